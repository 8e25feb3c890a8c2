"""What a front end asks for, resolved once: typed requests built from the declared options.

`run_settings` is the one place a `RunSettings` is assembled and `gate_settings` the one place a
`GateSettings` is, for the CLI and the pytest plugin alike; `gate_request` and `lab_request` add the
references, the mode and the outputs, and make every cross-option check (`--counts-only` with `--record`,
the pair options without `--against`, `--perfgate` with `--perfgate-update`) before anything is measured.
The values they take are plain: an option's key (`max_trials`) to its value, None where not given
(`options.resolve_all` gives them, `plain` strips their sources).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.app.options import Resolved
from perfgate.errors import UsageError
from perfgate.measure.lab import Pairing, ProgressCallback, RunSettings
from perfgate.naming import CLI, PYTEST, FrontEnd
from perfgate.outcome import check_something_to_gate
from perfgate.project import DEFAULT_TRIALS, ProjectConfig
from perfgate.records.acceptance import Acceptance
from perfgate.records.baselines import DEFAULT_BASELINE_DIR
from perfgate.records.results import RunResult
from perfgate.records.verdicts import GateSettings
from perfgate.references import Reference
from perfgate.variants import DEFAULT_CONFIGS, parse_configs

if TYPE_CHECKING:
    from perfgate.check.plan import CheckPlan

Warn = Callable[[str], None]  # one warning line, without its "warning: " prefix


class Mode(StrEnum):
    """How a check judges: against the stored baselines, in pairs against a git ref, or by the counts alone."""

    STORED = "stored"
    PAIRED = "paired"
    COUNTS = "counts"


@dataclass(frozen=True)
class HistoryRequest:
    """The history a command reads or appends to: its folder, and the origin branch that keeps it too."""

    directory: Path
    branch: str | None = None
    record: bool = False


@dataclass(frozen=True)
class Outputs:
    """What a command prints and the files it writes."""

    json: Path | None = None  # the results file
    markdown: Path | None = None
    report_json: Path | None = None  # the report as JSON (compare, report)
    png: Path | None = None
    html: Path | None = None
    format: str = "text"
    max_chars: int | None = None
    quiet: bool = False

    def files(self) -> list[tuple[Path, str]]:
        """Each file output that was asked for, with its option's name."""
        found = [(self.json, "--json"), (self.markdown, "--markdown"), (self.report_json, "--report-json")]
        found.append((self.png, "--png"))
        return [(path, name) for path, name in found if path is not None]


@dataclass(frozen=True)
class GateRequest:
    """A check (or calibrate, bisect, compare): what to measure, how to run it and judge it, and the outputs."""

    references: tuple[Reference, ...]
    run: RunSettings
    gate: GateSettings
    mode: Mode = Mode.STORED
    baseline_dir: Path = DEFAULT_BASELINE_DIR
    against: str | None = None
    pairing: Pairing = Pairing()
    history: HistoryRequest | None = None
    outputs: Outputs = Outputs()
    diagnose_all: bool = False
    front_end: FrontEnd = CLI
    command: str = "perfgate check"

    @property
    def paired(self) -> bool:
        return self.against is not None

    @property
    def judged(self) -> int:
        """How many workload configs the check judges (its time budget grows with them)."""
        return len(self.references) * len(self.run.configs)

    def plan(self, progress: ProgressCallback | None, notify: Callable[[str], None] | None) -> CheckPlan:
        """What the check layer is given (`check.plan.CheckPlan`), its progress and notes going where given."""
        from perfgate.check.plan import CheckPlan

        return CheckPlan(self.references, self.run, self.gate, self.pairing, progress, notify)


@dataclass(frozen=True)
class CalibrationRequest:
    """`perfgate calibrate`: its paired check (the working tree against itself), the A/A pairs it measures and the
    slowdown it plants."""

    check: GateRequest
    pairs: int
    slowdown: float


@dataclass(frozen=True)
class BisectRequest:
    """`perfgate bisect`: the paired check each step runs, and the range's good and bad commits."""

    check: GateRequest
    good: str
    bad: str


@dataclass(frozen=True)
class CompareRequest:
    """`perfgate compare`: the results files read (`candidate`, the last of `paths`, judged against `baseline`, the
    first of two, or else the stored baselines), and how it judges and reports (`check`: one look, the whole alpha)."""

    paths: tuple[Path, ...]
    candidate: RunResult
    baseline: RunResult | None
    check: GateRequest


@dataclass(frozen=True)
class ReportRequest:
    """`perfgate report`: the results file read (`run`, from `path`), the outputs, and what judging a check's file
    again needs: its baseline folder where given, and the project's settings (`project`, read only for a check's
    file or a lab run's reading)."""

    path: Path
    run: RunResult
    outputs: Outputs
    baseline_dir: Path | None
    project: Callable[[], ProjectConfig]


@dataclass(frozen=True)
class SeriesRequest:
    """`perfgate history`: the history it reads, the runs a table shows, the dashboard's folder (None: no
    dashboard), and the threshold and alpha its change points and creep are found at."""

    history: HistoryRequest
    limit: int
    html: Path | None
    threshold: float
    alpha: float


@dataclass(frozen=True)
class ExportRequest:
    """`perfgate export`: the history it reads, the other tool's format, the commit whose run (None: the last) and
    the file it also writes (None: printed only)."""

    history: HistoryRequest
    form: str
    commit: str | None = None
    output: Path | None = None


@dataclass(frozen=True)
class LabRequest:
    """A lab run (`perfgate run`, `perfgate update`): what to measure and where its results go."""

    references: tuple[Reference, ...]
    run: RunSettings
    baseline_dir: Path = DEFAULT_BASELINE_DIR
    outputs: Outputs = Outputs()
    allow_dirty: bool = False
    front_end: FrontEnd = CLI
    peak_tflops: Mapping[str, float] = field(default_factory=dict)


def plain(values: Mapping[str, Resolved]) -> dict[str, Any]:
    """`options.resolve_all`'s answer as plain values, by option key."""
    return {key: resolved.value for key, resolved in values.items()}


def references_of(texts: Sequence[str]) -> tuple[Reference, ...]:
    """The workloads named (else `[tool.perfgate] workloads`, else the built-ins); an empty list is "nothing to
    gate" (`outcome.check_something_to_gate`, exit 5)."""
    from perfgate.references import resolve_references

    references = resolve_references(list(texts))
    check_something_to_gate([r.target for r in references])
    return tuple(references)


def check_outputs(paths: Sequence[tuple[Path | None, str]]) -> None:
    """Refuse at once a file output that cannot be written, before anything is measured."""
    from perfgate.records.results import check_writable

    for path, option in paths:
        if path is not None:
            check_writable(path, option)


def check_folder(path: Path, option: str) -> None:
    """Refuse at once a folder perfgate will write in (the baselines, the history) that cannot take a file:
    probed by making one, since `os.access` says yes to root everywhere."""
    from perfgate._files import check_writable_folder

    check_writable_folder(path, option)


def run_settings(
    values: Mapping[str, Any],
    project: ProjectConfig,
    *,
    front_end: FrontEnd = CLI,
    counts_only: bool = False,
    configs: Sequence[str] | None = None,
) -> RunSettings:
    """The one assembly of a `RunSettings`, from option values by key (`configs` as text or names, `trials`,
    `device`, `threads`, `rounds`, `timeout`, `profile`, `profile_dir`, `nproc`, `fork_trials`; a key missing or
    None: its default) over the project's (`nproc`). `configs`: these instead (the plugin's per-test configs)."""
    from perfgate.measure.device import select_device
    from perfgate.measure.environment import default_threads
    from perfgate.measure.lab import DEFAULT_TIMEOUT_S

    if configs is None:
        text = values.get("configs")
        configs = parse_configs(text) if isinstance(text, str) else tuple(text or DEFAULT_CONFIGS)
    device = select_device(values.get("device") or "auto")
    nproc = values.get("nproc") or project.nproc
    return RunSettings(
        configs=tuple(configs),
        trials=values.get("trials") or DEFAULT_TRIALS,
        device=device.type,
        threads=values.get("threads") or default_threads(nproc or 1),
        rounds=values.get("rounds"),
        timeout_s=values.get("timeout") or DEFAULT_TIMEOUT_S,
        profile_dir=values.get("profile_dir") if values.get("profile") else None,
        nproc=nproc,
        counts_only=counts_only,
        fork=bool(values.get("fork_trials")),
        front_end=front_end,  # how the lab's messages spell the options
    )


def gate_settings(
    values: Mapping[str, Any],
    project: ProjectConfig,
    *,
    trials: int,
    paired: bool,
    single_look: bool = False,
    front_end: FrontEnd = CLI,
    accepted: Sequence[Acceptance] = (),
) -> GateSettings:
    """The one assembly of a `GateSettings`, from option values by key (`threshold`, `alpha`, `max_trials`,
    `time_budget`, `fail_on_inconclusive`, `warn_only`; None: not given, the project's or the default applies) for
    a check of `trials` first trials (pairs, when `paired`); `single_look`: a judgement that adds no trials (compare).
    The threshold and alpha recorded are only those given on the command line or in the environment."""
    return GateSettings.from_options(
        project,
        trials=trials,
        threshold=values.get("threshold"),
        alpha=values.get("alpha"),
        max_trials=trials if single_look else values.get("max_trials"),
        time_budget_s=values.get("time_budget"),
        fail_on_inconclusive=bool(values.get("fail_on_inconclusive")),
        warn_only=bool(values.get("warn_only")),
        front_end=front_end,
        accepted=accepted,
        paired=paired and not single_look,
    )


def acceptances(values: Mapping[str, Any], cwd: Path, *, command: str) -> tuple[list[Acceptance], list[str]]:
    """The slowdowns accepted for this command: `accept`, `accept_label`, and the Perf-Accept trailers of
    `accept_from`'s commit (check: of HEAD when not given); and a warning for each trailer line git ignores."""
    from perfgate.judge.acceptance import commit_acceptances, head_acceptances

    accepted = [*(values.get("accept") or ()), *(values.get("accept_label") or ())]
    commit = values.get("accept_from")
    if commit is not None:
        trailers, stray = commit_acceptances(commit, cwd)
    else:
        trailers, stray = head_acceptances(cwd) if command == "check" else ([], [])
    return [*trailers, *accepted], list(stray)


def history_request(values: Mapping[str, Any], project: ProjectConfig) -> HistoryRequest:
    """The history folder (`history_dir`, else `[tool.perfgate] history`, else .perfgate/history) and branch."""
    from perfgate.records.history import DEFAULT_HISTORY_DIR

    folder = values.get("history_dir") or project.history or DEFAULT_HISTORY_DIR
    return HistoryRequest(Path(folder), values.get("history_branch"), bool(values.get("record")))


def outputs_of(values: Mapping[str, Any]) -> Outputs:
    return Outputs(
        json=values.get("json"),
        markdown=values.get("markdown"),
        report_json=values.get("report_json"),
        png=values.get("png"),
        html=values.get("html"),
        format=values.get("format") or "text",
        max_chars=values.get("max_chars"),
        quiet=bool(values.get("quiet")),
    )


def _pairing(
    values: Mapping[str, Any],
    *,
    unpaired: bool = False,
    front_end: FrontEnd = CLI,
    where: Mapping[str, str] | None = None,
) -> Pairing:
    """How a paired check runs its pairs; asked for in a check that measures no pairs (`unpaired`: no base), a
    UsageError naming where the option came from (`where`, by option key; default: the front end's flag)."""
    environment = values.get("environment")
    pairing = Pairing(bool(values.get("parallel_pairs")), values.get("interleaved_pairs"), environment or "auto")
    if unpaired:
        option = front_end.option
        interleaved = f"{'' if pairing.interleaved else 'no-'}interleaved-pairs"
        for given, key, name in (
            (pairing.parallel, "parallel_pairs", "parallel-pairs"),
            (pairing.interleaved is not None, "interleaved_pairs", interleaved),
            (environment is not None, "environment", "environment"),
        ):
            if given:
                named = (where or {}).get(key) or option(name)
                raise UsageError(
                    f"{named} needs {option('against')}",
                    hint=f"add {option('against')} REF, e.g. {option('against')} main",
                )
    return pairing


def gate_request(
    values: Mapping[str, Any],
    *,
    project: ProjectConfig,
    cwd: Path,
    front_end: FrontEnd = CLI,
    warn: Warn | None = None,
) -> GateRequest:
    """`perfgate check`'s request, in the order its checks run today: a bad --against ref fails at once (before
    torch loads), then an output that cannot be written, the references (none: exit 5), the settings, a bad
    history folder or branch, and the options that do not go together."""
    against = values.get("against")
    if against is not None:
        from perfgate.measure.paired import open_repository, resolve_ref

        resolve_ref(open_repository(cwd), against)
    outputs = outputs_of(values)
    check_outputs([(outputs.json, "--json"), (outputs.markdown, "--markdown")])
    references = references_of(values.get("workloads") or ())
    counts_only = bool(values.get("counts_only"))
    run = run_settings(values, project, front_end=front_end)
    accepted, stray = acceptances(values, cwd, command="check")
    for line in stray:
        (warn or _stderr)(line)
    gate = gate_settings(
        values, project, trials=run.trials, paired=against is not None, front_end=front_end, accepted=accepted
    )
    history = history_request(values, project)
    if history.record:
        check_folder(history.directory, "--history-dir")
    if history.branch is not None:
        from perfgate.records.history_branch import check_branch

        check_branch(cwd, history.branch)
    pairing = _pairing(values, unpaired=against is None and not counts_only, front_end=front_end)
    if counts_only:
        for given, option in ((history.record, "--record"), (run.profile_dir is not None, "--profile")):
            if given:
                raise UsageError(
                    f"{option} cannot be combined with --counts-only, which times nothing",
                    hint=f"leave out {option}, or run the timed check without --counts-only",
                )
    if run.profile_dir is not None and not counts_only:
        check_folder(run.profile_dir, "--profile-dir")
    mode = Mode.COUNTS if counts_only else Mode.PAIRED if against is not None else Mode.STORED
    return GateRequest(
        references=references,
        run=run,
        gate=gate,
        mode=mode,
        baseline_dir=Path(values.get("baseline_dir") or DEFAULT_BASELINE_DIR),
        against=against,
        pairing=pairing,
        history=history,
        outputs=outputs,
        diagnose_all=bool(values.get("diagnose")),
        front_end=front_end,
        command="perfgate check",
    )


def paired_request(
    values: Mapping[str, Any],
    *,
    project: ProjectConfig,
    cwd: Path,
    against: str,
    command: str,
    front_end: FrontEnd = CLI,
) -> GateRequest:
    """`perfgate calibrate`'s and `perfgate bisect`'s request: always in pairs (`against`: the base they measure
    against, for the paired defaults: the largest number of pairs)."""
    references = references_of(values.get("workloads") or ())
    run = run_settings(values, project, front_end=front_end)
    gate = gate_settings(values, project, trials=run.trials, paired=True, front_end=front_end)
    return GateRequest(
        references=references,
        run=run,
        gate=gate,
        mode=Mode.PAIRED,
        against=against,
        pairing=_pairing(values),
        outputs=outputs_of(values),
        front_end=front_end,
        command=command,
    )


def report_request(values: Mapping[str, Any], *, project: Callable[[], ProjectConfig]) -> ReportRequest:
    """`perfgate report`'s request: an output that cannot be written fails first, then a file that cannot be read."""
    from perfgate.records.results import load_results

    outputs = outputs_of(values)
    check_outputs(outputs.files())
    path = Path(values["results"])
    return ReportRequest(path, load_results(path), outputs, values.get("baseline_dir"), project)


def compare_request(
    values: Mapping[str, Any], *, project: Callable[[], ProjectConfig], cwd: Path, warn: Warn | None = None
) -> CompareRequest:
    """`perfgate compare`'s request, in the order its checks run: an output that cannot be written, more than two
    results files, a file that cannot be read, a warning (`warn`) where the two files come from different machines,
    then the project (read only now) and the settings. It measures nothing, so it decides once (one look, the whole
    alpha)."""
    from perfgate.records.fingerprint import machine_difference
    from perfgate.records.results import load_results

    outputs = outputs_of(values)
    check_outputs(outputs.files())
    paths = tuple(values["results"])
    if len(paths) > 2:
        raise UsageError(
            "compare takes one or two results files", hint="perfgate compare [BASELINE.json] CANDIDATE.json"
        )
    candidate = load_results(paths[-1])
    baseline = load_results(paths[0]) if len(paths) == 2 else None
    if baseline is not None:
        differences = machine_difference(baseline, candidate)
        if differences is not None:
            (warn or _stderr)(
                f"{paths[0]} and {paths[1]} come from different machines ({differences}): "
                "this comparison mixes the machine with the code; to judge the code alone, run "
                "perfgate check --against REF on one runner"
            )
    accepted, stray = acceptances(values, cwd, command="compare")
    for line in stray:
        _stderr(line)
    gate = gate_settings(values, project(), trials=1, paired=False, single_look=True, accepted=accepted)
    check = GateRequest(
        references=(),
        run=RunSettings(configs=DEFAULT_CONFIGS),
        gate=gate,
        baseline_dir=Path(values.get("baseline_dir") or DEFAULT_BASELINE_DIR),
        outputs=outputs,
        command="perfgate compare",
    )
    return CompareRequest(paths, candidate, baseline, check)


def calibration_request(values: Mapping[str, Any], *, project: ProjectConfig, cwd: Path) -> CalibrationRequest:
    """`perfgate calibrate`'s request: its paired check, the pairs (`pairs`) and the planted slowdown (`slowdown`)."""
    check = paired_request(values, project=project, cwd=cwd, against="itself", command="perfgate calibrate")
    return CalibrationRequest(check, values["pairs"], values["slowdown"])


def series_request(values: Mapping[str, Any], project: ProjectConfig) -> SeriesRequest:
    """`perfgate history`'s request: the history (`history_request`), the table's `limit`, the dashboard's folder
    (`html`), and the trends' threshold and alpha: `threshold` and `alpha` where given, else the gate's global
    threshold and the project's alpha, else the defaults."""
    from perfgate.records.comparisons import DEFAULT_ALPHA

    threshold = project.thresholds_for("", "", threshold=values.get("threshold")).throughput
    alpha = next(v for v in (values.get("alpha"), project.alpha, DEFAULT_ALPHA) if v is not None)
    return SeriesRequest(history_request(values, project), values["limit"], values.get("html"), threshold, alpha)


def export_request(values: Mapping[str, Any], project: ProjectConfig) -> ExportRequest:
    """`perfgate export`'s request: the history, the format (`to`), the commit (`commit`) and the file (`output`)."""
    return ExportRequest(history_request(values, project), values["to"], values.get("commit"), values.get("output"))


def lab_request(
    values: Mapping[str, Any], *, project: ProjectConfig, command: str, front_end: FrontEnd = CLI
) -> LabRequest:
    """`perfgate run`'s and `perfgate update`'s request: outputs checked, references resolved (none: exit 5);
    for `update`, the baseline folder must take a file before anything is measured."""
    outputs = outputs_of(values)
    check_outputs([(outputs.json, "--json"), (outputs.markdown, "--markdown")])
    references = references_of(values.get("workloads") or ())
    baseline_dir = Path(values.get("baseline_dir") or DEFAULT_BASELINE_DIR)
    if command == "update":  # before torch loads, let alone a trial
        check_folder(baseline_dir, "--baseline-dir")
    run = run_settings(values, project, front_end=front_end)
    if run.profile_dir is not None:
        check_folder(run.profile_dir, "--profile-dir")
    return LabRequest(
        references=references,
        run=run,
        baseline_dir=baseline_dir,
        outputs=outputs,
        allow_dirty=bool(values.get("allow_dirty")),
        front_end=front_end,
        peak_tflops=project.peak_tflops,
    )


def _stderr(line: str) -> None:
    import sys

    sys.stderr.write(f"warning: {line}\n")


def bisect_request(values: Mapping[str, Any], *, project: ProjectConfig, cwd: Path) -> BisectRequest:
    """`perfgate bisect`'s request: bad refs (`good`, `bad`) fail at once, before torch loads; then paired against
    GOOD."""
    from perfgate.check.bisect import commits_between

    good, bad = values["good"], values["bad"]
    commits_between(good, bad)
    check = paired_request(values, project=project, cwd=cwd, against=good, command="perfgate bisect")
    return BisectRequest(check, good, bad)


def plugin_mode(*, check: bool, update: bool, against_given: bool, inner: bool) -> str:
    """The pytest plugin's mode, "off", "check" or "update", from `--perfgate` (`check`) and `--perfgate-update`
    (`update`); `against_given`: --perfgate-against was given on the command line; `inner`: this is a paired
    pytest-benchmark session a gate started (it measures, never gates). The options that do not go together
    are refused here, as the CLI's are in `gate_request`."""
    if check and update:
        raise UsageError(
            "--perfgate and --perfgate-update both given",
            hint="use --perfgate to check against the baselines, or --perfgate-update to rewrite them",
        )
    if update and against_given:
        raise UsageError(
            "--perfgate-against and --perfgate-update both given",
            hint="use --perfgate --perfgate-against REF to check against REF, or --perfgate-update alone to write "
            "the baselines",
        )
    if inner:
        return "off"
    return "update" if update else "check" if check else "off"


def inner_session() -> bool:
    """Whether this process is a paired pytest-benchmark session that a gate started (`check.micro`): the
    plugin measures there and never gates."""
    from perfgate.check.micro import inner_session as inner

    return inner()


@dataclass(frozen=True)
class PluginRequest:
    """`pytest --perfgate` (mode "check"), `pytest --perfgate-update` ("update") or neither ("off": the perf tests
    are collected and skipped): one request for the session. Each check in it (a fixture test, the configured
    items of one set of configs) gets its own `GateRequest` (`check`), judged at its share of the session's alpha
    (`app.suite.GateSuite`, `judge.family`) with Holm's procedure within it. The `RunSettings` are built there
    (`run`), when trials are about to run: choosing the device imports torch, which a session that runs no perf
    test never needs."""

    mode: str
    values: Mapping[str, Any]
    project: ProjectConfig
    gate: GateSettings
    baseline_dir: Path  # relative paths start at pytest's rootdir, and are shown from the cwd
    configs: tuple[str, ...]
    against: str | None = None  # a git ref: paired checks instead of the stored baselines
    outputs: Outputs = Outputs()
    rootpath: Path = Path()  # pytest's rootdir: where the paired pytest-benchmark sessions run
    pairing: Pairing = Pairing()  # how a paired check runs its pairs
    history: HistoryRequest | None = None  # --perfgate-record: each check appended to the history

    @property
    def trials(self) -> int:
        return int(self.values["trials"])

    def run(self, configs: str | Sequence[str] | None = None) -> RunSettings:
        """The lab's settings for these configs (names or text: a fixture test's `configs=`), else the session's."""
        chosen = self.configs if configs is None else parse_configs(configs)
        return run_settings(self.values, self.project, front_end=PYTEST, configs=chosen)

    @property
    def counts_only(self) -> bool:
        return bool(self.values.get("counts_only"))

    def check(self, references: Sequence[Reference], configs: str | Sequence[str] | None = None) -> GateRequest:
        mode = Mode.COUNTS if self.counts_only else Mode.STORED if self.against is None else Mode.PAIRED
        return GateRequest(
            references=tuple(references),
            run=self.run(configs),
            gate=self.gate,
            mode=mode,
            baseline_dir=self.baseline_dir,
            against=self.against,
            pairing=self.pairing,
            history=self.history,
            outputs=self.outputs,
            diagnose_all=bool(self.values.get("diagnose")),
            front_end=PYTEST,
            command="pytest --perfgate",
        )


def plugin_request(values: Mapping[str, Resolved], *, mode: str, rootpath: Path) -> PluginRequest:
    """The plugin's request from its resolved options (`options.resolve_pytest`), checked before any test runs in
    the plugin's order: a --perfgate-against ref that does not resolve, the configs, an output that cannot be
    written, the gate's settings (a check's --perfgate-max-trials below its trials), and for an update, a tree
    with uncommitted changes (unless --perfgate-allow-dirty). Errors name where the value came from."""
    from perfgate.project import load_project_config

    given = plain(values)
    where = {key: resolved.where for key, resolved in values.items()}
    against = given.get("against") if mode == "check" else None  # an ini value is a default for checks only
    if against is not None:  # a ref that does not resolve stops pytest before any trial
        from perfgate.measure.paired import open_repository, resolve_ref

        resolve_ref(open_repository(rootpath, where=where["against"]), against, where=where["against"])
    configs = DEFAULT_CONFIGS if given.get("configs") is None else parse_configs(given["configs"], where["configs"])
    outputs = Outputs(json=given.get("json"), markdown=given.get("markdown"))
    check_outputs([(outputs.json, where["json"])] if mode != "off" else [])
    check_outputs([(outputs.markdown, where["markdown"])] if mode == "check" else [])
    project = load_project_config(rootpath)
    checked = given if mode == "check" else {**given, "max_trials": None}  # only a check adds trials
    accepted: list[Acceptance] = []
    if mode == "check":  # as perfgate check: --perfgate-accept, and the trailers of HEAD or --perfgate-accept-from
        accepted, stray = acceptances(given, rootpath, command="check")
        for line in stray:
            _stderr(line)
    gate = gate_settings(
        checked, project, trials=given["trials"], paired=against is not None, front_end=PYTEST, accepted=accepted
    )
    history = history_request(given, project) if mode == "check" else None
    if history is not None and history.record:
        check_folder(history.directory, where["history_dir"] if given.get("history_dir") else "--perfgate-record")
    if history is not None and history.branch is not None:
        from perfgate.records.history_branch import check_branch

        check_branch(rootpath, history.branch)
    if mode == "check" and given.get("counts_only"):
        for key, name in (("record", "record"), ("profile", "profile")):
            if given.get(key):
                raise UsageError(
                    f"{where[key]} cannot be combined with {where['counts_only']}, which times nothing",
                    hint=f"leave out {PYTEST.option(name)}, or run the timed check without "
                    f"{PYTEST.option('counts-only')}",
                )
    if mode == "check" and given.get("profile"):
        check_folder(Path(given.get("profile_dir") or "perfgate-traces"), where["profile_dir"])
    directory = Path(given.get("baseline_dir") or DEFAULT_BASELINE_DIR)
    directory = directory if directory.is_absolute() else rootpath / directory
    if mode == "update" and not given.get("allow_dirty"):
        from perfgate.measure.environment import require_clean_tree

        require_clean_tree(rootpath, directory, PYTEST)
    # an update measures no pairs: the pairing options, like an ini's against, are a check's
    unpaired = against is None and not given.get("counts_only")
    pairing = _pairing(given, unpaired=unpaired, front_end=PYTEST, where=where) if mode == "check" else Pairing()
    shown = Path(os.path.relpath(directory)) if directory.is_relative_to(Path.cwd()) else directory
    return PluginRequest(mode, given, project, gate, shown, configs, against, outputs, rootpath, pairing, history)


def configured_workloads(project: ProjectConfig) -> list[tuple[Reference, str]]:
    """`[tool.perfgate] workloads`, each loaded once, from the project's source folders as its trials will load
    it (`measure.sources`): its reference and its workload's name."""
    from perfgate.measure.sources import import_from, project_root, source_folders
    from perfgate.references import parse_reference

    import_from(source_folders(project_root(project.base_dir)))
    references = [parse_reference(text, base_dir=project.base_dir) for text in project.workloads or []]
    return [(reference, reference.load(PYTEST).name) for reference in references]


def fixture_reference(workload: object, rootpath: Path) -> Reference:
    """The reference trial processes rebuild a fixture test's workload from (`perfgate.check(gpt_small)`); a
    Workload passed built must be the one its function rebuilds."""
    from perfgate.errors import WorkloadError
    from perfgate.references import reference_for
    from perfgate.workload import Workload

    reference = reference_for(workload, base_dir=rootpath)
    if isinstance(workload, Workload):
        rebuilt = reference.load()
        fields = ("name", "batch_size", "steps", "warmup_steps", "seed")
        changed = [f for f in fields if getattr(rebuilt, f) != getattr(workload, f)]
        if changed:
            raise WorkloadError(
                f"{reference.text} rebuilds a different workload than the one passed ({', '.join(changed)} differ)",
                hint="pass the function itself, perfgate.check(gpt_small), so every trial builds the same workload",
            )
    return reference
