"""The baseline store: one YAML file per workload under `baselines/`, entries keyed by machine type.

A file holds, per machine fingerprint, the per-trial values of every config, their summary, the
environment, the git commit, the data-slice checksum and first-step losses, and the settings used.
Files are read with `yaml.safe_load` only (never a loader that constructs Python objects) and written
atomically with a stable key order, so an update reads well as a pull-request diff.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from perfgate._files import MAX_INTEGER_DIGITS
from perfgate.errors import PerfgateError
from perfgate.records.fingerprint import Fingerprint, cpu_capability, fingerprint_key, machine_fingerprint
from perfgate.records.locking import locked_folder
from perfgate.records.results import RunResult, WorkloadResult, WorkloadSettings, is_newer_version, write_text_atomic
from perfgate.records.shapes import Counts, Environment, GitState, OperatorRow, RankResult, ShapeError
from perfgate.records.summary import PHASES, combine
from perfgate.variants import CONFIG_NAMES

BASELINE_SCHEMA_VERSION = 1
DEFAULT_BASELINE_DIR = Path("baselines")
DEFAULT_UPDATE_TRIALS = 5  # a baseline is measured once and compared many times: more trials, more sensitive checks
_HEADER = (
    "# perfgate baseline, written by `perfgate update`: review changes like code.\n"
    "# One entry per machine type; samples_per_sec and peak_bytes per trial are what `perfgate check` compares.\n"
)


class BaselineError(PerfgateError):
    """A baseline file that cannot be read or written."""


@dataclass(frozen=True)
class TrialEntry:
    """The per-trial values a baseline keeps (not every step time: the summary of each phase)."""

    samples_per_sec: float
    peak_bytes: int
    reserved_bytes: int | None = None
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    phase_s: dict[str, float] = field(default_factory=dict)  # total seconds per phase over the timed steps
    compile_s: float | None = None
    probe_steps_per_sec: float | None = None  # the machine probe's rate in this trial (perfgate/measure/probe.py)
    torch_calls_per_step: int | None = None  # torch functions one eager step calls (diagnosis)
    host_syncs_per_step: int | None = None  # of those, copies to the host (diagnosis)
    graph_breaks: int | None = None  # torch.compile graph breaks (diagnosis)
    loader_cpu_s: float | None = None  # CPU seconds of the DataLoader workers over the timed steps (diagnosis)
    # with CUDA events, the host's own wait for its batches over the timed steps (`TrialResult.data_wait_host_s`),
    # beside phase_s's data_wait, the device's idle wait for them (diagnosis); None where not timed so
    data_wait_host_s: float | None = None
    # what peak_bytes is (`PeakMemory.kind`) and the job's host memory by part (`PeakMemory.process_bytes`,
    # `loader_workers_bytes`); None in files written before they were kept
    memory_kind: str | None = None
    process_bytes: int | None = None
    loader_workers_bytes: int | None = None
    # a data-parallel trial's ranks, in rank order: seconds over the timed steps per phase, `step`, and, where
    # timed, `comm` (a gradient all-reduce in flight), `comm_exposed` (backward waiting for it) and
    # `comm_bytes` (the gradient bytes all-reduced), all summed over the timed steps (diagnosis)
    ranks: list[dict[str, float]] | None = None
    # times the trial ran its timed steps over the pinned slice (`TrialResult.rounds`): every total above covers
    # steps x rounds steps, so a per-step figure divides by both (`per_step`); 1 in files written before
    rounds: int = 1

    def per_step(self, total_s: float, steps: int) -> float:
        """A total over this trial's timed steps (`phase_s`, `loader_cpu_s`, a rank's figures) per step, given one
        round's `steps` (the entry's settings): the same unit as a trial measured in any number of rounds."""
        return total_s / (steps * self.rounds)


@dataclass(frozen=True)
class ConfigEntry:
    """One config's trials and its first-step losses (the pinned slice's fingerprint for this config)."""

    first_losses: list[float]
    trials: list[TrialEntry]
    top_operators: list[OperatorRow] = field(default_factory=list)  # from --profile: self time per step
    counts: Counts | None = None  # the step's exact counts (the first trial's: they are the same in every trial)

    @property
    def samples_per_sec(self) -> list[float]:
        return [t.samples_per_sec for t in self.trials]

    @property
    def peak_bytes(self) -> list[int]:
        return [t.peak_bytes for t in self.trials]

    @property
    def probe_steps_per_sec(self) -> list[float] | None:
        """The machine probe's rate per trial; None unless every trial has one."""
        rates = [t.probe_steps_per_sec for t in self.trials]
        return None if any(r is None for r in rates) else [r for r in rates if r is not None]


@dataclass(frozen=True)
class BaselineEntry:
    """One workload measured on one machine type."""

    workload: str
    fingerprint: Fingerprint
    measured_at: str
    perfgate_version: str
    git: GitState | None
    reference: str
    settings: WorkloadSettings
    data_checksum: str | None
    configs: dict[str, ConfigEntry]
    environment: Environment = field(default_factory=lambda: Environment(order=()))  # none recorded: `{}`

    @property
    def key(self) -> str:
        return fingerprint_key(self.fingerprint)

    @property
    def commit(self) -> str | None:
        return None if self.git is None else self.git.sha


@dataclass(frozen=True)
class StoredUpdate:
    """One workload's update: the entry measured, this machine's previous one, and what was written."""

    measured: BaselineEntry
    previous: BaselineEntry | None
    stored: BaselineEntry | None  # None when every config failed and nothing was written


def entry_from_workload(run: RunResult, workload: WorkloadResult) -> BaselineEntry:
    """The baseline entry for one workload of a run: every config with at least one successful trial."""
    configs: dict[str, ConfigEntry] = {}
    for name, config in workload.configs.items():
        trials = [
            TrialEntry(
                samples_per_sec=t.samples_per_sec,
                peak_bytes=0 if t.memory is None else int(t.memory.peak_bytes),
                reserved_bytes=None if t.memory is None else t.memory.reserved_bytes,
                step_p50_s=statistics.median(t.step_s) if t.step_s else None,
                step_p95_s=_p95(t.step_s),
                phase_s={p: sum(t.phases_s.get(p, [])) for p in PHASES},
                compile_s=t.compile_s,
                probe_steps_per_sec=combine(t.probe_steps_per_sec),
                torch_calls_per_step=t.torch_calls_per_step,
                host_syncs_per_step=t.host_syncs_per_step,
                graph_breaks=(t.compile_stats or {}).get("graph_breaks"),
                loader_cpu_s=t.system.loader_cpu_s if t.system is not None else None,
                data_wait_host_s=None if t.data_wait_host_s is None else sum(t.data_wait_host_s),
                memory_kind=None if t.memory is None else t.memory.kind,
                process_bytes=None if t.memory is None else t.memory.process_bytes,
                loader_workers_bytes=None if t.memory is None else t.memory.loader_workers_bytes,
                ranks=None if t.distributed is None else [rank_totals(r) for r in t.distributed.ranks],
                rounds=t.rounds,
            )
            for t in config.trials
            if t.ok
        ]
        if trials:
            profile = workload.profiles.get(name)
            operators = [] if profile is None else profile.top_operators
            counts = next((t.counts for t in config.trials if t.ok and t.counts is not None), None)
            configs[name] = ConfigEntry(list(workload.first_losses.get(name, [])), trials, list(operators), counts)
    return BaselineEntry(
        workload=workload.name,
        fingerprint=machine_fingerprint(run.environment),
        measured_at=run.created_at,
        perfgate_version=run.perfgate_version,
        git=run.environment.git,
        reference=workload.reference,
        settings=workload.settings,
        data_checksum=workload.data_checksum,
        configs=configs,
        environment=run.environment,
    )


def entries_from_results(run: RunResult) -> list[BaselineEntry]:
    return [entry_from_workload(run, workload) for workload in run.workloads]


def merge_entries(old: BaselineEntry | None, new: BaselineEntry) -> BaselineEntry:
    """Update `old` with `new`'s configs; configs measured only before are kept if the workload is unchanged."""
    if old is None or old.data_checksum != new.data_checksum or _comparable_settings(old) != _comparable_settings(new):
        return new
    configs = {**old.configs, **new.configs}
    return replace(new, configs={name: configs[name] for name in CONFIG_NAMES if name in configs})


class BaselineStore:
    """The baseline files of one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path_for(self, workload: str) -> Path:
        return self.directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', workload)}.yaml"

    def load(self, workload: str) -> dict[str, BaselineEntry]:
        """Every machine's entry for `workload` (empty when there is no file yet)."""
        path = self.path_for(workload)
        if not path.is_file():
            return {}
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BaselineError(f"cannot read {path}: {exc}", hint="check the file") from exc
        return parse_baseline(text, source=str(path), workload=workload)

    def find(self, workload: str, fingerprint: Fingerprint) -> BaselineEntry | None:
        return self.load(workload).get(fingerprint_key(fingerprint))

    def write(self, entry: BaselineEntry) -> tuple[BaselineEntry | None, BaselineEntry]:
        """Store `entry` (merged with this machine's previous one); other machines' entries are untouched.

        Returns this machine's previous entry, if any, and the entry as stored.
        """
        with locked_folder(self.directory):  # read, merge and rename as one step against other writers
            entries = self.load(entry.workload)
            previous = entries.get(entry.key)
            stored = entries[entry.key] = merge_entries(previous, entry)
            write_text_atomic(self.path_for(entry.workload), render_baseline(entry.workload, entries.values()))
        return previous, stored

    def write_run(self, run: RunResult) -> list[StoredUpdate]:
        """Store every workload of `run` that measured something; what was measured, replaced and kept."""
        updates = []
        for entry in entries_from_results(run):
            if entry.configs:
                previous, stored = self.write(entry)
                updates.append(StoredUpdate(entry, previous, stored))
            else:
                updates.append(StoredUpdate(entry, None, None))
        return updates


def render_baseline(workload: str, entries: Iterable[BaselineEntry]) -> str:
    """The YAML text of one workload's baseline file: machines sorted by key, fields in a fixed order."""
    machines = {entry.key: entry_to_dict(entry) for entry in sorted(entries, key=lambda e: e.key)}
    document = {"schema_version": BASELINE_SCHEMA_VERSION, "workload": workload, "machines": machines}
    return dump_yaml(_HEADER, document)


def dump_yaml(header: str, document: dict[str, Any]) -> str:
    """A baseline document as YAML text: keys in the given order, plain types only, no NaN."""
    # torch's version string is a str subclass that safe_dump refuses: round-trip through JSON.
    document = json.loads(json.dumps(document, allow_nan=False, default=str))
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True)


class _StrictSafeLoader(yaml.SafeLoader):
    """yaml's safe loader (plain types only: a tag that would construct a Python object is an error) that
    also refuses a key given twice in one mapping, which the YAML spec forbids and PyYAML lets the last win."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            digits = _int_digits(value_node)
            if digits > MAX_INTEGER_DIGITS:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"{key!r} is an integer of {digits} digits, more than a figure holds",
                    value_node.start_mark,
                )
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key; construction below reports it
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node: Any) -> int:
        """An integer of at most `MAX_INTEGER_DIGITS` digits: a larger one is no figure perfgate writes, and Python
        would refuse to read one of over 4,300 digits or to compare it with a float past 309."""
        digits = _int_digits(node)
        if digits > MAX_INTEGER_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {digits} digits, more than a figure holds", node.start_mark
            )
        value: int = self.construct_yaml_int(node)
        return value


def integer_digits(value: int) -> int:
    """How many digits `value` has, however long (Python refuses to write an integer of over 4,300 as text)."""
    bits = abs(value).bit_length()
    return len(str(abs(value))) if bits < 10_000 else int(bits * 0.30103) + 1


def _int_digits(node: yaml.Node) -> int:
    """The digits of an integer scalar as written (signs and underscores aside); 0 for any other node."""
    if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:int":
        return 0
    return len(str(node.value).replace("_", "").lstrip("+-"))


_StrictSafeLoader.add_constructor("tag:yaml.org,2002:int", _StrictSafeLoader.construct_bounded_int)


def load_yaml(text: str, *, source: str, update_command: str = "perfgate update") -> Any:
    """Parse YAML with the safe loader only: tags that would construct Python objects are errors, and so
    are repeated keys."""
    hint = f"fix the file or restore it from git, then run {update_command}"
    try:
        return yaml.load(text, Loader=_StrictSafeLoader)  # a SafeLoader subclass: plain types only
    except RecursionError:
        raise BaselineError("invalid YAML: nested too deeply", where=source, hint=hint) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(exc.problem or exc.context or exc).split())
        raise BaselineError(f"invalid YAML{line}: {problem}", where=source, hint=hint) from exc
    except yaml.YAMLError as exc:
        raise BaselineError(f"invalid YAML: {' '.join(str(exc).split())}", where=source, hint=hint) from exc


def parse_baseline(text: str, *, source: str, workload: str | None = None) -> dict[str, BaselineEntry]:
    """Parse a baseline file's text into entries keyed by machine; BaselineError on anything malformed."""
    document = load_yaml(text, source=source)
    reader = DocumentReader(source)
    document = reader.mapping(document, "the file")
    version = document.get("schema_version")
    if version != BASELINE_SCHEMA_VERSION:
        raise BaselineError(
            f"unsupported schema_version {version!r} (this perfgate reads {BASELINE_SCHEMA_VERSION})",
            where=source,
            hint=version_hint(version),
        )
    name = reader.get(document, "workload", str, "the file")
    if workload is not None and name != workload:
        raise BaselineError(
            f"the file is for workload {name!r}, not {workload!r}",
            where=source,
            hint="rename or remove it, then run perfgate update",
        )
    machines = reader.mapping(document.get("machines"), "machines")
    entries = {}
    for key, raw in machines.items():
        entry = reader.entry(name, raw, f"machines[{key!r}]")
        entries[entry.key] = entry
    return entries


def entry_to_dict(entry: BaselineEntry) -> dict[str, Any]:
    configs = {}
    for name, config in entry.configs.items():
        trials = [
            {
                "samples_per_sec": round_figure(t.samples_per_sec),
                "peak_bytes": t.peak_bytes,
                "reserved_bytes": t.reserved_bytes,
                "step_p50_s": round_figure(t.step_p50_s),
                "step_p95_s": round_figure(t.step_p95_s),
                "compile_s": round_figure(t.compile_s),
                "probe_steps_per_sec": round_figure(t.probe_steps_per_sec),
                "torch_calls_per_step": t.torch_calls_per_step,
                "host_syncs_per_step": t.host_syncs_per_step,
                "graph_breaks": t.graph_breaks,
                # the totals below cover steps x rounds timed steps; one round, as in files written before, left out
                **({} if t.rounds == 1 else {"rounds": t.rounds}),
                # the DataLoader workers' CPU seconds, where measured (files written before leave it out)
                **({} if t.loader_cpu_s is None else {"loader_cpu_s": round_figure(t.loader_cpu_s)}),
                # the host's wait for its batches, where timed with CUDA events (other files leave it out)
                **({} if t.data_wait_host_s is None else {"data_wait_host_s": round_figure(t.data_wait_host_s)}),
                # what peak_bytes is and its parts, where known (files written before leave them out)
                **{k: v for k, v in _memory_parts(t).items() if v is not None},
                "phase_s": {p: round_figure(v) for p, v in t.phase_s.items()},
                # a data-parallel trial's ranks (files of one-process trials leave it out)
                **({} if t.ranks is None else {"ranks": [{k: round_figure(v) for k, v in r.items()} for r in t.ranks]}),
            }
            for t in config.trials
        ]
        sps = config.samples_per_sec
        configs[name] = {
            "summary": {
                "samples_per_sec_median": round_figure(statistics.median(sps)),
                "samples_per_sec_spread_pct": round_figure(100 * (max(sps) - min(sps)) / 2 / statistics.median(sps)),
                "peak_bytes_median": int(statistics.median(config.peak_bytes)),
                "trials": len(trials),
            },
            "first_losses": [round_figure(v, 9) for v in config.first_losses],
            "trials": trials,
        }
        if config.top_operators:
            configs[name]["top_operators"] = [
                {k: round_figure(v) if isinstance(v, float) else v for k, v in row.to_dict().items()}
                for row in config.top_operators
            ]
        if config.counts is not None:
            configs[name]["counts"] = config.counts.to_dict()
    return {
        "fingerprint": entry.fingerprint.to_dict(),
        "measured_at": entry.measured_at,
        "perfgate_version": entry.perfgate_version,
        "git": None if entry.git is None else entry.git.to_dict(),
        "reference": entry.reference,
        "settings": entry.settings.to_dict(),
        "data_checksum": entry.data_checksum,
        "configs": configs,
        "environment": entry.environment.to_dict(),
    }


def version_hint(version: Any, update_command: str = "perfgate update") -> str:
    """What to do about a baseline file of another schema_version: newer needs a newer perfgate; there is
    no older format (1 is the first perfgate wrote), so anything else was not written by perfgate."""
    if is_newer_version(version, BASELINE_SCHEMA_VERSION):
        return f"it was written by a newer perfgate: upgrade perfgate to read it, or rewrite it with {update_command}"
    return f"perfgate has only ever written schema_version 1: restore the file from git or run {update_command}"


class DocumentReader:
    """Checks the shape of parsed YAML and names the place of the first thing that is wrong."""

    def __init__(self, source: str, update_command: str = "perfgate update") -> None:
        self.source = source
        self.update_command = update_command

    def fail(self, what: str) -> BaselineError:
        hint = f"fix the file or restore it from git, then run {self.update_command}"
        return BaselineError(what, where=self.source, hint=hint)

    def mapping(self, value: Any, where: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be a mapping, got {_type_name(value)}")
        return value

    def get(self, mapping: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
        if key not in mapping:
            raise self.fail(f"{where} has no {key!r}")
        value = mapping[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise self.fail(f"{where}.{key} has the wrong type ({_type_name(value)})")
        return value

    def number(self, mapping: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> float | None:
        value = mapping.get(key)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"{where}.{key} must be a number, got {_type_name(value)}")
        if isinstance(value, int) and abs(value) >= 10**MAX_INTEGER_DIGITS:  # math.isfinite would overflow on it
            raise self.fail(f"{where}.{key} is an integer of {integer_digits(value)} digits, more than a figure holds")
        if not math.isfinite(value) or value < 0:
            raise self.fail(f"{where}.{key} must be finite and not negative, got {value}")
        return float(value)

    def text(self, mapping: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> str | None:
        value = mapping.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key} must be a string, got {_type_name(value)}")
        return value

    def entry(self, workload: str, raw: Any, where: str) -> BaselineEntry:
        raw = self.mapping(raw, where)
        fingerprint = self.mapping(raw.get("fingerprint"), f"{where}.fingerprint")
        configs: dict[str, ConfigEntry] = {}
        for name, config in self.mapping(raw.get("configs"), f"{where}.configs").items():
            if name not in CONFIG_NAMES:
                raise self.fail(f"{where}.configs has unknown config {name!r} (known: {', '.join(CONFIG_NAMES)})")
            configs[name] = self.config(config, f"{where}.configs.{name}")
        git = raw.get("git")
        try:  # files written by hand may hold anything else there: read as none, as perfgate always did
            environment = Environment.from_dict(raw["environment"] if isinstance(raw.get("environment"), dict) else {})
            git_state = GitState.from_dict(git) if isinstance(git, dict) else None
            stored = Fingerprint.from_dict(fingerprint)
        except ShapeError as exc:
            raise self.fail(f"{where}: {exc}") from None
        if "cpu_capability" not in fingerprint and stored.device_type == "cpu":
            # written before the fingerprint held it: the entry's environment recorded it all along
            stored = replace(stored, cpu_capability=cpu_capability(environment))
        return BaselineEntry(
            workload=workload,
            fingerprint=stored,
            measured_at=str(raw.get("measured_at", "")),
            perfgate_version=str(raw.get("perfgate_version", "")),
            git=git_state,
            reference=str(raw.get("reference", "")),
            settings=self.settings(raw.get("settings", {}), f"{where}.settings"),
            data_checksum=raw.get("data_checksum") if isinstance(raw.get("data_checksum"), str) else None,
            configs=configs,
            environment=environment,
        )

    def settings(self, raw: Any, where: str) -> WorkloadSettings:
        """An entry's `settings`, strictly (`WorkloadSettings.from_dict`)."""
        try:
            return WorkloadSettings.from_dict(self.mapping(raw, where), where)
        except ShapeError as exc:
            raise self.fail(str(exc)) from None

    def ranks(self, raw: Any, where: str) -> list[dict[str, float]] | None:
        """A trial's `ranks`: a list of at least two tables of seconds (left out: one process)."""
        if raw is None:
            return None
        if not isinstance(raw, list) or len(raw) < 2:
            raise self.fail(f"{where} must be a list of two or more ranks")
        ranks = []
        for index, rank in enumerate(raw):
            rank = self.mapping(rank, f"{where}[{index}]")
            ranks.append({str(k): float(self.number(rank, k, f"{where}[{index}]") or 0.0) for k in rank})
        return ranks

    def rounds(self, trial: Mapping[str, Any], where: str) -> int:
        """A trial's `rounds`: a whole number of at least 1; left out (files written before it was kept), 1."""
        if "rounds" not in trial:
            return 1
        value = trial["rounds"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"{where}.rounds must be a whole number of at least 1, got {value!r}")
        return value

    def config(self, raw: Any, where: str) -> ConfigEntry:
        raw = self.mapping(raw, where)
        losses = raw.get("first_losses", [])
        if not isinstance(losses, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in losses
        ):
            raise self.fail(f"{where}.first_losses must be a list of numbers")
        trials_raw = raw.get("trials")
        if not isinstance(trials_raw, list) or not trials_raw:
            raise self.fail(f"{where}.trials must be a non-empty list")
        trials = []
        for index, trial in enumerate(trials_raw):
            here = f"{where}.trials[{index}]"
            trial = self.mapping(trial, here)
            samples_per_sec = self.number(trial, "samples_per_sec", here)
            if not samples_per_sec:
                raise self.fail(f"{here}.samples_per_sec must be positive")
            phase_s = self.mapping(trial.get("phase_s", {}), f"{here}.phase_s")
            trials.append(
                TrialEntry(
                    samples_per_sec=samples_per_sec,
                    peak_bytes=int(self.number(trial, "peak_bytes", here) or 0),
                    reserved_bytes=_int_or_none(self.number(trial, "reserved_bytes", here, optional=True)),
                    step_p50_s=self.number(trial, "step_p50_s", here, optional=True),
                    step_p95_s=self.number(trial, "step_p95_s", here, optional=True),
                    phase_s={str(p): float(self.number(phase_s, p, f"{here}.phase_s") or 0.0) for p in phase_s},
                    compile_s=self.number(trial, "compile_s", here, optional=True),
                    probe_steps_per_sec=self.number(trial, "probe_steps_per_sec", here, optional=True) or None,
                    torch_calls_per_step=_int_or_none(self.number(trial, "torch_calls_per_step", here, optional=True)),
                    host_syncs_per_step=_int_or_none(self.number(trial, "host_syncs_per_step", here, optional=True)),
                    graph_breaks=_int_or_none(self.number(trial, "graph_breaks", here, optional=True)),
                    loader_cpu_s=self.number(trial, "loader_cpu_s", here, optional=True),
                    data_wait_host_s=self.number(trial, "data_wait_host_s", here, optional=True),
                    memory_kind=self.text(trial, "memory_kind", here, optional=True),
                    process_bytes=_int_or_none(self.number(trial, "process_bytes", here, optional=True)),
                    loader_workers_bytes=_int_or_none(self.number(trial, "loader_workers_bytes", here, optional=True)),
                    ranks=self.ranks(trial.get("ranks"), f"{here}.ranks"),
                    rounds=self.rounds(trial, here),
                )
            )
        operators = raw.get("top_operators", [])
        if not isinstance(operators, list):
            raise self.fail(f"{where}.top_operators must be a list of operators with a name")
        rows = []
        for index, row in enumerate(operators):
            here = f"{where}.top_operators[{index}]"
            try:
                rows.append(OperatorRow.from_dict(row, here))
            except ShapeError as exc:
                raise self.fail(str(exc)) from None
            for key in ("self_cpu_s_per_step", "self_device_s_per_step"):
                self.number(row, key, here)  # finite and not negative, as a baseline has always held them
        counts = None
        if raw.get("counts") is not None:
            try:
                counts = Counts.from_dict(raw["counts"], f"{where}.counts")
            except (ShapeError, TypeError) as exc:
                raise self.fail(str(exc)) from exc
        return ConfigEntry([float(v) for v in losses], trials, rows, counts)


def rank_totals(rank: RankResult) -> dict[str, float]:
    """What a baseline keeps of one rank, summed over the timed steps: seconds per phase, the step, and where
    timed, the gradient all-reduce in flight (`comm`), backward's wait for it (`comm_exposed`) and the bytes it
    carried (`comm_bytes`)."""
    totals = {phase: sum(values) for phase, values in rank.phases_s.items()}
    totals["step"] = sum(rank.step_s)
    if rank.comm_s is not None and rank.comm_exposed_s is not None:
        totals["comm"] = sum(rank.comm_s)
        totals["comm_exposed"] = sum(rank.comm_exposed_s)
        totals["comm_bytes"] = float((rank.comm_bytes or 0) * len(rank.step_s))
    return totals


def _comparable_settings(entry: BaselineEntry) -> WorkloadSettings:
    return entry.settings.comparable()


def _p95(values: list[float]) -> float | None:
    from perfgate.records.summary import percentile

    return percentile(values, 95) if values else None


def round_figure(value: float | None, digits: int = 6) -> float | None:
    """Six significant digits: enough for any comparison, short enough for a readable diff."""
    return None if value is None else float(f"{value:.{digits}g}")


def _memory_parts(trial: TrialEntry) -> dict[str, Any]:
    return {
        "memory_kind": trial.memory_kind,
        "process_bytes": trial.process_bytes,
        "loader_workers_bytes": trial.loader_workers_bytes,
    }


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def _type_name(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
