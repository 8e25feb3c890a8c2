"""Regressions outside the steady case (issue 42): the count test of much slower pairs, failed and hung trials as
evidence, the hang limit taken from the other side's time, and a budget that says what would decide. Unit tests
(no trials run) but one end-to-end check whose head raises in its second trial."""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace

import pytest

from perfgate.judge.settings import count_level, levels_at
from perfgate.judge.stats import COUNT_SHARE, SLOW_CUT_FLOOR, LookLevels, compare_paired, count_slow_pairs, slow_cut
from perfgate.judge.verdict import Status, compare_pairs
from perfgate.judge.wording import count_text
from perfgate.records.comparisons import SLOW_RATE, Verdict
from perfgate.records.results import Against, TrialResult
from perfgate.records.verdicts import GateSettings, Look
from tests.helpers.results import BASE_MS, phased_run


def pairs(n: int, *, noise: float = 0.02, head_slow: set[int] = frozenset(), base_slow: set[int] = frozenset(), seed=0):
    """n pairs of samples/s: both sides unchanged but for head's (or base's) trials in `head_slow` (`base_slow`),
    2x slower."""
    rng = random.Random(seed)
    base = [1000 * math.exp(rng.gauss(0, noise)) / (2.0 if i in base_slow else 1.0) for i in range(n)]
    head = [1000 * math.exp(rng.gauss(0, noise)) / (2.0 if i in head_slow else 1.0) for i in range(n)]
    return base, head


# -- the count test --------------------------------------------------------------------------------------------


def test_much_slower_is_scaled_to_the_pairs_noise_and_never_below_its_floor():
    quiet = [math.log(1 + 0.002 * (i % 5 - 2)) for i in range(20)]
    assert slow_cut(quiet) == SLOW_CUT_FLOOR
    rng = random.Random(1)
    noisy = [rng.gauss(0, 0.15) for _ in range(20)]
    assert slow_cut(noisy) > 1.4  # a runner whose pairs spread 15%: 1.25x is its noise, not a slow path


def test_the_cut_holds_when_half_the_pairs_took_the_slow_path():
    # The median absolute deviation breaks down here (it read 6 slow pairs of 12 as a 19x noise); the shortest
    # half lies within one cluster.
    base, head = pairs(12, head_slow={1, 3, 5, 7, 9, 11})
    differences = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    assert slow_cut(differences) < 1.5
    assert count_slow_pairs(differences, SLOW_RATE, 0.001).head_slow == 6


def test_a_slow_path_in_a_third_of_head_trials_is_counted_and_rejects_the_runners_rate():
    base, head = pairs(30, head_slow=set(range(1, 30, 3)))
    count = count_slow_pairs([math.log(h / b) for b, h in zip(base, head, strict=True)], SLOW_RATE, 0.0005)
    assert (count.head_slow, count.base_slow, count.pairs) == (10, 0, 30)
    assert count.rejects and not count.stood_down
    assert count.head_factor == pytest.approx(2.0, rel=0.1)
    line = count_text(count)
    assert line.startswith("10 of 30 head trials ran 2x slower than their pair")
    assert "base: 0 of 30; the runner's rate on unchanged code: at most 5% (perfgate's default)" in line


def test_the_count_stands_down_where_the_base_stalls_more_often_than_the_rate_allows():
    base, head = pairs(30, head_slow=set(range(1, 30, 3)), base_slow={0, 6, 12, 18, 24})
    count = count_slow_pairs([math.log(h / b) for b, h in zip(base, head, strict=True)], SLOW_RATE, 0.0005)
    assert count.base_slow == 5 and count.stood_down and not count.rejects
    assert "the count test stood down" in count_text(count)


def test_a_count_that_rejects_makes_a_regression_of_an_interval_beyond_the_threshold_at_the_boundary():
    base, head = pairs(24, head_slow=set(range(1, 24, 3)))
    levels = LookLevels(alpha=0.0004, pass_error=0.001, count_alpha=0.0004)
    counted = compare_paired(base, head, levels=levels)
    alone = compare_paired(base, head, levels=levels, slow_rate=None)
    assert alone.verdict == Verdict.INCONCLUSIVE  # the t-test alone cannot show it at this level
    assert counted.verdict == Verdict.REGRESSION and counted.by_count
    assert counted.ci_high < 1 / 1.05  # the verdict and its interval agree
    assert counted.confidence == pytest.approx(1 - 2 * counted.boundary)
    # The combined test's p-value, as Holm reads it: the smaller share of its two parts' levels.
    assert counted.alpha == pytest.approx(levels.alpha * (1 - COUNT_SHARE) + levels.count_alpha)
    assert counted.p_slower / counted.alpha == pytest.approx(counted.count.p_value / levels.count_alpha)


def test_a_count_never_makes_a_regression_of_a_change_within_the_threshold():
    # A slow path 2x in a tenth of the trials is a ~7% slowdown; at 1.03x it would be 0.3%: counted, never failed.
    base, head = pairs(30, head_slow=set(range(0, 30, 3)))
    head = [h * (2.0 / 1.03) if i in set(range(0, 30, 3)) else h for i, h in enumerate(head)]
    comparison = compare_paired(base, head, levels=LookLevels(0.01, 0.025, count_alpha=0.005))
    assert comparison.verdict != Verdict.REGRESSION and not comparison.by_count


def test_unchanged_code_with_neither_side_slow_is_no_change_with_the_count_test_on():
    base, head = pairs(12, seed=3)
    assert compare_paired(base, head).verdict == Verdict.NO_CHANGE


@pytest.mark.parametrize("budget", [5, 12, 39])
def test_the_count_spends_at_most_its_share_of_alpha_on_every_path(budget):
    most, alpha = 40, 0.01
    # Looks at 3, 4, ... up to a budget look (held back for an extension), then the extension to 40.
    looks = [Look(n, n - 1 if n > 3 else 0, False) for n in range(3, budget)]
    looks.append(Look(budget, budget - 1, True, held_back=True))
    extended = looks + [Look(n, n - 1, n == most, extension=(budget, budget - 1)) for n in range(budget + 1, most + 1)]
    assert sum(count_level(look, most, alpha) for look in extended) == pytest.approx(COUNT_SHARE * alpha)
    # Not extended: the budget look, not held back, spends what is left.
    plain = [*looks[:-1], Look(budget, budget - 1, True)]
    assert sum(count_level(look, most, alpha) for look in plain) == pytest.approx(COUNT_SHARE * alpha)
    levels = levels_at(GateSettings(first_n=3, max_n=most), looks[-1])
    assert levels.count_alpha == pytest.approx(count_level(looks[-1], most, alpha))


# -- failed and hung trials are evidence ---------------------------------------------------------------------


def paired_result(head_failures: dict[int, str], base_failures: dict[int, str]):
    """A paired check of workload w, fp32, three pairs of identical trials, with these trials failed."""

    def side(failures):
        run = phased_run(BASE_MS)
        workload = run.workloads[0]
        config = workload.configs["fp32"]
        trials = [
            TrialResult("fp32", t.trial, "failed", failure=failures[t.trial]) if t.trial in failures else t
            for t in config.trials
        ]
        return replace(run, workloads=[replace(workload, configs={"fp32": replace(config, trials=trials)})])

    base, head = side(base_failures), side(head_failures)
    against = Against(ref="main", base_commit="b" * 40, head_commit="h" * 40, head_dirty=False, base=base)
    looks = {("w", "fp32"): Look(3, 0, True)}
    return compare_pairs(replace(head, against=against), base, GateSettings(), looks, against)


def test_a_head_that_fails_where_its_base_runs_fails_the_check_with_exit_4():
    result = paired_result({1: "hung: no result after 60 s"}, {})
    verdict = result.verdicts[0]
    assert verdict.status == Status.FAILED and result.exit_code == 4
    assert verdict.reason.startswith("the head failed in 1 of 3 trials; the base in 0 of 3")
    assert "head trial 2: hung: no result after 60 s" in verdict.reason


def test_failures_on_both_sides_say_the_workload_is_flaky_and_show_no_change_as_inconclusive():
    result = paired_result({0: "RuntimeError: boom"}, {2: "RuntimeError: boom"})
    verdict = result.verdicts[0]
    assert verdict.status == Status.INCONCLUSIVE and result.exit_code == 0
    assert "the head failed in 1 of 3 trials; the base in 1 of 3: the workload is flaky" in verdict.reason


def test_a_base_that_fails_where_the_head_runs_is_named_but_does_not_fail_the_check():
    verdict = paired_result({}, {0: "RuntimeError: old bug"}).verdicts[0]
    assert verdict.status != Status.FAILED
    named = "the head failed in 0 of 3 trials; the base in 1 of 3 (base trial 1: RuntimeError: old bug)"
    assert named in verdict.reason


# -- the hang limit --------------------------------------------------------------------------------------------


def test_a_hang_limit_comes_from_the_slowest_trial_so_far_at_least_a_minute_at_most_the_timeout():
    from perfgate.measure.paired import HANG_FACTOR, HANG_FLOOR_S, PairedSession

    session = PairedSession.__new__(PairedSession)  # the limit's arithmetic alone: no checkout, no workload
    session.settings = SimpleSettings(timeout_s=600.0)
    assert session._hang_after(2.0) == HANG_FLOOR_S
    assert session._hang_after(30.0) == HANG_FACTOR * 30.0
    assert session._hang_after(500.0) == 600.0


class SimpleSettings:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s


# -- end to end: a head that raises in one pair of three -------------------------------------------------------

FAILING_HEAD = '''
import os
from pathlib import Path

COUNTER = Path(os.environ["FAIL_COUNTER"])


def fail_in_the_second_trial():
    """Raise in the head's second trial (a counter file: the check loads the workload once, then each trial)."""
    seen = int(COUNTER.read_text()) if COUNTER.exists() else 0
    COUNTER.write_text(str(seen + 1))
    if seen == 2:
        raise RuntimeError("a rare lock timed out")
'''


@pytest.mark.e2e
def test_a_head_that_raises_in_one_pair_of_three_fails_the_check_with_exit_4_and_its_report(tmp_path):
    from tests.helpers.cli import run_in_process
    from tests.test_against import FAST, bench, make_repo, scratch

    head = bench().replace("def bench():\n", f"{FAILING_HEAD}\n\ndef bench():\n    fail_in_the_second_trial()\n")
    repo = make_repo(tmp_path / "repo", {"perf/bench.py": bench()}, {"perf/bench.py": head})
    env = {**scratch(tmp_path / "tmp"), "FAIL_COUNTER": str(tmp_path / "head-trials")}
    more = ("--max-trials", "3", "--time-budget", "60", "--rounds", "1", "--fork-trials", "--json", "out.json")
    result = run_in_process("check", "perf/bench.py:bench", "--against", "HEAD~1", *FAST, *more, cwd=repo, env=env)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "the head failed in 1 of " in result.stdout and "the base in 0 of " in result.stdout
    assert "a rare lock timed out" in result.stdout
    assert (repo / "out.json").is_file()  # the report is written


# -- a budget that can decide, or says it cannot ----------------------------------------------------------------


def test_a_budget_too_short_for_a_noisy_config_says_which_budget_would_decide_it():
    from types import SimpleNamespace

    from perfgate.check.paired import budget_plan
    from perfgate.measure.paired import SideTrials

    def trials(noise: float, side: str) -> list[TrialResult]:
        rng = random.Random(f"{noise} {side}")  # a string seed: the same draws in every process
        return [TrialResult("fp32", i, "ok", samples_per_sec=1000 * math.exp(rng.gauss(0, noise))) for i in range(3)]

    keys = [("lm", "fp32"), ("vision", "fp32")]  # lm's pairs spread 8% around no change, vision's 0.5%
    noises = {("lm", "fp32"): 0.08, ("vision", "fp32"): 0.005}
    sides = {side: SideTrials(trials={k: trials(noises[k], side) for k in keys}) for side in ("base", "head")}
    lm = [TrialResult("fp32", i, "ok", samples_per_sec=1000 * math.exp(r)) for i, r in enumerate((-0.08, 0.0, 0.08))]
    sides["base"].trials[keys[0]] = [TrialResult("fp32", i, "ok", samples_per_sec=1000.0) for i in range(3)]
    sides["head"].trials[keys[0]] = lm
    session = SimpleNamespace(sides=sides, mean_pair_s=lambda key: 30.0)
    settings = GateSettings(first_n=3, max_n=40, time_budget_s=300.0)
    started = time.monotonic() - 170.0  # three pairs of each config took almost 3 minutes of the 5
    (line,) = budget_plan(session, keys, settings, started)
    # vision needs one more pair (4 are the fewest that decide), then lm has the rest: 130 s = 1 + 2 more pairs
    assert line.startswith("lm fp32: 6 pairs fit in the 5-minute budget, ")
    needed = int(line.split(", ")[1].split()[0])
    assert needed > 6
    minutes = math.ceil((170 + (needed - 3) * 30 + 30) / 60)
    assert line.endswith(
        f"are needed: raise --time-budget to {minutes} minutes ({60 * minutes} s) or check fewer configs"
    )
    # No budget decides a config that needs more pairs than a check runs.
    settings = GateSettings(first_n=3, max_n=6, time_budget_s=100.0)
    lines = budget_plan(session, keys, settings, time.monotonic() - 90.0)
    noisy = next(line for line in lines if line.startswith("lm fp32: "))
    assert noisy.startswith("lm fp32: 3 pairs fit in the 100 s budget, about ")
    assert noisy.endswith(
        "more than the 6 a check runs: the pairs are too noisy for this threshold here (a quieter "
        "runner, fewer configs at once, or a larger threshold)"
    )
    # A head far beyond the threshold decides in a few pairs however noisy they are: no note (a loader made 18x
    # slower read 45 pairs needed from the threshold's half-width alone, and failed at its fourth pair).
    slow = ("slow", "fp32")
    base = [TrialResult("fp32", i, "ok", samples_per_sec=v) for i, v in enumerate((35000, 30000, 38000))]
    head = [TrialResult("fp32", i, "ok", samples_per_sec=v) for i, v in enumerate((1900, 1800, 5000))]
    session.sides["base"].trials[slow], session.sides["head"].trials[slow] = base, head
    assert budget_plan(session, [slow], GateSettings(first_n=3, max_n=40, time_budget_s=300.0), started) == []


# -- the diagnosis names an intermittent slow path ----------------------------------------------------------------


def test_the_diagnosis_leads_with_an_intermittent_slow_path_the_count_found():
    from perfgate.judge.diagnosis import diagnose
    from tests.helpers.results import phased_trial

    def side(slow: set[int], seed: int):
        rng = random.Random(seed)
        run = phased_run(BASE_MS)
        workload = run.workloads[0]
        trials = []
        for i in range(24):
            factor = (2.0 if i in slow else 1.0) * math.exp(rng.gauss(0, 0.01))
            trials.append(phased_trial(i, {p: v * factor for p, v in BASE_MS.items()}))
        configs = {"fp32": replace(workload.configs["fp32"], trials=trials)}
        return replace(run, workloads=[replace(workload, configs=configs)])

    base, head = side(set(), 1), side(set(range(1, 24, 3)), 2)
    against = Against(ref="main", base_commit="b" * 40, head_commit="h" * 40, head_dirty=False, base=base)
    looks = {("w", "fp32"): Look(24, 23, True)}
    result = compare_pairs(replace(head, against=against), base, GateSettings(max_n=40), looks, against)
    verdict = result.verdicts[0]
    assert verdict.status == Status.REGRESSION and verdict.throughput.count.rejects
    (diagnosis,) = diagnose(result)
    assert diagnosis.suspect == "intermittent"
    assert diagnosis.findings[0].line.startswith(
        "intermittent: a slow path in some processes: 8 of 24 head trials ran 2x slower than their pair"
    )
    # Every head trial 2x slower is a steady slowdown: the count rejects, and the phases name the suspect.
    head = side(set(range(24)), 2)
    result = compare_pairs(replace(head, against=against), base, GateSettings(max_n=40), looks, against)
    assert result.verdicts[0].status == Status.REGRESSION and result.verdicts[0].throughput.count.rejects
    (diagnosis,) = diagnose(result)
    assert diagnosis.suspect != "intermittent" and not any(f.suspect == "intermittent" for f in diagnosis.findings)
