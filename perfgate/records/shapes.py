"""The small fixed-shape objects inside a trial's result and a workload's results: a trial's peak memory, its
autocast check and its system sampler's summary, and a profiling trial's outcome.

Each is written by `to_dict` exactly as the results file (`schema/`) and a trial's record keep it, and read back
by `from_dict` strictly: an unknown or missing key is a ShapeError naming it, never silently dropped (as
`results.TrialRecord` reads a trial's record). The reader says where: a trial's record or a results file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Self, cast

from perfgate._files import MAX_INTEGER_DIGITS


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


def checked(record: Any, names: Collection[str], what: str, *, optional: Collection[str] = ()) -> dict[str, Any]:
    """`record` as a JSON object with the fields `names` (those in `optional` may be left out); else a ShapeError."""
    problem = field_problem(record, names, what, optional=optional)
    if problem is not None:
        raise ShapeError(problem)
    result: dict[str, Any] = record
    return result


_check = checked


class _LongInteger(str):
    """An integer too long to read, kept as its digits so that `huge_integer_place` can say where it is."""


def huge_integer_place(text: str | bytes) -> str:
    """Where the first integer longer than `MAX_INTEGER_DIGITS` digits sits in a JSON document, as
    ` (at workloads[0].configs.fp32.trials[1].peak_bytes)`; empty when there is none (or the text is no JSON).
    `_files.read_json` refuses such a number without saying where: this names the field for the message."""

    def parse_int(digits: str) -> Any:
        return _LongInteger(digits) if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS else 0

    try:
        document = json.loads(text, parse_int=parse_int)
        place = _place_of_long_integer(document, "")
    except (ValueError, RecursionError, TypeError):
        return ""
    return "" if place is None else f" (at {place or 'the document'})"


def _place_of_long_integer(value: Any, where: str) -> str | None:
    if isinstance(value, _LongInteger):
        return where
    items: Any = ()
    if isinstance(value, dict):
        items = ((f"{where}.{key}" if where else str(key), item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{index}]", item) for index, item in enumerate(value))
    for place, item in items:
        found = _place_of_long_integer(item, place)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class PeakMemory:
    """A trial's peak memory over its timed steps (`Device.peak_memory`); a trial that measured nothing has none,
    which the files keep as `{}`."""

    # What `peak_bytes` is, the figure the gate compares: on the CPU, cpu-job-above-setup (the training process
    # above its level after setup plus its DataLoader workers) or, where the workers' memory could not be read,
    # cpu-rss-above-setup (the training process alone; also every file written before the workers were
    # counted); either with -lifetime-peak where the peak could not be reset. On CUDA, cuda-max-allocated.
    kind: str
    peak_bytes: int
    reserved_bytes: int | None  # CUDA's max_memory_reserved; None on the CPU
    setup_bytes: int | None = None  # the level after setup; None where a file left it out
    # The job's host memory by part (None where not measured, and in files written before they were): the
    # training process's peak resident memory above its level after setup, and the peak over the timed steps
    # of its DataLoader workers' unique memory summed over the live workers, with the most workers seen live.
    process_bytes: int | None = None
    loader_workers_bytes: int | None = None
    loader_workers: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> PeakMemory:
        record = _check(data, _PEAK_MEMORY_FIELDS, "a trial's memory", optional=_PEAK_MEMORY_OPTIONAL)
        return cls(**record)

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        for name in _PEAK_MEMORY_OPTIONAL:
            if document[name] is None:
                del document[name]
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


# Counts whose value depends on the device's backend (operators decompose differently, kernels and allocations
# differ): compared only between runs on the same device type. The others are the model's and the code's.
DEVICE_DEPENDENT_COUNTS = ("operators_per_step", "kernels_per_step", "allocated_peak_bytes")


@dataclass(frozen=True)
class Counts:
    """What one training step does, counted exactly outside the timed steps (`perfgate.measure.counting`); None
    where a count does not apply (operators under torch.compile, kernels off CUDA, graphs outside it)."""

    device: str  # "cpu" or "cuda": operators, kernels and the allocated peak are compared only like with like
    parameters: int
    trainable_parameters: int
    flops_per_sample: float | None  # FlopCounterMode over one step (forward, backward, optimizer) / batch size
    operators_per_step: int | None  # ATen operators one eager step dispatches
    kernels_per_step: int | None  # CUDA kernels one step launches
    allocated_peak_bytes: int | None  # CUDA: the allocator's peak over one step; CPU: peak live tensor storage
    allocated_kind: str | None  # "cuda-max-allocated" or "cpu-live-storage"
    graphs: int | None  # torch.compile's graphs at the end of the warm-up steps
    graph_breaks: int | None
    recompiles: int | None
    break_places: list[str] = field(default_factory=list)  # "model.py:42 in forward: why", at most ten
    recompile_reasons: list[str] = field(default_factory=list)  # "model.py:40 in forward: the guard that failed"
    counting_s: float = 0.0  # what counting took, in seconds

    @classmethod
    def from_dict(cls, data: Any, what: str = "a trial's counts") -> Counts:
        record = _check(data, _COUNTS_FIELDS, what, optional=("break_places", "recompile_reasons", "counting_s"))
        return cls(**record)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UsageSpread:
    """A sampled metric over the timed steps: its mean and 95th percentile."""

    mean: float
    p95: float

    @classmethod
    def from_dict(cls, data: Any, what: str = "a system metric") -> UsageSpread:
        return cls(**_check(data, ("mean", "p95"), what))


# NVML's clocks-event reasons (`nvmlClocksEventReason*`, called throttle reasons before driver 535), by the names
# the files keep; `measure/gpu.py` decodes NVML's bitmask into them.
CLOCKS_EVENT_REASONS = (
    "idle",
    "applications clocks setting",
    "power cap",
    "hardware slowdown",
    "sync boost",
    "thermal (software)",
    "thermal (hardware)",
    "power brake",
    "display clock setting",
)
# Those that mean the GPU ran slower than it could; the others are its own choice (idle) or a setting.
SLOWING_REASONS = ("power cap", "thermal (software)", "thermal (hardware)", "hardware slowdown", "power brake")
THROTTLED_SHARE = 0.10  # a trial slowed in at least this share of its GPU samples is flagged as throttled
# A reading is slowed where a slowing reason is set and the SM clock is this far below the card's top clock (its
# NVML maximum, else the trial's highest reading): a card at its power cap that still runs within a few percent of
# its top clock (an H200 at 6%, its pairs agreeing to 0.3%) costs nothing worth a flag; its reasons are kept.
CLOCK_DROP = 0.10


@dataclass(frozen=True)
class GpuFacts:
    """The GPU a trial ran on and how it ran over the timed steps, from the system sampler's NVML readings
    (`measure/gpu.py`): its name, clocks, power, temperature and the clocks-event reasons seen. A figure NVML
    could not read (or a trial too short for one reading) is None."""

    name: str
    samples: int  # NVML readings over the timed steps
    sm_clock_mean_mhz: float | None
    sm_clock_min_mhz: float | None
    sm_clock_max_mhz: float | None
    memory_clock_mean_mhz: float | None
    memory_clock_min_mhz: float | None
    power_mean_w: float | None
    power_max_w: float | None
    power_limit_w: float | None
    temperature_max_c: float | None
    reasons: dict[str, int]  # each clocks-event reason seen (`CLOCKS_EVENT_REASONS`): in how many readings
    slowed_samples: int  # readings with one of `SLOWING_REASONS` and the SM clock CLOCK_DROP below the top
    sm_clock_limit_mhz: float | None = None  # the card's top SM clock (NVML's maximum); left out of files without it

    @property
    def slowed_share(self) -> float:
        """The share of readings in which the GPU ran slower than it could (0 without readings)."""
        return self.slowed_samples / self.samples if self.samples else 0.0

    @property
    def throttled(self) -> bool:
        """Slowed in a meaningful share of the readings (`THROTTLED_SHARE`): noise the report flags."""
        return self.slowed_samples > 0 and self.slowed_share >= THROTTLED_SHARE

    @property
    def slowing_reasons(self) -> list[str]:
        """The slowing reasons seen, in `SLOWING_REASONS` order."""
        return [reason for reason in SLOWING_REASONS if self.reasons.get(reason)]

    @classmethod
    def from_dict(cls, data: Any, what: str = "a trial's GPU facts") -> GpuFacts:
        record = _check(data, _GPU_FIELDS, what, optional=("sm_clock_limit_mhz",))
        if not isinstance(record["name"], str):
            raise ShapeError(f"{what} has a name that is not a string")
        reasons = record["reasons"]
        if not isinstance(reasons, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in reasons.items()
        ):
            raise ShapeError(f"{what} has reasons that are not a JSON object of reading counts")
        return cls(**record)

    def to_dict(self) -> dict[str, Any]:
        document = {**asdict(self), "reasons": dict(self.reasons)}
        if self.sm_clock_limit_mhz is None:
            del document["sm_clock_limit_mhz"]
        return document


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
    gpu: GpuFacts | None = None  # None without CUDA and NVML (and in files written before perfgate read it)

    @classmethod
    def from_dict(cls, data: Any) -> SystemSummary:
        what = "a trial's system summary"
        record = _check(data, _SYSTEM_FIELDS, what, optional=("loader_cpu_s", "gpu"))
        spreads = {
            name: None if record[name] is None else UsageSpread.from_dict(record[name], f"{what}'s {name}")
            for name in _SYSTEM_FIELDS
            if name not in ("samples", "loader_cpu_s", "gpu")
        }
        gpu = record.get("gpu")
        return cls(
            samples=record["samples"],
            loader_cpu_s=record.get("loader_cpu_s"),
            gpu=None if gpu is None else GpuFacts.from_dict(gpu, f"{what}'s gpu"),
            **spreads,
        )

    def to_dict(self) -> dict[str, Any]:
        """As the results file keeps it: `{"samples": n, "cpu_percent": {"mean": m, "p95": p} or null, ...,
        "loader_cpu_s": s, "gpu": {...}}` (`loader_cpu_s` and `gpu` left out where not measured)."""
        document = asdict(self)
        if self.loader_cpu_s is None:
            del document["loader_cpu_s"]
        if self.gpu is None:
            del document["gpu"]
        else:
            document["gpu"] = self.gpu.to_dict()
        return document


@dataclass(frozen=True)
class OperatorRow:
    """One operator of a profile's table (`measure.profiling.top_operators`): its name, and per timed step how
    many times it ran and its self time on the CPU and on the device, in seconds. A figure keeps the type the
    file gave it (an int stays an int), so a file read and written again is the same bytes."""

    name: str
    calls_per_step: float
    self_cpu_s_per_step: float
    self_device_s_per_step: float

    @property
    def self_s(self) -> float:
        """Its self time per step, CPU and device together."""
        return float(self.self_cpu_s_per_step) + float(self.self_device_s_per_step)

    @classmethod
    def from_dict(cls, data: Any, what: str = "an operator of a profile") -> OperatorRow:
        record = _check(data, _OPERATOR_FIELDS, what)
        if not isinstance(record["name"], str):
            raise ShapeError(f"{what} has a name that is not a string")
        for name in _OPERATOR_FIELDS[1:]:
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
                raise ShapeError(f"{what} has {name} {value!r}, not a finite number")
        return cls(**record)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite(value: float) -> bool:
    return isinstance(value, int) or math.isfinite(value)  # an int however long: math.isfinite could overflow


@dataclass(frozen=True)
class Profile:
    """A profiling trial's outcome for one config (`--profile`): its trace file and the operators with the most
    self time per step, or, when it measured nothing, why (`failure`)."""

    trace: str | None = None
    top_operators: list[OperatorRow] = field(default_factory=list)
    failure: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Profile:
        if isinstance(data, dict) and "failure" in data:
            return cls(failure=_check(data, ("failure",), "a failed profile")["failure"])
        record = _check(data, ("trace", "top_operators"), "a profile")
        rows = record["top_operators"]
        if not isinstance(rows, list):
            raise ShapeError("a profile has top_operators that are not a list")
        return cls(
            trace=record["trace"],
            top_operators=[OperatorRow.from_dict(row, f"a profile's top_operators[{i}]") for i, row in enumerate(rows)],
        )

    def to_dict(self) -> dict[str, Any]:
        if self.failure is not None:
            return {"failure": self.failure}
        return {"trace": self.trace, "top_operators": [row.to_dict() for row in self.top_operators]}


_PEAK_MEMORY_FIELDS = tuple(PeakMemory.__dataclass_fields__)
_OPERATOR_FIELDS = tuple(OperatorRow.__dataclass_fields__)
_PEAK_MEMORY_OPTIONAL = ("setup_bytes", "process_bytes", "loader_workers_bytes", "loader_workers")
_AUTOCAST_FIELDS = tuple(AutocastCheck.__dataclass_fields__)
_COUNTS_FIELDS = tuple(Counts.__dataclass_fields__)
_AUTOCAST_COUNTS = frozenset({"bf16_layer_outputs", "checked_layer_outputs"})
_SYSTEM_FIELDS = tuple(SystemSummary.__dataclass_fields__)
_GPU_FIELDS = tuple(GpuFacts.__dataclass_fields__)


def peak_memory_from_dict(data: Any) -> PeakMemory | None:
    """A trial's `memory` as the files keep it: `{}` (a trial that measured nothing) is None."""
    return None if data == {} else PeakMemory.from_dict(data)


def peak_memory_to_dict(memory: PeakMemory | None) -> dict[str, Any]:
    """A trial's `memory` as the files keep it: `{}` for a trial that measured nothing."""
    return {} if memory is None else memory.to_dict()


class _FixedShape:
    """A shape whose JSON object has exactly its fields (`_check`), written as `asdict` writes it."""

    WHAT: ClassVar[str]  # what an error calls it

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        make: Callable[..., Self] = cls
        return make(**_check(data, tuple(f.name for f in fields(cast(Any, cls))), cls.WHAT))

    def to_dict(self) -> dict[str, Any]:
        return asdict(cast(Any, self))


@dataclass(frozen=True)
class RankResult(_FixedShape):
    """One rank of a data-parallel trial (`--nproc`), as it measured itself: per timed step its phases, its step
    time and, where perfgate timed the gradient all-reduce (a `DistributedDataParallel` model), the time with an
    all-reduce in flight and the part of it after backward's last bucket was launched, when backward waited."""

    WHAT = "a rank's result"

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


@dataclass(frozen=True)
class UnusedParameters(_FixedShape):
    """The parameters of a data-parallel trial's model that got no gradient in one forward and backward of the
    unwrapped model before the steps (any rank's), and what the trained model did about them."""

    WHAT = "a trial's unused parameters"

    names: list[str]  # in the model's order
    find_unused_parameters: bool | None  # the DDP model's setting (perfgate's or the workload's); None: not DDP
    autograd_nodes: int  # the step's autograd graph, which DDP walks every step with find_unused_parameters=True


@dataclass(frozen=True)
class Distributed:
    """How a data-parallel trial ran (`--nproc`): ranks, backend, what wrapped the model, and each rank's figures.
    The trial's own figures are the job's: samples/s over the slowest rank's time, that rank's step and phase
    times, the largest rank's peak memory."""

    nproc: int
    backend: str  # gloo (CPU) or nccl (CUDA)
    wrapper: str  # DistributedDataParallel, or the type the workload's `wrap` returned
    ranks: list[RankResult]
    # the parameters the loss left without a gradient; None where there were none (left out of the files, so a
    # file written before this field existed reads the same)
    unused_parameters: UnusedParameters | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Distributed:
        what = "a trial's distributed section"
        record = _check(data, _DISTRIBUTED_FIELDS, what, optional=("unused_parameters",))
        if not isinstance(record["ranks"], list):
            raise ShapeError("a trial's distributed section has ranks that are not a list")
        unused = record.get("unused_parameters")
        return cls(
            **{
                **record,
                "ranks": [RankResult.from_dict(rank) for rank in record["ranks"]],
                "unused_parameters": None if unused is None else UnusedParameters.from_dict(unused),
            }
        )

    def to_dict(self) -> dict[str, Any]:
        document = {**asdict(self), "ranks": [rank.to_dict() for rank in self.ranks]}
        if self.unused_parameters is None:
            del document["unused_parameters"]
        else:
            document["unused_parameters"] = self.unused_parameters.to_dict()
        return document


_DISTRIBUTED_FIELDS = tuple(Distributed.__dataclass_fields__)


# -- The environment a run was measured in (`measure.environment.collect_environment`) ------------------------
#
# An open shape: the results schema allows keys it does not name, and perfgate added keys over time (the CUDA
# device's and the CPU's `capability`, `float32_matmul_precision`, git's `shallow`), so every field may be left
# out of a file, a key perfgate does not know is kept in `extra`, and `order` keeps the keys in a file's order
# (nulls included) so that a file read and written again is the same bytes. Built by perfgate, `order` is None:
# the fields in the order perfgate writes them, those that are None included (`_ALWAYS`), the rest left out.


def _open_fields(data: Any, kinds: Mapping[str, tuple[type, ...]], what: str) -> dict[str, Any]:
    """The constructor arguments of an open shape from its JSON object: each known field type-checked (None is
    always allowed), the unknown ones in `extra`, the keys' order in `order`."""
    if not isinstance(data, dict):
        raise ShapeError(f"{what} is {type(data).__name__}, not a JSON object")
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key not in kinds:
            extra[str(key)] = value
            continue
        allowed = kinds[key]
        if value is not None and (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
            names = " or ".join(kind.__name__ for kind in allowed)
            raise ShapeError(f"{what} has {key} {value!r}, not {names}")
        values[key] = value
    return {**values, "extra": extra, "order": tuple(str(key) for key in data)}


def _open_to_dict(shape: Any, kinds: Mapping[str, tuple[type, ...]], always: Collection[str]) -> dict[str, Any]:
    if shape.order is None:
        known = [name for name in kinds if name in always or getattr(shape, name) is not None]
        order = (*known, *shape.extra)
    else:  # a file's keys in its order, then any set since it was read (`dataclasses.replace`)
        added = [name for name in (*kinds, *shape.extra) if name not in shape.order]
        order = (*shape.order, *(n for n in added if n in shape.extra or getattr(shape, n) is not None))
    document: dict[str, Any] = {}
    for name in order:
        if name in kinds:
            value = getattr(shape, name)
            document[name] = value.to_dict() if hasattr(value, "to_dict") else value
        elif name in shape.extra:
            document[name] = shape.extra[name]
    return document


_GIT_KINDS: dict[str, tuple[type, ...]] = {"sha": (str,), "branch": (str,), "dirty": (bool,), "shallow": (bool,)}
_DEVICE_KINDS: dict[str, tuple[type, ...]] = {
    "type": (str,),
    "name": (str,),
    "count": (int,),
    "driver": (str,),
    "capability": (str,),
}
_CPU_KINDS: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "logical_cores": (int,),
    "available_cores": (int,),
    "capability": (str,),
}
_ENVIRONMENT_KINDS: dict[str, tuple[type, ...]] = {
    "python": (str,),
    "platform": (str,),
    "torch": (str,),
    "cuda": (str,),
    "cudnn": (int,),
    "device": (dict,),
    "cpu": (dict,),
    "threads": (int,),
    "trials": (str,),
    "float32_matmul_precision": (str,),
    "git": (dict,),
}


class _OpenShape:
    """An open shape: its known fields (`KINDS`) type-checked as read, the keys it does not know kept in `extra`
    and written back, in the file's order (`order`); a known field is written where it is set, or always
    (`ALWAYS`)."""

    KINDS: ClassVar[Mapping[str, tuple[type, ...]]]
    ALWAYS: ClassVar[Collection[str]]
    WHAT: ClassVar[str]  # what an error calls it
    extra: Mapping[str, Any]
    order: tuple[str, ...] | None

    @classmethod
    def from_dict(cls, data: Any, what: str | None = None) -> Self:
        """Read what `to_dict` wrote; a known field of the wrong type is a ShapeError."""
        make: Callable[..., Self] = cls
        return make(**cls._values(data, what or cls.WHAT))

    @classmethod
    def _values(cls, data: Any, what: str) -> dict[str, Any]:
        return _open_fields(data, cls.KINDS, what)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the files keep."""
        return _open_to_dict(self, self.KINDS, self.ALWAYS)


@dataclass(frozen=True)
class GitState(_OpenShape):
    """The repository a run was measured in (`measure.environment.git_state`): whatever git could not say is
    None (no commits: no sha; a detached HEAD: no branch)."""

    KINDS = _GIT_KINDS
    ALWAYS = _GIT_KINDS
    WHAT = "the environment's git state"

    sha: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    shallow: bool | None = None  # the usual actions/checkout clone has depth 1; files before it lack it
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DeviceInfo(_OpenShape):
    """The device a run was measured on (`Device.describe`): its type, name, count and driver, and a CUDA
    device's compute capability (`8.0`)."""

    KINDS = _DEVICE_KINDS
    ALWAYS = ("type", "name", "count", "driver")
    WHAT = "the environment's device"

    type: str | None = None  # "cpu" or "cuda"
    name: str | None = None
    count: int | None = None
    driver: str | None = None
    capability: str | None = None  # CUDA only
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class CpuInfo(_OpenShape):
    """The CPU a run was measured on: its model, its cores (all, and those this process may use) and the
    instruction set torch uses on it (`AVX2`, `AVX512`)."""

    KINDS = _CPU_KINDS
    ALWAYS = _CPU_KINDS
    WHAT = "the environment's cpu"

    model: str | None = None
    logical_cores: int | None = None
    available_cores: int | None = None
    capability: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Environment(_OpenShape):
    """Versions, device, CPU, threads, platform and git state of a run (`RunResult.environment`, a baseline
    entry's `environment`)."""

    KINDS = _ENVIRONMENT_KINDS
    ALWAYS = tuple(name for name in _ENVIRONMENT_KINDS if name != "trials")  # written only where set
    WHAT = "the environment"

    python: str | None = None
    platform: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    device: DeviceInfo | None = None
    cpu: CpuInfo | None = None
    threads: int | None = None
    float32_matmul_precision: str | None = None
    git: GitState | None = None
    trials: str | None = None  # "forked": each trial forked from one process (`--fork-trials`); None: fresh ones
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def _values(cls, data: Any, what: str) -> dict[str, Any]:
        values = _open_fields(data, cls.KINDS, what)
        if values.get("device") is not None:
            values["device"] = DeviceInfo.from_dict(values["device"], f"{what}'s device")
        if values.get("cpu") is not None:
            values["cpu"] = CpuInfo.from_dict(values["cpu"], f"{what}'s cpu")
        if values.get("git") is not None:
            values["git"] = GitState.from_dict(values["git"], f"{what}'s git state")
        return values
