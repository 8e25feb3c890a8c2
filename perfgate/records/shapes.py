"""The small fixed-shape objects inside a trial's result and a workload's results: a trial's peak memory, its
autocast check and its system sampler's summary, and a profiling trial's outcome.

Each is written by `to_dict` exactly as the results file (`schema/`) and a trial's record keep it, and read back
by `from_dict` strictly: an unknown or missing key is a ShapeError naming it, never silently dropped (as
`results.TrialRecord` reads a trial's record). The reader says where: a trial's record or a results file.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any


class ShapeError(ValueError):
    """A JSON object that is not the shape it should be, in one line: `a trial's memory lacks the field 'kind'`."""


def field_problem(record: Any, names: Collection[str], what: str, *, optional: Collection[str] = ()) -> str | None:
    """What is wrong with `record` as a JSON object with the fields `names` (those in `optional` may be left out),
    in one line naming the fields; None when nothing is."""
    if not isinstance(record, dict):
        return f"{what} is {type(record).__name__}, not a JSON object"
    unknown = sorted(set(record) - set(names))
    missing = sorted(set(names) - set(optional) - set(record))
    if not unknown and not missing:
        return None
    problems = []
    if unknown:
        problems.append(f"has the unknown field{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}")
    if missing:
        problems.append(f"lacks the field{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))}")
    return f"{what} {' and '.join(problems)}"


def _check(record: Any, names: Collection[str], what: str, *, optional: Collection[str] = ()) -> dict[str, Any]:
    problem = field_problem(record, names, what, optional=optional)
    if problem is not None:
        raise ShapeError(problem)
    result: dict[str, Any] = record
    return result


@dataclass(frozen=True)
class PeakMemory:
    """A trial's peak memory over its timed steps (`Device.peak_memory`); a trial that measured nothing has none,
    which the files keep as `{}`."""

    kind: str  # cpu-rss-above-setup, cpu-rss-above-setup-lifetime-peak (no peak reset) or cuda-max-allocated
    peak_bytes: int
    reserved_bytes: int | None  # CUDA's max_memory_reserved; None on the CPU
    setup_bytes: int | None = None  # the level after setup; None where a file left it out

    @classmethod
    def from_dict(cls, data: Any) -> PeakMemory:
        record = _check(data, _PEAK_MEMORY_FIELDS, "a trial's memory", optional=("setup_bytes",))
        return cls(**record)

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        if self.setup_bytes is None:
            del document["setup_bytes"]
        return document


@dataclass(frozen=True)
class AutocastCheck:
    """A bf16 trial's check that autocast is on: a matmul's dtype under it and, in an eager step, how many
    Linear and Conv layers produced bfloat16 outputs (None where not counted: torch.compile)."""

    active: bool
    probe_dtype: str
    bf16_layer_outputs: int | None = None
    checked_layer_outputs: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> AutocastCheck:
        optional = ("bf16_layer_outputs", "checked_layer_outputs")
        return cls(**_check(data, _AUTOCAST_FIELDS, "a trial's autocast check", optional=optional))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k not in _AUTOCAST_COUNTS}


@dataclass(frozen=True)
class UsageSpread:
    """A sampled metric over the timed steps: its mean and 95th percentile."""

    mean: float
    p95: float

    @classmethod
    def from_dict(cls, data: Any, what: str = "a system metric") -> UsageSpread:
        return cls(**_check(data, ("mean", "p95"), what))


@dataclass(frozen=True)
class SystemSummary:
    """What the results file keeps of the system sampler's samples (a trial's `system`): how many, and each
    metric's spread."""

    samples: int
    cpu_percent: UsageSpread | None  # all cores' mean, per sample
    busiest_core_percent: UsageSpread | None  # the busiest core, per sample
    process_cpu_percent: UsageSpread | None  # the trial process; 100 = one core
    gpu_util_percent: UsageSpread | None  # None without CUDA and NVML
    # CPU seconds the trial's child processes (its DataLoader workers) used over the timed steps; None where
    # not measured (files written before it was)
    loader_cpu_s: float | None = None

    @classmethod
    def from_dict(cls, data: Any) -> SystemSummary:
        what = "a trial's system summary"
        record = _check(data, _SYSTEM_FIELDS, what, optional=("loader_cpu_s",))
        spreads = {
            name: None if record[name] is None else UsageSpread.from_dict(record[name], f"{what}'s {name}")
            for name in _SYSTEM_FIELDS
            if name not in ("samples", "loader_cpu_s")
        }
        return cls(samples=record["samples"], loader_cpu_s=record.get("loader_cpu_s"), **spreads)

    def to_dict(self) -> dict[str, Any]:
        """As the results file keeps it: `{"samples": n, "cpu_percent": {"mean": m, "p95": p} or null, ...,
        "loader_cpu_s": s}` (`loader_cpu_s` left out where it was not measured)."""
        document = asdict(self)
        if self.loader_cpu_s is None:
            del document["loader_cpu_s"]
        return document


@dataclass(frozen=True)
class Profile:
    """A profiling trial's outcome for one config (`--profile`): its trace file and the operators with the most
    self time per step, or, when it measured nothing, why (`failure`)."""

    trace: str | None = None
    top_operators: list[dict[str, Any]] = field(default_factory=list)  # name, calls and self time per step
    failure: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Profile:
        if isinstance(data, dict) and "failure" in data:
            return cls(failure=_check(data, ("failure",), "a failed profile")["failure"])
        record = _check(data, ("trace", "top_operators"), "a profile")
        return cls(trace=record["trace"], top_operators=record["top_operators"])

    def to_dict(self) -> dict[str, Any]:
        if self.failure is not None:
            return {"failure": self.failure}
        return {"trace": self.trace, "top_operators": self.top_operators}


_PEAK_MEMORY_FIELDS = tuple(PeakMemory.__dataclass_fields__)
_AUTOCAST_FIELDS = tuple(AutocastCheck.__dataclass_fields__)
_AUTOCAST_COUNTS = frozenset({"bf16_layer_outputs", "checked_layer_outputs"})
_SYSTEM_FIELDS = tuple(SystemSummary.__dataclass_fields__)


def peak_memory_from_dict(data: Any) -> PeakMemory | None:
    """A trial's `memory` as the files keep it: `{}` (a trial that measured nothing) is None."""
    return None if data == {} else PeakMemory.from_dict(data)


def peak_memory_to_dict(memory: PeakMemory | None) -> dict[str, Any]:
    """A trial's `memory` as the files keep it: `{}` for a trial that measured nothing."""
    return {} if memory is None else memory.to_dict()


@dataclass(frozen=True)
class RankResult:
    """One rank of a data-parallel trial (`--nproc`), as it measured itself: per timed step its phases, its step
    time and, where perfgate timed the gradient all-reduce (a `DistributedDataParallel` model), the time with an
    all-reduce in flight and the part of it after backward's last bucket was launched, when backward waited."""

    rank: int
    samples_per_sec: float  # this rank's samples over its own time
    step_s: list[float]
    phases_s: dict[str, list[float]]
    comm_s: list[float] | None  # per step: wall time with a gradient all-reduce in flight; None: not timed
    comm_exposed_s: list[float] | None  # per step: of that, what backward waited for after its last bucket
    buckets: int | None  # gradient buckets all-reduced a step
    comm_bytes: int | None  # gradient bytes all-reduced a step
    peak_bytes: int  # this rank's peak memory (`PeakMemory.peak_bytes`)
    data_checksum: str | None  # this rank's share of the pinned slice

    @classmethod
    def from_dict(cls, data: Any) -> RankResult:
        return cls(**_check(data, _RANK_FIELDS, "a rank's result"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Distributed:
    """How a data-parallel trial ran (`--nproc`): ranks, backend, what wrapped the model, and each rank's figures.
    The trial's own figures are the job's: samples/s over the slowest rank's time, that rank's step and phase
    times, the largest rank's peak memory."""

    nproc: int
    backend: str  # gloo (CPU) or nccl (CUDA)
    wrapper: str  # DistributedDataParallel, or the type the workload's `wrap` returned
    ranks: list[RankResult]

    @classmethod
    def from_dict(cls, data: Any) -> Distributed:
        record = _check(data, _DISTRIBUTED_FIELDS, "a trial's distributed section")
        if not isinstance(record["ranks"], list):
            raise ShapeError("a trial's distributed section has ranks that are not a list")
        return cls(**{**record, "ranks": [RankResult.from_dict(rank) for rank in record["ranks"]]})

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ranks": [rank.to_dict() for rank in self.ranks]}


_RANK_FIELDS = tuple(RankResult.__dataclass_fields__)
_DISTRIBUTED_FIELDS = tuple(Distributed.__dataclass_fields__)
