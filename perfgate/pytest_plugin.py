"""The pytest front end: `pytest --perfgate` gates perf tests, `pytest --perfgate-update` writes baselines.

Three kinds of perf test, all collected by every run and skipped unless one of the two flags is given:

- each workload in `[tool.perfgate] workloads`, one item per config (`perfgate::lm-small[bf16]`);
- tests that use the `perfgate` fixture: `perfgate.check(gpt_small)` measures and judges one workload;
- pytest-benchmark tests: their raw round times are judged against `baselines/pytest-benchmark.yaml`.

With `--perfgate-against REF` everything is measured against the git ref REF instead of the stored
baselines: the workloads (configured and fixture-style) in pairs of trials (`check.paired.run_paired_check`,
as `perfgate check --against`), the pytest-benchmark tests in pairs of whole pytest sessions of REF and
the working tree (`check.micro.run_paired_micro`). This session's own pytest-benchmark run then only
shows that the tests pass. The paired sessions set `check.micro.INNER_SESSION_ENV`, which turns this
plugin off inside them, whatever their options say.

This module only parses options and reports: measuring, judging and storing come from the core
(`check.stored.run_check`, `check.paired.run_paired_check`, `measure.lab.run_lab`,
`records.baselines.BaselineStore`, `records.micro`, `check.micro`), as for the CLI.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfgate import options
from perfgate.check.micro import inner_session
from perfgate.dependencies import dependencies_required
from perfgate.errors import PerfgateError
from perfgate.formatting import format_signed_pct
from perfgate.judge.settings import DEFAULT_MAX_PAIRS
from perfgate.judge.verdict import fails_build
from perfgate.measure.lab import DEFAULT_TRIALS
from perfgate.naming import PYTEST
from perfgate.options import add_to_pytest, ini_key
from perfgate.records.baselines import DEFAULT_BASELINE_DIR, DEFAULT_UPDATE_TRIALS
from perfgate.variants import CONFIG_NAMES, parse_configs

if TYPE_CHECKING:
    from perfgate.check.micro import PairedMicro
    from perfgate.judge.micro import MicroVerdict
    from perfgate.judge.settings import GateSettings
    from perfgate.judge.verdict import ConfigVerdict, GateResult, WorkloadVerdict
    from perfgate.measure.lab import RunSettings
    from perfgate.project import ProjectConfig
    from perfgate.records.baselines import StoredUpdate
    from perfgate.records.micro import MicroBenchmark
    from perfgate.records.results import MicroSection, RunResult
    from perfgate.references import Reference

SKIP_REASON = "perf test: run with --perfgate (or --perfgate-update to record baselines)"


PLUGIN_OPTIONS = (
    options.CONFIGS,
    options.TRIALS,
    options.MAX_TRIALS,
    options.THREADS,
    options.ROUNDS,
    options.NPROC,
    options.BASELINE_DIR,
    options.THRESHOLD,
    options.ALPHA,
    options.JSON,
    options.MARKDOWN,
    options.AGAINST,
    options.FAIL_ON_INCONCLUSIVE,
    options.ALLOW_DIRTY,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "perfgate: performance-regression gate")
    group.addoption("--perfgate", action="store_true", help="run the perf tests and fail on supported regressions")
    group.addoption(
        "--perfgate-update", action="store_true", help="run the perf tests and write their baselines instead"
    )
    for option in PLUGIN_OPTIONS:
        add_to_pytest(
            group, parser, option, PYTEST, default=f"{DEFAULT_TRIALS}; {DEFAULT_UPDATE_TRIALS} with --perfgate-update"
        )


@dataclass(frozen=True)
class PluginSettings:
    """The options, parsed: `mode` is "off", "check" or "update"."""

    mode: str
    project: ProjectConfig
    configs: tuple[str, ...]
    trials: int
    max_trials: int | None
    threads: int | None
    rounds: int | None  # None: calibrated (`perfgate.measure.rounds`)
    nproc: int | None
    baseline_dir: Path
    threshold: float | None
    alpha: float | None
    json: Path | None
    fail_on_inconclusive: bool
    allow_dirty: bool
    against: str | None = None  # a git ref: a paired check instead of the stored baselines
    markdown: Path | None = None  # the report as Markdown, as `perfgate check --markdown` writes it

    def run_settings(self, configs: Sequence[str] | None = None) -> RunSettings:
        from perfgate.measure.device import select_device
        from perfgate.measure.environment import default_threads
        from perfgate.measure.lab import RunSettings

        device = select_device("auto").type
        nproc = self.nproc or self.project.nproc
        return RunSettings(
            configs=tuple(configs or self.configs),
            trials=self.trials,
            device=device,
            threads=self.threads or default_threads(nproc or 1),
            rounds=self.rounds,
            nproc=nproc,
        )

    def gate_settings(self) -> GateSettings:
        from perfgate.judge.settings import GateSettings

        max_trials = self.max_trials
        if max_trials is None and self.against is not None:  # as `perfgate check --against`
            max_trials = max(self.trials, DEFAULT_MAX_PAIRS)
        return GateSettings.from_options(
            self.project,
            trials=self.trials,
            threshold=self.threshold,
            alpha=self.alpha,
            max_trials=max_trials,
            fail_on_inconclusive=self.fail_on_inconclusive,
            front_end=PYTEST,
        )


@dependencies_required()
def read_settings(config: pytest.Config) -> PluginSettings:
    """Parse options and ini keys (an option wins over its ini key); PerfgateError on a bad value."""
    from perfgate.project import load_project_config
    from perfgate.records.results import check_writable

    def value(option: options.Option) -> tuple[str | None, str]:
        key = ini_key(option)
        given = config.getoption(key)
        if given is not None:
            return str(given), PYTEST.option(option.name)
        ini = str(config.getini(key) or "").strip()
        if len(ini) > 1 and ini[0] == ini[-1] and ini[0] in "'\"":  # pytest.ini keeps quotes; TOML does not
            ini = ini[1:-1]
        return (ini or None), f"ini {key}"

    def flag(option: options.Option) -> bool:
        return bool(config.getoption(ini_key(option)) or config.getini(ini_key(option)))

    raw = {option.name: value(option) for option in PLUGIN_OPTIONS if not option.flag}

    def parsed(option: options.Option) -> Any:
        text, where = raw[option.name]
        return None if text is None or option.parse is None else option.parse(text, where)

    check, update = config.getoption("perfgate"), config.getoption("perfgate_update")
    if check and update:
        from perfgate.errors import UsageError

        raise UsageError(
            "--perfgate and --perfgate-update both given",
            hint="use --perfgate to check against the baselines, or --perfgate-update to rewrite them",
        )
    mode = "update" if update else "check" if check else "off"
    if inner_session():  # a paired pytest-benchmark session started by a gate: measure, never gate
        mode = "off"
    against, against_where = raw["against"]
    if update and config.getoption("perfgate_against") is not None:
        from perfgate.errors import UsageError

        raise UsageError(
            "--perfgate-against and --perfgate-update both given",
            hint="use --perfgate --perfgate-against REF to check against REF, or --perfgate-update alone to write "
            "the baselines",
        )
    if against is not None and mode == "check":  # a ref that does not resolve stops pytest before any trial
        from perfgate.measure.paired import open_repository, resolve_ref

        try:
            resolve_ref(open_repository(config.rootpath), against)
        except PerfgateError as error:
            error.where = against_where
            raise
    configs_text, configs_where = raw["configs"]
    try:
        configs = parse_configs(configs_text) if configs_text is not None else CONFIG_NAMES
    except PerfgateError as error:
        error.where = configs_where
        raise
    json_path = parsed(options.JSON)
    if json_path is not None and mode != "off":
        check_writable(json_path, raw["json"][1])
    markdown = parsed(options.MARKDOWN)
    if markdown is not None and mode == "check":
        check_writable(markdown, raw["markdown"][1])
    trials = parsed(options.TRIALS)
    return PluginSettings(
        mode=mode,
        project=load_project_config(config.rootpath),
        configs=configs,
        trials=trials or (DEFAULT_UPDATE_TRIALS if mode == "update" else DEFAULT_TRIALS),
        max_trials=parsed(options.MAX_TRIALS),
        threads=parsed(options.THREADS),
        rounds=parsed(options.ROUNDS),
        nproc=parsed(options.NPROC),
        baseline_dir=parsed(options.BASELINE_DIR) or DEFAULT_BASELINE_DIR,
        threshold=parsed(options.THRESHOLD),
        alpha=parsed(options.ALPHA),
        json=json_path,
        fail_on_inconclusive=flag(options.FAIL_ON_INCONCLUSIVE),
        allow_dirty=flag(options.ALLOW_DIRTY),
        against=against if mode == "check" else None,  # an ini value is a default for checks: updates ignore it
        markdown=markdown,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perfgate: a perfgate perf test (skipped unless pytest runs with --perfgate)")
    try:
        settings = read_settings(config)
        if settings.mode != "off":
            _refuse_parallel_workers(config)
            if settings.mode == "check":
                settings.gate_settings()  # refuse bad combinations (--perfgate-max-trials below trials) up front
            elif not settings.allow_dirty:
                from perfgate.measure.environment import require_clean_tree

                require_clean_tree(config.rootpath, config.rootpath / settings.baseline_dir, PYTEST)
    except PerfgateError as error:
        raise pytest.UsageError(f"perfgate: {error.one_line()}") from None
    session = PerfgateSession(config, settings)
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "perfgate-session")
    config.pluginmanager.register(_QuietBenchmarkFinish(), "perfgate-quiet-benchmark-finish")
    if settings.mode != "off" and config.pluginmanager.hasplugin("benchmark"):
        session.capture_pytest_benchmark_json()


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_generate_machine_info(config: pytest.Config) -> dict[str, Any] | None:
    """In a paired session, pytest-benchmark's machine info without its CPU survey, which costs a second or
    more per session and is never read there; elsewhere (None) pytest-benchmark's own."""
    if not inner_session():
        return None
    import platform

    return {
        "node": platform.node(),
        "machine": platform.machine(),
        "python_implementation": platform.python_implementation(),
        "python_version": platform.python_version(),
        "system": platform.system(),
        "release": platform.release(),
        "cpu": {},
    }


def _refuse_parallel_workers(config: pytest.Config) -> None:
    workers = config.getoption("numprocesses", None)
    # An xdist worker has `workerinput`; the PYTEST_XDIST_WORKER variable would also catch pytest sessions
    # that a worker's tests start in subprocesses, which run on their own.
    if workers not in (None, 0, "0") or hasattr(config, "workerinput"):
        from perfgate.errors import UsageError

        raise UsageError(
            f"perf tests cannot run under pytest-xdist (-n {workers}): two benchmarks at once on one machine "
            "measure each other",
            hint="run them in their own pytest call without -n, e.g. pytest --perfgate -m perfgate -p no:xdist",
        )


_SESSION = pytest.StashKey["PerfgateSession"]()


@dataclass(eq=False)  # registered as a plugin: hashed by identity
class PerfgateSession:
    """Everything one pytest session measured and decided, for the items, the summary and the JSON."""

    config: pytest.Config
    settings: PluginSettings
    gates: list[GateResult] = field(default_factory=list)
    runs: list[RunResult] = field(default_factory=list)
    updates: list[StoredUpdate] = field(default_factory=list)
    micro: list[MicroVerdict] = field(default_factory=list)
    micro_updates: list[tuple[MicroBenchmark, MicroBenchmark | None]] = field(default_factory=list)
    micro_paired: PairedMicro | None = None  # --perfgate-against: the session pairs that judged `micro`
    micro_mode: str = "stored baselines"  # what `micro` was compared with, in words
    problems: list[str] = field(default_factory=list)  # what failed outside any test: the run fails
    _configured: dict[tuple[str, str], ConfigVerdict | str | None] | None = None
    _probes: list[float] = field(default_factory=list)
    _benchmark_json: Path | None = None
    _environment: dict[str, Any] | None = None  # this process's environment, once read for pytest-benchmark
    _written: list[Path] = field(default_factory=list)  # the results file and the report, once written

    @property
    def baseline_dir(self) -> Path:
        """The baseline folder: relative paths start at pytest's rootdir, and are shown from the cwd."""
        directory = self.settings.baseline_dir
        if not directory.is_absolute():
            directory = self.config.rootpath / directory
        return Path(os.path.relpath(directory)) if directory.is_relative_to(Path.cwd()) else directory

    # -- collection ---------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before -k, -m and --lf select from the items
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        if self.settings.project.workloads and self.config.args_source != pytest.Config.ArgsSource.ARGS:
            items.extend(self._configured_items(session))
        for item in items:
            if isinstance(item, WorkloadItem) or "perfgate" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.perfgate)
                if self.settings.mode == "off":
                    item.add_marker(pytest.mark.skip(reason=SKIP_REASON))

    def _configured_items(self, session: pytest.Session) -> list[WorkloadItem]:
        from perfgate.references import parse_reference

        project = self.settings.project
        try:
            references = [parse_reference(text, base_dir=project.base_dir) for text in project.workloads or []]
            loaded = [(reference, reference.load()) for reference in references]
        except PerfgateError as error:
            raise pytest.UsageError(f"perfgate: {error.one_line()} (in {project.source})") from None
        source = Path(project.source.split(" ")[0]) if project.source else self.config.rootpath
        collector = WorkloadsCollector.from_parent(session, name="perfgate", nodeid="perfgate", path=source)
        return [
            WorkloadItem.from_parent(
                collector,
                name=f"{workload.name}[{config}]",
                reference=reference,
                workload=workload.name,
                config_name=config,
            )
            for reference, workload in loaded
            for config in self.settings.configs
        ]

    # -- measuring ----------------------------------------------------------------------------------

    def configured_outcome(self, item: WorkloadItem) -> ConfigVerdict | str | None:
        """The verdict (check) or problem text for one configured item; None for a stored update."""
        if self._configured is None:
            selected = [i for i in item.session.items if isinstance(i, WorkloadItem)]
            try:
                self._configured = self._measure_configured(selected)
            except PerfgateError as error:  # e.g. a workload whose code fails: every item says so, none re-runs
                self._configured = {(i.workload, i.config_name): error.one_line() for i in selected}
        return self._configured.get((item.workload, item.config_name), "not measured")

    def _measure_configured(self, items: list[WorkloadItem]) -> dict[tuple[str, str], ConfigVerdict | str | None]:
        """Measure every selected configured item at once: configs interleaved, as `perfgate check` does."""
        groups: dict[tuple[str, ...], list[Reference]] = {}
        configs_of: dict[Reference, set[str]] = {}
        for item in items:
            configs_of.setdefault(item.reference, set()).add(item.config_name)
        for reference, names in configs_of.items():
            groups.setdefault(tuple(c for c in CONFIG_NAMES if c in names), []).append(reference)
        outcomes: dict[tuple[str, str], ConfigVerdict | str | None] = {}
        for configs, references in groups.items():
            if self.settings.mode == "update":
                outcomes.update(self._update(references, configs))
            else:
                result = self._check(references, configs)
                for workload in result.workloads:
                    for config in configs:
                        outcomes[(workload.workload, config)] = workload.problem
                    for verdict in workload.configs:
                        outcomes[(verdict.workload, verdict.config)] = verdict
        return outcomes

    @dependencies_required()  # a package that is not installed: a PerfgateError, one line, as the CLI says it
    def _check(self, references: Sequence[Reference], configs: Sequence[str] | None = None) -> GateResult:
        from perfgate.check.paired import run_paired_check
        from perfgate.check.stored import run_check
        from perfgate.records.baselines import BaselineStore

        run_settings, gate_settings = self.settings.run_settings(configs), self.settings.gate_settings()
        with self._terminal() as (progress, notify):
            if self.settings.against is not None:
                result = run_paired_check(
                    references, run_settings, gate_settings, self.settings.against, progress=progress, notify=notify
                )
            else:
                store = BaselineStore(self.baseline_dir)
                result = run_check(references, run_settings, gate_settings, store, progress, notify)
        self.gates.append(result)
        if result.run is not None:
            self.runs.append(result.run)
        return result

    @dependencies_required()
    def _update(
        self, references: Sequence[Reference], configs: Sequence[str] | None = None
    ) -> dict[tuple[str, str], ConfigVerdict | str | None]:
        from perfgate.measure.lab import run_lab
        from perfgate.records.baselines import BaselineStore

        with self._terminal() as (progress, _):
            run = run_lab(references, self.settings.run_settings(configs), progress)
        self.runs.append(run)
        updates = BaselineStore(self.baseline_dir).write_run(run)
        self.updates.extend(updates)
        outcomes: dict[tuple[str, str], ConfigVerdict | str | None] = {}
        for workload in run.workloads:
            for name, config in workload.configs.items():
                measured = any(t.ok for t in config.trials)
                outcomes[(workload.name, name)] = None if measured else f"the config failed: {config.failure_reason}"
        return outcomes

    @contextmanager
    def _terminal(self) -> Iterator[tuple[Any, Callable[[str], None] | None]]:
        """Progress lines on the terminal while trials run, past pytest's output capturing."""
        from perfgate.report.progress import Progress

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None or self.config.get_verbosity() < 0:
            yield None, None
            return
        terminal: Any = reporter

        class Stream:
            def write(self, text: str) -> None:
                with capture.global_and_fixture_disabled() if capture else _nothing():
                    terminal.write(text)

            def flush(self) -> None:
                terminal.flush()

            def isatty(self) -> bool:
                return False

        stream = Stream()
        with capture.global_and_fixture_disabled() if capture else _nothing():
            terminal.ensure_newline()
            if getattr(getattr(terminal, "_tw", None), "width_of_current_line", 0):  # e.g. after the last "[100%]"
                terminal.write("\n")
        yield Progress(self.settings.trials, stream), lambda message: stream.write(f"perfgate: {message}\n")

    # -- pytest-benchmark ---------------------------------------------------------------------------

    def capture_pytest_benchmark_json(self) -> None:
        """Have pytest-benchmark write its JSON (raw round times included) so its update-json hook fires."""
        if self.config.getoption("benchmark_json", None) is None:
            handle, name = tempfile.mkstemp(prefix="perfgate-pytest-benchmark-", suffix=".json")
            os.close(handle)
            self._benchmark_json = Path(name)
            self.config.option.benchmark_json = _JsonTarget(self._benchmark_json)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.settings.mode == "off" or self.settings.against is not None:  # paired: no probe needed
            return
        if not self._probes and "benchmark" in getattr(item, "fixturenames", ()):
            self._probes.append(_probe())

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: Any, output_json: Any) -> None:
        if self.settings.mode == "off":
            return
        if self.settings.against is not None:
            self._pair_pytest_benchmark(output_json)
            return
        from perfgate.judge.micro import compare_micro
        from perfgate.records.micro import DEFAULT_RUN_NOISE, MicroStore, parse_pytest_benchmark
        from perfgate.records.summary import combine

        try:
            environment, fingerprint = _environment()
            self._environment = environment
            self._probes.append(_probe())
            git = environment.get("git") or {}
            measured = parse_pytest_benchmark(
                output_json,
                probe=combine(self._probes),
                measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                commit=git.get("sha"),
            )
            store = MicroStore(self.baseline_dir)
            if self.settings.mode == "update":
                previous = store.write(fingerprint, measured)
                self.micro_updates.extend((m, previous[m.name]) for m in measured)
                return
            gate = self.settings.gate_settings()
            threshold = gate.limits("", "").throughput
            noise = self.settings.project.benchmark_noise
            self.micro_mode = f"stored baselines ({store.path})"
            self.micro = compare_micro(
                store.find(fingerprint),
                measured,
                threshold=threshold,
                alpha=gate.alpha,
                run_noise=DEFAULT_RUN_NOISE if noise is None else noise,
                path=store.path,
            )
        except PerfgateError as error:
            self.problems.append(f"pytest-benchmark results not judged: {error.one_line()}")

    def _pair_pytest_benchmark(self, output_json: Any) -> None:
        """--perfgate-against: this session's run showed the benchmarks pass; session pairs of REF and the
        working tree measure them (`check.micro.run_paired_micro`)."""
        from perfgate.check.micro import run_paired_micro
        from perfgate.records.micro import parse_pytest_benchmark

        assert self.settings.against is not None
        try:
            names = [m.name for m in parse_pytest_benchmark(output_json)]
            if not names:
                return
            gate = self.settings.gate_settings()
            with self._terminal() as (_, notify), dependencies_required():
                self.micro_paired = run_paired_micro(
                    self.settings.against,
                    names,
                    rootdir=self.config.rootpath,
                    threshold=gate.limits("", "").throughput,
                    alpha=gate.alpha,
                    max_pairs=max(gate.trials, gate.max_trials),
                    min_pairs=gate.trials,
                    time_budget_s=gate.budget_s(0),
                    notify=notify,
                )
            self.micro = self.micro_paired.verdicts
            paired = self.micro_paired
            self.micro_mode = (
                f"paired: {paired.pairs} session pair{'s' if paired.pairs != 1 else ''} against {paired.ref} "
                f"({paired.base_commit[:10]}), alternating which side runs first"
            )
        except PerfgateError as error:
            self.problems.append(
                f"pytest-benchmark tests not measured against {self.settings.against}: {error.one_line()}"
            )

    # -- the end ------------------------------------------------------------------------------------

    # Plain, not a wrapper: it runs once every wrapper has started, pytest-benchmark's included, which hands
    # over its results (`pytest_benchmark_update_json`) then; and before the terminal summary is written.
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._benchmark_json is not None:
            self._benchmark_json.unlink(missing_ok=True)
        self._write_outputs()
        # Paired, a benchmark that REF lacks is new: nothing to compare, and nothing wrong.
        micro_failed = any(
            fails_build(
                v.status, fail_on_inconclusive=self.settings.fail_on_inconclusive, new_is_ok=bool(self.micro_paired)
            )
            for v in self.micro
        )
        if (micro_failed or self.problems) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _micro_section(self) -> MicroSection | None:
        from perfgate.report.json import micro_section

        if not self.micro:
            return None
        return micro_section(self.micro, paired=self.micro_paired is not None, mode=self.micro_mode)

    def _write_outputs(self) -> None:
        """The results file (--perfgate-json), the Markdown report (--perfgate-markdown) and, under GitHub
        Actions, that report appended to the job summary: what `perfgate check --json --markdown` and the
        Action write."""
        from perfgate.records.results import write_text_atomic
        from perfgate.report.markdown import append_job_summary

        micro = self._micro_section()
        if self.settings.json is not None and (self.runs or micro is not None):
            try:
                self._results(micro).write_json(self.settings.json)
                self._written.append(self.settings.json)
            except PerfgateError as error:
                self.problems.append(error.one_line())
        if self.settings.mode != "check":
            return
        try:
            text = self._markdown(micro)
            if self.settings.markdown is not None:
                write_text_atomic(self.settings.markdown, text)
                self._written.append(self.settings.markdown)
            if self.gates or micro is not None or self.problems:  # a session without perf tests adds nothing
                append_job_summary(text)
        except PerfgateError as error:
            self.problems.append(error.one_line())

    def _gate(self) -> GateResult:
        """Every check of this session as one result (an empty one when nothing was checked)."""
        from perfgate.judge.verdict import GateResult
        from perfgate.report.markdown import merge_gates

        return merge_gates(self.gates) if self.gates else GateResult([], self.settings.gate_settings())

    def _results(self, micro: MicroSection | None) -> RunResult:
        """The results file's document: every run merged, the check's settings (so `perfgate report` judges it
        as this session did) and the pytest-benchmark verdicts."""
        from dataclasses import replace

        import perfgate
        from perfgate.records.results import RunResult, merge_runs
        from perfgate.report.json import gate_record

        if self.runs:
            run = merge_runs(self.runs)
        else:  # pytest-benchmark tests alone
            environment = self._environment if self._environment is not None else _environment()[0]
            run = RunResult(perfgate.__version__, datetime.now(UTC).isoformat(timespec="seconds"), environment, [])
        gate = gate_record(self._gate(), self.baseline_dir) if self.gates else None
        return replace(run, gate=gate, micro=micro)

    def _markdown(self, micro: MicroSection | None) -> str:
        from perfgate.judge.diagnosis import diagnose
        from perfgate.report.markdown import format_markdown

        gate = self._gate()
        diagnoses = [d for g in self.gates for d in diagnose(g)]
        details = str(self.settings.json) if self.settings.json is not None else None
        return format_markdown(gate, details=details, diagnoses=diagnoses, micro=micro, problems=self.problems)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from perfgate.report.text import format_pytest_summary

        text = format_pytest_summary(
            gates=self.gates,
            runs=self.runs,
            updates=self.updates,
            store_dir=self.baseline_dir,
            micro=self.micro,
            micro_updates=self.micro_updates,
            micro_paired=self.micro_paired is not None,
            problems=self.problems,
            peak_tflops=self.settings.project.peak_tflops,
        )
        if text:
            terminalreporter.write_sep("=", "perfgate")
            for mode in dict.fromkeys(gate.mode for gate in self.gates):
                terminalreporter.write_line(f"mode: {mode}")
            terminalreporter.write_line(text.rstrip("\n"))
            paired = self.micro_paired
            if paired is not None and paired.pairs:
                stopped = f"; undecided ones stopped at {paired.stopped_because}" if paired.stopped_because else ""
                terminalreporter.write_line(
                    f"pytest-benchmark tests: measured in {paired.pairs} session pair{'s' if paired.pairs > 1 else ''}"
                    f" against {paired.ref} ({paired.base_commit[:10]}), alternating which side runs first{stopped}"
                )
            for path in self._written:
                what = "results" if path == self.settings.json else "report"
                terminalreporter.write_line(f"{what} written to {path}")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


class _QuietBenchmarkFinish:
    """perfgate asked pytest-benchmark for its JSON; a session without benchmarks is no news. Outermost
    (a tryfirst wrapper) so the warning pytest-benchmark gives as it finishes is caught."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self) -> Iterator[None]:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Not saving anything, no benchmarks have been run")
            return (yield)


class _JsonTarget(os.PathLike[str]):
    """The value perfgate gives pytest-benchmark's --benchmark-json: a path (pytest-benchmark 5.3 and later
    open it) that is also a context manager opening itself for writing (earlier versions take an open file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: Any = None

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __enter__(self) -> Any:
        self._handle = open(self.path, "wb")  # noqa: SIM115 (closed by __exit__)
        return self._handle

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


@dependencies_required()
def _environment() -> tuple[dict[str, Any], dict[str, Any]]:
    import torch

    from perfgate.measure.environment import collect_environment
    from perfgate.records.fingerprint import machine_fingerprint

    environment = collect_environment("cpu", torch.get_num_threads())
    return environment, machine_fingerprint(environment)


def _probe() -> float:
    from perfgate.measure.device import Device
    from perfgate.measure.probe import probe_steps_per_sec

    return probe_steps_per_sec(Device())


# -- the configured workloads as items -----------------------------------------------------------------


class WorkloadsCollector(pytest.Collector):
    """The parent of the configured workloads' items: their node ids read `perfgate::NAME[CONFIG]`."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        return []  # the items are made by the plugin, which has the selected configs


class PerfgateFailure(Exception):
    """A perf test's failure: the text says it all, no traceback."""


class WorkloadItem(pytest.Item):
    """One configured workload in one config."""

    def __init__(self, *, reference: Reference, workload: str, config_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reference = reference
        self.workload = workload
        self.config_name = config_name

    def runtest(self) -> None:
        session = self.config.stash[_SESSION]
        outcome = session.configured_outcome(self)
        if isinstance(outcome, str):
            raise PerfgateFailure(f"{self.workload} {self.config_name}: {outcome}")
        if outcome is None:
            self.user_properties.append(("perfgate_verdict", "baseline written"))
            return
        record_verdict(self.user_properties, outcome)
        if fails_build(outcome.status, fail_on_inconclusive=session.settings.fail_on_inconclusive):
            raise PerfgateFailure(verdict_text(outcome))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, PerfgateFailure | PerfgateError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"perfgate: {self.workload} {self.config_name} ({self.reference.text})"


def verdict_text(verdict: ConfigVerdict) -> str:
    """The failure message: readable without the summary table."""
    return f"{verdict.workload} {verdict.config}: {verdict.status.value.upper()}: {verdict.reason}"


def record_verdict(properties: list[tuple[str, object]], verdict: ConfigVerdict) -> None:
    """The verdict's figures as JUnit XML properties."""
    properties.append(("perfgate_verdict", verdict.status.value))
    t = verdict.throughput
    if t is not None:
        properties.extend(
            [
                ("perfgate_baseline_samples_per_sec", f"{t.baseline_median:.6g}"),
                ("perfgate_current_samples_per_sec", f"{t.candidate_median:.6g}"),
                ("perfgate_ratio", f"{t.ratio:.4f}"),
                ("perfgate_ci", f"{t.ci_low:.4f}-{t.ci_high:.4f}"),
                ("perfgate_p_value", f"{min(t.p_slower, t.p_faster):.3g}"),
            ]
        )
    m = verdict.memory
    if m is not None and m.change is not None:
        properties.append(("perfgate_peak_memory_change", format_signed_pct(m.change)))


# -- the fixture ---------------------------------------------------------------------------------------


class PerfgateFixture:
    """What a test gets from the `perfgate` fixture: `check(workload)` measures and judges a workload."""

    def __init__(self, session: PerfgateSession, node: pytest.Item) -> None:
        self._session = session
        self._node = node

    def check(self, workload: object, *, configs: str | Sequence[str] | None = None) -> WorkloadVerdict | None:
        """Run the lab on `workload` and fail this test on a supported regression (or write its baseline
        under --perfgate-update, returning None).

        `workload` is a function returning a perfgate.Workload (`perfgate.check(gpt_small)`), a Workload
        built by such a function (`perfgate.check(gpt_small())`), or a reference string (`"lm"`,
        `"perf/workloads.py:gpt_small"`). `configs` (e.g. "fp32,bf16") replaces --perfgate-configs for this test.
        """
        session = self._session
        try:
            reference = _reference(workload, self._node.config.rootpath)
            chosen = parse_configs(configs) if configs is not None else session.settings.configs
            if session.settings.mode == "update":
                outcome = session._update([reference], chosen)
                problems = [text for text in outcome.values() if isinstance(text, str)]
                if problems:
                    pytest.fail(f"{reference.text}: {'; '.join(problems)}", pytrace=False)
                self._node.user_properties.append(("perfgate_verdict", "baseline written"))
                return None
            result = session._check([reference], chosen)
        except PerfgateError as error:
            pytest.fail(error.one_line(), pytrace=False)
        (verdict,) = result.workloads
        if verdict.problem:
            pytest.fail(f"{verdict.workload}: {verdict.problem}", pytrace=False)
        for config_verdict in verdict.configs:
            record_verdict(self._node.user_properties, config_verdict)
        failures = [
            v
            for v in verdict.configs
            if fails_build(v.status, fail_on_inconclusive=session.settings.fail_on_inconclusive)
        ]
        if failures:
            pytest.fail("\n".join(verdict_text(v) for v in failures), pytrace=False)
        return verdict


def _reference(workload: object, rootpath: Path) -> Reference:
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


@pytest.fixture
def perfgate(request: pytest.FixtureRequest) -> PerfgateFixture:
    """Measure a workload with the three-run lab and gate it: `perfgate.check(gpt_small)`."""
    session = request.config.stash[_SESSION]
    if session.settings.mode == "off":
        pytest.skip(SKIP_REASON)
    return PerfgateFixture(session, request.node)
