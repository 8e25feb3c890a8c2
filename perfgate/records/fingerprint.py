"""The machine fingerprint: which stored measurements a run may be compared with."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from perfgate.records.shapes import Environment, ShapeError

if TYPE_CHECKING:
    from perfgate.records.results import RunResult


@dataclass(frozen=True)
class Fingerprint:
    """A machine type (`machine_fingerprint`): the fields a baseline entry is filed under, in a baseline file
    as a table of all of them (`to_dict`). A field that does not apply, or that an entry written by hand leaves
    out, is None."""

    device_type: str | None = None  # "cpu" or "cuda"
    device_name: str | None = None  # CUDA only
    device_count: int | None = None
    cuda: str | None = None  # CUDA only
    torch: str | None = None
    cpu_model: str | None = None  # the CPU only
    cpu_capability: str | None = None  # the CPU only: the instruction set torch uses (`AVX2`, `AVX512`)
    threads: int | None = None  # the CPU only
    # "forked": trials forked from one process that imported torch (`--fork-trials`), whose samples/s and resident
    # memory are not a fresh process's; None: a fresh process each (every earlier baseline, whose table lacks it)
    trials: str | None = None

    @classmethod
    def from_dict(cls, data: Any, what: str = "the fingerprint") -> Fingerprint:
        """A baseline file's fingerprint table: a field it lacks is None and one perfgate does not know is
        dropped (as perfgate always read them); a field of the wrong type is a ShapeError."""
        if not isinstance(data, dict):
            raise ShapeError(f"{what} is {type(data).__name__}, not a mapping")
        values = {name: data.get(name) for name in FINGERPRINT_FIELDS}
        for name, value in values.items():
            kind = int if name in _COUNTS else str
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise ShapeError(f"{what} has {name} {value!r}, not {kind.__name__}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Every field, in `FINGERPRINT_FIELDS` order, as a baseline file keeps it (`trials` only where set, so
        a fresh-process baseline reads as every earlier one)."""
        document = asdict(self)
        if self.trials is None:
            del document["trials"]
        return document


FINGERPRINT_FIELDS = tuple(Fingerprint.__dataclass_fields__)
_COUNTS = ("device_count", "threads")  # the integers; the other fields are strings


def machine_fingerprint(environment: Environment) -> Fingerprint:
    """The stable fields that decide which baseline a run may be compared with.

    Device model and count, CUDA and torch versions; for CPU runs the CPU model, the instruction set
    torch uses on it (`AVX2`, `AVX512`: one model name can cover both, and bf16 runs about 20x slower
    without the newer one) and the thread count. Never clock speeds, hostnames or anything else that
    changes between two runs on one machine type.
    """
    # Read from the JSON object the files keep, whose keys say what was recorded: a device without a
    # recorded count is one device, an environment without a device is a CPU's.
    document = environment.to_dict()
    device = document.get("device") or {}
    on_cpu = device.get("type", "cpu") == "cpu"
    return Fingerprint(
        device_type=device.get("type", "cpu"),
        device_name=None if on_cpu else device.get("name"),
        device_count=device.get("count", 1),
        cuda=None if on_cpu else document.get("cuda"),
        torch=str(document.get("torch")),
        cpu_model=(document.get("cpu") or {}).get("model") if on_cpu else None,
        cpu_capability=cpu_capability(environment) if on_cpu else None,
        threads=document.get("threads") if on_cpu else None,
        trials=document.get("trials"),
    )


def cpu_capability(environment: Environment) -> str | None:
    """The CPU instruction set torch uses, as the environment recorded it (None before perfgate recorded it)."""
    capability = None if environment.cpu is None else environment.cpu.capability
    return str(capability) if capability else None


def fingerprint_key(fingerprint: Fingerprint) -> str:
    """A readable key naming the machine type, used to file its baseline entries."""
    if fingerprint.device_type == "cpu":
        threads = fingerprint.threads
        plural = "" if threads == 1 else "s"
        model = fingerprint.cpu_model
        if fingerprint.cpu_capability:
            model = f"{model} ({fingerprint.cpu_capability})"
        forked = ", trials forked" if fingerprint.trials == "forked" else ""
        return f"cpu {model}, {threads} thread{plural}, torch {fingerprint.torch}{forked}"
    return f"{fingerprint.device_count}x {fingerprint.device_name}, cuda {fingerprint.cuda}, torch {fingerprint.torch}"


def fingerprint_differences(wanted: Fingerprint, stored: Fingerprint) -> list[str]:
    """`field: stored != wanted` for each fingerprint field that differs; the trials' start in words."""
    return [
        _trials_difference(stored.trials, wanted.trials)
        if name == "trials"
        else f"{name} {getattr(stored, name)!r} (this machine: {getattr(wanted, name)!r})"
        for name in FINGERPRINT_FIELDS
        if getattr(stored, name) != getattr(wanted, name)
    ]


def _trials_difference(stored: str | None, wanted: str | None) -> str:
    """`trials forked (this run: fresh processes; ...: both with --fork-trials or both without)`."""

    def words(trials: str | None) -> str:
        return "fresh processes" if trials is None else str(trials)

    return (
        f"trials {words(stored)} (this run: {words(wanted)}; a forked trial's samples/s and resident memory are "
        "not a fresh process's, so baseline and check start their trials alike: both with --fork-trials or both "
        "without)"
    )


def machine_difference(baseline: RunResult, candidate: RunResult) -> str | None:
    """What differs between two results files' machine fingerprints (`device_type 'cpu' -> 'cuda'; threads 2 -> 4`);
    None when they come from the same machine type."""
    old, new = (asdict(machine_fingerprint(run.environment)) for run in (baseline, candidate))
    differences = [f"{name} {old[name]!r} -> {new[name]!r}" for name in FINGERPRINT_FIELDS if old[name] != new[name]]
    return "; ".join(differences) or None
