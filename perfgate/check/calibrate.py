"""`perfgate calibrate`: what this runner can detect, measured on this runner.

Two passes over the working tree, each a paired check of the code against itself:

1. A/A: a fixed number of pairs of every workload and config, both sides the same code. The spread of
   the per-pair log ratios is the runner's paired noise, and the seconds per pair say how many pairs
   the time budget allows. From the two follows the smallest slowdown a check would call a
   regression with 80% probability at its last look (`detectable_slowdown`).
2. Planted: the same paired check with a known slowdown in head (every step sleeps a fraction of its
   own time, `TrialSpec.planted_slowdown`), decided as `perfgate check --against` decides. A runner
   that cannot call a planted 10% slowdown a regression cannot gate 5% either.

From the A/A pairs also comes r0, the rate at which this runner stalls one side of a pair on unchanged code, which
a paired check's count test assumes (`runner_slow_rate`); calibrate prints it as `[tool.perfgate]` keeps it
(`slow_pair_rate`, `slow_pair_rate_date`), where every later check reads it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from perfgate.check.paired import decide_paired, remove_leftovers
from perfgate.check.plan import CheckPlan, paired_session
from perfgate.judge.stats import (
    DETECTION_POWER,
    binomial_tail,
    boundary_level,
    look_levels,
    rate_upper_bound,
    student_t_ppf,
)
from perfgate.judge.verdict import compare_pairs
from perfgate.measure.paired import PairedSession, working_tree
from perfgate.records.calibration import RATE_CONFIDENCE, Calibration, ConfigCalibration, SlowPairRate
from perfgate.records.comparisons import MIN_DECIDING, SLOW_RATE, STAND_DOWN_P, SlowPairCount
from perfgate.records.results import pairing_text
from perfgate.records.verdicts import GateSettings

DEFAULT_CALIBRATION_PAIRS = 5
DEFAULT_PLANTED_SLOWDOWN = 0.10


def runner_slow_rate(counts: Sequence[SlowPairCount]) -> SlowPairRate:
    """r0 from the A/A pairs' count tests: perfgate's default (SLOW_RATE) unless the pairs show otherwise. A handful
    of pairs cannot show a rate of a few percent, so the rate is bounded above at RATE_CONFIDENCE: below the default
    only where that bound is (enough pairs with no stall); above it, at the bound, only where the pairs' own count
    is beyond the default as a check's count test would stand down on it (binomial p below STAND_DOWN_P)."""
    slow = sum(c.head_slow + c.base_slow for c in counts)
    sides = 2 * sum(c.pairs for c in counts)
    if not sides:
        return SlowPairRate(slow=0, sides=0, bound=math.nan, rate=SLOW_RATE)
    # up to a whole percent, as the count test's line shows a rate; 99% at most (a rate must stay below 1)
    bound = min(math.ceil(100 * rate_upper_bound(slow, sides, RATE_CONFIDENCE) - 1e-9) / 100, 0.99)
    quieter = bound < SLOW_RATE
    noisier = binomial_tail(slow, sides, SLOW_RATE) < STAND_DOWN_P
    return SlowPairRate(slow=slow, sides=sides, bound=bound, rate=bound if quieter or noisier else SLOW_RATE)


def detectable_slowdown(noise: float, pairs: int, settings: GateSettings, threshold: float) -> float:
    """The slowdown a paired check with `pairs` pairs calls a regression with 80% probability at its last look.

    A regression needs the whole interval beyond the threshold and a difference significant at alpha, so the
    true slowdown must clear the larger of the two bars by the power margin; fewer than MIN_DECIDING pairs call
    nothing (nan)."""
    if not math.isfinite(noise) or pairs < 2:
        return math.nan
    levels = look_levels(pairs, max(0, pairs - 1), pairs, alpha=settings.alpha, final=True, shape=settings.spending)
    se = noise / math.sqrt(pairs)
    df = pairs - 1
    if pairs < MIN_DECIDING:
        return math.nan
    # The verdict's interval must lie wholly beyond the threshold: beyond it by the interval's half-width at the
    # last look's boundary, and beyond no change at alpha (`stats._decide`).
    level = boundary_level(pairs, final=True)
    bar = max(math.log1p(threshold) + student_t_ppf(1 - level, df) * se, student_t_ppf(1 - levels.alpha, df) * se)
    return math.expm1(bar + student_t_ppf(DETECTION_POWER, df) * se)


def run_calibration(
    plan: CheckPlan, *, pairs: int = DEFAULT_CALIBRATION_PAIRS, slowdown: float = DEFAULT_PLANTED_SLOWDOWN
) -> Calibration:
    """Measure the runner's paired A/A noise, then check a planted slowdown as a paired check would."""
    settings, run_settings, notify = plan.gate, plan.run, plan.notify
    remove_leftovers(notify)
    tree = working_tree()

    def session(planted: float = 0.0) -> PairedSession:
        """The working tree against itself, measured as the user asked; head `planted` slower."""
        return paired_session(plan, tree, tree, "itself", planted_slowdown=planted)

    if notify:
        notify(f"A/A: {pairs} pairs of each config, the working tree against itself")
    with session() as aa:
        aa.run_pairs(pairs)
        aa_run = aa.paired_run()
        assert aa_run.against is not None
        aa_result = compare_pairs(aa_run, aa_run.against.base, settings, {}, aa_run.against)
        pair_s = {key: aa.mean_pair_s(key) for key in aa.sides["head"].trials}
        aa_forked = aa.fork
        aa_interleaved = aa.interleaved
    if notify:
        against = run_settings.front_end.option("against")
        notify(f"planted: head {100 * slowdown:g}% slower, decided as perfgate check {against} decides")
    started = time.monotonic()
    with session(slowdown) as planted:
        planted_result = decide_paired(planted, settings, started, notify)
    planted_by_key = {(v.workload, v.config): v for v in planted_result.verdicts}
    configs = []
    budget_s = settings.budget_s(len(aa_result.verdicts))
    config_budget_s = budget_s / max(1, len(aa_result.verdicts))  # each config's share, as the check spends it
    for verdict in aa_result.verdicts:
        key = (verdict.workload, verdict.config)
        noise = verdict.throughput.noise if verdict.throughput is not None else math.nan
        per_pair = pair_s.get(key, math.nan)
        budget_pairs = max(settings.first_n, min(settings.max_n, int(config_budget_s // per_pair)))
        threshold = verdict.thresholds.throughput
        other = planted_by_key.get(key)
        configs.append(
            ConfigCalibration(
                workload=verdict.workload,
                config=verdict.config,
                noise=noise,
                pair_s=per_pair,
                budget_pairs=budget_pairs,
                detectable_slowdown=detectable_slowdown(noise, budget_pairs, settings, threshold),
                planted_status="failed" if other is None else other.status.value,
                planted_pairs=0 if other is None or other.throughput is None else other.throughput.n_candidate,
                planted_ratio=math.nan if other is None or other.throughput is None else other.throughput.ratio,
            )
        )
    aa_comparisons = [v.throughput for v in aa_result.verdicts if v.throughput is not None]
    how = pairing_text(plan.pairing.parallel, aa_interleaved)
    how += ", forked from one server a side" if aa_forked else ", each a fresh process"
    threads = f"{run_settings.torch_threads} torch thread(s) per trial"
    threads += "" if run_settings.threads else " (torch's default)"
    return Calibration(
        configs=configs,
        slowdown=slowdown,
        threshold_text=", ".join(sorted({f"{100 * v.thresholds.throughput:g}%" for v in aa_result.verdicts})) or "5%",
        settings_text=f"{threads} on {run_settings.device}, each pair's trials "
        f"{how}; time budget {budget_s:g} s, at most {settings.max_n} pairs per config",
        aa=aa_result,
        planted=planted_result,
        slow_pairs=runner_slow_rate([t.count for t in aa_comparisons if t.count is not None]),
    )
