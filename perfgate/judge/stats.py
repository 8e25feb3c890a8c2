"""The gate's statistics: throughput ratios with intervals and significance, memory tolerance, verdicts.

Pure functions over sequences of numbers that return frozen dataclasses (the history's trends are in
`trends.py`). Throughput is compared with Welch's t-test on log samples/sec: the log makes a ratio
of geometric means the estimate (a slowdown is multiplicative), and unlike an exact Mann-Whitney U
test it can reach significance with three trials a side (Mann-Whitney's smallest one-sided p for 3
vs 3 is 1/20 = 0.05, so it could never fail a build at alpha 0.01; see `smallest_mann_whitney_p`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from perfgate.project import DEFAULT_MEMORY_TOLERANCE, DEFAULT_THRESHOLD

DEFAULT_ALPHA = 0.01
DEFAULT_MEMORY_FLOOR_BYTES = 2 << 20  # a CPU process's peak RSS jitters by pages
PASS_ERROR = 0.025  # chance of calling "no change" on a regression exactly at the threshold, over all looks
DETECTION_POWER = 0.8  # the power at which the minimum detectable effect is quoted
OUTLIER_FACTOR = 2.0  # a trial this many times off its side's median is interference, not signal


SPENDING_SHAPES = ("even", "pocock", "obrien-fleming")
DEFAULT_SPENDING = "even"  # benchmarks/sequential.py: as good as Pocock, better at high noise


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class ThroughputComparison:
    """Candidate against baseline samples/sec: ratio of geometric means, interval, tests and verdict."""

    baseline_median: float  # samples/sec, median over trials
    candidate_median: float
    ratio: float  # candidate / baseline, of geometric means; below 1 is slower
    ci_low: float  # the interval of the ratio the verdict uses (nan when noise cannot be estimated)
    ci_high: float
    confidence: float  # of that interval: 95%, widened for repeated looks
    p_slower: float  # one-sided p-value of "the candidate is not slower"
    p_faster: float  # one-sided p-value of "the candidate is not faster"
    n_baseline: int
    n_candidate: int
    noise: float  # per-trial standard deviation of log throughput (about the relative noise); nan if unknown
    detectable_slowdown: float  # slowdown (as a fraction of throughput) detectable at alpha with 80% power
    threshold: float
    alpha: float  # per look
    verdict: Verdict
    outliers: tuple[int, int] = (0, 0)  # trials left out of (baseline, candidate) as interference

    @property
    def change(self) -> float:
        """Relative change of samples/sec: -0.1 is 10% fewer samples per second."""
        return self.ratio - 1.0


@dataclass(frozen=True)
class LookLevels:
    """The error rates one look of a sequential check may spend: significance and the no-change error."""

    alpha: float  # chance of a false regression (or improvement) call at this look
    pass_error: float  # chance, at this look, of calling "no change" on a change exactly at the threshold


def spent(fraction: float, total: float, shape: str = DEFAULT_SPENDING) -> float:
    """How much of an error rate `total` a sequential check has spent once it has `fraction` of its
    largest sample (Lan & DeMets alpha spending).

    - "pocock": total * ln(1 + (e - 1) * t), generous early, so a large slowdown is decided after a
      few pairs;
    - "obrien-fleming": 2 - 2 * Phi(z_{1-total/2} / sqrt(t)), almost nothing early and nearly all at
      the end;
    - "even": total * t, Bonferroni over equally spaced looks.

    Each look may use the increment since the previous look; by the union bound the looks together
    never exceed `total`, whatever the correlation between them.
    """
    if shape not in SPENDING_SHAPES:
        raise ValueError(f"unknown spending shape {shape!r}; one of {', '.join(SPENDING_SHAPES)}")
    t = min(max(fraction, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if shape == "pocock":
        return total * math.log1p((math.e - 1.0) * t)
    if shape == "even":
        return total * t
    normal = _normal()
    return float(2.0 - 2.0 * normal.cdf(normal.ppf(1.0 - total / 2.0) / math.sqrt(t)))


def look_levels(
    n: int,
    previous_n: int,
    most: int,
    *,
    alpha: float = DEFAULT_ALPHA,
    pass_error: float = PASS_ERROR,
    final: bool = False,
    shape: str = DEFAULT_SPENDING,
) -> LookLevels:
    """The levels of a look at sample size `n` whose previous look was at `previous_n` (0: none), in a
    check that stops at `most`. A `final` look (no more samples will come: the budget is spent)
    spends everything left."""
    if not 0 <= previous_n < n:
        raise ValueError(f"a look needs more samples than the previous one ({previous_n} -> {n})")
    most = max(most, n)
    before = previous_n / most

    def level(total: float) -> float:
        already = spent(before, total, shape)
        return total - already if final or n >= most else spent(n / most, total, shape) - already

    return LookLevels(alpha=level(alpha), pass_error=level(pass_error))


@dataclass(frozen=True)
class MemoryComparison:
    """Candidate against baseline peak memory (medians over trials) with a relative tolerance."""

    baseline_bytes: int
    candidate_bytes: int
    tolerance: float
    floor_bytes: int
    verdict: Verdict
    p_value: float = math.nan  # one-sided, in the direction of the change (nan: no estimate of noise)

    @property
    def change_bytes(self) -> int:
        return self.candidate_bytes - self.baseline_bytes

    @property
    def change(self) -> float | None:
        """Relative change; None when the baseline is zero (the change is then only in bytes)."""
        if self.baseline_bytes == 0:
            return 0.0 if self.candidate_bytes == 0 else None
        return self.change_bytes / self.baseline_bytes


def slowdown_bound(threshold: float) -> float:
    """The throughput ratio below which a change counts as a regression beyond `threshold`.

    A 5% regression means 5% more time per sample, that is samples/sec below 1/1.05 of the baseline;
    defining it on this log-symmetric scale makes swapping baseline and candidate turn a regression
    into an improvement exactly.
    """
    return 1.0 / (1.0 + threshold)


def compare_throughput(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    looks: int = 1,
    run_noise: float = 0.0,
    levels: LookLevels | None = None,
) -> ThroughputComparison:
    """Compare per-trial samples/sec of a candidate with a baseline and decide.

    - regression: the estimated ratio is below 1/(1+threshold) and the slowdown is significant
      (one-sided p below `alpha / looks`);
    - improvement: the mirror image;
    - no change: the interval's lower end is above 1/(1+threshold), so the data rule out a regression
      beyond the threshold;
    - inconclusive: anything else (the interval straddles the threshold), including too few trials to
      estimate the noise.

    `looks` is how often a sequential check may test: both error rates are split evenly over the
    looks (Bonferroni), so testing after every extra trial raises neither. With one look the interval
    is the usual two-sided 95% one. Trials more than OUTLIER_FACTOR off their side's median are left
    out first: on a shared machine a trial that ran beside another job can take 20x longer, and one
    such trial would otherwise swamp every later comparison.

    `run_noise` is for samples that all come from one run a side (pytest-benchmark's rounds): the
    standard deviation of a whole run's log throughput from run to run, which such samples cannot
    show. It adds 2 * run_noise**2 to the variance of the difference, as a term known exactly (its
    degrees of freedom are infinite in the Welch-Satterthwaite sum). The lab's trials are separate
    processes already, so they leave it at 0.

    `levels`, when given, replaces `alpha / looks` and the even split of the no-change error with the
    levels of one look of an alpha-spending plan (`look_levels`).
    """
    if not 0 <= run_noise < 1:
        raise ValueError(f"run_noise must be in [0, 1), got {run_noise}")
    _check_level(threshold, "threshold")
    _check_level(alpha, "alpha")
    if looks < 1:
        raise ValueError(f"looks must be at least 1, got {looks}")
    alpha, pass_error = (alpha / looks, PASS_ERROR / looks) if levels is None else (levels.alpha, levels.pass_error)
    log_b, dropped_b = drop_outliers(_logs(baseline, "baseline"))
    log_c, dropped_c = drop_outliers(_logs(candidate, "candidate"))
    difference = statistics.fmean(log_c) - statistics.fmean(log_b)
    se, df, noise = _standard_error(log_b, log_c, run_noise)
    return _decide(
        difference,
        se,
        df,
        noise,
        threshold=threshold,
        alpha=alpha,
        pass_error=pass_error,
        medians=(math.exp(statistics.median(log_b)), math.exp(statistics.median(log_c))),
        sizes=(len(log_b), len(log_c)),
        outliers=(dropped_b, dropped_c),
    )


def compare_paired(
    base: Sequence[float],
    head: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    levels: LookLevels | None = None,
) -> ThroughputComparison:
    """Compare head with base from pairs of trials measured side by side (pair i: base[i], head[i]).

    The estimate is the geometric mean of the per-pair ratios head/base, tested with a one-sample
    t-test on the per-pair log ratios: whatever slowed the machine during a pair slowed both of its
    trials, so drift between pairs drops out and only the noise within a pair remains. Pairs whose
    log ratio lies more than OUTLIER_FACTOR off the median pair's are left out as interference (a
    minority only, as in `drop_outliers`). The verdict rules are `compare_throughput`'s;
    `n_baseline` and `n_candidate` are both the number of pairs used, and `noise` is the per-pair
    standard deviation of the log ratio.
    """
    _check_level(threshold, "threshold")
    if len(base) != len(head):
        raise ValueError(f"paired comparison needs as many base as head trials ({len(base)} != {len(head)})")
    levels = levels or LookLevels(DEFAULT_ALPHA, PASS_ERROR)
    _check_level(levels.alpha, "alpha")
    all_differences = [h - b for b, h in zip(_logs(base, "base"), _logs(head, "head"), strict=True)]
    kept = _kept_indices(all_differences)
    differences = [all_differences[i] for i in kept]
    kept_base, kept_head = [base[i] for i in kept], [head[i] for i in kept]
    dropped = len(all_differences) - len(kept)
    n = len(differences)
    difference = statistics.fmean(differences)
    if n < 2:
        se: float | None = None
        df = noise = math.nan
    else:
        noise = statistics.stdev(differences)
        se, df = noise / math.sqrt(n), float(n - 1)
    return _decide(
        difference,
        se,
        df,
        noise,
        threshold=threshold,
        alpha=levels.alpha,
        pass_error=levels.pass_error,
        medians=(statistics.median(kept_base), statistics.median(kept_head)),
        sizes=(n, n),
        outliers=(dropped, dropped),
    )


def _exp(value: float) -> float:
    return math.inf if value > 700 else math.exp(value)


def _kept_indices(logs: Sequence[float]) -> list[int]:
    """The indices `drop_outliers` keeps."""
    if len(logs) < 3:
        return list(range(len(logs)))
    center = statistics.median(logs)
    # A hair of slack, so a value exactly OUTLIER_FACTOR off stays in at any scale (log rounding differs).
    kept = [i for i, v in enumerate(logs) if abs(v - center) <= math.log(OUTLIER_FACTOR) + 1e-9]
    return kept if 2 * len(kept) > len(logs) else list(range(len(logs)))


def _decide(
    difference: float,
    se: float | None,
    df: float,
    noise: float,
    *,
    threshold: float,
    alpha: float,
    pass_error: float,
    medians: tuple[float, float],
    sizes: tuple[int, int],
    outliers: tuple[int, int],
) -> ThroughputComparison:
    """The verdict from a log difference (head minus base), its standard error and degrees of freedom."""
    ratio = math.exp(difference)
    if se is None:  # one trial a side: no estimate of noise at all
        p_slower = p_faster = ci_low = ci_high = detectable = math.nan
    elif se == 0.0:  # identical trials on each side: the difference is exact
        p_slower = 0.0 if difference < 0 else 1.0
        p_faster = 0.0 if difference > 0 else 1.0
        ci_low = ci_high = ratio
        detectable = 0.0
    else:
        t_statistic = difference / se
        p_slower = float(_student_t().cdf(t_statistic, df))
        p_faster = float(_student_t().sf(t_statistic, df))
        half_width = float(_student_t().ppf(1 - pass_error, df)) * se
        # An early look of a steep spending plan can have a huge quantile: the interval is then unbounded.
        ci_low, ci_high = _exp(difference - half_width), _exp(difference + half_width)
        detectable_log = (float(_student_t().ppf(1 - alpha, df)) + float(_student_t().ppf(DETECTION_POWER, df))) * se
        detectable = 1.0 - math.exp(-detectable_log)
    bound = slowdown_bound(threshold)
    # Decided on the log scale, where swapping the sides negates `difference` exactly.
    if difference < -math.log1p(threshold) and p_slower < alpha:
        verdict = Verdict.REGRESSION
    elif difference > math.log1p(threshold) and p_faster < alpha:
        verdict = Verdict.IMPROVEMENT
    elif ci_low >= bound:  # False for nan: no noise estimate is never "no change"
        verdict = Verdict.NO_CHANGE
    else:
        verdict = Verdict.INCONCLUSIVE
    return ThroughputComparison(
        baseline_median=medians[0],
        candidate_median=medians[1],
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=1 - 2 * pass_error,
        p_slower=p_slower,
        p_faster=p_faster,
        n_baseline=sizes[0],
        n_candidate=sizes[1],
        noise=noise,
        detectable_slowdown=detectable,
        threshold=threshold,
        alpha=alpha,
        verdict=verdict,
        outliers=outliers,
    )


def compare_memory(
    baseline: Sequence[int],
    candidate: Sequence[int],
    *,
    tolerance: float = DEFAULT_MEMORY_TOLERANCE,
    floor_bytes: int = DEFAULT_MEMORY_FLOOR_BYTES,
    alpha: float = DEFAULT_ALPHA,
    looks: int = 1,
) -> MemoryComparison:
    """Compare peak memory: the change of medians against a tolerance, and Welch's t for support.

    A change counts when the medians differ by more than both `tolerance` of the baseline and
    `floor_bytes` (so allocator jitter on a small footprint, or a zero baseline, never fails a build)
    and the difference is significant (one-sided p below `alpha / looks`); a change beyond the
    tolerance that noise could explain is inconclusive. On CUDA, peak allocated memory repeats to the
    byte, so any change beyond the tolerance is significant; a CPU process's peak RSS varies by a few
    MiB from trial to trial, and only a test tells a real 6% from that.
    """
    _check_level(tolerance, "memory tolerance")
    _check_level(alpha, "alpha")
    if floor_bytes < 0:
        raise ValueError(f"floor_bytes must be >= 0, got {floor_bytes}")
    if not baseline or not candidate:
        raise ValueError("compare_memory needs at least one value on each side")
    if any(not math.isfinite(v) or v < 0 for v in (*baseline, *candidate)):
        raise ValueError("peak memory must be finite and not negative")
    base = int(statistics.median(baseline))
    cand = int(statistics.median(candidate))
    allowed = max(tolerance * base, floor_bytes)
    values_b, values_c = [float(v) for v in baseline], [float(v) for v in candidate]
    difference = statistics.fmean(values_c) - statistics.fmean(values_b)
    se, df, _ = _standard_error(values_b, values_c)
    if se is None:
        p_larger = p_smaller = math.nan
    elif se == 0.0:
        p_larger, p_smaller = (0.0 if difference > 0 else 1.0), (0.0 if difference < 0 else 1.0)
    else:
        p_larger = float(_student_t().sf(difference / se, df))
        p_smaller = float(_student_t().cdf(difference / se, df))
    alpha /= max(1, looks)
    if cand - base > allowed:
        p_value = p_larger
        verdict = Verdict.REGRESSION if p_larger < alpha else Verdict.INCONCLUSIVE
    elif base - cand > allowed:
        p_value = p_smaller
        verdict = Verdict.IMPROVEMENT if p_smaller < alpha else Verdict.INCONCLUSIVE
    else:
        p_value = min(p_larger, p_smaller)
        verdict = Verdict.NO_CHANGE
    return MemoryComparison(base, cand, tolerance, floor_bytes, verdict, p_value)


def combine_verdicts(raw: Verdict, adjusted: Verdict) -> Verdict:
    """One verdict from the raw comparison and the machine-adjusted one: decisive only when they agree.

    A regression must show in both (the machine being slower today is not the code's fault), and so
    must "no change" (a real slowdown hidden by a faster machine is not a pass); an improvement in one
    and no change in the other is no change.
    """
    if raw == adjusted:
        return raw
    if {raw, adjusted} == {Verdict.NO_CHANGE, Verdict.IMPROVEMENT}:
        return Verdict.NO_CHANGE
    return Verdict.INCONCLUSIVE


def looks(trials: int, max_trials: int) -> int:
    """How often a power-aware check tests: after its first `trials`, then after each extra trial."""
    return max(1, max_trials - trials + 1)


def drop_outliers(logs: Sequence[float]) -> tuple[list[float], int]:
    """Leave out log values more than OUTLIER_FACTOR off the median (only with three or more, and only
    a minority of them: when most values are that far apart, none of them is the outlier)."""
    kept = _kept_indices(logs)
    return [logs[i] for i in kept], len(logs) - len(kept)


def smallest_mann_whitney_p(n_baseline: int, n_candidate: int) -> float:
    """The smallest one-sided p-value an exact Mann-Whitney U test can give for these sample sizes."""
    return 1.0 / math.comb(n_baseline + n_candidate, n_baseline)


def _standard_error(
    log_b: list[float], log_c: list[float], run_noise: float = 0.0
) -> tuple[float | None, float, float]:
    """Standard error of the difference of log means, its degrees of freedom, and per-trial noise.

    Welch's unequal-variance form when both sides have two or more trials; with one trial on a side,
    that side borrows the other's variance (there is nothing else to go on). `run_noise` adds a
    known variance per side (see `compare_throughput`).
    """
    n_b, n_c = len(log_b), len(log_c)
    var_b = statistics.variance(log_b) if n_b > 1 else None
    var_c = statistics.variance(log_c) if n_c > 1 else None
    known = 2 * run_noise**2
    if var_b is None and var_c is None:
        return (math.sqrt(known), math.inf, math.nan) if known else (None, math.nan, math.nan)
    if var_b is None or var_c is None:
        variance = var_c if var_b is None else var_b
        assert variance is not None
        df = float((n_c if var_b is None else n_b) - 1)
        share = variance * (1 / n_b + 1 / n_c)
        return math.sqrt(share + known), _welch_df(share + known, [(share, df)]), math.sqrt(variance)
    share_b, share_c = var_b / n_b, var_c / n_c
    se_squared = share_b + share_c + known
    noise = math.sqrt(((n_b - 1) * var_b + (n_c - 1) * var_c) / (n_b + n_c - 2))
    if se_squared == 0.0:
        return 0.0, float(n_b + n_c - 2), 0.0
    return math.sqrt(se_squared), _welch_df(se_squared, [(share_b, n_b - 1), (share_c, n_c - 1)]), noise


def _welch_df(total: float, estimated: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a variance sum; terms not listed are known exactly."""
    denominator = sum(share**2 / df for share, df in estimated if share)
    return total**2 / denominator if denominator else math.inf


def _logs(values: Sequence[float], side: str) -> list[float]:
    if not values:
        raise ValueError(f"the {side} has no trials")
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"the {side}'s samples/sec must be positive and finite")
    return [math.log(v) for v in values]


def student_t_ppf(q: float, df: float) -> float:
    """Student's t quantile (for the calibration's detectable-slowdown figure)."""
    return float(_student_t().ppf(q, df))


@cache
def _normal() -> Any:
    from scipy import stats

    return stats.norm


@cache
def _student_t() -> Any:
    """scipy's Student-t distribution, imported on first use: importing perfgate (and its pytest plugin,
    which loads in every pytest run) stays quick."""
    from scipy import stats

    return stats.t


def _check_level(value: float, name: str) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be between 0 and 1, got {value}")


@dataclass(frozen=True)
class ProbedComparison:
    """A throughput comparison raw and, with the machine probe's rates, per probe rate (`adjusted`),
    with the probe's own comparison (`machine`: how fast the machine ran)."""

    raw: ThroughputComparison
    adjusted: ThroughputComparison | None = None
    machine: ThroughputComparison | None = None

    @property
    def verdict(self) -> Verdict:
        return combined_verdict(self.raw, self.adjusted)


def compare_probed(
    baseline: Sequence[float],
    candidate: Sequence[float],
    baseline_probes: Sequence[float | None] | None,
    candidate_probes: Sequence[float | None] | None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    levels: LookLevels | None = None,
    run_noise: float = 0.0,
) -> ProbedComparison:
    """`compare_throughput` on the rates, and, when every sample has a probe rate on both sides, on the
    rates divided by them: the one raw / machine-adjusted comparison for trials and micro-benchmarks."""
    raw = compare_throughput(baseline, candidate, threshold=threshold, alpha=alpha, levels=levels, run_noise=run_noise)
    if not baseline_probes or not candidate_probes or not all(baseline_probes) or not all(candidate_probes):
        return ProbedComparison(raw)
    base_probes = [p for p in baseline_probes if p]
    current_probes = [p for p in candidate_probes if p]
    adjusted = compare_throughput(
        [r / p for r, p in zip(baseline, base_probes, strict=True)],
        [r / p for r, p in zip(candidate, current_probes, strict=True)],
        threshold=threshold,
        alpha=alpha,
        levels=levels,
        run_noise=run_noise,
    )
    return ProbedComparison(raw, adjusted, compare_throughput(base_probes, current_probes, threshold=threshold))


EXCEPTION_TRIALS = 2  # trials each side needs before the adjusted test may decide alone (`combined_verdict`)


def combined_verdict(
    raw: ThroughputComparison, adjusted: ThroughputComparison | None, *, exception_trials: int = EXCEPTION_TRIALS
) -> Verdict:
    """The throughput verdict from the raw comparison and, with the machine probe, the adjusted one.

    Both must agree (`judge.stats.combine_verdicts`), with one exception: when the machine-adjusted
    comparison finds a significant change and the raw estimate lies beyond the threshold in the same
    direction, a raw test that lacks the trials to be significant on its own (one disturbed trial
    among three baseline trials leaves it two degrees of freedom) does not wave the change through.
    The adjusted test alone holds the false-alarm rate; the raw estimate guards against a probe that
    moved for reasons of its own. The exception needs `exception_trials` (two) trials a side: a side's
    one trial may have been slowed while its probe, timed before and after its steps, saw nothing, and
    nothing shows it (one clean trial ran 14% slower while its probe ran 7% faster, a significant -19%
    adjusted; benchmarks/probe_rule.py puts such false alarms at 4.5% of one-trial checks with the
    exception and 0.9% without, against alpha 1%).
    """
    if adjusted is None:
        return raw.verdict
    if raw.verdict == Verdict.INCONCLUSIVE and min(raw.n_baseline, raw.n_candidate) >= exception_trials:
        bound = math.log1p(raw.threshold)
        if adjusted.verdict == Verdict.REGRESSION and math.log(raw.ratio) < -bound:
            return Verdict.REGRESSION
        if adjusted.verdict == Verdict.IMPROVEMENT and math.log(raw.ratio) > bound:
            return Verdict.IMPROVEMENT
    return combine_verdicts(raw.verdict, adjusted.verdict)
