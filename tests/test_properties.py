"""Property and fuzz tests (hypothesis): the loaders fail only with perfgate's own errors on any input,
and the statistics keep their invariants on any finite, positive samples."""

from __future__ import annotations

import contextlib
import json
import math

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from perfgate.errors import PerfgateError
from perfgate.judge.stats import compare_memory, compare_throughput
from perfgate.records.baselines import parse_baseline
from perfgate.records.comparisons import Verdict
from perfgate.records.micro import parse_micro_baseline
from perfgate.records.results import parse_results

# No per-example deadline: on a shared machine one example can take 100x its usual time.
settings.register_profile("perfgate", deadline=None)
settings.load_profile("perfgate")

# YAML-ish text: fragments of real baseline files, YAML syntax and tags, shuffled and cut anywhere.
FRAGMENTS = [
    "schema_version: 1\n",
    "schema_version: 2\n",
    "workload: w\n",
    "machines:\n",
    "  m:\n",
    "    fingerprint: {device_type: cpu}\n",
    "    configs:\n",
    "      fp32:\n",
    "        trials:\n",
    "        - {samples_per_sec: 1.5, peak_bytes: 10}\n",
    "        - samples_per_sec: .nan\n",
    "        first_losses: [1.0, 2.0]\n",
    "    settings: {steps: 3}\n",
    "!!python/object/apply:os.system ['echo hacked']\n",
    "&a [*a]\n",
    "? [1, 2]\n: x\n",
    "- 1\n",
    "{",
    "]",
    ": :",
    "'unterminated\n",
    "\t\n",
    "~\n",
    "-1e999\n",
    "\x00",
    "machines: machines: 1\n",
]
yaml_like = st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join) | st.text(max_size=200)

# Any JSON-able document: what yaml.safe_load or json.loads could hand the readers.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_like)
def test_the_baseline_loader_raises_only_its_own_errors_on_any_text(text):
    with contextlib.suppress(PerfgateError):
        parse_baseline(text, source="fuzz.yaml", workload="w")


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_the_baseline_loader_raises_only_its_own_errors_on_any_document(document):
    text = yaml.safe_dump({"schema_version": 1, "workload": "w", "machines": document})
    with contextlib.suppress(PerfgateError):
        parse_baseline(text, source="fuzz.yaml", workload="w")


@settings(max_examples=100)
@given(yaml_like)
def test_the_micro_benchmark_baseline_loader_raises_only_its_own_errors(text):
    with contextlib.suppress(PerfgateError):
        parse_micro_baseline(text, source="fuzz.yaml")


@settings(max_examples=100)
@given(json_values)
def test_the_results_loader_raises_only_its_own_errors(document):
    for candidate in (document, {"schema_version": 1, "workloads": document}):
        with contextlib.suppress(PerfgateError):
            parse_results(json.dumps(candidate), source="fuzz.json")


# Samples/sec as a real run gives them: positive, finite, within a few orders of magnitude. Drawn on a
# grid so that equal values stay equal and distinct ones distinct when scaled by a power of two.
samples = st.lists(st.integers(1, 10**6).map(lambda n: n / 64), min_size=1, max_size=12)
thresholds = st.sampled_from([0.01, 0.05, 0.1, 0.5])
alphas = st.sampled_from([0.001, 0.01, 0.05])
RANK = {Verdict.IMPROVEMENT: 0, Verdict.NO_CHANGE: 1, Verdict.INCONCLUSIVE: 2, Verdict.REGRESSION: 3}


@given(samples, samples, thresholds, alphas, st.integers(1, 4), st.sampled_from([0.0, 0.1]))
def test_the_comparison_never_raises_and_its_figures_are_consistent(base, new, threshold, alpha, looks, run_noise):
    result = compare_throughput(base, new, threshold=threshold, alpha=alpha, looks=looks, run_noise=run_noise)
    assert result.ratio > 0 and math.isfinite(result.ratio)
    assert result.n_baseline == len(base) and result.n_candidate == len(new)  # every trial counts
    assert 0 <= result.slow[0] <= len(base) and 0 <= result.slow[1] <= len(new)
    if not math.isnan(result.ci_low):
        assert result.ci_low <= result.ratio <= result.ci_high
        bound = 1 / (1 + threshold)  # the verdict is what its interval says
        said = {
            Verdict.REGRESSION: result.ci_high < bound,
            Verdict.IMPROVEMENT: result.ci_low > 1 / bound,
            Verdict.NO_CHANGE: bound <= result.ci_low <= 1 / bound,
            Verdict.INCONCLUSIVE: result.ci_low < bound <= result.ci_high,
        }
        assert said[result.verdict], (result.verdict, result.ci_low, result.ci_high)
    assert math.isnan(result.p_slower) or 0 <= result.p_slower <= 1


@given(samples, samples, thresholds, alphas)
def test_swapping_baseline_and_candidate_swaps_regression_and_improvement(base, new, threshold, alpha):
    forward = compare_throughput(base, new, threshold=threshold, alpha=alpha).verdict
    backward = compare_throughput(new, base, threshold=threshold, alpha=alpha).verdict
    assert (forward == Verdict.REGRESSION) == (backward == Verdict.IMPROVEMENT)
    assert (forward == Verdict.IMPROVEMENT) == (backward == Verdict.REGRESSION)


@given(samples, samples, thresholds, alphas, st.integers(-20, 20))
@example(base=[1 / 64], new=[1 / 64, 2 / 64, 3 / 64], threshold=0.01, alpha=0.001, power=1)  # exactly 2x off
def test_scaling_both_sides_by_a_constant_changes_nothing(base, new, threshold, alpha, power):
    scale = 2.0**power
    plain = compare_throughput(base, new, threshold=threshold, alpha=alpha)
    scaled = compare_throughput([v * scale for v in base], [v * scale for v in new], threshold=threshold, alpha=alpha)
    assert scaled.verdict == plain.verdict
    assert math.isclose(scaled.ratio, plain.ratio, rel_tol=1e-9)


@given(samples, samples, thresholds, alphas, st.floats(0.05, 0.95))
def test_a_larger_slowdown_is_never_judged_less_of_a_regression(base, new, threshold, alpha, factor):
    milder = compare_throughput(base, new, threshold=threshold, alpha=alpha).verdict
    worse = compare_throughput(base, [v * factor for v in new], threshold=threshold, alpha=alpha).verdict
    assert RANK[worse] >= RANK[milder], (milder, worse)


memory = st.lists(st.integers(0, 10**10), min_size=1, max_size=8)


@given(memory, memory, thresholds, alphas, st.integers(1, 10**9))
def test_more_memory_is_never_judged_less_of_a_regression(base, new, tolerance, alpha, extra):
    milder = compare_memory(base, new, tolerance=tolerance, alpha=alpha).verdict
    worse = compare_memory(base, [v + extra for v in new], tolerance=tolerance, alpha=alpha).verdict
    assert milder in RANK and worse in RANK
    if milder == Verdict.REGRESSION:
        assert worse == Verdict.REGRESSION
