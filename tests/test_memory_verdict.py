"""The peak-memory verdict (issue 30's audit): per-pair ratios in a paired check, and against a stored baseline a
session-to-session term, with the interval tested against the tolerance rather than against no change."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from perfgate.judge.memory import TrialMemory, compared_peaks
from perfgate.judge.stats import MEMORY_SESSION_NOISE, LookLevels, compare_memory, compare_paired_memory
from perfgate.judge.verdict import compare_entries
from perfgate.judge.wording import memory_reason
from perfgate.records.comparisons import MIN_DECIDING, Verdict
from perfgate.records.verdicts import GateSettings
from tests.helpers.baselines import gate_entry

MIB = 1 << 20
X = 400 * MIB  # a CPU job's resident peak above setup


def tight(level: float, n: int, rng: random.Random, spread: float = 0.003) -> list[int]:
    """`n` trials of one session around `level` bytes, 0.3% apart."""
    return [int(level * math.exp(rng.gauss(0.0, spread))) for _ in range(n)]


# -- against a stored baseline ----------------------------------------------------------------------------------


def test_the_ci_false_alarm_three_tight_trials_against_one_at_plus_7_6_percent_is_not_a_regression():
    """The audited case: Welch's t against zero gave p = 4e-4 and failed the build."""
    baseline = [X - 300_000, X, X + 300_000]
    result = compare_memory(baseline, [int(X * 1.076)])
    assert result.verdict == Verdict.INCONCLUSIVE  # beyond the 5% tolerance, well within sessions' noise
    assert result.p_larger > 0.1 and result.ci_low < 1.05 < result.ci_high
    assert result.session_noise == MEMORY_SESSION_NOISE
    # As many trials on the candidate's side do not make one session's figure more than one session's.
    again = compare_memory(baseline, [int(X * 1.076) + d for d in (-300_000, 0, 300_000)])
    assert again.verdict == Verdict.INCONCLUSIVE and again.p_larger > 0.1


@pytest.mark.parametrize("trials", [(3, 3), (3, 1)])
def test_unchanged_code_against_a_stored_baseline_rarely_regresses_with_5_percent_session_noise(trials):
    """2000 A/A checks: each session's level moves 5% (s.d.), its trials 0.3% about it. Without a session term
    (the audit's pseudo-replication) a sizeable share fail; with MEMORY_SESSION_NOISE hardly any."""
    rng = random.Random(30)
    alarms = pseudo_replicated = 0
    checks = 2000
    for _ in range(checks):
        base = tight(X * math.exp(rng.gauss(0.0, 0.05)), trials[0], rng)
        cand = tight(X * math.exp(rng.gauss(0.0, 0.05)), trials[1], rng)
        alarms += compare_memory(base, cand).verdict == Verdict.REGRESSION
        pseudo_replicated += compare_memory(base, cand, session_noise=0.0).verdict == Verdict.REGRESSION
    assert alarms / checks <= 0.01  # 0.05% and 0% here; 4-5% where sessions move 10% (s.d.), the audit's worst
    assert pseudo_replicated / checks > 0.1  # about 20%, the audit's 10-17% and more


def test_thirty_percent_more_memory_in_three_trials_a_side_is_a_regression():
    rng = random.Random(3)
    result = compare_memory(tight(X, 3, rng), tight(1.3 * X, 3, rng))
    assert result.verdict == Verdict.REGRESSION
    assert 1.05 < result.ci_low < result.ratio < result.ci_high and result.ratio == pytest.approx(1.3, rel=0.01)
    assert result.p_larger < result.alpha == 0.01
    assert result.change == pytest.approx(0.3, abs=0.01) and result.change_bytes > 0


def test_cuda_figures_that_repeat_to_the_byte_carry_no_session_noise_and_the_exact_ratio_decides():
    grown = compare_memory([1000 * MIB] * 3, [1060 * MIB] * 3, session_noise=0.0)
    assert (grown.verdict, grown.exact, grown.p_larger) == (Verdict.REGRESSION, True, 0.0)
    assert grown.ratio == grown.ci_low == grown.ci_high == pytest.approx(1.06)
    assert compare_memory([1000 * MIB] * 5, [1040 * MIB], session_noise=0.0).verdict == Verdict.NO_CHANGE
    assert compare_memory([1000 * MIB] * 5, [1060 * MIB], session_noise=0.0).verdict == Verdict.REGRESSION
    cuda = [TrialMemory("cuda-max-allocated", 1000 * MIB)] * 3
    assert compared_peaks(cuda, cuda, "the baseline").session_noise == 0.0
    cpu = [TrialMemory("cpu-job-above-setup", 400 * MIB, 400 * MIB, 0)] * 3
    assert compared_peaks(cpu, cpu, "the baseline").session_noise == MEMORY_SESSION_NOISE


def test_stored_memory_within_the_tolerance_is_no_change_and_less_memory_is_an_improvement():
    rng = random.Random(4)
    assert compare_memory(tight(X, 5, rng), tight(1.02 * X, 3, rng)).verdict == Verdict.NO_CHANGE
    assert compare_memory(tight(X, 5, rng), tight(0.6 * X, 3, rng)).verdict == Verdict.IMPROVEMENT


# -- a paired check: per-pair ratios ----------------------------------------------------------------------------


def paired(ratio: float, pairs: int, noise: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Pairs whose level drifts 10% from pair to pair; head/base = `ratio` within a pair, give or take `noise`."""
    rng = random.Random(seed)
    levels = [X * math.exp(rng.gauss(0.0, 0.1)) for _ in range(pairs)]
    return [int(v) for v in levels], [int(v * ratio * math.exp(rng.gauss(0.0, noise))) for v in levels]


def test_paired_growth_of_8_percent_over_six_pairs_is_a_regression_and_2_percent_no_change():
    grown = compare_paired_memory(*paired(1.08, 6, 0.005))
    assert grown.verdict == Verdict.REGRESSION and grown.paired and not grown.exact
    assert 1.05 < grown.ci_low < 1.08 < grown.ci_high and grown.session_noise == 0.0
    assert (grown.n_baseline, grown.n_candidate) == (6, 6)
    same = compare_paired_memory(*paired(1.02, 6, 0.005))
    assert same.verdict == Verdict.NO_CHANGE and same.ci_high < 1.05


def test_paired_figures_that_repeat_to_the_byte_decide_from_two_pairs():
    for pairs in (2, 3, 6):
        grown = compare_paired_memory([1000 * MIB] * pairs, [1100 * MIB] * pairs)
        assert (grown.verdict, grown.exact) == (Verdict.REGRESSION, True)
        assert grown.ci_low == grown.ci_high == pytest.approx(1.1)
        same = compare_paired_memory([1000 * MIB] * pairs, [1030 * MIB] * pairs)
        assert same.verdict == Verdict.NO_CHANGE
        assert compare_paired_memory([1000 * MIB] * pairs, [800 * MIB] * pairs).verdict == Verdict.IMPROVEMENT
    one = compare_paired_memory([1000 * MIB], [1100 * MIB])  # one pair shows nothing repeats
    assert one.verdict == Verdict.INCONCLUSIVE and math.isnan(one.p_larger)


@pytest.mark.parametrize("pairs", range(2, MIN_DECIDING))
def test_fewer_than_four_noisy_pairs_never_call_a_memory_regression(pairs):
    for seed in range(20):
        result = compare_paired_memory(*paired(1.5, pairs, 0.002, seed))
        assert result.verdict == Verdict.INCONCLUSIVE
        assert result.ci_low <= 1.05 + 1e-9  # the interval is held from excluding the tolerance
    decided = compare_paired_memory(*paired(1.5, MIN_DECIDING, 0.002))
    assert decided.verdict == Verdict.REGRESSION


def test_paired_memory_takes_the_looks_levels_and_rejects_unpaired_sides():
    base, head = paired(1.08, 8, 0.005)
    result = compare_paired_memory(base, head, levels=LookLevels(alpha=0.002, pass_error=0.01))
    assert result.alpha == 0.002 and 0 <= result.p_larger < 0.002
    with pytest.raises(ValueError):
        compare_paired_memory(base, head[:-1])


# -- zero baselines and the floor -------------------------------------------------------------------------------


@pytest.mark.parametrize("compare", [compare_paired_memory, compare_memory])
def test_zero_baselines_and_changes_below_the_floor_never_fail(compare):
    zero = compare([0, 0, 0], [0, 0, 0])
    assert (zero.verdict, zero.change, zero.change_bytes) == (Verdict.NO_CHANGE, 0.0, 0)
    jitter = compare([0, 0, 0], [4096, 8192, 4096])
    assert jitter.verdict != Verdict.REGRESSION and jitter.change is None and math.isnan(jitter.ratio)
    grown = compare([0, 0, 0], [64 * MIB] * 3)
    assert grown.change is None and math.isnan(grown.ci_low)
    if compare is compare_paired_memory:  # exact on every pair (a stored CPU figure carries session noise)
        assert grown.verdict == Verdict.REGRESSION
    # 15% of 10 MiB is below the 2 MiB floor: no regression; 30% is above it.
    assert compare([10 * MIB] * 3, [int(11.5 * MIB)] * 3).verdict == Verdict.NO_CHANGE
    assert compare([10 * MIB] * 3, [13 * MIB] * 3, floor_bytes=MIB).verdict != Verdict.NO_CHANGE
    assert compare_paired_memory([10 * MIB] * 3, [13 * MIB] * 3).verdict == Verdict.REGRESSION
    with pytest.raises(ValueError):
        compare([-1], [1])


def test_a_cuda_zero_baseline_against_64_mib_is_a_regression():
    assert compare_memory([0, 0], [64 * MIB, 64 * MIB], session_noise=0.0).verdict == Verdict.REGRESSION


# -- the gate uses the paired comparison in a paired check, and says what the interval says ---------------------


def with_memory(entry, peaks_mib, kind):
    trials = [
        dataclasses.replace(t, peak_bytes=int(p * MIB), memory_kind=kind)
        for t, p in zip(entry.configs["fp32"].trials, peaks_mib, strict=True)
    ]
    return dataclasses.replace(entry, configs={"fp32": dataclasses.replace(entry.configs["fp32"], trials=trials)})


def test_a_paired_check_judges_memory_per_pair_and_a_stored_one_with_session_noise():
    settings = GateSettings(first_n=5, max_n=5)
    rates = [500, 505, 495, 502, 498]
    base = with_memory(gate_entry(rates), [400, 440, 380, 420, 400], "cpu-job-above-setup")
    head = with_memory(gate_entry(rates), [432, 475.2, 410.4, 453.6, 432], "cpu-job-above-setup")  # +8% a pair
    (pairs,) = compare_entries(base, head, settings, paired=True, base_name="HEAD~1").configs
    assert pairs.memory is not None and pairs.memory.paired and pairs.memory.verdict == Verdict.REGRESSION
    assert "tolerance 5%): a memory regression" in pairs.reason and "session" not in pairs.reason
    (stored,) = compare_entries(base, head, settings).configs
    assert stored.memory is not None and not stored.memory.paired
    assert stored.memory.verdict == Verdict.INCONCLUSIVE  # the spread between pairs hides 8% between sessions
    assert "7% session-to-session noise assumed): inconclusive, the interval straddles the 5% tolerance" in (
        stored.reason
    )


def test_the_memory_line_reads_the_interval():
    grown = compare_paired_memory(*paired(1.12, 8, 0.01))
    line = memory_reason(grown)
    low, high = f"{100 * (grown.ci_low - 1):+.1f}%", f"{100 * (grown.ci_high - 1):+.1f}%"
    assert line.startswith("peak memory ") and f", interval {low} to {high}, tolerance 5%): a memory regression" in line
    exact = memory_reason(compare_paired_memory([100 * MIB] * 2, [112 * MIB] * 2))
    assert exact == (
        "peak memory 100.0 MiB -> 112.0 MiB (+12.0%, the same figure in every pair, tolerance 5%): a memory regression"
    )
    few = memory_reason(compare_paired_memory(*paired(1.3, 3, 0.01)))
    assert few.endswith("inconclusive, 3 pairs cannot call a memory change: that needs 4 or more")
    zero = memory_reason(compare_paired_memory([0, 0], [64 * MIB] * 2))
    assert zero == "peak memory 0 B -> 64.0 MiB (from zero, the same figure in every pair, tolerance 2.0 MiB): " + (
        "a memory regression"
    )
    assert memory_reason(compare_paired_memory([100 * MIB] * 2, [101 * MIB] * 2)) == ""
