"""Descriptive summaries of trials: medians, spreads and step-time percentiles (no scipy here)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from perfgate.records.shapes import Distributed, PeakMemory

PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")


class Trial(Protocol):
    """What a summary reads of a trial (`results.TrialResult` has it)."""

    @property
    def ok(self) -> bool: ...
    @property
    def samples_per_sec(self) -> float: ...
    @property
    def step_s(self) -> list[float]: ...
    @property
    def phases_s(self) -> dict[str, list[float]]: ...
    @property
    def compile_s(self) -> float | None: ...
    @property
    def memory(self) -> PeakMemory | None: ...


@dataclass(frozen=True)
class Spread:
    """Median and range of a small sample, such as samples/sec over trials."""

    median: float
    minimum: float
    maximum: float
    n: int

    @property
    def spread_pct(self) -> float:
        """Half the range as a percentage of the median: the `±` shown in the table."""
        if self.n < 2 or self.median == 0:
            return 0.0
        return 100.0 * (self.maximum - self.minimum) / 2 / self.median

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("Spread.of needs at least one value")
        return cls(statistics.median(values), min(values), max(values), len(values))


def combine(rates: Sequence[float]) -> float | None:
    """One rate from a trial's machine probes: their geometric mean (None when there are none)."""
    if not rates:
        return None
    return math.exp(sum(math.log(r) for r in rates) / len(rates))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile needs at least one value")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class ConfigSummary:
    """What the table shows for one config, computed from its successful trials."""

    samples_per_sec: Spread
    step_p50_s: float
    step_p95_s: float
    step_p99_s: float
    phase_share: dict[str, float]  # fraction of step time per phase, pooled over trials
    phase_median_s: dict[str, float]
    peak_bytes: int
    reserved_bytes: int | None
    compile_s: float | None
    trials_ok: int
    trials_failed: int


def summarize_trials(trials: Sequence[Trial]) -> ConfigSummary | None:
    """Summarise the successful trials of one config, or None when none succeeded (or, counting trials, none was
    timed)."""
    ok = [t for t in trials if t.ok]
    if not ok or not any(t.step_s for t in ok):  # none succeeded, or counting trials that timed nothing
        return None
    step_s = [s for t in ok for s in t.step_s]
    total = sum(step_s)
    phase_share = {p: sum(sum(t.phases_s[p]) for t in ok) / total if total else 0.0 for p in PHASES}
    phase_median = {p: statistics.median([s for t in ok for s in t.phases_s[p]]) for p in PHASES}
    compile_times = [t.compile_s for t in ok if t.compile_s is not None]
    memory = [t.memory for t in ok if t.memory is not None]
    reserved = [m.reserved_bytes for m in memory if m.reserved_bytes is not None]
    return ConfigSummary(
        samples_per_sec=Spread.of([t.samples_per_sec for t in ok]),
        step_p50_s=percentile(step_s, 50),
        step_p95_s=percentile(step_s, 95),
        step_p99_s=percentile(step_s, 99),
        phase_share=phase_share,
        phase_median_s=phase_median,
        peak_bytes=int(statistics.median([m.peak_bytes for m in memory])),
        reserved_bytes=int(statistics.median(reserved)) if reserved else None,
        # The first trial compiles cold; later ones show the cached cost. Report the largest.
        compile_s=max(compile_times) if compile_times else None,
        trials_ok=len(ok),
        trials_failed=len(trials) - len(ok),
    )


@dataclass(frozen=True)
class RankSummary:
    """One rank of a config's data-parallel trials: medians over the trials, times per step."""

    rank: int
    samples_per_sec: float
    step_p50_s: float
    phase_s: dict[str, float]  # mean time per step per phase
    comm_s: float | None  # a gradient all-reduce in flight, per step; None: not timed
    comm_exposed_s: float | None  # of that, what backward waited for after its last bucket
    peak_bytes: int

    @property
    def overlap(self) -> float | None:
        """The share of the all-reduce's time that overlapped with backward's compute."""
        if self.comm_s is None or self.comm_exposed_s is None or self.comm_s <= 0:
            return None
        return max(0.0, 1.0 - self.comm_exposed_s / self.comm_s)


def summarize_ranks(jobs: Sequence[Distributed]) -> list[RankSummary]:
    """Each rank's figures over a config's data-parallel trials (`TrialResult.distributed`), in rank order."""
    if not jobs:
        return []
    summaries = []
    for index in range(min(len(job.ranks) for job in jobs)):
        ranks = [job.ranks[index] for job in jobs]
        timed = [r for r in ranks if r.comm_s is not None and r.comm_exposed_s is not None]
        summaries.append(
            RankSummary(
                rank=ranks[0].rank,
                samples_per_sec=statistics.median(r.samples_per_sec for r in ranks),
                step_p50_s=statistics.median(s for r in ranks for s in r.step_s),
                phase_s={p: statistics.fmean(s for r in ranks for s in r.phases_s.get(p, [0.0])) for p in PHASES},
                comm_s=statistics.fmean(s for r in timed for s in r.comm_s or [0.0]) if timed else None,
                comm_exposed_s=statistics.fmean(s for r in timed for s in r.comm_exposed_s or [0.0]) if timed else None,
                peak_bytes=int(statistics.median(r.peak_bytes for r in ranks)),
            )
        )
    return summaries
