"""The gate's statistics: throughput ratios with intervals and significance, memory tolerance, verdicts.

Pure functions over sequences of numbers that return frozen dataclasses (the history's trends are in
`trends.py`). Throughput is compared on log samples/sec: the log makes a ratio of geometric means the
estimate (a slowdown is multiplicative). A paired check tests the per-pair log ratios with a one-sample t;
a check against stored baselines uses Welch's t (unlike an exact Mann-Whitney U test it can reach
significance with three trials a side; see `smallest_mann_whitney_p`).

What a threshold means (docs/statistics.md, "The operating characteristic"): a verdict reads one interval.
A regression is an interval that lies wholly beyond the threshold's bound, "no change" one that lies wholly
inside it, and anything straddling the bound is inconclusive. The interval's slow end is set at each look by
`boundary_level` (calibrated by simulation so that a true 2.5% slowdown fails at most 5% of checks and a true
7.5% one at least 90%, at 3% trial noise) and by alpha, so that unchanged code fails at most alpha of checks
at any noise. No trial is left out: a slow trial is evidence, and a cluster of them on one side is what an
intermittent regression looks like.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from perfgate.project import DEFAULT_MEMORY_TOLERANCE, DEFAULT_THRESHOLD
from perfgate.records.comparisons import (
    DEFAULT_ALPHA,
    DEFAULT_SPENDING,
    MIN_DECIDING,
    SLOW_FACTOR,
    SLOW_RATE,
    MemoryComparison,
    SlowPairCount,
    ThroughputComparison,
    Verdict,
    combined_verdict,
)

DEFAULT_MEMORY_FLOOR_BYTES = 2 << 20  # a CPU process's peak RSS jitters by pages
# The standard deviation of one session's log peak memory about its usual level, for the CPU kinds (resident
# memory): issue 30's audit saw it move 7-15% between sessions on the CI machine, about 10% typical, and that
# is the difference of two sessions: 10% / sqrt(2) = 7% a session. 0 for CUDA, whose peak allocated memory
# repeats to the byte (`judge.memory.compared_peaks` picks). Only a check against a stored baseline (another
# session) adds it: 2 * it**2 to the variance of the difference, like `compare_throughput`'s `run_noise`.
MEMORY_SESSION_NOISE = 0.07
PASS_ERROR = 0.025  # chance of calling "no change" on a regression exactly at the threshold, over all looks
DETECTION_POWER = 0.8  # the power at which the minimum detectable effect is quoted
# The one-sided level of each end of a verdict's interval at a look of n pairs: BOUNDARY_FIRST at MIN_DECIDING
# pairs, rising evenly to BOUNDARY_LAST at BOUNDARY_PAIRS, and at a paired check's last look (its budget or its
# most pairs spent) at least BOUNDARY_FINAL. benchmarks/operating_characteristic.py calibrates them so that, at 3%
# trial noise, a true 2.5% slowdown fails at most 5% of checks and 7.5% at least 90%, from 12 pairs on.
BOUNDARY_FIRST, BOUNDARY_LAST, BOUNDARY_PAIRS, BOUNDARY_FINAL = 0.02, 0.20, 12, 0.30


SPENDING_SHAPES = ("even", "pocock", "obrien-fleming", "hwang-shih-decani")
HSD_GAMMA = -4.0  # the Hwang-Shih-DeCani shape: convex, a little alpha early and most of it late
# How alpha is spent over the looks by default: `records.comparisons.DEFAULT_SPENDING`, which says why.
# The share of what is left of the error rates that a paired check's budget look keeps back, for the pairs it may
# add past the budget when the slow trials all fall on one side (an intermittent slowdown: `check.sequential`).
EXTENSION_RESERVE = 0.3

# The count test of a paired check (`count_slow_pairs`): how often head ran much slower than its pair, against the
# rate at which a runner stalls one side of a pair on unchanged code (SLOW_RATE unless `perfgate calibrate`
# measured it). "Much slower" is SLOW_CUT_SIGMAS times the pairs' own noise (a robust scale: the width of their
# shortest half), never less than SLOW_CUT_FLOOR. The test takes COUNT_SHARE of a check's alpha, spent over its most
# pairs (`count_level`; the interval's significance keeps the rest of each look's), tests head's count
# against the larger of the rate and the base's own rate (its BASE_RATE_BOUND upper bound: the base side sees the
# same runner), and stands down where the base's slow pairs alone are beyond the rate (a one-sided binomial p
# below STAND_DOWN_P): interference then hits this runner more often than the test may assume.
# benchmarks/count_test.py chose these values by simulation (SLOW_RATE and STAND_DOWN_P, which a check's settings
# and the count's shape read, are in `records.comparisons`).
SHORTH_NORMAL = 1.349  # the width of a normal sample's shortest half, in standard deviations (2 x 0.674)
SLOW_CUT_SIGMAS = 6.0
SLOW_CUT_FLOOR = 1.25
COUNT_SHARE = 0.3
BASE_RATE_BOUND = 0.8  # the count tests head against the larger of the rate and this upper bound of the base's rate


def slow_cut(differences: Sequence[float]) -> float:
    """What "much slower" means for these per-pair log ratios: SLOW_CUT_SIGMAS times their robust scale, and never
    less than SLOW_CUT_FLOOR; as a factor. The scale is the shortest interval that holds half the pairs (two at
    least), over its width for a normal sample (2 x 0.674 sigma): a slow path takes its pairs far from the others,
    and the shortest half then lies within one cluster, whose spread is the pairs' noise. (The median absolute
    deviation breaks down as the slow pairs near half: 6 slow pairs of 12 made it 30x the noise.)"""
    if len(differences) < 2:
        return SLOW_CUT_FLOOR
    ordered = sorted(differences)
    half = max(2, len(ordered) // 2)
    shortest = min(ordered[i + half - 1] - ordered[i] for i in range(len(ordered) - half + 1))
    return max(SLOW_CUT_FLOOR, math.exp(SLOW_CUT_SIGMAS * shortest / SHORTH_NORMAL))


def count_slow_pairs(differences: Sequence[float], rate: float, alpha: float, rate_source: str = "") -> SlowPairCount:
    """The count test on per-pair log ratios head/base (`differences`, below 0: head slower): how many pairs ran
    much slower on each side (`slow_cut`), and the binomial tail of head's count under "at most `rate` of pairs"
    (or the base's own rate, where its BASE_RATE_BOUND upper bound is larger), to be judged at `alpha`. Valid
    where one-sided stalls of unchanged code hit a side in at most that rate of pairs, independently: the base's
    count tests that (`SlowPairCount.stood_down`)."""
    _check_level(rate, "the runner's slow-pair rate")
    cut = slow_cut(differences)
    limit = math.log(cut) - 1e-9
    head = [d for d in differences if d <= -limit]
    base_slow = sum(d >= limit for d in differences)
    n = len(differences)
    tested = max(rate, float(_beta().ppf(BASE_RATE_BOUND, base_slow + 1, n - base_slow))) if n else rate
    return SlowPairCount(
        pairs=n,
        head_slow=len(head),
        base_slow=base_slow,
        cut=cut,
        rate=rate,
        tested_rate=tested,
        p_value=binomial_tail(len(head), n, tested),
        base_p=binomial_tail(base_slow, n, rate),
        alpha=alpha,
        head_factor=math.exp(-statistics.median(head)) if head else math.nan,
        rate_source=rate_source,
    )


def binomial_tail(k: int, n: int, rate: float) -> float:
    """P(X >= k) for X ~ Binomial(n, rate)."""
    if k <= 0:
        return 1.0
    return float(_binomial().sf(k - 1, n, rate))


def rate_upper_bound(k: int, n: int, confidence: float) -> float:
    """The one-sided Clopper-Pearson upper bound of a rate seen `k` times in `n` chances, at `confidence`: the
    largest rate under which `k` or fewer would still be seen with probability 1 - `confidence` (1.0 when every
    chance was taken; nan without any)."""
    _check_level(confidence, "the bound's confidence")
    if not 0 <= k <= n:
        raise ValueError(f"a count of {k} in {n} chances is no count")
    if n == 0:
        return math.nan
    if k == n:
        return 1.0
    return float(_beta().ppf(confidence, k + 1, n - k))


@dataclass(frozen=True)
class LookLevels:
    """The error rates one look of a sequential check may spend: significance and the no-change error."""

    alpha: float  # chance of a false regression (or improvement) call at this look
    pass_error: float  # chance, at this look, of calling "no change" on a change exactly at the threshold
    final: bool = False  # no more pairs will come: a paired check reads its interval at BOUNDARY_FINAL at least
    # A paired check's count test at this look (`settings.count_level`); None: COUNT_SHARE of `alpha`, as the
    # interval's part takes the rest.
    count_alpha: float | None = None

    def divided(self, divisor: float) -> LookLevels:
        """These levels with alpha (the count's too) divided, as Holm's procedure divides them."""
        count = None if self.count_alpha is None else self.count_alpha / divisor
        return replace(self, alpha=self.alpha / divisor, count_alpha=count)


def spent(fraction: float, total: float, shape: str = DEFAULT_SPENDING) -> float:
    """How much of an error rate `total` a sequential check has spent once it has `fraction` of its
    largest sample (Lan & DeMets alpha spending).

    - "pocock": total * ln(1 + (e - 1) * t), generous early, so a large slowdown is decided after a
      few pairs;
    - "obrien-fleming": 2 - 2 * Phi(z_{1-total/2} / sqrt(t)), almost nothing early and nearly all at
      the end;
    - "even": total * t, Bonferroni over equally spaced looks;
    - "hwang-shih-decani": total * (1 - e^(-g t)) / (1 - e^(-g)) with g = HSD_GAMMA (-4): between even and
      O'Brien-Fleming.

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
    if shape == "hwang-shih-decani":
        return total * math.expm1(-HSD_GAMMA * t) / math.expm1(-HSD_GAMMA)
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
    held_back: bool = False,
    extension: tuple[int, int] | None = None,
) -> LookLevels:
    """The levels of a look at sample size `n` whose previous look was at `previous_n` (0: none), in a
    check that stops at `most`: alpha spent in `shape`, the no-change error evenly. A `final` look (no
    more samples will come: the budget is spent) spends everything left.

    A paired check keeps EXTENSION_RESERVE of what is left for an intermittent slowdown (`check.sequential`):
    its budget's final look is `held_back` (it spends only the rest), and the looks of the extension that may
    follow (`extension`: the budget look's n and previous n) share the reserve, spread over the pairs up to
    `most` in the same shapes, the last of them spending what is left of it. Whichever way a check goes, its
    looks together spend at most `alpha` (the union bound)."""
    if not 0 <= previous_n < n:
        raise ValueError(f"a look needs more samples than the previous one ({previous_n} -> {n})")
    most = max(most, n)
    last = final or n >= most

    def level(total: float, spending: str) -> float:
        if extension is not None:
            budget_n, budget_previous = extension
            pot = EXTENSION_RESERVE * (total - spent(budget_previous / most, total, spending))
            span = max(most - budget_n, 1)
            already = spent(max(previous_n - budget_n, 0) / span, pot, spending)
            value = pot - already if last else spent((n - budget_n) / span, pot, spending) - already
        else:
            already = spent(previous_n / most, total, spending)
            if last:
                value = total - already
                if held_back:
                    value *= 1.0 - EXTENSION_RESERVE
            else:
                value = spent(n / most, total, spending) - already
        return max(value, 1e-300)  # a steep shape's first looks: nothing to spend, but a level all the same

    return LookLevels(alpha=level(alpha, shape), pass_error=level(pass_error, "even"), final=last)


def slowdown_bound(threshold: float) -> float:
    """The throughput ratio below which a change counts as a regression beyond `threshold`.

    A 5% regression means 5% more time per sample, that is samples/sec below 1/1.05 of the baseline;
    defining it on this log-symmetric scale makes swapping baseline and candidate turn a regression
    into an improvement exactly.
    """
    return 1.0 / (1.0 + threshold)


def boundary_level(n: int, final: bool = False) -> float:
    """The one-sided level of each end of the interval at a look of `n` pairs (or what an unpaired comparison
    counts as): how likely a change exactly at the threshold is called a regression at that look. Small at the
    first looks, where the noise is estimated from few pairs and its tails are heavy; larger once the pairs are
    many; at a paired check's `final` look at least BOUNDARY_FINAL, so that a slowdown half again the threshold
    is caught in the pairs the time budget allowed (benchmarks/operating_characteristic.py)."""
    if n < MIN_DECIDING:
        return 0.0
    share = min(1.0, (n - MIN_DECIDING) / (BOUNDARY_PAIRS - MIN_DECIDING))
    level = BOUNDARY_FIRST + (BOUNDARY_LAST - BOUNDARY_FIRST) * share
    return max(level, BOUNDARY_FINAL) if final else level


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
    """Compare per-trial samples/sec of a candidate with a baseline and decide (Welch's t on log samples/sec).

    The verdict reads one interval of the ratio candidate/baseline (`_decide`):
    - regression: the whole interval lies below 1/(1+threshold), with MIN_DECIDING trials a side or more;
    - improvement: the whole interval lies above 1+threshold, likewise;
    - no change: the interval's slow end lies at or above 1/(1+threshold): the data rule out a regression
      beyond the threshold;
    - inconclusive: anything else (the interval straddles the bound), including too few trials to estimate
      the noise.

    `looks` is how often a sequential check may test: both error rates are split evenly over the looks
    (Bonferroni). Every trial counts: a trial that ran 2x slower is either interference, which widens the
    interval, or the change itself.

    `run_noise` is for samples that all come from one run a side (pytest-benchmark's rounds): the standard
    deviation of a whole run's log throughput from run to run, which such samples cannot show. It adds
    2 * run_noise**2 to the variance of the difference, as a term known exactly (its degrees of freedom are
    infinite in the Welch-Satterthwaite sum). The lab's trials are separate processes already, so they leave
    it at 0; a stored baseline's session noise is such a term too.

    `levels`, when given, replaces `alpha / looks` and the even split of the no-change error with the levels
    of one look of an alpha-spending plan (`look_levels`).
    """
    if not 0 <= run_noise < 1:
        raise ValueError(f"run_noise must be in [0, 1), got {run_noise}")
    _check_level(threshold, "threshold")
    _check_level(alpha, "alpha")
    if looks < 1:
        raise ValueError(f"looks must be at least 1, got {looks}")
    alpha = alpha / looks if levels is None else levels.alpha
    log_b, log_c = _logs(baseline, "baseline"), _logs(candidate, "candidate")
    difference = statistics.fmean(log_c) - statistics.fmean(log_b)
    se, df, noise = _standard_error(log_b, log_c, run_noise)
    return _decide(
        difference,
        se,
        df,
        noise,
        threshold=threshold,
        alpha=alpha,
        medians=(math.exp(statistics.median(log_b)), math.exp(statistics.median(log_c))),
        sizes=(len(log_b), len(log_c)),
        slow=(_slow_against(log_b, statistics.median(log_c)), _slow_against(log_c, statistics.median(log_b))),
        count=_deciding_count(df, len(log_b), len(log_c)),
    )


def compare_paired(
    base: Sequence[float],
    head: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    levels: LookLevels | None = None,
    slow_rate: float | None = SLOW_RATE,
    rate_source: str = "",
) -> ThroughputComparison:
    """Compare head with base from pairs of trials measured side by side (pair i: base[i], head[i]).

    The estimate is the geometric mean of the per-pair ratios head/base, tested with a one-sample t-test on
    the per-pair log ratios: whatever slowed the machine during a pair slowed both of its trials, so drift
    between pairs drops out and only the noise within a pair remains. Every pair counts: pairs in which one
    side ran SLOW_FACTOR or more slower than the other are counted in `slow` (base, head), and a third of
    head's trials on a 2x slower path is a regression, reported as intermittent. The verdict rules are
    `compare_throughput`'s; `n_baseline` and `n_candidate` are both the number of pairs, and `noise` is the
    per-pair standard deviation of the log ratio.

    With `slow_rate` (None: none), the count test (`count_slow_pairs`) joins the interval: the interval's
    significance against no change takes 1 - COUNT_SHARE of the look's alpha, the count `levels.count_alpha`
    (None: COUNT_SHARE of alpha). A count that rejects makes a regression of an interval that lies beyond the
    threshold's bound at the boundary's level alone (the count gave the significance): so "5%" keeps its meaning,
    and an intermittent slow path that the t-test needs about 40 pairs for is called in about 20. `alpha` is then
    the two parts' levels together and `p_slower` the combined test's, alpha x the smaller of p_t / its level and
    p_count / its level: a valid p-value for Holm, each part being tested at its own level.
    """
    _check_level(threshold, "threshold")
    if len(base) != len(head):
        raise ValueError(f"paired comparison needs as many base as head trials ({len(base)} != {len(head)})")
    levels = levels or LookLevels(DEFAULT_ALPHA, PASS_ERROR)
    _check_level(levels.alpha, "alpha")
    differences = [h - b for b, h in zip(_logs(base, "base"), _logs(head, "head"), strict=True)]
    n = len(differences)
    difference = statistics.fmean(differences)
    if n < 2:
        se: float | None = None
        df = noise = math.nan
    else:
        noise = statistics.stdev(differences)
        se, df = noise / math.sqrt(n), float(n - 1)
    limit = math.log(SLOW_FACTOR) - 1e-9  # a hair of slack: exactly 1.5x counts at any scale
    share = 0.0 if slow_rate is None else COUNT_SHARE
    t_alpha = levels.alpha * (1.0 - share)
    decided = _decide(
        difference,
        se,
        df,
        noise,
        threshold=threshold,
        alpha=t_alpha,
        medians=(statistics.median(base), statistics.median(head)),
        sizes=(n, n),
        slow=(sum(d >= limit for d in differences), sum(d <= -limit for d in differences)),
        final=levels.final,
    )
    if slow_rate is None:
        return decided
    count_alpha = levels.alpha * share if levels.count_alpha is None else levels.count_alpha
    count = count_slow_pairs(differences, slow_rate, count_alpha, rate_source)
    # The combined test's alpha and p-value: its share of alpha (p / alpha, as Holm reads it) is the smaller of
    # its parts' shares, each part at its own level.
    alpha = t_alpha + count_alpha
    shares = [decided.p_slower / t_alpha] + ([] if count.stood_down else [count.p_value / count_alpha])
    p_slower = min(1.0, alpha * min(shares)) if not math.isnan(decided.p_slower) else decided.p_slower
    decided = replace(decided, alpha=alpha, p_slower=p_slower, count=count)
    if decided.verdict != Verdict.INCONCLUSIVE or not count.rejects or se is None or se == 0.0:
        return decided
    # The count gave the significance: the interval at the boundary's level alone decides the size.
    width = float(_student_t().ppf(1 - decided.boundary, df)) * se
    if difference + width >= -math.log1p(threshold):
        return decided
    return replace(
        decided,
        ci_low=_exp(difference - width),
        ci_high=_exp(difference + width),
        confidence=1 - 2 * decided.boundary,
        verdict=Verdict.REGRESSION,
        by_count=True,
    )


def _exp(value: float) -> float:
    return math.inf if value > 700 else 0.0 if value < -700 else math.exp(value)


def _deciding_count(df: float, n_baseline: int, n_candidate: int) -> int:
    """What an unpaired comparison counts as for MIN_DECIDING and `boundary_level`: as many pairs as give the
    pooled degrees of freedom (3 trials against 3 count as 5), and with one trial on a side the other side's
    count, whose spread it borrows (3 against 1: 3, too few to call a change); no estimate at all (`df` nan)
    counts as the smaller side."""
    if math.isnan(df):
        return min(n_baseline, n_candidate)
    if min(n_baseline, n_candidate) >= 2:
        return n_baseline + n_candidate - 1
    return max(n_baseline, n_candidate)


def _slow_against(logs: Sequence[float], other_median: float) -> int:
    """How many of one side's log rates lie SLOW_FACTOR or more below the other side's median."""
    return sum(v <= other_median - math.log(SLOW_FACTOR) + 1e-9 for v in logs)


def _decide(
    difference: float,
    se: float | None,
    df: float,
    noise: float,
    *,
    threshold: float,
    alpha: float,
    medians: tuple[float, float],
    sizes: tuple[int, int],
    slow: tuple[int, int],
    count: int | None = None,
    final: bool = False,
) -> ThroughputComparison:
    """The verdict from a log difference (head minus base), its standard error and degrees of freedom.

    One interval of the ratio, symmetric on the log scale: at the look's `boundary_level` (two-sided: each end
    at that one-sided level), and wide enough that lying beyond the threshold's bound also means a change
    significant against no change at all at `alpha`. The verdict is what the interval says: wholly below the
    bound, a regression; wholly above its mirror, an improvement; its slow end at or above the bound, no
    change; else inconclusive. Swapping the sides negates the difference and swaps regression and improvement.
    With fewer than MIN_DECIDING pairs (`count`: what an unpaired comparison counts as) the interval is taken at
    the first boundary's level, may show no change, and is held from excluding the bound on the side of a change.
    `final`: a paired check's last look (`boundary_level`).
    """
    ratio = math.exp(difference)
    n = min(sizes) if count is None else count  # pairs, or what an unpaired comparison counts as
    bound = math.log1p(threshold)  # the threshold on the log scale: a regression is below -bound
    boundary = boundary_level(n, final)
    level = boundary if boundary > 0 else BOUNDARY_FIRST
    if se is None:  # one trial a side: no estimate of noise at all
        p_slower = p_faster = detectable = math.nan
        low_end = high_end = math.nan
    elif se == 0.0:  # identical trials on each side: the difference is exact
        p_slower = 0.0 if difference < 0 else 1.0
        p_faster = 0.0 if difference > 0 else 1.0
        low_end = high_end = difference
        detectable = 0.0
    else:
        t = _student_t()
        p_slower = float(t.cdf(difference / se, df))
        p_faster = float(t.sf(difference / se, df))
        # Beyond the bound at the boundary's level, and (the second term) beyond zero at alpha.
        width = max(float(t.ppf(1 - level, df)) * se, float(t.ppf(1 - alpha, df)) * se - bound)
        low_end, high_end = difference - width, difference + width
        detectable_log = (float(t.ppf(1 - alpha, df)) + float(t.ppf(DETECTION_POWER, df))) * se
        detectable = 1.0 - math.exp(-detectable_log)
    if boundary == 0 and not math.isnan(low_end):
        # Too few pairs to call a change: the interval may not exclude the bound on the side of a change.
        high_end, low_end = max(high_end, -bound), min(low_end, bound)
    ci_low, ci_high = _exp(low_end), _exp(high_end)  # an early look's huge quantile: an unbounded end
    if high_end < -bound:  # False for nan: no noise estimate decides nothing
        verdict = Verdict.REGRESSION
    elif low_end > bound:
        verdict = Verdict.IMPROVEMENT
    elif low_end >= -bound:
        verdict = Verdict.NO_CHANGE
    else:
        verdict = Verdict.INCONCLUSIVE
    return ThroughputComparison(
        baseline_median=medians[0],
        candidate_median=medians[1],
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=1 - 2 * level,
        p_slower=p_slower,
        p_faster=p_faster,
        n_baseline=sizes[0],
        n_candidate=sizes[1],
        noise=noise,
        detectable_slowdown=detectable,
        threshold=threshold,
        alpha=alpha,
        verdict=verdict,
        slow=slow,
        boundary=boundary,
    )


def holm_steps(shares: Sequence[float]) -> list[float]:
    """Holm's step-down procedure over one check's comparisons: each one's divisor of its own alpha.

    `shares` are the p-values (of "slower", or "larger" for memory) each as a share of its own alpha, so tests
    at different looks mix. Sorted from the smallest, the j-th (from 0) of m is tested at alpha / (m - j) until
    one is not significant; that one and all after it get the divisor where the procedure stopped. Together
    the tests of unchanged code then fail at most alpha, however many there are and however they correlate."""
    order = sorted(range(len(shares)), key=lambda i: shares[i])
    count = len(shares)
    stop = next((rank for rank, i in enumerate(order) if (count - rank) * shares[i] >= 1.0), count)
    divisors = [1.0] * count
    for rank, i in enumerate(order):
        divisors[i] = float(count - min(rank, stop))
    return divisors


def compare_memory(
    baseline: Sequence[int],
    candidate: Sequence[int],
    *,
    tolerance: float = DEFAULT_MEMORY_TOLERANCE,
    floor_bytes: int = DEFAULT_MEMORY_FLOOR_BYTES,
    alpha: float = DEFAULT_ALPHA,
    looks: int = 1,
    session_noise: float = MEMORY_SESSION_NOISE,
) -> MemoryComparison:
    """Compare peak memory against a stored baseline: this session's trials against another session's.

    Trials of one session cannot show how far a whole session's peak memory moves, so the variance of the
    difference of mean log peak memory (`_memory_logs`) is Welch's estimate from the trials plus
    2 * `session_noise`**2, a term known exactly (`MEMORY_SESSION_NOISE`; 0 for CUDA's peak allocated memory,
    which repeats to the byte). The interval of the ratio candidate/baseline reads like throughput's (`_decide`),
    growth being the bad direction, with both ends at one-sided level PASS_ERROR (2.5%):
    - regression: the whole interval lies above 1 + tolerance (and beyond `floor_bytes`, `_memory_bound`), and
      it is wide enough that this also means growth significant against no change at `alpha / looks`;
    - improvement: the whole interval lies below 1 / (1 + tolerance), likewise;
    - no change: the estimate lies within the tolerance. Against another session the interval cannot rule out
      growth of the tolerance's size (session noise above the tolerance), and a gate that left every such check
      open would gate nothing; a paired check (`compare_paired_memory`) can;
    - inconclusive: the estimate lies beyond the tolerance and the interval straddles it.
    With no session noise and figures that repeat to the byte the difference is exact, and it decides.
    """
    _check_memory(tolerance, floor_bytes)
    _check_level(alpha, "alpha")
    if not 0 <= session_noise < 1:
        raise ValueError(f"session_noise must be in [0, 1), got {session_noise}")
    if looks < 1:
        raise ValueError(f"looks must be at least 1, got {looks}")
    alpha /= looks
    shift = _memory_shift(floor_bytes)
    log_b, log_c = _memory_logs(baseline, shift, "baseline"), _memory_logs(candidate, shift, "candidate")
    reference = _memory_reference(log_b, shift)
    difference = statistics.fmean(log_c) - statistics.fmean(log_b)
    # Relative noise of the bytes; on the shifted scale it shrinks where the floor is a large part of the figure.
    noise = session_noise * reference / (reference + shift)
    se, df, _ = _standard_error(log_b, log_c, noise)
    bound = _memory_bound(reference, tolerance, floor_bytes, shift)
    interval = _memory_interval(difference, se, df, bound=bound, alpha=alpha, boundary=PASS_ERROR)
    return _memory_comparison(
        (baseline, candidate),
        difference,
        interval,
        no_change=abs(difference) <= bound,  # the estimate within the tolerance (see above)
        scale=(reference, shift, bound),
        limits=(tolerance, floor_bytes, alpha),
        sizes=(len(log_b), len(log_c)),
        session_noise=session_noise,
        exact=se == 0.0,
    )


def compare_paired_memory(
    base: Sequence[int],
    head: Sequence[int],
    *,
    tolerance: float = DEFAULT_MEMORY_TOLERANCE,
    floor_bytes: int = DEFAULT_MEMORY_FLOOR_BYTES,
    levels: LookLevels | None = None,
) -> MemoryComparison:
    """Compare head's peak memory with base's from pairs measured side by side (pair i: base[i], head[i]).

    Like `compare_paired`: the estimate is the geometric mean of the per-pair ratios head/base (of
    `_memory_logs`' figures), tested with a one-sample t on the per-pair log ratios, and the interval reads like
    throughput's (`_decide`), growth being the bad direction: a regression is the whole interval above
    1 + tolerance (and beyond `floor_bytes`, `_memory_bound`); no change its growth end inside that bound; an
    improvement the whole interval below 1 / (1 + tolerance); inconclusive anything else. With noise, fewer
    than MIN_DECIDING pairs call no regression or improvement. A figure that repeats to the byte (CUDA's peak
    allocated memory: one ratio on every pair) needs no statistics: from two pairs on, the exact ratio decides
    (one pair shows nothing repeats, and is inconclusive).
    """
    _check_memory(tolerance, floor_bytes)
    levels = levels or LookLevels(DEFAULT_ALPHA, PASS_ERROR)
    _check_level(levels.alpha, "alpha")
    if len(base) != len(head):
        raise ValueError(f"paired comparison needs as many base as head trials ({len(base)} != {len(head)})")
    shift = _memory_shift(floor_bytes)
    log_b, log_h = _memory_logs(base, shift, "base"), _memory_logs(head, shift, "head")
    differences = [h - b for b, h in zip(log_b, log_h, strict=True)]
    n = len(differences)
    difference = statistics.fmean(differences)
    se, df = (None, math.nan) if n < 2 else (statistics.stdev(differences) / math.sqrt(n), float(n - 1))
    reference = _memory_reference(log_b, shift)
    bound = _memory_bound(reference, tolerance, floor_bytes, shift)
    interval = _memory_interval(
        difference, se, df, bound=bound, alpha=levels.alpha, boundary=boundary_level(n), hold=n < MIN_DECIDING
    )
    return _memory_comparison(
        (base, head),
        difference,
        interval,
        no_change=interval[1] <= bound,  # the interval's growth end inside the bound
        scale=(reference, shift, bound),
        limits=(tolerance, floor_bytes, levels.alpha),
        sizes=(n, n),
        paired=True,
        exact=se == 0.0,
    )


def _memory_comparison(
    figures: tuple[Sequence[int], Sequence[int]],
    difference: float,
    interval: tuple[float, float, float, float],
    *,
    no_change: bool,
    scale: tuple[float, float, float],
    limits: tuple[float, int, float],
    sizes: tuple[int, int],
    session_noise: float = 0.0,
    paired: bool = False,
    exact: bool = False,
) -> MemoryComparison:
    """The verdict and the figures of a memory comparison, stored or paired, from its interval (`_memory_interval`:
    low, high, p_larger, p_smaller) on the `_memory_logs` scale; `scale`: the baseline's reference figure, the
    shift and the bound; `limits`: tolerance, floor and alpha; `no_change`: the mode's own rule for it."""
    low, high, p_larger, p_smaller = interval
    reference, shift, bound = scale
    tolerance, floor_bytes, alpha = limits
    if low > bound:  # False for nan: no estimate of noise decides nothing
        verdict = Verdict.REGRESSION
    elif high < -bound:
        verdict = Verdict.IMPROVEMENT
    elif no_change:
        verdict = Verdict.NO_CHANGE
    else:
        verdict = Verdict.INCONCLUSIVE
    return MemoryComparison(
        int(statistics.median(figures[0])),
        int(statistics.median(figures[1])),
        tolerance,
        floor_bytes,
        verdict,
        p_value=p_larger if difference >= 0 else p_smaller,
        ratio=_memory_ratio(difference, reference, shift),
        ci_low=_memory_ratio(low, reference, shift),
        ci_high=_memory_ratio(high, reference, shift),
        p_larger=p_larger,
        alpha=alpha,
        n_baseline=sizes[0],
        n_candidate=sizes[1],
        session_noise=session_noise,
        paired=paired,
        exact=exact,
    )


def _memory_interval(
    difference: float,
    se: float | None,
    df: float,
    *,
    bound: float,
    alpha: float,
    boundary: float,
    hold: bool = False,
) -> tuple[float, float, float, float]:
    """`_decide`'s interval for memory, where growth is the bad direction: symmetric, each end at one-sided level
    `boundary` (BOUNDARY_FIRST where that is 0) and wide enough that lying beyond `bound` also means a change
    significant at `alpha`. `hold` (too few pairs) keeps it from excluding the bound on the side of a change; an
    exact difference (se 0) decides as it is. Returns (low, high, p_larger, p_smaller), all nan without an
    estimate of noise."""
    if se is None:
        return math.nan, math.nan, math.nan, math.nan
    if se == 0.0:
        return difference, difference, (0.0 if difference > 0 else 1.0), (0.0 if difference < 0 else 1.0)
    t = _student_t()
    p_larger, p_smaller = float(t.sf(difference / se, df)), float(t.cdf(difference / se, df))
    level = boundary if boundary > 0 else BOUNDARY_FIRST
    width = max(float(t.ppf(1 - level, df)) * se, float(t.ppf(1 - alpha, df)) * se - bound)
    low, high = difference - width, difference + width
    if hold:
        low, high = min(low, bound), max(high, -bound)
    return low, high, p_larger, p_smaller


def _check_memory(tolerance: float, floor_bytes: int) -> None:
    _check_level(tolerance, "memory tolerance")
    if floor_bytes < 0:
        raise ValueError(f"floor_bytes must be >= 0, got {floor_bytes}")


def _memory_shift(floor_bytes: int) -> float:
    """What `_memory_logs` adds to every figure: the floor (at least a byte)."""
    return float(max(floor_bytes, 1))


def _memory_logs(values: Sequence[int], shift: float, side: str) -> list[float]:
    """Peak memory on the scale memory is compared on: log(bytes + shift), `shift` being the floor. On a large
    figure this is the log (a change is a ratio); the floor keeps a zero or tiny figure finite and makes a change
    of a few pages on a small footprint small, so a zero baseline needs no exception."""
    if not values:
        raise ValueError(f"the {side} has no peak memory figures")
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError("peak memory must be finite and not negative")
    return [math.log(v + shift) for v in values]


def _memory_reference(logs: Sequence[float], shift: float) -> float:
    """The baseline's typical figure in bytes: the geometric mean on the `_memory_logs` scale."""
    return max(0.0, _exp(statistics.fmean(logs)) - shift)


def _memory_bound(reference: float, tolerance: float, floor_bytes: int, shift: float) -> float:
    """The growth beyond which peak memory regressed, on the `_memory_logs` scale: more than both `tolerance` of
    the baseline and `floor_bytes`; so a change smaller than the floor is never a regression, from zero either."""
    return math.log1p(max(tolerance * reference, floor_bytes) / (reference + shift))


def _memory_ratio(log_difference: float, reference: float, shift: float) -> float:
    """A difference on the `_memory_logs` scale as a ratio of bytes to the baseline's `reference`; nan from zero."""
    if math.isnan(log_difference) or reference < 1.0:
        return math.nan
    return max(0.0, 1.0 + math.expm1(min(log_difference, 700.0)) * (reference + shift) / reference)


def looks(trials: int, max_trials: int) -> int:
    """How often a power-aware check tests: after its first `trials`, then after each extra trial."""
    return max(1, max_trials - trials + 1)


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
def _beta() -> Any:
    from scipy import stats

    return stats.beta


@cache
def _binomial() -> Any:
    from scipy import stats

    return stats.binom


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
