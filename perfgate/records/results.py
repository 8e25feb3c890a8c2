"""The results of a lab run: raw per-trial records, summaries, and the versioned JSON file."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal, get_args

from perfgate import _files
from perfgate.errors import ResultsError, TrialRecordError
from perfgate.outcome import Status
from perfgate.records.shapes import (
    AutocastCheck,
    Counts,
    Distributed,
    Environment,
    PeakMemory,
    Profile,
    ShapeError,
    SystemSummary,
    checked,
    field_problem,
    huge_integer_place,
    peak_memory_from_dict,
    peak_memory_to_dict,
)
from perfgate.records.summary import ConfigSummary, summarize_trials

SCHEMA_VERSION = 2  # 2 added the paired check's base side (`against`) and the slice's sample indices
# Optional sections added since keep the version (files without them still read): `micro`, pytest-benchmark verdicts.
READABLE_VERSIONS = (1, 2)
SCHEMA_PATH = Path(__file__).with_name("schema") / f"results-v{SCHEMA_VERSION}.schema.json"


@dataclass(frozen=True)
class TrialResult:
    """One trial of one config, as measured in its own process."""

    config: str
    trial: int
    status: str  # "ok" or "failed"
    failure: str | None = None
    samples_per_sec: float = 0.0
    step_s: list[float] = field(default_factory=list)
    phases_s: dict[str, list[float]] = field(default_factory=dict)
    warmup_step_s: list[float] = field(default_factory=list)
    timed_elapsed_s: float | None = None
    bookkeeping_s: float | None = None
    compile_s: float | None = None
    setup_s: float | None = None
    process_s: float | None = None
    # The runner's wall time for the trial process, start to record (interpreter, imports and all), measured
    # by the process that started it; None where a file left it out.
    wall_s: float | None = None
    rounds: int = 1  # times the timed steps ran over the pinned slice (`perfgate.measure.rounds`)
    first_losses: list[float] = field(default_factory=list)
    final_loss: float | None = None
    data_checksum: str | None = None
    memory: PeakMemory | None = None  # None: the trial measured nothing (the files keep `{}`)
    memory_step_bytes: list[int] = field(default_factory=list)  # memory in use after each timed step
    torch_calls_per_step: int | None = None  # torch functions one eager step calls (framework overhead)
    host_syncs_per_step: int | None = None  # of those, copies to the host: .item(), .cpu(), float(t), ...
    compile_stats: dict[str, int] | None = None  # torch.compile's graphs and graph breaks
    # The step's exact counts (FLOPs, operators, kernels, graphs, parameters, allocated peak), made outside the
    # timed steps; left out of the files when None (not counted: files written before, or counting failed).
    counts: Counts | None = None
    system: SystemSummary | None = None  # CPU and GPU utilisation during the timed steps (sampler.py)
    autocast: AutocastCheck | None = None
    threads: int | None = None
    probe_steps_per_sec: list[float] = field(default_factory=list)  # perfgate's fixed work, before and after
    warnings: list[str] = field(default_factory=list)
    workload: dict[str, Any] | None = None  # the workload's identity as the trial built it (trial.workload_identity)
    distributed: Distributed | None = None  # a data-parallel trial's ranks (`--nproc`); left out of the files when None
    # How the steps were timed (CLOCKINGS): the host clock at every phase boundary (the CPU; files without the
    # field), or CUDA events read after the last timed step, samples/sec over the wall time between the two
    # synchronisations at the timed steps' edges (`perfgate.measure.device.Device.step_clock`).
    clocking: str = "host-clock"
    # With CUDA events, where the data_wait phase is the device's idle wait for the batch: the host's own wait
    # in next(batches), per timed step; left out of the files when None.
    data_wait_host_s: list[float] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the results file and a trial's record keep: every field, in order."""
        document = {f.name: getattr(self, f.name) for f in fields(self)}
        document["memory"] = peak_memory_to_dict(self.memory)
        document["system"] = None if self.system is None else self.system.to_dict()
        document["autocast"] = None if self.autocast is None else self.autocast.to_dict()
        if self.distributed is None:
            del document["distributed"]
        else:
            document["distributed"] = self.distributed.to_dict()
        if self.data_wait_host_s is None:
            del document["data_wait_host_s"]
        if self.counts is None:
            del document["counts"]
        else:
            document["counts"] = self.counts.to_dict()
        return copy.deepcopy(document)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialResult:
        """Read what `to_dict` wrote (the caller checks the field names; one left out takes its default):
        `memory`, `system` and `autocast` strictly, an unknown or missing key a ShapeError naming it."""
        values = dict(data)
        if "memory" in values:
            values["memory"] = peak_memory_from_dict(values["memory"])
        if values.get("system") is not None:
            values["system"] = SystemSummary.from_dict(values["system"])
        if values.get("autocast") is not None:
            values["autocast"] = AutocastCheck.from_dict(values["autocast"])
        if values.get("distributed") is not None:
            values["distributed"] = Distributed.from_dict(values["distributed"])
        if values.get("counts") is not None:
            values["counts"] = Counts.from_dict(values["counts"])
        if values.get("clocking", CLOCKINGS[0]) not in CLOCKINGS:
            raise ShapeError(f"a trial's result has clocking {values['clocking']!r}; one of {', '.join(CLOCKINGS)}")
        return cls(**values)


TRIAL_STATUSES = ("ok", "failed")
CLOCKINGS = ("host-clock", "cuda-events")  # how a trial's steps were timed (TrialResult.clocking)
# Why a trial failed, which decides what the runner does: `workload` (the user's code is at fault: stop the
# run), `config` (this config cannot run here, e.g. torch.compile failed: no more trials of it), `internal`
# (a bug in perfgate's trial code), `crash` (the trial process died, timed out or wrote no record).
FailureKind = Literal["workload", "config", "internal", "crash"]
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)


@dataclass(frozen=True)
class TrialRecord:
    """What one trial process sends back (`python -m perfgate.measure.trial SPEC OUT` writes it as JSON):
    its `TrialResult`, and what only the runner reads, never the results file."""

    result: TrialResult
    failure_kind: FailureKind | None = None  # set when the trial failed, else None
    traceback: str | None = None  # the failure's traceback (shown with --debug)
    profile: Profile | None = None  # a profiling trial's trace path and top operators

    @classmethod
    def failed(
        cls,
        config: str,
        trial: int,
        message: str,
        kind: FailureKind,
        *,
        traceback: str | None = None,
        process_s: float | None = None,
    ) -> TrialRecord:
        """The record of a trial that measured nothing: why (`message`) and what kind of failure."""
        result = TrialResult(config=config, trial=trial, status="failed", failure=message, process_s=process_s)
        return cls(result, failure_kind=kind, traceback=traceback)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object a trial process writes: every field, always (the reading side refuses any gap)."""
        return {
            "result": self.result.to_dict(),
            "failure_kind": self.failure_kind,
            "traceback": self.traceback,
            "profile": None if self.profile is None else self.profile.to_dict(),
        }

    @classmethod
    def from_dict(cls, record: Any, *, source: str) -> TrialRecord:
        """Read what `to_dict` wrote, strictly: an unknown or missing field, or a status or failure kind
        outside the vocabulary, is a TrialRecordError naming it (never silently dropped)."""
        _check_fields(record, _RECORD_FIELDS, "a trial's record", source)
        _check_fields(record["result"], _TRIAL_FIELDS, "a trial's result", source, _OPTIONAL_TRIAL_FIELDS)
        try:
            result = TrialResult.from_dict(record["result"])
            profile = None if record["profile"] is None else Profile.from_dict(record["profile"])
        except ShapeError as exc:
            raise TrialRecordError(str(exc), where=source, hint=_MISMATCH_HINT) from None
        kind = record["failure_kind"]
        if result.status not in TRIAL_STATUSES:
            raise TrialRecordError(
                f"a trial's result has status {result.status!r}; a trial is {' or '.join(map(repr, TRIAL_STATUSES))}",
                where=source,
                hint=_MISMATCH_HINT,
            )
        if (kind is None) != result.ok or (kind is not None and kind not in FAILURE_KINDS):
            expected = "none" if result.ok else " or ".join(map(repr, FAILURE_KINDS))
            raise TrialRecordError(
                f"a trial's record with status {result.status!r} has failure_kind {kind!r}, not {expected}",
                where=source,
                hint=_MISMATCH_HINT,
            )
        return cls(result, failure_kind=kind, traceback=record["traceback"], profile=profile)


_MISMATCH_HINT = "the trial process and the runner disagree on the record: run both from one perfgate installation"


def _check_fields(
    record: Any, names: frozenset[str], what: str, source: str, optional: frozenset[str] = frozenset()
) -> None:
    """`record` is a JSON object with exactly the fields `names` (those in `optional` may be left out); else a
    one-line TrialRecordError naming them."""
    if not isinstance(record, dict):
        raise TrialRecordError(f"{what} is {type(record).__name__}, not a JSON object", where=source)
    problem = field_problem(record, names, what, optional=optional)
    if problem is not None:
        raise TrialRecordError(problem, where=source, hint=_MISMATCH_HINT)


@dataclass(frozen=True)
class ConfigResult:
    """All trials of one config; `failure` is set when the config could not run at all."""

    config: str
    trials: list[TrialResult]
    failure: str | None = None

    @property
    def failure_reason(self) -> str:
        """Why the config has no measurement: its own failure, else its first failed trial's."""
        return (
            self.failure
            or next((t.failure for t in self.trials if t.failure), None)
            or "no trial produced a measurement"
        )

    @property
    def counted_only(self) -> bool:
        """Counting trials (`--counts-only`): some succeeded, and none of those timed a step."""
        ok = [t for t in self.trials if t.ok]
        return bool(ok) and not any(t.step_s for t in ok)

    @cached_property
    def summary(self) -> ConfigSummary | None:
        """The table's figures for this config (None when no trial succeeded); computed once."""
        return summarize_trials(self.trials)

    def to_dict(self) -> dict[str, Any]:
        """The raw trials and, next to them, the summary the table shows."""
        summary = self.summary
        return {
            "config": self.config,
            "trials": [trial.to_dict() for trial in self.trials],
            "failure": self.failure,
            "summary": None if summary is None else asdict(summary),
        }


@dataclass(frozen=True)
class WorkloadSettings:
    """How a workload was measured: the amount of work (batch, timed and warm-up steps, seed), the trials, the
    torch threads, the device, the DataLoader's settings and, where they apply, the data-parallel ranks, the
    pinned slice's sample indices and the dataset's length. A results file has the first eight; a baseline written
    by an older perfgate (or a hand-made one) may lack any, so each may be None here.

    `keys`: the keys in the order a file had them (null ones included), so a file read and written again is the
    same bytes; None when built by perfgate (the order perfgate writes; a field that is None left out)."""

    batch_size: int | None = None
    steps: int | None = None
    warmup_steps: int | None = None
    seed: int | None = None
    trials: int | None = None
    threads: int | None = None
    device: str | None = None
    loader: Mapping[str, Any] | None = None  # the DataLoader's plain settings: num_workers, pin_memory, ...
    nproc: int | None = None  # ranks of a data-parallel job; None for one process
    slice_indices: str | None = None  # the pinned slice's sample indices, where every trial agreed on them
    accumulation: int | None = None  # micro-batches per optimizer step; None for one
    dataset_length: int | None = None  # the samples the workload's dataset has, which the slice is drawn from
    keys: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the files keep."""
        set_fields = tuple(name for name in _SETTINGS_FIELDS if getattr(self, name) is not None)
        # a file's keys in its order (nulls included), then any set since it was read (`dataclasses.replace`)
        names = set_fields if self.keys is None else (*self.keys, *(n for n in set_fields if n not in self.keys))
        document = {name: getattr(self, name) for name in names}
        if isinstance(document.get("loader"), Mapping):
            document["loader"] = dict(document["loader"])
        return document

    def comparable(self) -> WorkloadSettings:
        """These settings without the trial count, which an update may change without changing the workload."""
        return replace(self, trials=None)

    @classmethod
    def from_dict(cls, data: Any, what: str = "a workload's settings") -> WorkloadSettings:
        """Read what `to_dict` wrote, strictly: an unknown or wrong-typed field is a ShapeError naming it."""
        record = checked(data, _SETTINGS_FIELDS, what, optional=_SETTINGS_FIELDS)
        integers = ("batch_size", "steps", "warmup_steps", "seed", "trials", "threads", "nproc", "accumulation")
        for name in (*integers, "dataset_length"):
            value = record.get(name)
            if value is not None and not _is_int(value):
                raise ShapeError(f"{what} has {name} {value!r}, not an integer")
        for name in ("device", "slice_indices"):
            value = record.get(name)
            if value is not None and not isinstance(value, str):
                raise ShapeError(f"{what} has {name} {value!r}, not a string")
        loader = record.get("loader")
        if loader is not None and not (isinstance(loader, dict) and all(isinstance(k, str) for k in loader)):
            raise ShapeError(f"{what} has a loader that is not a table of settings")
        return cls(**{**record, "loader": None if loader is None else dict(loader)}, keys=tuple(record))


_SETTINGS_FIELDS = tuple(name for name in WorkloadSettings.__dataclass_fields__ if name != "keys")


@dataclass(frozen=True)
class WorkloadResult:
    """One workload's lab: its settings, its pinned-slice identity and every config's trials."""

    name: str
    reference: str
    settings: WorkloadSettings
    data_checksum: str | None
    first_losses: dict[str, list[float]]
    configs: dict[str, ConfigResult]
    warnings: list[str] = field(default_factory=list)
    profiles: dict[str, Profile] = field(default_factory=dict)  # per config: trace and top operators

    @property
    def counted_only(self) -> bool:
        """A `--counts-only` workload: every config that ran was counted, none timed."""
        ran = [c for c in self.configs.values() if any(t.ok for t in c.trials)]
        return bool(ran) and all(c.counted_only for c in ran)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the results file keeps: every field, in order."""
        document = {f.name: getattr(self, f.name) for f in fields(self)}
        document["settings"] = self.settings.to_dict()
        document["configs"] = {name: config.to_dict() for name, config in self.configs.items()}
        document["profiles"] = {name: profile.to_dict() for name, profile in self.profiles.items()}
        return copy.deepcopy(document)


def pairing_text(parallel: bool, interleaved: bool) -> str:
    """How a pair's two trials shared the machine, as reports say it."""
    if parallel:
        return "at the same time on separate CPUs"
    if interleaved:
        return "taking turns at the training steps"
    return "one after the other, alternating"


@dataclass(frozen=True)
class Against:
    """A paired check's other side: the base commit, measured beside the working tree (head) in one job."""

    ref: str  # as the user gave it
    base_commit: str
    head_commit: str | None  # None in a repository without commits
    head_dirty: bool  # head is the working tree, uncommitted changes included
    base: RunResult  # the base side's trials (pair i of a config: base trial i and head trial i)
    order: list[str] = field(default_factory=list)  # the schedule, one entry per pair: "lm-small fp32 #0: base, head"
    parallel: bool = False  # the two trials of a pair ran at the same time, on separate CPUs
    problems: dict[str, str] = field(default_factory=dict)  # workloads the base could not measure, and why
    forked: bool = (
        False  # trials forked from a per-side server that imported torch once (`perfgate.measure.trialserver`)
    )
    interleaved: bool = False  # a pair's two trials took turns at their steps (`perfgate.measure.turns`)
    environments: Environments | None = None  # the packages each side ran with (None: recorded before they were)
    # workloads new in the head: the base's file does not define their function (`references.Reference.defined`),
    # so the base could not measure them and they have nothing to compare with; reported, not failed
    new: tuple[str, ...] = ()

    def describe(self) -> str:
        head = "the working tree"
        if self.head_commit:
            head += f" ({self.head_commit[:10]}{', with uncommitted changes' if self.head_dirty else ''})"
        base = f"{self.ref} ({self.base_commit[:10]})" if self.base_commit else self.ref
        return f"paired: {head} against {base}, each pair measured {self.measured()}"

    def measured(self) -> str:
        """How each pair was measured, in words: its two trials' order, and how a trial process started."""
        processes = ", trials forked from one server a side" if self.forked else ""
        return f"{pairing_text(self.parallel, self.interleaved)}{processes}"

    def to_dict(self) -> dict[str, Any]:
        base = self.base.to_dict()
        return {
            "ref": self.ref,
            "base_commit": self.base_commit,
            "head_commit": self.head_commit,
            "head_dirty": self.head_dirty,
            "parallel": self.parallel,
            "order": self.order,
            "problems": self.problems,
            "forked": self.forked,
            "interleaved": self.interleaved,
            **({"environments": self.environments.to_dict()} if self.environments is not None else {}),
            **({"new": list(self.new)} if self.new else {}),
            "base": {"created_at": base["created_at"], "workloads": base["workloads"]},
        }


@dataclass(frozen=True)
class Environments:
    """The Python packages each side of a paired check ran with (`perfgate.measure.packages`).

    `kind` "shared": both sides ran in the head's environment (the base's code from its worktree, everything
    installed the head's); "per-side": the base ran in an environment built from its own declarations (the
    packages it declares differently over the head's, and its own project built from its sources)."""

    kind: str
    why: str  # why this kind, in words
    packages: dict[str, dict[str, str]]  # "base" and "head": distribution name -> version, as each side imports it
    prepare_s: float = 0.0  # seconds spent building the base's environment (0: none built, or taken from the cache)
    declared: tuple[str, ...] = ()  # in a shared environment: what the base declares that the head's lacks
    code_changed: bool | None = None  # whether head changes any file but the declarations (None: not known)

    def changed(self) -> list[tuple[str, str | None, str | None]]:
        """(name, base version, head version) of every package whose version differs between the sides."""
        base, head = self.packages.get("base", {}), self.packages.get("head", {})
        return [
            (name, base.get(name), head.get(name))
            for name in sorted(set(base) | set(head), key=str.lower)
            if base.get(name) != head.get(name)
        ]

    def changed_text(self, most: int = 8) -> str:
        """The changed packages in words: "evaldep 1.0 -> 1.1, torch 2.13.0 -> 2.14.1" ("" where none)."""
        words = [f"{name} {base or '(none)'} -> {head or '(none)'}" for name, base, head in self.changed()]
        more = f" and {len(words) - most} more" if len(words) > most else ""
        return ", ".join(words[:most]) + more

    def describe(self) -> str:
        """One line for the report's mode: where the base ran, and what differed."""
        if self.kind == "per-side":
            changed = self.changed_text()
            moved = f"; packages: {changed}" if changed else "; no package version differs"
            return f"the base ran in its own environment ({self.why}){moved}"
        lacks = f"; the base declares {', '.join(self.declared)}, not installed for it" if self.declared else ""
        return f"both sides ran in the head's environment ({self.why}){lacks}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "why": self.why,
            "prepare_s": round(self.prepare_s, 3),
            "declared": list(self.declared),
            **({"code_changed": self.code_changed} if self.code_changed is not None else {}),
            "packages": {side: dict(sorted(found.items())) for side, found in self.packages.items()},
        }

    @classmethod
    def from_dict(cls, item: dict[str, Any]) -> Environments:
        return cls(
            kind=str(item["kind"]),
            why=str(item.get("why", "")),
            packages={side: dict(found) for side, found in item.get("packages", {}).items()},
            prepare_s=float(item.get("prepare_s", 0.0)),
            declared=tuple(item.get("declared", ())),
            code_changed=item.get("code_changed"),
        )


@dataclass(frozen=True)
class MicroResult:
    """One pytest-benchmark test's verdict as `pytest --perfgate` decided it (`records.verdicts.MicroVerdict`),
    kept in the results file: calls/s are of the median round; the ratio and interval are current/baseline
    (head/base when paired); None where there was nothing to compare."""

    name: str  # pytest-benchmark's fullname, e.g. tests/test_augment.py::test_flip[224]
    status: Status  # any but ACCEPTED (a pytest-benchmark test has no accepted slowdown); its word in the file
    reason: str
    baseline_calls_per_sec: float | None = None
    current_calls_per_sec: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    machine_ratio: float | None = None  # the machine probe's current/baseline rate (stored baselines only)
    rounds: int | None = None  # pytest-benchmark's rounds in the current session

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):  # its word, as the file (or a caller) gives it
            object.__setattr__(self, "status", Status(self.status))

    def to_dict(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "status": self.status.value}


@dataclass(frozen=True)
class MicroSection:
    """The pytest-benchmark tests a pytest session judged: how (`mode`, in words) and each test's verdict."""

    mode: str  # "stored baselines (baselines/pytest-benchmark.yaml)", or the paired sessions against a ref
    paired: bool  # judged in session pairs against a git ref: a test without a base side is new, not missing
    benchmarks: list[MicroResult]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "paired": self.paired, "benchmarks": [b.to_dict() for b in self.benchmarks]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MicroSection:
        return cls(
            mode=data["mode"], paired=bool(data["paired"]), benchmarks=[MicroResult(**b) for b in data["benchmarks"]]
        )


@dataclass(frozen=True)
class GateRecord:
    """What a results file keeps of the check that judged it (`gate`), so that a later report judges the run
    exactly as the check did: its settings, its mode, each config's last look and the divisors of alpha.

    The first six are in every check's file; the rest were added within schema_version 2, so a file may lack
    them (None here, and left out when written again)."""

    threshold: float | None  # given on the command line (None: the project's thresholds)
    alpha: float
    trials: int
    max_trials: int
    fail_on_inconclusive: bool
    baseline_dir: str
    spending: str | None = None
    accepted: tuple[Mapping[str, Any], ...] | None = None  # `Acceptance.to_record` each; read by the judge
    mode: str | None = None
    looks: Mapping[str, tuple[Any, ...]] | None = None  # "workload/config": n, previous n, final (`Look.to_record`)
    divisors: Mapping[str, tuple[float, float]] | None = None  # "workload/config": throughput's, memory's
    # a pytest session's checks sharing one alpha (`judge.family`): {"comparisons": N, "checks": K}
    session: Mapping[str, int] | None = None
    # a paired check's count test: the runner's rate of one-sided slow pairs it assumed, and where that came from
    # ("measured by perfgate calibrate on DATE"); None: perfgate's default, `records.comparisons.SLOW_RATE`
    slow_rate: float | None = None
    slow_rate_source: str | None = None
    warn_only: bool | None = None  # the check reported its verdicts and passed the build (None: it did not)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the results file keeps, keys in the order perfgate has always written them."""
        document: dict[str, Any] = {
            "threshold": self.threshold,
            "alpha": self.alpha,
            "trials": self.trials,
            "max_trials": self.max_trials,
            "fail_on_inconclusive": self.fail_on_inconclusive,
            "baseline_dir": self.baseline_dir,
        }
        if self.spending is not None:
            document["spending"] = self.spending
        if self.accepted is not None:
            document["accepted"] = [dict(a) for a in self.accepted]
        if self.mode is not None:
            document["mode"] = self.mode
        if self.looks is not None:
            document["looks"] = {key: list(look) for key, look in self.looks.items()}
        if self.divisors is not None:
            document["divisors"] = {key: list(pair) for key, pair in self.divisors.items()}
        if self.session is not None:
            document["session"] = dict(self.session)
        if self.slow_rate is not None:
            document["slow_rate"] = self.slow_rate
        if self.slow_rate_source is not None:
            document["slow_rate_source"] = self.slow_rate_source
        if self.warn_only:
            document["warn_only"] = True
        return document

    @classmethod
    def from_dict(cls, data: Any) -> GateRecord:
        """Read what `to_dict` wrote, strictly: an unknown, missing or wrong-typed field is a ShapeError."""
        what = "the gate record"
        record = checked(data, _GATE_FIELDS, what, optional=_GATE_OPTIONAL)
        threshold = record["threshold"]
        if threshold is not None:
            threshold = _number(threshold, f"{what}'s threshold")
        _expect(record, "trials", int, what)
        _expect(record, "max_trials", int, what)
        _expect(record, "fail_on_inconclusive", bool, what)
        _expect(record, "baseline_dir", str, what)
        for key in ("spending", "mode", "slow_rate_source"):
            if record.get(key) is not None:
                _expect(record, key, str, what)
        if record.get("warn_only") is not None:
            _expect(record, "warn_only", bool, what)
        slow_rate = record.get("slow_rate")
        if slow_rate is not None and not 0 < _number(slow_rate, f"{what}'s slow_rate") < 1:
            raise ShapeError(f"{what}'s slow_rate is {slow_rate!r}, not a rate between 0 and 1")
        accepted = record.get("accepted")
        if accepted is not None and not (isinstance(accepted, list) and all(isinstance(a, dict) for a in accepted)):
            raise ShapeError(f"{what}'s accepted is not a list of JSON objects")
        return cls(
            threshold=threshold,
            alpha=_number(record["alpha"], f"{what}'s alpha"),
            trials=record["trials"],
            max_trials=record["max_trials"],
            fail_on_inconclusive=record["fail_on_inconclusive"],
            baseline_dir=record["baseline_dir"],
            spending=record.get("spending"),
            accepted=None if accepted is None else tuple(dict(a) for a in accepted),
            mode=record.get("mode"),
            looks=_looks(record.get("looks"), f"{what}'s looks"),
            divisors=_divisors(record.get("divisors"), f"{what}'s divisors"),
            session=_session(record.get("session"), f"{what}'s session"),
            slow_rate=slow_rate,
            slow_rate_source=record.get("slow_rate_source"),
            warn_only=record.get("warn_only"),
        )


_GATE_FIELDS = tuple(GateRecord.__dataclass_fields__)
# added within schema_version 2
_GATE_OPTIONAL = (
    "spending",
    "accepted",
    "mode",
    "looks",
    "divisors",
    "session",
    "slow_rate",
    "slow_rate_source",
    "warn_only",
)


def _expect(record: Mapping[str, Any], key: str, kind: type, what: str) -> None:
    value = record[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ShapeError(f"{what}'s {key} is {type(value).__name__}, not {kind.__name__}")


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ShapeError(f"{what} is {value!r}, not a finite number")
    return value


def _looks(data: Any, what: str) -> dict[str, tuple[Any, ...]] | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ShapeError(f"{what} is {type(data).__name__}, not a JSON object")
    looks: dict[str, tuple[Any, ...]] = {}
    for key, look in data.items():
        if not (
            isinstance(look, list)
            and len(look) in (3, 5)
            and _is_int(look[0])
            and (look[1] is None or _is_int(look[1]))
            and isinstance(look[2], bool)
            and (len(look) == 3 or (isinstance(look[3], bool) and _is_extension(look[4])))
        ):
            raise ShapeError(
                f"{what} has {key!r}: {look!r}, not [n, previous n or null, final] "
                "(or with [held back, [budget n, budget previous n] or null] after them)"
            )
        if len(look) == 3:
            looks[str(key)] = (look[0], look[1], look[2])
        else:
            extension = None if look[4] is None else (look[4][0], look[4][1])
            looks[str(key)] = (look[0], look[1], look[2], look[3], extension)
    return looks


def _is_extension(value: Any) -> bool:
    return value is None or (isinstance(value, list) and len(value) == 2 and all(_is_int(v) for v in value))


def _divisors(data: Any, what: str) -> dict[str, tuple[float, float]] | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ShapeError(f"{what} is {type(data).__name__}, not a JSON object")
    divisors = {}
    for key, pair in data.items():
        if not (isinstance(pair, list) and len(pair) == 2):
            raise ShapeError(f"{what} has {key!r}: {pair!r}, not [throughput, memory]")
        divisors[str(key)] = (_number(pair[0], f"{what}[{key!r}]"), _number(pair[1], f"{what}[{key!r}]"))
    return divisors


def _session(data: Any, what: str) -> dict[str, int] | None:
    if data is None:
        return None
    if not (isinstance(data, dict) and set(data) == {"comparisons", "checks"} and all(map(_is_int, data.values()))):
        raise ShapeError(f'{what} is {data!r}, not {{"comparisons": N, "checks": K}} (whole numbers)')
    return {"comparisons": data["comparisons"], "checks": data["checks"]}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class RunResult:
    """A whole `perfgate run`: environment fingerprint plus each workload's results."""

    perfgate_version: str
    created_at: str
    environment: Environment
    workloads: list[WorkloadResult]
    gate: GateRecord | None = None  # the check that measured it (`GateResult.to_record`)
    against: Against | None = None  # a paired check: the base side, measured beside this run
    micro: MicroSection | None = None  # pytest --perfgate: the pytest-benchmark tests' verdicts

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: raw trials and, next to them, the summaries the table shows."""
        document = {
            "schema_version": SCHEMA_VERSION,
            "perfgate_version": self.perfgate_version,
            "created_at": self.created_at,
            "environment": self.environment.to_dict(),
            "workloads": [workload.to_dict() for workload in self.workloads],
        }
        if self.gate is not None:
            document["gate"] = self.gate.to_dict()
        if self.against is not None:
            document["against"] = self.against.to_dict()
        if self.micro is not None:
            document["micro"] = self.micro.to_dict()
        return document

    def write_json(self, path: Path) -> None:
        """Write atomically: the file is either the old one or the complete new one."""
        write_text_atomic(path, json.dumps(_finite(self.to_dict()), indent=2, allow_nan=False) + "\n")


def merge_runs(runs: list[RunResult]) -> RunResult:
    """One results document from several runs on this machine (a later run of a workload replaces an earlier)."""
    if not runs:
        raise ValueError("merge_runs needs at least one run")
    workloads = {w.name: w for run in runs for w in run.workloads}
    return RunResult(
        runs[0].perfgate_version,
        runs[-1].created_at,
        runs[0].environment,
        list(workloads.values()),
        against=_merged_against(runs),
    )


def _merged_against(runs: list[RunResult]) -> Against | None:
    """The base side of paired runs against one base commit, merged as their head sides are."""
    sides = [run.against for run in runs]
    first = sides[0]
    if first is None or any(a is None or a.base_commit != first.base_commit for a in sides):
        return None
    present = [a for a in sides if a is not None]
    base = merge_runs([a.base for a in present])
    return Against(
        ref=first.ref,
        base_commit=first.base_commit,
        head_commit=present[-1].head_commit,
        head_dirty=present[-1].head_dirty,
        base=base,
        order=[entry for a in present for entry in a.order],
        parallel=first.parallel,
        problems={k: v for a in present for k, v in a.problems.items()},
        forked=first.forked,
        interleaved=first.interleaved,
        environments=first.environments,
        new=tuple(dict.fromkeys(name for a in present for name in a.new)),
    )


def check_writable(path: Path, option: str) -> None:
    """Refuse an output path that cannot be written before spending minutes measuring."""
    _files.check_writable(path, option)


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, flush to disk, then rename over it (`_files.write_atomic`);
    a ResultsError saying what to do when it cannot be written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(f"cannot write {path}: {exc.strerror}", hint="check the path and permissions") from exc
    try:
        _files.write_atomic(path, text)
    except OSError as exc:
        kept = "the previous file is unchanged; " if path.exists() else ""
        raise ResultsError(
            f"cannot write {path}: {exc.strerror}", hint=f"{kept}check free space and permissions, then run again"
        ) from exc


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: store them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def load_results(path: Path) -> RunResult:
    """Read a results file written by `--json` (schema_version 1 or 2) back into a RunResult."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"results file {path} not found", hint="write one with --json PATH") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}", hint="give a results file written by --json") from exc
    return parse_results(text, source=str(path))


def parse_results(text: str, *, source: str) -> RunResult:
    """Parse a results document: strict JSON (no NaN, no repeated keys) that the shipped schema accepts.

    Nothing in it is executed or unpickled; anything malformed is a ResultsError naming where."""
    hint = "give a results file written by perfgate --json"
    try:
        document = _files.read_json(text, source=source)
    except _files.JsonError as exc:
        raise ResultsError(f"{source} is not valid JSON: {exc.problem}{huge_integer_place(text)}", hint=hint) from None
    version = document.get("schema_version") if isinstance(document, dict) else None
    if not isinstance(document, dict) or version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ResultsError(
            f"{source} has schema_version {version!r}; this perfgate reads "
            f"{' and '.join(str(v) for v in READABLE_VERSIONS)}",
            hint="upgrade perfgate to read it" if is_newer_version(version, SCHEMA_VERSION) else hint,
        )
    problem = _schema_problem(document, version)
    if problem is not None:
        raise ResultsError(f"{source} is not a valid results file: {problem}", hint=hint)
    try:
        gate = document.get("gate")
        against = document.get("against")
        micro = document.get("micro")  # optional: files written before it, or by perfgate check, have none
        environment = Environment.from_dict(document["environment"])
        return RunResult(
            document["perfgate_version"],
            document["created_at"],
            environment,
            _workloads(document["workloads"]),
            None if gate is None else GateRecord.from_dict(gate),
            None if against is None else _against(against, document["perfgate_version"], environment),
            None if micro is None else MicroSection.from_dict(micro),
        )
    except ShapeError as exc:
        raise ResultsError(f"{source} is not a valid results file: {exc}", hint=hint) from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ResultsError(f"{source} is not a complete results file ({type(exc).__name__}: {exc})", hint=hint) from exc


def _workloads(items: list[dict[str, Any]]) -> list[WorkloadResult]:
    return [
        WorkloadResult(
            name=w["name"],
            reference=w["reference"],
            settings=WorkloadSettings.from_dict(w["settings"]),
            data_checksum=w["data_checksum"],
            first_losses=w["first_losses"],
            configs={
                name: ConfigResult(
                    name,
                    [TrialResult.from_dict({k: v for k, v in t.items() if k in _TRIAL_FIELDS}) for t in c["trials"]],
                    c.get("failure"),
                )
                for name, c in w["configs"].items()
            },
            warnings=w.get("warnings", []),
            profiles={name: Profile.from_dict(p) for name, p in w.get("profiles", {}).items()},
        )
        for w in items
    ]


def _against(item: dict[str, Any], version: str, environment: Environment) -> Against:
    base = RunResult(version, item["base"]["created_at"], environment, _workloads(item["base"]["workloads"]))
    return Against(
        ref=item["ref"],
        base_commit=item["base_commit"],
        head_commit=item["head_commit"],
        head_dirty=item["head_dirty"],
        base=base,
        order=list(item["order"]),
        parallel=bool(item["parallel"]),
        problems=dict(item["problems"]),
        forked=bool(item.get("forked", False)),
        interleaved=bool(item.get("interleaved", False)),
        environments=Environments.from_dict(item["environments"]) if item.get("environments") else None,
        new=tuple(str(name) for name in item.get("new", ())),
    )


def is_newer_version(found: Any, current: int) -> bool:
    """Whether a file's schema_version is a later one than this perfgate writes (an int, not a bool)."""
    return isinstance(found, int) and not isinstance(found, bool) and found > current


@cache
def _validator(version: int = SCHEMA_VERSION) -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.with_name(f"results-v{version}.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _schema_problem(document: dict[str, Any], version: int = SCHEMA_VERSION) -> str | None:
    """The first place where `document` breaks the results schema, as `workloads[0].name: ...`."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(version).iter_errors(document))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{where or 'the document'}: {message}"


_TRIAL_FIELDS = frozenset(TrialResult.__dataclass_fields__)
_OPTIONAL_TRIAL_FIELDS = frozenset({"distributed", "data_wait_host_s", "counts"})  # written only where set
_RECORD_FIELDS = frozenset(TrialRecord.__dataclass_fields__)
