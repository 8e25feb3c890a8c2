"""Which sequential design a paired check (`perfgate check --against`) should use, by simulation.

A paired check measures base and head side by side: pair i is one base trial and one head trial run
back to back (in ABBA order: base-head, head-base, ...). It looks after its first pairs and then after
each extra pair of a still open config, up to a largest number of pairs or a time budget, deciding each
look with `perfgate.judge.stats.compare_paired` at the levels of an alpha-spending plan
(`perfgate.judge.stats.look_levels`). This script estimates, for each spending shape ("even",
"pocock", "obrien-fleming"), the verdict rates and the pairs used, and compares them with the old design
(a stored baseline against candidate trials, `perfgate.judge.stats.compare_throughput`).

The machine (log throughput of a trial, samples/sec = 1000 x exp(log)):

- drift: an AR(1) process per trial slot within a session (starting at 0, coefficient sqrt(0.9) per
  trial, so 0.9 and an innovation s.d. of 5% per pair's worth of time); both trials of a pair share
  the value at the pair's first slot (the pair's block drift);
- a neighbour taking a core: per trial, it arrives with probability 1% and stays a geometric number of
  trials (mean 6), slowing every trial it overlaps to 0.5-0.85x (uniform); it can arrive or leave
  between the two trials of a pair, so it can hit one side of a pair only;
- order: the second trial of a pair runs 1% slower (log -0.01); ABBA alternation puts it on base and
  head in turn;
- per-trial noise N(0, noise), noise = 1%, 2%, 5%, 10%;
- the true effect on head: log(1/(1+x)) for a slowdown x = 0, 2.5%, 5%, 7.5%, 10%, 20%.

The new design, exactly as `perfgate check --against` decides (`gate.LookTracker`,
`gate.decide_sequentially`): a look at 3 pairs, then one more pair per open config, each look at
`look_levels(n, previous_n, 20, alpha=0.01, final=..., shape=...)`, stopping at a regression, an
improvement or no change; the look at 20 pairs is final. The time-budget variant: the budget allows only
12 pairs, so the look at 12 is the final one (it spends all that is left of both error rates). The
decisions are computed in numpy for speed; on a subsample of every cell they are checked against
perfgate itself (`decide_sequentially` on a simulated clock, with `LookTracker`, `GateSettings.levels` and
`compare_paired`; the old design's loop with `compare_throughput`), and must agree exactly (verdict and
pairs used). With "obrien-fleming" the first looks' no-change error is so small that, on noisy pairs, the
log of the no-change interval's upper end can be beyond what math.exp takes: `stats._decide` takes that
end as inf where its log exceeds 700, and so does the numpy model (the verdict does not depend on it). An
earlier perfgate raised OverflowError there, which this simulation found.

The old design: a stored baseline of 5 trials (`perfgate update`), 3 candidate trials, then one more
while inconclusive up to 8, each look by `compare_throughput` with Bonferroni looks (`looks(3, 8)` = 6),
on two machines: "another session", where the baseline's session level differs from the check's by
N(0, 10%) in log and each session has its own drift and neighbours as above, and "i.i.d. noise",
benchmarks/power.py's model (per-trial noise only). The machine-probe adjustment of the real gate is
ignored (the paired design needs no probe).

    python benchmarks/sequential.py [--reps 2000] [--aa-reps 20000] [--seed 20240601] [--budget-pairs 12] \\
        [--verify 20]

`--reps` is per cell with a slowdown, `--aa-reps` per A/A cell, where the false-alarm rate and its
one-sided 95% upper bound (Clopper-Pearson) are estimated: a plan that spends nearly all of its 1% at one
look (obrien-fleming with a time budget spends 0.95% at its final look) has a true rate near 0.9% at 10%
noise, and it takes some 20000 repetitions for the bound to come out below 1%. Prints Markdown tables
(progress on stderr); exits 1 if the check against perfgate itself finds a difference. About a minute on
two cores with the defaults.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
from power import _markdown, _pct, _upper_95  # the report's helpers, shared with power.py (run from benchmarks/)
from scipy import stats as scipy_stats

import perfgate.judge.verdict
from perfgate.check.sequential import decide_sequentially
from perfgate.judge.settings import LookTracker, levels_at
from perfgate.judge.stats import (
    PASS_ERROR,
    SPENDING_SHAPES,
    compare_paired,
    compare_throughput,
    look_levels,
    looks,
    slowdown_bound,
)
from perfgate.judge.verdict import Status
from perfgate.project import DEFAULT_THRESHOLD, DEFAULT_TRIALS
from perfgate.records.baselines import DEFAULT_UPDATE_TRIALS
from perfgate.records.comparisons import DEFAULT_ALPHA, DEFAULT_SPENDING, Verdict
from perfgate.records.verdicts import DEFAULT_MAX_PAIRS, DEFAULT_MAX_TRIALS, ConfigVerdict, GateSettings

# The outlier rule's factor, as it was before 2026-11-26 (a75baf4's perfgate.judge.stats.OUTLIER_FACTOR: a trial
# more than 2x off the median was dropped while a minority); the gate drops no trial now, this mirrors the old rule.
OUTLIER_FACTOR = 2.0
NOISE_LEVELS = (0.01, 0.02, 0.05, 0.10)
SLOWDOWNS = (0.0, 0.025, 0.05, 0.075, 0.10, 0.20)
BASE_THROUGHPUT = 1000.0
DRIFT_PHI = 0.9  # AR(1) coefficient per pair's worth of time
DRIFT_STEP = 0.05  # AR(1) innovation s.d. per pair's worth of time (log)
NEIGHBOUR_ARRIVES = 0.01  # per trial
NEIGHBOUR_MEAN_TRIALS = 6.0
NEIGHBOUR_FACTOR = (0.5, 0.85)  # throughput while a neighbour takes a core
ORDER_BIAS = 0.01  # the second trial of a pair is this much slower (log)
SESSION_OFFSET = 0.10  # old design: s.d. of the log level between the baseline's session and the check's
# The old design's machines: another session with its own drift and neighbours (the model above), or
# benchmarks/power.py's i.i.d. per-trial noise only (no session offset, drift or neighbours).
OLD_MACHINES = (("another session", True), ("i.i.d. noise", False))
FIRST_PAIRS = 3
THRESHOLD = DEFAULT_THRESHOLD
ALPHA = DEFAULT_ALPHA

# verdict codes of the vectorised decision
INCONCLUSIVE, REGRESSION, IMPROVEMENT, NO_CHANGE = 0, 1, 2, 3
EXP_LIMIT = 700.0  # perfgate.judge.stats._exp: the interval's end is inf where its log exceeds this
CODES = {
    Verdict.INCONCLUSIVE: INCONCLUSIVE,
    Verdict.REGRESSION: REGRESSION,
    Verdict.IMPROVEMENT: IMPROVEMENT,
    Verdict.NO_CHANGE: NO_CHANGE,
}


# --------------------------------------------------------------------------------------------------
# the machine


def drift(rng: np.random.Generator, reps: int, slots: int) -> np.ndarray:
    """Log drift per trial slot within a session: AR(1) from 0, DRIFT_PHI and DRIFT_STEP per pair (two slots)."""
    phi = math.sqrt(DRIFT_PHI)
    step = DRIFT_STEP / math.sqrt(1.0 + phi**2)  # two trial steps make one pair step of DRIFT_STEP
    out = np.zeros((reps, slots))
    for j in range(1, slots):
        out[:, j] = phi * out[:, j - 1] + step * rng.standard_normal(reps)
    return out


def neighbours(rng: np.random.Generator, reps: int, slots: int) -> np.ndarray:
    """Log slowdown per trial slot from a neighbour taking a core (a two-state Markov chain, stationary start)."""
    leaves = 1.0 / NEIGHBOUR_MEAN_TRIALS
    low, high = NEIGHBOUR_FACTOR
    present = rng.random(reps) < NEIGHBOUR_ARRIVES / (NEIGHBOUR_ARRIVES + leaves)
    factor = rng.uniform(low, high, reps)
    out = np.zeros((reps, slots))
    for j in range(slots):
        if j:
            arrives = ~present & (rng.random(reps) < NEIGHBOUR_ARRIVES)
            factor = np.where(arrives, rng.uniform(low, high, reps), factor)
            present = np.where(present, rng.random(reps) >= leaves, arrives)
        out[:, j] = np.where(present, np.log(factor), 0.0)
    return out


def paired_draws(
    rng: np.random.Generator, reps: int, pairs: int, noise: float, slowdown: float
) -> tuple[np.ndarray, np.ndarray]:
    """Samples/sec of base and head, (reps, pairs): pair i takes trial slots 2i and 2i+1, in ABBA order."""
    slots = 2 * pairs
    level = drift(rng, reps, slots)[:, 0::2]  # the pair's block drift, shared by both of its trials
    extra = neighbours(rng, reps, slots) + noise * rng.standard_normal((reps, slots))
    extra[:, 1::2] -= ORDER_BIAS  # the second trial of each pair
    base_first = np.arange(pairs) % 2 == 0
    base_slot = np.where(base_first, 2 * np.arange(pairs), 2 * np.arange(pairs) + 1)
    head_slot = np.where(base_first, 2 * np.arange(pairs) + 1, 2 * np.arange(pairs))
    base = level + extra[:, base_slot]
    head = level + extra[:, head_slot] + math.log(1.0 / (1.0 + slowdown))
    return BASE_THROUGHPUT * np.exp(base), BASE_THROUGHPUT * np.exp(head)


def old_draws(
    rng: np.random.Generator, reps: int, trials: int, noise: float, slowdown: float, machine: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Samples/sec of a stored baseline and of `trials` candidate trials: with `machine`, in two sessions
    (a session offset between them, each with its own drift and neighbours), else i.i.d. noise only."""
    n_base = DEFAULT_UPDATE_TRIALS
    base = noise * rng.standard_normal((reps, n_base))
    cand = noise * rng.standard_normal((reps, trials)) + math.log(1.0 / (1.0 + slowdown))
    if machine:
        base += drift(rng, reps, n_base) + neighbours(rng, reps, n_base)
        cand += drift(rng, reps, trials) + neighbours(rng, reps, trials)
        cand += SESSION_OFFSET * rng.standard_normal((reps, 1))
    return BASE_THROUGHPUT * np.exp(base), BASE_THROUGHPUT * np.exp(cand)


# --------------------------------------------------------------------------------------------------
# the decisions, vectorised (the rules of perfgate.judge.stats._decide)


def kept_mask(logs: np.ndarray) -> np.ndarray:
    """`perfgate.judge.stats._kept_indices` per row: within OUTLIER_FACTOR of the median, when that is a majority."""
    n = logs.shape[1]
    if n < 3:
        return np.ones(logs.shape, dtype=bool)
    center = np.median(logs, axis=1, keepdims=True)
    kept = np.abs(logs - center) <= math.log(OUTLIER_FACTOR)
    kept[~(2 * kept.sum(axis=1) > n)] = True
    return kept


def masked_mean_var(logs: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    count = kept.sum(axis=1)
    mean = np.where(kept, logs, 0.0).sum(axis=1) / count
    var = np.where(kept, (logs - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(count - 1, 1)
    return mean, var, count


@dataclass(frozen=True)
class Estimate:
    """Per repetition at one look: the log difference (head - base), its standard error and degrees of freedom."""

    difference: np.ndarray
    se: np.ndarray  # nan where the noise cannot be estimated
    df: np.ndarray


def paired_estimate(base: np.ndarray, head: np.ndarray, n: int) -> Estimate:
    differences = np.log(head[:, :n]) - np.log(base[:, :n])
    mean, var, count = masked_mean_var(differences, kept_mask(differences))
    se = np.where(count >= 2, np.sqrt(var) / np.sqrt(count), np.nan)
    return Estimate(mean, se, (count - 1).astype(float))


def welch_estimate(base: np.ndarray, cand: np.ndarray, m: int) -> Estimate:
    log_b, log_c = np.log(base), np.log(cand[:, :m])
    mean_b, var_b, n_b = masked_mean_var(log_b, kept_mask(log_b))
    mean_c, var_c, n_c = masked_mean_var(log_c, kept_mask(log_c))
    share_b, share_c = var_b / n_b, var_c / n_c
    se2 = share_b + share_c
    df = se2**2 / (share_b**2 / (n_b - 1) + share_c**2 / (n_c - 1))
    return Estimate(mean_c - mean_b, np.sqrt(se2), df)


def exp_capped(logs: np.ndarray) -> np.ndarray:
    """`perfgate.judge.stats._exp` per element: inf where the log exceeds EXP_LIMIT (nan stays nan)."""
    return np.where(logs > EXP_LIMIT, math.inf, np.exp(np.minimum(logs, EXP_LIMIT)))


def interval(estimate: Estimate, pass_error: float) -> tuple[np.ndarray, np.ndarray]:
    """`_decide`'s no-change interval of the ratio (ci_low, ci_high): the upper end is inf where its log
    exceeds EXP_LIMIT (a tiny no-change error, as "obrien-fleming" spends at its first looks, with noisy
    pairs); nan where the noise cannot be estimated."""
    d, se, df = estimate.difference, estimate.se, estimate.df
    with np.errstate(invalid="ignore"):
        half_width = scipy_stats.t.ppf(1 - pass_error, df) * se
        return exp_capped(d - half_width), exp_capped(d + half_width)


def decide(estimate: Estimate, alpha: float, pass_error: float) -> np.ndarray:
    """Verdict codes at one look with these levels, by the rules of `_decide`."""
    t_dist = scipy_stats.t
    d, se, df = estimate.difference, estimate.se, estimate.df
    with np.errstate(invalid="ignore"):
        t_statistic = d / se
        p_slower = t_dist.cdf(t_statistic, df)
        p_faster = t_dist.sf(t_statistic, df)
    ci_low, _ = interval(estimate, pass_error)
    edge = math.log1p(THRESHOLD)
    out = np.full(d.shape, INCONCLUSIVE)
    out[ci_low >= slowdown_bound(THRESHOLD)] = NO_CHANGE  # nan (no noise estimate) is never no change
    out[(d > edge) & (p_faster < alpha)] = IMPROVEMENT
    out[(d < -edge) & (p_slower < alpha)] = REGRESSION
    return out


@dataclass
class Outcome:
    """Verdicts and sample sizes used (pairs, or candidate trials) of one design in one cell."""

    verdicts: np.ndarray
    used: np.ndarray

    @classmethod
    def of(cls, looks_: Sequence[np.ndarray], sizes: Sequence[int]) -> Outcome:
        """The sequential outcome from every look's verdicts: the first decisive one, else the last."""
        verdicts = np.stack(looks_, axis=1)
        rows, size = np.arange(len(verdicts)), np.asarray(sizes)
        decisive = verdicts != INCONCLUSIVE
        index = np.where(decisive.any(axis=1), decisive.argmax(axis=1), verdicts.shape[1] - 1)
        return cls(verdicts[rows, index], size[index])

    @property
    def reps(self) -> int:
        return len(self.verdicts)

    def count(self, code: int) -> int:
        return int((self.verdicts == code).sum())

    def rate(self, code: int) -> float:
        return self.count(code) / self.reps

    @property
    def mean_used(self) -> float:
        return float(self.used.mean())


def paired_outcomes(base: np.ndarray, head: np.ndarray, *, most: int, budget: int) -> dict[tuple[str, int], Outcome]:
    """Per (shape, last pair): the sequential outcome of every repetition (looks at FIRST_PAIRS..last)."""
    estimates = {n: paired_estimate(base, head, n) for n in range(FIRST_PAIRS, most + 1)}
    out = {}
    for shape in SPENDING_SHAPES:
        for last in sorted({most, budget}):
            sizes = range(FIRST_PAIRS, last + 1)
            columns = []
            for n in sizes:
                previous = 0 if n == FIRST_PAIRS else n - 1
                levels = look_levels(n, previous, most, alpha=ALPHA, final=n >= last, shape=shape)
                columns.append(decide(estimates[n], levels.alpha, levels.pass_error))
            out[(shape, last)] = Outcome.of(columns, list(sizes))
    return out


def old_outcome(base: np.ndarray, cand: np.ndarray, *, trials: int, max_trials: int) -> Outcome:
    n_looks = looks(trials, max_trials)
    sizes = range(trials, max_trials + 1)
    columns = [decide(welch_estimate(base, cand, m), ALPHA / n_looks, PASS_ERROR / n_looks) for m in sizes]
    return Outcome.of(columns, list(sizes))


# --------------------------------------------------------------------------------------------------
# perfgate itself, for the check of the vectorised decisions


class _Clock:
    """perfgate.judge.verdict's `time` while checking: monotonic() is the simulated seconds of the pairs run so far."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


PAIR_S = 60.0  # simulated seconds of one pair, against which a time budget for `budget` pairs is set


def perfgate_paired(
    base: Sequence[float], head: Sequence[float], *, shape: str, most: int, budget: int
) -> tuple[int, int]:
    """One config of a paired check decided by perfgate itself: `gate.decide_sequentially` with a
    `LookTracker`, `GateSettings.levels` and `compare_paired`, on a simulated clock where every pair takes
    PAIR_S and the time budget is `budget` pairs' worth (the first pairs count: `run_paired_check` starts
    its clock before them).

    Returns the verdict and the pairs used."""
    settings = GateSettings(first_n=FIRST_PAIRS, max_n=most, alpha=ALPHA, time_budget_s=PAIR_S * budget, spending=shape)
    tracker = LookTracker(settings)
    key = ("simulated", "config")
    limits = settings.thresholds_for(*key)
    clock = _Clock()
    n = FIRST_PAIRS
    clock.now = PAIR_S * n
    verdicts: list[int] = []

    def judge(final: bool) -> Any:
        levels = levels_at(settings, tracker.look({key: n}, final)[key])
        comparison = compare_paired(base[:n], head[:n], threshold=THRESHOLD, levels=levels)
        verdicts.append(CODES[comparison.verdict])
        status = Status(comparison.verdict.value)
        return SimpleNamespace(verdicts=[ConfigVerdict(*key, status, "", limits, throughput=comparison)])

    def run_more(pending: list[tuple[str, str]]) -> None:
        nonlocal n
        assert pending == [key]
        n += 1
        clock.now += PAIR_S

    with mock.patch.object(perfgate.judge.verdict, "time", clock):
        decide_sequentially(
            judge, lambda: {key: n}, run_more, lambda pending: PAIR_S * len(pending), settings, 0.0, None, unit="pair"
        )
    return verdicts[-1], n


def perfgate_old(base: Sequence[float], cand: Sequence[float], *, trials: int, max_trials: int) -> tuple[int, int]:
    """The old `perfgate check` throughput decision (benchmarks/power.py's perfgate_sequential)."""
    n_looks = looks(trials, max_trials)
    used = trials
    while True:
        verdict = compare_throughput(base, cand[:used], threshold=THRESHOLD, alpha=ALPHA, looks=n_looks).verdict
        if verdict != Verdict.INCONCLUSIVE or used >= max_trials:
            return CODES[verdict], used
        used += 1


# --------------------------------------------------------------------------------------------------
# the report


def _summary(outcome: Outcome) -> str:
    """P(regression) / P(no change) / P(inconclusive) / mean sample size."""
    return (
        f"{_pct(outcome.rate(REGRESSION))} / {_pct(outcome.rate(NO_CHANGE))} / "
        f"{_pct(outcome.rate(INCONCLUSIVE))} / {outcome.mean_used:.1f}"
    )


def _aa_row(design: str, noise: float, o: Outcome) -> list[str]:
    count = o.count(REGRESSION)
    return [
        design,
        _pct(noise, 0),
        f"{count}/{o.reps}",
        _pct(o.rate(REGRESSION), 2),
        _pct(_upper_95(count, o.reps), 2),
        _pct(o.rate(IMPROVEMENT), 2),
        _pct(o.rate(NO_CHANGE)),
        f"{o.mean_used:.1f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2000, help="repetitions per cell with a slowdown")
    parser.add_argument("--aa-reps", type=int, default=20000, help="repetitions per A/A cell (no slowdown)")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--max-pairs", type=int, default=DEFAULT_MAX_PAIRS)
    parser.add_argument("--budget-pairs", type=int, default=12, help="pairs a time budget allows (its final look)")
    parser.add_argument("--verify", type=int, default=20, help="repetitions per cell checked against perfgate itself")
    args = parser.parse_args(argv)
    if min(args.reps, args.aa_reps) < 1 or args.verify < 0 or not FIRST_PAIRS <= args.budget_pairs <= args.max_pairs:
        raise SystemExit(
            f"need --reps, --aa-reps >= 1, --verify >= 0 and {FIRST_PAIRS} <= --budget-pairs <= --max-pairs"
        )
    started = time.monotonic()
    most, budget = args.max_pairs, args.budget_pairs
    trials, max_trials = DEFAULT_TRIALS, DEFAULT_MAX_TRIALS
    lasts = sorted({most, budget}, reverse=True)
    variants = [(shape, last) for shape in SPENDING_SHAPES for last in lasts]

    new: dict[tuple[float, float], dict[tuple[str, int], Outcome]] = {}
    old: dict[tuple[float, float, str], Outcome] = {}
    checked = 0
    mismatches: list[str] = []
    for i, noise in enumerate(NOISE_LEVELS):
        for j, slowdown in enumerate(SLOWDOWNS):
            reps = args.aa_reps if slowdown == 0 else args.reps
            # One stream per cell and design: each cell reproduces on its own; all shapes see the same draws.
            rng = np.random.default_rng([args.seed, 0, i, j])
            base, head = paired_draws(rng, reps, most, noise, slowdown)
            new[(noise, slowdown)] = cells = paired_outcomes(base, head, most=most, budget=budget)
            for r in range(min(args.verify, reps)):
                for shape, last in variants:
                    want = perfgate_paired(base[r].tolist(), head[r].tolist(), shape=shape, most=most, budget=last)
                    o = cells[(shape, last)]
                    got = (int(o.verdicts[r]), int(o.used[r]))
                    checked += 1
                    if want != got:
                        mismatches.append(f"paired {noise} x {slowdown} rep {r} {shape}/{last}: {want} != {got}")
            for k, (name, machine) in enumerate(OLD_MACHINES):
                rng = np.random.default_rng([args.seed, 1 + k, i, j])
                stored, cand = old_draws(rng, reps, max_trials, noise, slowdown, machine)
                o = old[(noise, slowdown, name)] = old_outcome(stored, cand, trials=trials, max_trials=max_trials)
                for r in range(min(args.verify, reps)):
                    want_old = perfgate_old(stored[r].tolist(), cand[r].tolist(), trials=trials, max_trials=max_trials)
                    checked += 1
                    if want_old != (int(o.verdicts[r]), int(o.used[r])):
                        mismatches.append(f"old {noise} x {slowdown} {name} rep {r}: {want_old} != {o.verdicts[r]}")
            print(f"[sequential] noise {_pct(noise, 0)}, slowdown {_pct(slowdown)}", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started

    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    out = [
        "# Sequential design of the paired check (`perfgate check --against`): simulation",
        "",
        f"- date: {now}; repetitions per cell: {args.aa_reps} A/A, {args.reps} otherwise; seed {args.seed}",
        f"- machine: AR(1) drift ({DRIFT_PHI:g} and {_pct(DRIFT_STEP, 0)} innovation per pair's worth of time, the "
        f"pair's value shared by its two trials); a neighbour arriving with p {NEIGHBOUR_ARRIVES:g} per trial for a "
        f"mean of {NEIGHBOUR_MEAN_TRIALS:g} trials at {NEIGHBOUR_FACTOR[0]:g}-{NEIGHBOUR_FACTOR[1]:g}x (it can split "
        f"a pair); the second trial of a pair {_pct(ORDER_BIAS, 0)} slower, ABBA order; per-trial noise N(0, noise); "
        "head's throughput / (1 + slowdown)",
        f"- paired check: {FIRST_PAIRS} pairs, then one more per look while inconclusive, up to {most} pairs (or a "
        f"time budget for {budget}: the look at {budget} is final); compare_paired at look_levels(alpha {ALPHA:g}, "
        f"no-change error {PASS_ERROR:g}, shape), threshold {THRESHOLD:g}",
        f"- old check: stored baseline of {DEFAULT_UPDATE_TRIALS} trials, candidate trials {trials} to {max_trials}, "
        f"compare_throughput with {looks(trials, max_trials)} Bonferroni looks; machine-probe adjustment ignored. "
        f"'another session': the baseline's session differs by N(0, {_pct(SESSION_OFFSET, 0)}) in log and each "
        "session has its own drift and neighbours; 'i.i.d. noise': benchmarks/power.py's model",
        f"- checked against perfgate itself (decide_sequentially, LookTracker, GateSettings.levels, compare_paired; "
        f"the old loop with compare_throughput) on "
        f"the first {args.verify} repetitions of every cell: {checked - len(mismatches)} of {checked} sequential "
        "decisions agree exactly (verdict and sample size used)",
        f"- Monte Carlo s.e. of a rate p: sqrt(p(1-p)/reps), about {_pct(math.sqrt(0.25 / args.reps), 1)} at 50% "
        f"and {_pct(math.sqrt(0.01 * 0.99 / args.aa_reps), 2)} at 1% (A/A)",
    ]
    out += [f"  - MISMATCH {m}" for m in mismatches[:10]]
    out += ["", "## A/A false alarms (regression on identical code), per comparison over all looks", ""]
    paired_rows = [
        _aa_row(f"paired {shape}, {'max' if last == most else 'budget'} {last} pairs", noise, new[(noise, 0.0)][key])
        for key in variants
        for shape, last in [key]
        for noise in NOISE_LEVELS
    ]
    old_rows = [
        _aa_row(f"old, {name}", noise, old[(noise, 0.0, name)]) for name, _ in OLD_MACHINES for noise in NOISE_LEVELS
    ]
    header = ["design", "noise", "regressions", "false alarm", "95% upper bound", "false improvement", "no change"]
    out.append(_markdown([*header, "mean pairs (old: cand. trials)"], paired_rows + old_rows))
    above = "; ".join(
        f"{shape} {last} pairs at noise {_pct(noise, 0)} ({_pct(o.rate(REGRESSION), 2)}, bound {_pct(bound, 2)})"
        for shape, last in variants
        for noise in NOISE_LEVELS
        for o in [new[(noise, 0.0)][(shape, last)]]
        for bound in [_upper_95(o.count(REGRESSION), o.reps)]
        if bound > ALPHA
    )
    out += [
        "",
        f"By construction a paired check's false-alarm rate is at most alpha = {_pct(ALPHA, 0)}: each look's "
        "one-sided t-test is exact for normal pair differences and the looks' levels add up to alpha (the union "
        "bound, whatever the stopping rule). The simulation checks that the model's non-normal parts (neighbours "
        "splitting pairs, the order effect, the outlier rule) do not break that.",
        f"Paired cells whose 95% upper bound is above {_pct(ALPHA, 0)}: {above or 'none'}.",
    ]
    for last in lasts:
        out += [
            "",
            f"## Paired check, {'up to' if last == most else 'time budget for'} {last} pairs: "
            "P(regression) / P(no change) / P(inconclusive at the end) / mean pairs",
            "",
        ]
        rows = [
            [_pct(noise, 0), _pct(x), *(_summary(new[(noise, x)][(shape, last)]) for shape in SPENDING_SHAPES)]
            for noise in NOISE_LEVELS
            for x in SLOWDOWNS
        ]
        out.append(_markdown(["noise", "slowdown", *SPENDING_SHAPES], rows))
    out += [
        "",
        "## Old check (stored baseline, Welch, Bonferroni looks): P(regression) / P(no change) / P(inconclusive) / "
        "mean candidate trials",
        "",
    ]
    rows = [
        [_pct(noise, 0), _pct(x), *(_summary(old[(noise, x, name)]) for name, _ in OLD_MACHINES)]
        for noise in NOISE_LEVELS
        for x in SLOWDOWNS
    ]
    out.append(_markdown(["noise", "slowdown", *(name for name, _ in OLD_MACHINES)], rows))
    out += ["", "## P(regression): paired check by shape against the old check", ""]
    rows = [
        [
            _pct(noise, 0),
            _pct(x),
            *(_pct(new[(noise, x)][(shape, most)].rate(REGRESSION)) for shape in SPENDING_SHAPES),
            *(_pct(new[(noise, x)][(DEFAULT_SPENDING, last)].rate(REGRESSION)) for last in lasts if last != most),
            *(_pct(old[(noise, x, name)].rate(REGRESSION)) for name, _ in OLD_MACHINES),
        ]
        for noise in NOISE_LEVELS
        for x in SLOWDOWNS
    ]
    out.append(
        _markdown(
            [
                "noise",
                "slowdown",
                *(f"paired {shape} ({most})" for shape in SPENDING_SHAPES),
                *(f"paired {DEFAULT_SPENDING} (budget {last})" for last in lasts if last != most),
                *(f"old, {name}" for name, _ in OLD_MACHINES),
            ],
            rows,
        )
    )
    out += [
        "",
        f"A paired check of n pairs runs 2n trials; the old check runs {trials}-{max_trials} candidate trials against "
        f"a baseline stored earlier. perfgate's default shape: {DEFAULT_SPENDING}.",
        "",
        f"run time: {elapsed:.1f} s",
    ]
    print("\n".join(out), flush=True)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
