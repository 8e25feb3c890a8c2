"""What the statistics decide, as shapes: a verdict, the throughput and memory comparisons, the count test of a
paired check, and the rule that joins a raw and a machine-adjusted verdict.

`judge.stats` computes them; every report reads them (records sit below both). The constants here are those the
shapes and a check's settings (`records.verdicts.GateSettings`) read; `judge.stats` says how they were chosen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_ALPHA = 0.01
MIN_DECIDING = 4  # pairs (or trials a side) before a regression or an improvement may be called
SLOW_FACTOR = 1.5  # a trial this much slower than its pair (or the other side's median) is reported as slow
# How alpha is spent over the looks: Hwang-Shih-DeCani (gamma -4) keeps most of it for the last looks, where a
# slowdown on some trials only (a third of them 2x slower) shows, yet leaves enough early for a steady 10%
# slowdown to be called in about 10 pairs (benchmarks/operating_characteristic.py; O'Brien-Fleming needed 13,
# even spending caught 77% of the intermittent slowdowns against 89%). The no-change error is spent evenly.
DEFAULT_SPENDING = "hwang-shih-decani"
# The count test of a paired check (`judge.stats.count_slow_pairs`): the rate at which a runner stalls one side of
# a pair on unchanged code (unless `perfgate calibrate` measured it), and the binomial p of the base's own slow
# pairs below which the test stands down. benchmarks/count_test.py chose these values by simulation.
SLOW_RATE = 0.05
STAND_DOWN_P = 0.05


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class SlowPairCount:
    """A paired check's count test: in how many pairs head ran `cut` or more slower than its base trial, tested
    against `rate`, the most a runner stalls one side of a pair on unchanged code (H0: head's rate <= `rate`), with
    the base's own count as the check of that assumption (`count_slow_pairs`)."""

    pairs: int
    head_slow: int  # pairs in which head ran `cut` or more slower than its base trial
    base_slow: int  # pairs in which base ran `cut` or more slower than its head trial
    cut: float  # the factor "much slower" means here: SLOW_CUT_SIGMAS x the pairs' noise, at least SLOW_CUT_FLOOR
    rate: float  # r0: the runner's rate of one-sided slow pairs on unchanged code
    tested_rate: float  # what head's count was tested against: the larger of `rate` and the base's own (its bound)
    p_value: float  # one-sided binomial: P(head_slow or more of `pairs` | tested_rate)
    base_p: float  # the base's count against `rate`: below STAND_DOWN_P, the runner stalls more often than `rate`
    alpha: float  # the level the count had at this look (`count_level`)
    head_factor: float = math.nan  # how much slower head's slow pairs ran (their median ratio base/head)
    rate_source: str = ""  # where `rate` came from: "" perfgate's default, else "measured by perfgate calibrate on ..."

    @property
    def stood_down(self) -> bool:
        """The base's own count is more than `rate` allows: the assumption fails on this runner now."""
        return self.base_p < STAND_DOWN_P

    @property
    def rejects(self) -> bool:
        """Head ran much slower than its pair more often than the runner's rate explains, at this look's level."""
        return not self.stood_down and self.pairs >= MIN_DECIDING and self.p_value <= self.alpha


@dataclass(frozen=True)
class ThroughputComparison:
    """Candidate against baseline samples/sec: ratio of geometric means, interval, tests and verdict."""

    baseline_median: float  # samples/sec, median over trials
    candidate_median: float
    ratio: float  # candidate / baseline, of geometric means; below 1 is slower
    ci_low: float  # the interval of the ratio the verdict uses (nan when noise cannot be estimated)
    ci_high: float
    confidence: float  # of that interval: 1 - 2 x the boundary's level (at least, where alpha widens it)
    p_slower: float  # one-sided p-value of "the candidate is not slower"
    p_faster: float  # one-sided p-value of "the candidate is not faster"
    n_baseline: int
    n_candidate: int
    noise: float  # per-trial standard deviation of log throughput (about the relative noise); nan if unknown
    detectable_slowdown: float  # slowdown (as a fraction of throughput) detectable at alpha with 80% power
    threshold: float
    alpha: float  # per look: the significance a change must also reach against no change at all
    verdict: Verdict
    slow: tuple[int, int] = (0, 0)  # (baseline, candidate) trials SLOW_FACTOR or more slower than their pair
    boundary: float = math.nan  # the one-sided level of the interval's slow end at this look (`boundary_level`)
    count: SlowPairCount | None = None  # a paired check's count test of head's much slower pairs
    by_count: bool = False  # a regression whose significance the count test gave (the interval at `boundary`)

    @property
    def change(self) -> float:
        """Relative change of samples/sec: -0.1 is 10% fewer samples per second."""
        return self.ratio - 1.0


@dataclass(frozen=True)
class MemoryComparison:
    """Candidate against baseline peak memory with a relative tolerance and a floor in bytes: the medians over
    trials (`baseline_bytes`, `candidate_bytes`, `change`), and the estimate and interval the verdict reads
    (`compare_memory`, `compare_paired_memory`)."""

    baseline_bytes: int
    candidate_bytes: int
    tolerance: float
    floor_bytes: int
    verdict: Verdict
    p_value: float = math.nan  # one-sided, in the direction of the change (nan: no estimate of noise)
    ratio: float = math.nan  # the estimate of candidate / baseline bytes; nan from a zero baseline
    ci_low: float = math.nan  # the interval of that ratio the verdict reads (nan: no estimate of noise or zero base)
    ci_high: float = math.nan
    p_larger: float = math.nan  # one-sided p-value of "the candidate does not use more memory" (for Holm)
    alpha: float = math.nan  # the level growth had to be significant at, against no change at all
    n_baseline: int = 0  # trials (a paired check: pairs)
    n_candidate: int = 0
    session_noise: float = 0.0  # against a stored baseline: the session-to-session noise assumed (log scale)
    paired: bool = False  # per-pair ratios of a paired check
    exact: bool = False  # the figures repeated to the byte: the exact ratio decided

    @property
    def change_bytes(self) -> int:
        return self.candidate_bytes - self.baseline_bytes

    @property
    def change(self) -> float | None:
        """Relative change; None when the baseline is zero (the change is then only in bytes)."""
        if self.baseline_bytes == 0:
            return 0.0 if self.candidate_bytes == 0 else None
        return self.change_bytes / self.baseline_bytes


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


def combined_verdict(
    raw: ThroughputComparison, adjusted: ThroughputComparison | None, *, exception_trials: int | None = None
) -> Verdict:
    """The throughput verdict from the raw comparison and, with the machine probe, the adjusted one: both must
    agree (`combine_verdicts`).

    Until 2026-11-26 the adjusted comparison could decide alone when the raw one was inconclusive with its
    estimate beyond the threshold (from `exception_trials` trials a side; benchmarks/probe_rule.py measures
    that rule, and passing `exception_trials` applies it). The audit of issue 30 found that the adjusted test
    alone calls regressions on unchanged code whenever workload and probe have session-level noise of their
    own (1.4-2.7% of A/A checks at 2% residual session noise, 6-11% at 4%), so the two must now agree.
    """
    if adjusted is None:
        return raw.verdict
    exception = exception_trials is not None and min(raw.n_baseline, raw.n_candidate) >= exception_trials
    if exception and raw.verdict == Verdict.INCONCLUSIVE:
        bound = math.log1p(raw.threshold)
        if adjusted.verdict == Verdict.REGRESSION and math.log(raw.ratio) < -bound:
            return Verdict.REGRESSION
        if adjusted.verdict == Verdict.IMPROVEMENT and math.log(raw.ratio) > bound:
            return Verdict.IMPROVEMENT
    return combine_verdicts(raw.verdict, adjusted.verdict)
