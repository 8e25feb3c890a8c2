"""The verdict keeps its promise ("a regression beyond the threshold that the data support fails the build;
noise does not"): the hand-made trials of the audit in issue 30, one test per finding.

1. slow trials on one side are evidence, not interference to drop;
2. the verdict reads one interval, tested against the threshold, never contradicting it;
4. the machine-adjusted comparison never decides alone;
5. one false-alarm rate per check (Holm over configs and metrics), and no call on fewer than four pairs;
6. alpha spent mostly late (Hwang-Shih-DeCani), the whole of it by the last look.
(3, memory, is tests/test_memory_verdict.py.)
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace
from unittest import mock

import pytest

from perfgate.check import sequential
from perfgate.judge.settings import LookTracker, levels_at
from perfgate.judge.stats import (
    EXTENSION_RESERVE,
    LookLevels,
    boundary_level,
    compare_paired,
    compare_throughput,
    look_levels,
    slowdown_bound,
    spent,
)
from perfgate.judge.verdict import compare_entries, holm_divisors, one_error_rate
from perfgate.judge.wording import throughput_reason
from perfgate.outcome import Status
from perfgate.records.baselines import BaselineEntry, ConfigEntry, TrialEntry
from perfgate.records.comparisons import DEFAULT_ALPHA, MIN_DECIDING, SLOW_RATE, Verdict, combined_verdict
from perfgate.records.fingerprint import Fingerprint
from perfgate.records.results import WorkloadSettings
from perfgate.records.verdicts import ConfigVerdict, GateResult, GateSettings, Look


def pairs(n: int, *, slowdown: float = 0.0, noise: float = 0.01, slow: frozenset[int] = frozenset(), seed: int = 0):
    """n pairs (base, head) of samples/s: head `slowdown` slower on its time per sample, and 2.5x slower in the
    pairs whose index is in `slow`; `noise` per trial, log-normal."""
    rng = random.Random(seed)
    base = [1000 * math.exp(rng.gauss(0, noise)) for _ in range(n)]
    head = [
        b * math.exp(rng.gauss(0, noise)) / (1 + slowdown) / (2.5 if i in slow else 1.0) for i, b in enumerate(base)
    ]
    return base, head


# -- 1. slow trials on one side are evidence -------------------------------------------------------------


@pytest.mark.parametrize("slow", [2, 3, 4, 5])
def test_ten_pairs_with_head_trials_two_and_a_half_times_slower_are_never_no_change(slow):
    base, head = pairs(10, slow=frozenset(range(0, 2 * slow, 2)))
    result = compare_paired(base, head)
    assert result.verdict in (Verdict.REGRESSION, Verdict.INCONCLUSIVE)  # the audit: "no change" for 2, 3, 4 of 10
    assert result.slow == (0, slow) and result.n_candidate == 10  # every pair counted
    reason = throughput_reason(result, None, None, sample="pair")
    assert f"{slow} of 10 head trials ran 2.5x slower than their pair" in reason  # the count test's line


def test_a_third_of_head_trials_on_a_slow_path_is_a_regression_reported_as_intermittent():
    base, head = pairs(40, slow=frozenset(range(0, 40, 3)))
    result = compare_paired(base, head, levels=look_levels(40, 39, 40))  # the last look of a sequential check
    assert result.verdict == Verdict.REGRESSION
    reason = throughput_reason(result, None, None, sample="pair")
    assert "14 of 40 head trials ran 2.5x slower than their pair" in reason and "base: 0 of 40" in reason


def test_base_trials_slowed_by_a_neighbour_are_counted_and_do_not_make_a_regression():
    base, head = pairs(12)
    base = [b / 2 if i in (1, 7) else b for i, b in enumerate(base)]  # two base trials beside another job
    result = compare_paired(base, head)
    assert result.slow == (2, 0) and result.verdict != Verdict.REGRESSION


def test_three_of_eight_current_trials_two_and_a_half_times_slower_are_not_no_change_against_a_stored_baseline():
    rng = random.Random(5)
    baseline = [1000 * math.exp(rng.gauss(0, 0.01)) for _ in range(3)]
    current = [1000 * math.exp(rng.gauss(0, 0.01)) / (2.5 if i < 3 else 1) for i in range(8)]
    result = compare_throughput(baseline, current)
    assert result.verdict != Verdict.NO_CHANGE and result.slow == (0, 3)  # the audit: "no change"


# -- 2. one interval, tested against the threshold ------------------------------------------------------


def test_a_significant_slowdown_whose_interval_contains_the_bound_is_not_a_regression():
    # The audit: 20 pairs at -5.5% judged "regression" with the interval 0.938-0.955x around the 0.952x bound.
    base, head = pairs(20, slowdown=0.055, noise=0.02, seed=11)
    result = compare_paired(base, head)
    assert result.p_slower < 1e-6  # clearly slower than no change at all...
    if result.ci_low < slowdown_bound(0.05) <= result.ci_high:
        assert result.verdict == Verdict.INCONCLUSIVE  # ...but not shown beyond 5%
    else:
        assert result.verdict == Verdict.REGRESSION and result.ci_high < slowdown_bound(0.05)


@pytest.mark.parametrize("seed", range(40))
def test_the_verdict_is_what_its_interval_says(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 30)
    base, head = pairs(n, slowdown=rng.uniform(-0.1, 0.15), noise=rng.choice([0.005, 0.02, 0.06]), seed=seed)
    levels = look_levels(n, n - 1, 40) if rng.random() < 0.5 else None
    result = compare_paired(base, head, levels=levels)
    bound = slowdown_bound(0.05)
    expected = {
        Verdict.REGRESSION: result.ci_high < bound,
        Verdict.IMPROVEMENT: result.ci_low > 1 / bound,
        Verdict.NO_CHANGE: bound <= result.ci_low <= 1 / bound,
        Verdict.INCONCLUSIVE: result.ci_low < bound <= result.ci_high,
    }
    assert expected[result.verdict], (result.verdict, result.ci_low, result.ci_high)
    assert result.ci_low <= result.ratio <= result.ci_high


def test_four_percent_slower_with_little_noise_passes_a_five_percent_threshold():
    base, head = pairs(20, slowdown=0.04, noise=0.005, seed=3)
    assert compare_paired(base, head).verdict == Verdict.NO_CHANGE


def test_five_percent_means_time_per_sample_everywhere():
    assert slowdown_bound(0.05) == pytest.approx(1 / 1.05)  # samples/s -4.76%, not -5%
    exact = compare_throughput([1000.0] * 4, [1000 / 1.049] * 4)
    beyond = compare_throughput([1000.0] * 4, [1000 / 1.051] * 4)
    assert (exact.verdict, beyond.verdict) == (Verdict.NO_CHANGE, Verdict.REGRESSION)


# -- 5. no call on fewer than four pairs; one false-alarm rate per check ----------------------------------


def test_fewer_than_four_pairs_never_call_a_regression_and_say_why():
    base, head = pairs(3, slowdown=0.5, noise=0.001)
    result = compare_paired(base, head)
    assert MIN_DECIDING == 4 and result.verdict == Verdict.INCONCLUSIVE and boundary_level(3) == 0
    assert result.ci_high >= slowdown_bound(0.05)  # the interval is held from excluding the bound
    assert "3 pairs cannot call a change beyond the 5% threshold" in throughput_reason(
        result, None, None, sample="pair"
    )
    base, head = pairs(4, slowdown=0.5, noise=0.001)
    assert compare_paired(base, head).verdict == Verdict.REGRESSION


def test_a_two_pair_check_that_looked_slower_is_not_a_regression():
    # The CI false alarm on record: two pairs, one degree of freedom.
    assert compare_paired([100.0, 101.0], [90.0, 90.5]).verdict == Verdict.INCONCLUSIVE


def _entry(configs: dict[str, list[float]]) -> BaselineEntry:
    """Workload w's configs, their trials at these samples/s; peak memory jitters a little from trial to trial (a
    CPU's resident memory), so memory is a comparison with sampling error, in Holm's family."""
    return BaselineEntry(
        workload="w",
        fingerprint=Fingerprint(device_type="cpu"),
        measured_at="2026-11-26T00:00:00+00:00",
        perfgate_version="0.1.0",
        git=None,
        reference="w.py:w",
        settings=WorkloadSettings.from_dict({"batch_size": 8, "steps": 10, "warmup_steps": 1, "seed": 0}),
        data_checksum="sha256:00",
        configs={
            name: ConfigEntry(
                [2.0],
                [TrialEntry(samples_per_sec=v, peak_bytes=(50 << 20) + 4096 * (int(v * 1e6) % 7)) for v in values],
            )
            for name, values in configs.items()
        },
    )


def _check(base: dict[str, list[float]], head: dict[str, list[float]]) -> GateResult:
    settings = GateSettings()
    return one_error_rate(
        lambda family: GateResult(
            [compare_entries(_entry(base), _entry(head), settings, paired=True, family=family)], settings
        )
    )


def test_one_false_alarm_rate_per_check_divides_alpha_over_configs_and_metrics():
    # One config alone: its slowdown is a regression at alpha 1%.
    base, head = pairs(12, slowdown=0.12, noise=0.05, seed=8)
    alone = _check({"fp32": base}, {"fp32": head})
    (verdict,) = alone.verdicts
    assert verdict.throughput is not None and verdict.throughput.verdict == Verdict.REGRESSION
    p = verdict.throughput.p_slower
    # Beside five unchanged configs the same data must clear alpha / (2 x 6) (Holm's first step), and does not.
    others = {f"c{i}": pairs(12, seed=20 + i) for i in range(5)}
    many = _check(
        {"fp32": base} | {k: b for k, (b, _) in others.items()}, {"fp32": head} | {k: h for k, (_, h) in others.items()}
    )
    slow = next(v for v in many.verdicts if v.config == "fp32")
    assert many.comparisons == 12  # six configs, throughput and memory
    if p * 12 >= DEFAULT_ALPHA:
        assert slow.throughput is not None and slow.throughput.verdict != Verdict.REGRESSION
    assert slow.throughput is not None and slow.throughput.alpha <= DEFAULT_ALPHA / 12 + 1e-12
    assert alone.comparisons == 2


def test_holm_steps_down_from_the_smallest_p_value():
    settings = GateSettings()
    strong_base, strong_head = pairs(12, slowdown=0.5, noise=0.01, seed=1)
    weak_base, weak_head = pairs(12, seed=2)
    result = GateResult(
        [
            compare_entries(
                _entry({"a": strong_base, "b": weak_base}),
                _entry({"a": strong_head, "b": weak_head}),
                settings,
                paired=True,
            )
        ],
        settings,
    )
    divisors = holm_divisors(result)
    assert divisors[("w", "a")][0] == 4.0  # the smallest of four p-values: alpha / 4
    assert max(divisors[("w", "b")]) <= 3.0


# -- 4. the machine-adjusted comparison never decides alone -----------------------------------------------


def test_an_adjusted_regression_with_an_inconclusive_raw_comparison_is_inconclusive():
    raw = compare_throughput([1000, 1100, 900], [880, 1000, 820])
    adjusted = compare_throughput([1.0, 1.0, 1.0, 1.001], [0.85, 0.851, 0.849, 0.85])
    assert raw.verdict == Verdict.INCONCLUSIVE and adjusted.verdict == Verdict.REGRESSION
    assert math.log(raw.ratio) < -math.log1p(0.05)  # the old exception's case: raw beyond the threshold
    assert combined_verdict(raw, adjusted) == Verdict.INCONCLUSIVE
    assert combined_verdict(raw, adjusted, exception_trials=2) == Verdict.REGRESSION  # the rule until 2026-11-26


# -- 6. alpha spending ----------------------------------------------------------------------------------


def test_alpha_is_spent_mostly_late_and_wholly_by_the_last_look():
    shares = [spent(k / 40, DEFAULT_ALPHA) for k in range(41)]
    assert shares == sorted(shares) and shares[-1] == pytest.approx(DEFAULT_ALPHA)
    assert shares[20] < DEFAULT_ALPHA / 4  # half the pairs, less than a quarter of alpha
    levels = [look_levels(n, n - 1 if n > 3 else 0, 40) for n in range(3, 41)]
    assert sum(lv.alpha for lv in levels) == pytest.approx(DEFAULT_ALPHA, rel=1e-9)
    assert sum(lv.pass_error for lv in levels) == pytest.approx(0.025, rel=1e-9)  # the no-change error: evenly
    assert all(lv.alpha > 0 for lv in levels)


def test_the_boundary_rises_from_two_percent_at_four_pairs_to_twenty_at_twelve_and_thirty_at_the_last_look():
    assert [boundary_level(n) for n in (3, 4, 8, 12, 40)] == pytest.approx([0.0, 0.02, 0.11, 0.2, 0.2])
    assert [boundary_level(n, final=True) for n in (3, 4, 12)] == pytest.approx([0.0, 0.3, 0.3])
    first = compare_paired(*pairs(4, slowdown=0.08, noise=0.01, seed=4), levels=LookLevels(0.01, 0.025))
    assert first.boundary == pytest.approx(0.02) and first.confidence == pytest.approx(0.96)
    last = compare_paired(*pairs(4, slowdown=0.08, noise=0.01, seed=4), levels=look_levels(4, 3, 4))
    assert last.boundary == pytest.approx(0.3) and look_levels(4, 3, 4).final
    assert compare_throughput(*pairs(6, seed=5)).boundary == pytest.approx(boundary_level(11))  # never final


# -- an intermittent slowdown open at the budget: measured past it, on a reserve of alpha --------------------


def decide(
    base,
    head,
    budget_pairs: int,
    *,
    extensible: bool = True,
    slow_rate: float | None = SLOW_RATE,
    counts_fail: bool = False,
):
    """One config through `decide_sequentially` on a simulated clock (a pair takes 1 s, the first look at 3
    pairs, a budget of `budget_pairs` s), judged by `compare_paired` at the tracker's levels: the last verdict,
    the pairs used, the looks, and what was said. `counts_fail`: the config already fails by its exact counts
    (a regression whatever its throughput says, as `judge.verdict` rules)."""
    settings = GateSettings(first_n=3, max_n=40, time_budget_s=float(budget_pairs))
    key = ("bench", "fp32")
    counts = {key: 3}
    tracker = LookTracker(settings, extensible=extensible)
    looks, said = [], []

    def judge(final: bool):
        look = tracker.look(dict(counts), final)[key]
        looks.append(look)
        n = counts[key]
        comparison = compare_paired(base[:n], head[:n], levels=levels_at(settings, look), slow_rate=slow_rate)
        status = Status.REGRESSION if counts_fail else Status(comparison.verdict.value)
        verdict = ConfigVerdict(*key, status, "", settings.thresholds_for(*key), throughput=comparison)
        return SimpleNamespace(verdicts=[verdict])

    def run_more(pending):
        for k in pending:
            counts[k] += 1

    clock = SimpleNamespace(monotonic=lambda: float(counts[key]))
    with mock.patch.object(sequential, "time", clock):
        result, stopped = sequential.decide_sequentially(
            judge,
            lambda: dict(counts),
            run_more,
            lambda pending: 1.0,
            settings,
            0.0,
            said.append,
            unit="pair",
            extend=tracker.extend if extensible else None,
        )
    return result.verdicts[0].throughput, counts[key], looks, said, stopped


def slow_path(n: int, *, every: int = 3, seed: int = 0):
    """n pairs in which head takes a 2x slower path in every `every`-th pair, else unchanged (2% noise)."""
    rng = random.Random(seed)
    base = [1000 * math.exp(rng.gauss(0, 0.02)) for _ in range(n)]
    head = [1000 * math.exp(rng.gauss(0, 0.02)) / (2.0 if i % every == 1 else 1.0) for i in range(n)]
    return base, head


@pytest.mark.parametrize("slow_rate", [SLOW_RATE, None], ids=["with the count test", "the interval alone"])
def test_an_intermittent_slowdown_still_open_at_the_budget_is_measured_past_it_and_fails(slow_rate):
    base, head = slow_path(40, seed=2)
    kept, used_kept, _, _, stopped = decide(base, head, 12, extensible=False, slow_rate=slow_rate)
    assert kept.verdict == Verdict.INCONCLUSIVE and used_kept == 12  # the budget alone: open (the real runs' case)
    assert stopped == "time budget 12 s reached"
    result, used, looks, said, _ = decide(base, head, 12, slow_rate=slow_rate)
    assert result.verdict == Verdict.REGRESSION and 12 < used <= 40  # measured on, by pairs, and decided
    assert any("fall on head's side" in line and "past the time budget" in line for line in said), said
    budget_look = next(look for look in looks if look.held_back)
    assert budget_look.n == 12 and budget_look.final
    assert all(look.extension == (12, budget_look.previous_n) for look in looks if look.n > 12)


def test_a_config_its_counts_already_fail_is_not_measured_past_the_budget():
    """The extension is for a verdict still open: one that fails by its counts cannot pass unseen, whatever its
    slow pairs; it stops at the budget, a regression, its throughput as far as the budget measured it."""
    base, head = slow_path(40, seed=2)  # the intermittent slow path that the test above measures past the budget
    throughput, used, _, said, stopped = decide(base, head, 12, counts_fail=True)
    assert throughput.verdict == Verdict.INCONCLUSIVE and used == 12
    assert stopped is None  # nothing is left open: the config is decided, a regression
    assert not any("past the time budget" in line for line in said), said


def test_slow_pairs_on_both_sides_are_interference_and_the_budget_stands():
    base, head = slow_path(40, seed=4)
    base = [b / 2.0 if i % 5 == 3 else b for i, b in enumerate(base)]  # a neighbour slows base's trials as often
    result, used, looks, said, stopped = decide(base, head, 12)
    assert used == 12 and not any("past the time budget" in line for line in said)
    assert all(look.extension is None for look in looks) and stopped in (None, "time budget 12 s reached")


def test_unchanged_code_with_one_sided_neighbours_is_measured_on_but_never_fails():
    # Unchanged code whose base happened to run beside no neighbour while head's trials met two: extended, and
    # the reserve keeps the extension's calls within alpha.
    rng = random.Random(9)
    base = [1000 * math.exp(rng.gauss(0, 0.02)) for _ in range(40)]
    head = [1000 * math.exp(rng.gauss(0, 0.02)) / (2.0 if i in (4, 9) else 1.0) for i in range(40)]
    result, used, looks, said, _ = decide(base, head, 12)
    assert any("past the time budget" in line for line in said)
    assert result.verdict != Verdict.REGRESSION


@pytest.mark.parametrize("budget_n, budget_previous, most", [(12, 11, 40), (5, 4, 40), (30, 29, 40), (15, 10, 20)])
def test_a_check_measured_past_its_budget_spends_at_most_its_alpha(budget_n, budget_previous, most):
    # Every path's looks: the scheduled ones up to the budget, the held-back budget look, then the extension's
    # looks up to `most`, the last spending what is left of the reserve. Together: alpha, never more.
    before = spent(budget_previous / most, DEFAULT_ALPHA)
    held = look_levels(budget_n, budget_previous, most, final=True, held_back=True)
    assert held.alpha == pytest.approx((1 - EXTENSION_RESERVE) * (DEFAULT_ALPHA - before))
    extension = [
        look_levels(n, n - 1, most, extension=(budget_n, budget_previous)).alpha for n in range(budget_n + 1, most + 1)
    ]
    assert sum(extension) == pytest.approx(EXTENSION_RESERVE * (DEFAULT_ALPHA - before))
    assert before + held.alpha + sum(extension) == pytest.approx(DEFAULT_ALPHA)
    # An extension cut short by time: its last look (final) spends the rest of the reserve, no more.
    cut = [look_levels(n, n - 1, most, extension=(budget_n, budget_previous)).alpha for n in range(budget_n + 1, most)]
    last = look_levels(most - 1, most - 2, most, final=True, extension=(budget_n, budget_previous)).alpha
    assert sum(cut[:-1]) + last == pytest.approx(EXTENSION_RESERVE * (DEFAULT_ALPHA - before))


def test_a_tracker_that_cannot_extend_spends_everything_at_the_budget_look():
    settings = GateSettings(first_n=3, max_n=40)
    plain, extensible = LookTracker(settings), LookTracker(settings, extensible=True)
    key = ("bench", "fp32")
    for tracker in (plain, extensible):
        tracker.look({key: 3}, final=False)
        tracker.look({key: 4}, final=False)
    assert plain.look({key: 4}, final=True)[key] == Look(4, 3, True)
    assert extensible.look({key: 4}, final=True)[key] == Look(4, 3, True, held_back=True)
    assert Look.from_record(Look(4, 3, True, held_back=True).to_record()) == Look(4, 3, True, held_back=True)
    extensible.extend([key])
    assert extensible.look({key: 5}, final=False)[key] == Look(5, 4, False, extension=(4, 3))
    assert Look.from_record(Look(5, 4, False, extension=(4, 3)).to_record()) == Look(5, 4, False, extension=(4, 3))
    assert Look(4, 3, True).to_record() == [4, 3, True]  # a plain look is recorded as before
