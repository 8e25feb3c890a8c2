"""Peak memory by part: which figures of two sides compare, and which part of the job grew.

On the CPU a trial's peak memory is the job's (`PeakMemory.kind` cpu-job-above-setup): the training process
above its level after setup plus its DataLoader workers. Files written before the workers were counted hold
the training process alone (cpu-rss-above-setup, or a baseline entry with no kind). Against such a side the
gate compares the training process alone, and says so: refusing every baseline recorded before would stop
every check until it is recorded again, and the process alone is still a like-for-like figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.formatting import format_bytes
from perfgate.judge.stats import MEMORY_SESSION_NOISE
from perfgate.records.baselines import ConfigEntry
from perfgate.records.shapes import PeakMemory

JOB_KIND = "cpu-job-above-setup"  # and its -lifetime-peak variant
PROCESS_KIND = "cpu-rss-above-setup"
# A part is named when it moved, in the direction of the whole change, by at least this share of it.
PART_SHARE = 0.25
WORKER_HINT = "a worker keeps what it loads"


@dataclass(frozen=True)
class TrialMemory:
    """One trial's peak memory as the gate reads it, from a results file's trial or a baseline's."""

    kind: str | None  # None: a baseline entry written before the kind was kept
    peak_bytes: int
    process_bytes: int | None = None
    loader_workers_bytes: int | None = None

    @classmethod
    def of(cls, memory: PeakMemory | None) -> TrialMemory:
        if memory is None:
            return cls(None, 0)
        return cls(memory.kind, memory.peak_bytes, memory.process_bytes, memory.loader_workers_bytes)

    @property
    def is_job(self) -> bool:
        """The job's memory: the training process and its DataLoader workers."""
        return self.kind is not None and self.kind.startswith(JOB_KIND)

    @property
    def process_alone(self) -> int:
        """The training process's part: the whole figure of a trial that measured nothing else."""
        return self.process_bytes if self.is_job and self.process_bytes is not None else self.peak_bytes


def of_entry(config: ConfigEntry) -> list[TrialMemory]:
    """A baseline config's trials as the gate reads their memory."""
    return [TrialMemory(t.memory_kind, t.peak_bytes, t.process_bytes, t.loader_workers_bytes) for t in config.trials]


def of_trials(memories: Sequence[PeakMemory | None]) -> list[TrialMemory]:
    return [TrialMemory.of(m) for m in memories]


@dataclass(frozen=True)
class ComparedPeaks:
    """The per-trial figures the memory verdict compares, and a note where they are not the whole job's."""

    baseline: list[int]
    candidate: list[int]
    note: str = ""
    # how far a session's figure moves from session to session (`stats.MEMORY_SESSION_NOISE`): 0 where every trial
    # measured CUDA's peak allocated memory, which repeats to the byte; resident memory (or a kind not recorded) moves
    session_noise: float = MEMORY_SESSION_NOISE


def compared_peaks(baseline: Sequence[TrialMemory], candidate: Sequence[TrialMemory], base_name: str) -> ComparedPeaks:
    """Each side's peak memory; the training process alone where one side measured the whole job on the CPU and
    the other only the training process (`base_name`: `the baseline`, or the ref of a paired check)."""
    base_job = bool(baseline) and all(t.is_job for t in baseline)
    cand_job = bool(candidate) and all(t.is_job for t in candidate)
    cuda = any(t.kind is not None and t.kind.startswith("cuda") for t in (*baseline, *candidate))
    if base_job == cand_job or cuda:
        exact = all(t.kind is not None and t.kind.startswith("cuda") for t in (*baseline, *candidate))
        noise = 0.0 if exact else MEMORY_SESSION_NOISE
        return ComparedPeaks([t.peak_bytes for t in baseline], [t.peak_bytes for t in candidate], session_noise=noise)
    older = base_name if cand_job else "this run"
    note = (
        f"peak memory compared for the training process alone: {older} did not measure the DataLoader workers' "
        "memory"
        + (" (recorded by an earlier perfgate: run perfgate update to gate the workers too)" if cand_job else "")
    )
    return ComparedPeaks([t.process_alone for t in baseline], [t.process_alone for t in candidate], note)


def grown_parts(baseline: Sequence[TrialMemory], candidate: Sequence[TrialMemory]) -> str:
    """Which part of the job's memory moved, medians over trials: `loader workers +410 MiB: a worker keeps what
    it loads`, `training process +96.0 MiB`; empty where a side did not measure both parts or nothing moved."""
    base, cand = _parts(baseline), _parts(candidate)
    if base is None or cand is None:
        return ""
    changes = {name: cand[name] - base[name] for name in base}
    total = sum(changes.values())
    if total == 0:
        return ""
    moved = sorted(
        (name for name, change in changes.items() if change * total > 0 and abs(change) >= PART_SHARE * abs(total)),
        key=lambda name: abs(changes[name]),
        reverse=True,
    )
    if not moved:
        return ""
    text = " and ".join(f"{name} {signed_bytes(changes[name])}" for name in moved)
    return f"{text}: {WORKER_HINT}" if moved[0] == "loader workers" and total > 0 else text


def _parts(trials: Sequence[TrialMemory]) -> dict[str, int] | None:
    """Each part's median, where every trial's figure is the job's (on CUDA the parts are the host's, beside
    the device memory judged: they do not explain its change)."""
    if not trials or not all(
        t.is_job and t.process_bytes is not None and t.loader_workers_bytes is not None for t in trials
    ):
        return None
    return {
        "training process": int(statistics.median(t.process_bytes or 0 for t in trials)),
        "loader workers": int(statistics.median(t.loader_workers_bytes or 0 for t in trials)),
    }


def signed_bytes(value: int) -> str:
    """`+410.0 MiB`, `-2.0 MiB`."""
    return f"{'+' if value >= 0 else '-'}{format_bytes(abs(value))}"
