"""History trends: where a series of runs changed level, and slow drift that no single step explains.

A history holds, for one (workload, config, machine), its runs oldest first; each run is the list of its
trials' values: samples/s, or peak memory in bytes (the direction does not matter here). Everything works
on logs, since a change in throughput or memory is a ratio, and a run is summarised by its level, the
median of its trials' logs (one odd trial does not move it).

Runs, not trials, are the unit of evidence. The trials of one run share that run's machine, build and
neighbours on the CI host, so they scatter less around each other than runs scatter around the true
level; counting three trials of one lucky run as three independent samples would make a run-to-run
wobble look certain. So the segmentation and both tests read run levels.

`change_points`:

1. Segment the run levels with PELT (ruptures' `Pelt(model="l2")`): exact for a penalised least-squares
   cost, unlike binary segmentation's greedy splits, and cheap at a history's length. The penalty per
   change is PENALTY_FACTOR * sigma^2 * ln(n), sigma the run-to-run noise estimated from the series
   itself: median |difference of consecutive levels| / (0.6745 sqrt 2), the MAD of first differences. A
   step moves one difference only, so it hardly inflates sigma; a steady drift moves every difference,
   raising sigma, so drift is less often cut into steps (see 2. for the rest). The factor 3 (the R
   changepoint package's MBIC for a change in mean; BIC would be 2) is the stricter choice because sigma
   is itself estimated from a short series. sigma is floored at NOISE_FLOOR, so that a series of
   identical levels (peak memory often is) has a penalty and splits only where it changed.
2. Test each boundary against the two segments that border it. Its change is the ratio of the medians
   of their trials; its p-value is Welch's two-sided t-test of their run levels (Welch: the noise may
   differ after a change; a t-test rather than Mann-Whitney, which with 2 to 4 runs a side cannot reach
   p = 0.01 at all); and it must be abrupt: two levels must fit the two segments' run levels better (a
   smaller sum of squares) than one straight line through them, both models having two parameters.
   Otherwise the level moved gradually, which is creep: PELT does cut a long ramp into stairs, and the
   halves of a ramp of 8 runs differ significantly. A boundary that is not abrupt, or whose change is
   under min_change, or whose p-value is over alpha, is removed, the least certain first, and its
   neighbours are tested again against the merged segment, until every boundary left passes. The
   segmentation chose the boundaries, so these p-values are optimistic: they are a filter, not a
   calibrated error rate (benchmarks/change_points.py measures the rates).

`creep` fits a least-squares line to the run levels after the last change point and reports the fitted
change over that window when it reaches the threshold and the slope's t-test is significant: a slope
t-test rather than Kendall's tau, whose smallest two-sided p-value with 5 runs is 1/60, so it could never
flag a short window at alpha 0.01.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import Any

from perfgate.records.history import History
from perfgate.records.series import ChangePoint, Creep, Series, runs_of

PENALTY_FACTOR = 3.0  # penalty per change, in sigma^2 ln(n): MBIC-like, see the module docstring
NOISE_FLOOR = 1e-3  # smallest run-to-run noise assumed (0.1%), so identical levels still have a penalty
MIN_CREEP_RUNS = 4  # a line through fewer runs has under 2 degrees of freedom for its noise
# median |a - b| of two independent normal draws, in standard deviations of one draw
_MAD_OF_DIFFERENCES = statistics.NormalDist().inv_cdf(0.75) * math.sqrt(2)


@dataclass(frozen=True)
class _Run:
    index: int  # position in the series as given, runs without trials included
    values: tuple[float, ...]
    level: float  # median of the trials' logs


def change_points(
    runs: Sequence[Sequence[float]], *, min_change: float = 0.05, alpha: float = 0.01, min_size: int = 2
) -> list[ChangePoint]:
    """Where a series of runs (each a list of the trial values of one run, oldest first) changed level.

    runs: trial values (samples/s or bytes), each positive and finite; runs without trials are skipped,
    and indices still count them. min_change: the smallest |after / before - 1| reported. alpha: the
    largest p-value reported. min_size: the fewest runs in a segment (at least 2: a level needs two runs
    to show its noise). Returns the change points oldest first; [] when fewer than 2 * min_size runs have
    trials. See the module docstring for the method.
    """
    _check_fraction(min_change, "min_change")
    _check_alpha(alpha)
    if min_size < 2:
        raise ValueError(f"min_size must be at least 2 runs, got {min_size}")
    kept = _runs(runs)
    if len(kept) < 2 * min_size:
        return []
    bounds = [0, *_segment([run.level for run in kept], min_size), len(kept)]
    while True:
        tested = [_step(kept, bounds[i - 1], bounds[i], bounds[i + 1]) for i in range(1, len(bounds) - 1)]
        steps = [step for step, _ in tested]
        failing = [
            k
            for k, (step, abrupt) in enumerate(tested)
            if not abrupt or abs(step.change) < min_change or step.p_value > alpha
        ]
        if not failing:
            return steps
        weakest = max(failing, key=lambda k: (steps[k].p_value, -abs(steps[k].change)))
        del bounds[weakest + 1]


def creep(
    runs: Sequence[Sequence[float]],
    *,
    threshold: float = 0.05,
    alpha: float = 0.01,
    change_points: Sequence[ChangePoint] = (),
) -> Creep | None:
    """Slow drift that adds up beyond `threshold` over several runs while no single step does.

    runs: as for `change_points`. threshold: the smallest |fitted change| reported over the window.
    alpha: the largest p-value of the slope reported. change_points: the series' change points (from
    `change_points`); the window starts at the last of them, or at the first run, so a step already
    reported is not reported again as creep. Returns None when the window has fewer than MIN_CREEP_RUNS
    runs with trials, or the drift is too small or not significant.
    """
    _check_fraction(threshold, "threshold")
    _check_alpha(alpha)
    kept = _runs(runs)
    start = max((point.index for point in change_points), default=0)
    window = [run for run in kept if run.index >= start]
    if len(window) < MIN_CREEP_RUNS:
        return None
    slope, p_value = _slope([float(run.index) for run in window], [run.level for run in window])
    change = math.expm1(slope * (window[-1].index - window[0].index))
    if abs(change) < threshold or p_value > alpha:
        return None
    return Creep(start=window[0].index, end=window[-1].index, change=change, p_value=p_value)


def _run_noise(levels: Sequence[float]) -> float:
    """Run-to-run standard deviation of log levels, robustly: the MAD of first differences, floored.

    Differences cancel a level that changed between segments, and the median ignores the few that span
    a step; 0 differences (fewer than 2 levels) give the floor.
    """
    steps = [abs(b - a) for a, b in pairwise(levels)]
    if not steps:
        return NOISE_FLOOR
    return max(statistics.median(steps) / _MAD_OF_DIFFERENCES, NOISE_FLOOR)


def _runs(runs: Sequence[Sequence[float]]) -> list[_Run]:
    """The runs that have trials, checked: each value must be a positive, finite number."""
    kept = []
    for index, trials in enumerate(runs):
        for trial, value in enumerate(trials):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"run {index}, trial {trial}: {value!r} is not a positive finite number")
        if len(trials):
            values = tuple(float(value) for value in trials)
            kept.append(_Run(index, values, statistics.median(math.log(value) for value in values)))
    return kept


def _segment(levels: Sequence[float], min_size: int) -> list[int]:
    """PELT's boundaries (the first position of each new segment) with the noise-scaled penalty."""
    import numpy as np
    import ruptures

    penalty = PENALTY_FACTOR * _run_noise(levels) ** 2 * math.log(len(levels))
    algorithm = ruptures.Pelt(model="l2", min_size=min_size, jump=1)
    ends = algorithm.fit(np.asarray(levels, dtype=float)).predict(pen=penalty)
    return [int(end) for end in ends[:-1]]  # the last end is len(levels)


def _step(runs: Sequence[_Run], low: int, boundary: int, high: int) -> tuple[ChangePoint, bool]:
    """The change at `boundary` between the segments runs[low:boundary] and runs[boundary:high], and
    whether it is abrupt: two levels fit the segments' run levels better than one straight line does."""
    before_runs, after_runs = runs[low:boundary], runs[boundary:high]
    before = statistics.median(value for run in before_runs for value in run.values)
    after = statistics.median(value for run in after_runs for value in run.values)
    before_levels, after_levels = [run.level for run in before_runs], [run.level for run in after_runs]
    p_value = _welch(before_levels, after_levels)
    two_levels = _squares(before_levels) + _squares(after_levels)
    _, one_line = _line([float(run.index) for run in runs[low:high]], before_levels + after_levels)
    return ChangePoint(runs[boundary].index, before, after, after / before - 1, p_value), two_levels < one_line


def _squares(values: Sequence[float]) -> float:
    """Sum of squared deviations from the mean."""
    mean = statistics.fmean(values)
    return sum((value - mean) ** 2 for value in values)


def _welch(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's t-test that a and b (2 values or more each) have the same mean."""
    difference = statistics.fmean(b) - statistics.fmean(a)
    shares = [(statistics.variance(side) / len(side), len(side) - 1) for side in (a, b)]
    se_squared = sum(share for share, _ in shares)
    if se_squared == 0.0:  # both sides exact (peak memory can be): any difference is certain
        return 0.0 if difference else 1.0
    df = se_squared**2 / sum(share**2 / df for share, df in shares if share)
    return min(1.0, 2 * float(_student_t().sf(abs(difference) / math.sqrt(se_squared), df)))


def _slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of y on x, and the two-sided p-value of its t-test (n - 2 degrees of freedom)."""
    slope, residual = _line(x, y)
    if residual == 0.0:
        return slope, 0.0 if slope else 1.0
    df = len(x) - 2
    t = abs(slope) / math.sqrt(residual / df / _squares(x))
    return slope, min(1.0, 2 * float(_student_t().sf(t, df)))


def _line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of y on x and the sum of squared residuals."""
    mean_x, mean_y = statistics.fmean(x), statistics.fmean(y)
    slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y, strict=True)) / _squares(x)
    return slope, sum((b - mean_y - slope * (a - mean_x)) ** 2 for a, b in zip(x, y, strict=True))


@cache
def _student_t() -> Any:
    """scipy's Student-t distribution, imported on first use (importing perfgate stays quick)."""
    from scipy import stats

    return stats.t


def _check_fraction(value: float, name: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a fraction of 0 or more, got {value}")


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")


def series_of(history: History, *, threshold: float = 0.05, alpha: float = 0.01) -> list[Series]:
    """The history's series, each with its change points (samples/s and peak memory) and creep."""
    found = []
    for (workload, config, machine), runs in runs_of(history).items():
        speed = [r.samples_per_sec for r in runs]
        memory = [[float(b) for b in r.peak_bytes if b > 0] for r in runs]
        points = change_points(speed, min_change=threshold, alpha=alpha)
        memory_points = change_points(memory, min_change=threshold, alpha=alpha) if all(m for m in memory) else []
        drift = creep(speed, threshold=threshold, alpha=alpha, change_points=points)
        found.append(Series(workload, config, machine, runs, points, memory_points, drift))
    return found
