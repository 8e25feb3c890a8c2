"""The gate's statistics on seeded synthetic samples with known effects and noise."""

from __future__ import annotations

import math
import random

import pytest

from perfgate.judge.stats import (
    compare_memory,
    compare_paired,
    compare_throughput,
    looks,
    slowdown_bound,
    smallest_mann_whitney_p,
)
from perfgate.judge.wording import throughput_reason
from perfgate.records.comparisons import Verdict

MIB = 1 << 20


def samples(n: int, *, mean: float = 1000.0, noise: float = 0.02, seed: int = 0) -> list[float]:
    """Per-trial samples/sec with log-normal noise of relative size `noise`."""
    rng = random.Random(seed)
    return [mean * math.exp(rng.gauss(0.0, noise)) for _ in range(n)]


def test_a_twenty_percent_slowdown_with_one_percent_noise_is_a_regression():
    result = compare_throughput(samples(5, seed=1, noise=0.01), samples(5, mean=1000 / 1.2, seed=2, noise=0.01))
    assert result.verdict == Verdict.REGRESSION
    assert result.ratio == pytest.approx(1 / 1.2, rel=0.02)
    assert result.ci_low < result.ratio < result.ci_high < 1
    assert result.p_slower < 0.001


def test_swapping_baseline_and_candidate_turns_a_regression_into_an_improvement():
    base, slow = samples(5, seed=3), samples(4, mean=850, seed=4)
    forward, backward = compare_throughput(base, slow), compare_throughput(slow, base)
    assert (forward.verdict, backward.verdict) == (Verdict.REGRESSION, Verdict.IMPROVEMENT)
    assert backward.ratio == pytest.approx(1 / forward.ratio)
    assert backward.p_faster == pytest.approx(forward.p_slower)


def test_equal_distributions_with_small_noise_show_no_change():
    result = compare_throughput(samples(8, seed=5, noise=0.005), samples(8, seed=6, noise=0.005))
    assert result.verdict == Verdict.NO_CHANGE
    assert result.ci_low > slowdown_bound(0.05)


def test_a_significant_slowdown_below_the_threshold_is_not_a_regression():
    result = compare_throughput(samples(8, seed=7, noise=0.002), samples(8, mean=980, seed=8, noise=0.002))
    assert result.p_slower < 0.001  # clearly slower...
    assert result.verdict == Verdict.NO_CHANGE  # ...but by 2%, inside the 5% threshold


def test_an_interval_that_straddles_the_threshold_is_inconclusive_and_names_what_could_be_detected():
    result = compare_throughput(samples(3, seed=9, noise=0.10), samples(3, mean=950, seed=10, noise=0.10))
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.ci_low < slowdown_bound(0.05) < result.ci_high
    assert 0.05 < result.detectable_slowdown < 1


def test_more_trials_make_smaller_slowdowns_detectable():
    few = compare_throughput(samples(3, seed=11, noise=0.05), samples(3, seed=12, noise=0.05))
    many = compare_throughput(samples(12, seed=11, noise=0.05), samples(12, seed=12, noise=0.05))
    assert many.detectable_slowdown < few.detectable_slowdown


def test_identical_trials_on_each_side_give_exact_answers_without_nan():
    same = compare_throughput([500.0] * 3, [500.0] * 3)
    assert same.verdict == Verdict.NO_CHANGE
    assert (same.ratio, same.ci_low, same.ci_high, same.noise) == (1.0, 1.0, 1.0, 0.0)
    slower = compare_throughput([500.0] * 3, [400.0] * 3)
    assert slower.verdict == Verdict.REGRESSION
    assert slower.p_slower == 0.0 and slower.ratio == pytest.approx(0.8)
    assert not any(math.isnan(v) for v in (slower.ci_low, slower.ci_high, slower.detectable_slowdown))


def test_one_trial_each_side_is_inconclusive_never_no_change():
    result = compare_throughput([500.0], [300.0])
    assert result.verdict == Verdict.INCONCLUSIVE
    assert math.isnan(result.p_slower) and math.isnan(result.ci_low)


def test_one_pair_or_one_trial_a_side_says_it_cannot_decide_and_names_no_size_it_could_detect():
    one_pair = compare_paired([500.0], [513.0])
    assert one_pair.verdict == Verdict.INCONCLUSIVE and math.isnan(one_pair.noise)
    assert throughput_reason(one_pair, None, None, sample="pair") == (
        "samples/s +2.6% (1.026x, one pair a side: no estimate of noise): inconclusive, 1 pair cannot decide"
    )
    one_trial = throughput_reason(compare_throughput([500.0], [490.0]), None, None)
    assert one_trial.endswith("): inconclusive, 1+1 trials cannot decide")
    assert "unknown" not in one_trial


def test_one_trial_on_one_side_borrows_the_other_sides_noise():
    result = compare_throughput(samples(5, seed=13, noise=0.01), [700.0])
    assert result.verdict == Verdict.REGRESSION
    assert result.n_baseline == 5 and result.n_candidate == 1


def test_scaling_both_samples_changes_nothing():
    base, cand = samples(4, seed=14, noise=0.04), samples(4, mean=900, seed=15, noise=0.04)
    plain = compare_throughput(base, cand)
    scaled = compare_throughput([7 * v for v in base], [7 * v for v in cand])
    assert scaled.verdict == plain.verdict
    assert scaled.p_slower == pytest.approx(plain.p_slower)
    assert scaled.ratio == pytest.approx(plain.ratio)


def test_a_larger_slowdown_is_never_judged_less_of_a_regression():
    base = samples(5, seed=16, noise=0.03)
    noise = samples(3, mean=1.0, seed=17, noise=0.03)
    results = [compare_throughput(base, [v * 1000 / (1 + s) for v in noise]) for s in (0.0, 0.05, 0.1, 0.2, 0.4)]
    p_values = [r.p_slower for r in results]
    assert p_values == sorted(p_values, reverse=True)
    assert results[-1].verdict == Verdict.REGRESSION


@pytest.mark.parametrize("bad", [[], [0.0], [-1.0], [math.nan], [math.inf]])
def test_throughput_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError):
        compare_throughput([1.0, 2.0], bad)


def test_thresholds_and_alpha_must_be_fractions():
    with pytest.raises(ValueError, match="threshold must be between 0 and 1"):
        compare_throughput([1.0, 2.0], [1.0, 2.0], threshold=5)
    with pytest.raises(ValueError, match="alpha"):
        compare_throughput([1.0, 2.0], [1.0, 2.0], alpha=0)


def test_the_threshold_is_symmetric_on_a_log_scale():
    assert slowdown_bound(0.05) == pytest.approx(1 / 1.05)
    exact_improvement = compare_throughput([1000.0] * 3, [1000 * 1.06] * 3)
    exact_regression = compare_throughput([1000 * 1.06] * 3, [1000.0] * 3)
    assert (exact_improvement.verdict, exact_regression.verdict) == (Verdict.IMPROVEMENT, Verdict.REGRESSION)


def test_error_rates_are_split_over_the_looks_of_a_power_aware_check():
    assert (looks(3, 8), looks(3, 3)) == (6, 1)
    base, cand = samples(5, seed=20, noise=0.03), samples(4, mean=900, seed=21, noise=0.03)
    once, six = compare_throughput(base, cand), compare_throughput(base, cand, looks=6)
    assert six.alpha == pytest.approx(0.01 / 6)
    # the interval's confidence: 1 - 2 x the boundary's level, at least (alpha widens it where it binds)
    assert once.confidence == pytest.approx(1 - 2 * once.boundary) == six.confidence
    assert six.ci_low <= once.ci_low < once.ci_high <= six.ci_high
    assert six.p_slower == pytest.approx(once.p_slower)


def test_a_regression_clear_of_the_threshold_at_one_look_is_inconclusive_over_six():
    # 11.3% slower, 3% standard error: beyond the bound at alpha 1%, not at 1% / 6.
    base = [1000 * math.exp(x) for x in (-0.06, -0.03, 0.0, 0.03, 0.06)]
    cand = [1000 * math.exp(-0.12 + x) for x in (-0.05, -0.02, 0.02, 0.05)]
    assert compare_throughput(base, cand).verdict == Verdict.REGRESSION
    assert compare_throughput(base, cand, looks=6).verdict == Verdict.INCONCLUSIVE


def test_a_trial_slowed_twentyfold_by_another_job_is_counted_and_widens_the_interval():
    base = samples(5, seed=24, noise=0.03)
    polluted = [*base[:4], base[4] / 20]
    result = compare_throughput(polluted, samples(3, mean=800, seed=25, noise=0.03))
    assert result.slow == (1, 0) and result.n_baseline == 5  # counted, not left out
    assert result.verdict == Verdict.INCONCLUSIVE  # the slow baseline trial widens the interval: no call either way
    assert result.ci_low < slowdown_bound(0.05) < result.ci_high


def test_mann_whitney_cannot_reach_one_percent_with_three_trials_a_side():
    assert smallest_mann_whitney_p(3, 3) == pytest.approx(0.05)
    assert smallest_mann_whitney_p(5, 3) == pytest.approx(1 / 56)
    # Welch's t on the same sizes can: a clear slowdown gets p far below 0.01.
    assert compare_throughput(samples(3, seed=18, noise=0.01), samples(3, mean=800, seed=19)).p_slower < 0.001


def test_memory_that_grows_beyond_the_tolerance_in_every_trial_is_a_regression():
    result = compare_memory([50 * MIB, 51 * MIB, 50 * MIB], [114 * MIB, 115 * MIB, 114 * MIB])
    assert result.verdict == Verdict.REGRESSION
    assert result.change == pytest.approx(64 / 50)
    assert result.p_value < 0.001


def test_memory_within_tolerance_is_no_change_and_growth_that_noise_explains_is_inconclusive():
    assert compare_memory([100 * MIB] * 3, [103 * MIB] * 3).verdict == Verdict.NO_CHANGE
    overlapping = compare_memory([50 * MIB, 52 * MIB, 70 * MIB], [60 * MIB, 60 * MIB, 61 * MIB])
    assert overlapping.verdict == Verdict.INCONCLUSIVE


def test_cpu_rss_jitter_of_a_few_mib_is_not_a_memory_regression():
    """Measured on the CI machine: an A/A check's three trials all above a five-trial baseline's range."""
    baseline = [62644224, 62558208, 59035648, 60358656, 57516032]
    candidate = [64057344, 65024000, 64081920]
    result = compare_memory(baseline, candidate, looks=6)
    assert result.change is not None and result.change > 0.05  # beyond the tolerance...
    assert result.verdict == Verdict.INCONCLUSIVE  # ...but not beyond the trials' noise


def test_deterministic_device_memory_fails_on_any_growth_beyond_the_tolerance():
    # CUDA's peak allocated memory: no session-to-session noise (`compared_peaks`), and the exact ratio decides.
    result = compare_memory([1000 * MIB] * 3, [1060 * MIB] * 3, looks=6, session_noise=0.0)
    assert (result.verdict, result.p_value) == (Verdict.REGRESSION, 0.0)


def test_zero_memory_baselines_never_divide_by_zero():
    zero = compare_memory([0, 0], [0, 0])
    assert (zero.verdict, zero.change) == (Verdict.NO_CHANGE, 0.0)
    jitter = compare_memory([0, 0], [4096, 8192])
    assert jitter.verdict == Verdict.NO_CHANGE and jitter.change is None
    grown = compare_memory([0, 0], [64 * MIB, 64 * MIB])
    assert grown.verdict == Verdict.REGRESSION and grown.change is None


def test_memory_shrinking_in_every_trial_is_an_improvement():
    assert compare_memory([100 * MIB] * 3, [60 * MIB] * 3).verdict == Verdict.IMPROVEMENT


def test_memory_rejects_negative_or_empty_samples():
    with pytest.raises(ValueError):
        compare_memory([], [1])
    with pytest.raises(ValueError):
        compare_memory([-1], [1])
