"""The pytest front end: `pytest --perfgate` gates perf tests, `pytest --perfgate-update` writes baselines.

Three kinds of perf test, all collected by every run and skipped unless one of the two flags is given:

- each workload in `[tool.perfgate] workloads`, one item per config (`perfgate::lm-small[bf16]`);
- tests that use the `perfgate` fixture: `perfgate.check(gpt_small)` measures and judges one workload;
- pytest-benchmark tests: their raw round times are judged against `baselines/pytest-benchmark.yaml`.

With `--perfgate-against REF` everything is measured against the git ref REF instead of the stored
baselines: the workloads (configured and fixture-style) in pairs of trials, as `perfgate check --against`,
the pytest-benchmark tests in pairs of whole pytest sessions of REF and the working tree. This session's own
pytest-benchmark run then only shows that the tests pass. The paired sessions turn this plugin off inside
them, whatever their options say.

This module is an adapter: the options are declared and resolved in `app.options` (`resolve_pytest`), the
request is built in `app.request` (`plugin_request`), and the session's checks, its pytest-benchmark
verdicts, its outputs and whether it fails are `app.suite.GateSuite`'s, as `perfgate check`'s are
`app.gate.GateSession`'s. What stays here is pytest's side: hooks, items, the fixture, the terminal.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfgate.app.options import add_all_to_pytest, resolve_pytest
from perfgate.app.request import (
    configured_workloads,
    fixture_reference,
    inner_session,
    plugin_mode,
    plugin_request,
)
from perfgate.app.suite import GateSuite, Verdicts
from perfgate.dependencies import dependencies_required
from perfgate.errors import PerfgateError, UsageError
from perfgate.formatting import format_signed_pct
from perfgate.records.verdicts import WorkloadVerdict

if TYPE_CHECKING:
    from perfgate.records.verdicts import ConfigVerdict
    from perfgate.references import Reference

SKIP_REASON = "perf test: run with --perfgate (or --perfgate-update to record baselines)"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_all_to_pytest(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perfgate: a perfgate perf test (skipped unless pytest runs with --perfgate)")
    try:
        with dependencies_required():  # a package that is not installed: one line, as the CLI says it
            mode = plugin_mode(
                check=config.getoption("perfgate"),
                update=config.getoption("perfgate_update"),
                against_given=config.getoption("perfgate_against") is not None,
                inner=inner_session(),
            )
            values = resolve_pytest(config, command=mode)
            if mode != "off":
                _refuse_parallel_workers(config)
            plugin = plugin_request(values, mode=mode, rootpath=config.rootpath)
    except PerfgateError as error:
        raise pytest.UsageError(f"perfgate: {error.one_line()}") from None
    session = PerfgateSession(config, GateSuite(plugin, partial(_terminal, config)))
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "perfgate-session")
    config.pluginmanager.register(_QuietBenchmarkFinish(), "perfgate-quiet-benchmark-finish")
    if mode != "off" and config.pluginmanager.hasplugin("benchmark"):
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
        raise UsageError(
            f"perf tests cannot run under pytest-xdist (-n {workers}): two benchmarks at once on one machine "
            "measure each other",
            hint="run them in their own pytest call without -n, e.g. pytest --perfgate -m perfgate -p no:xdist",
        )


_SESSION = pytest.StashKey["PerfgateSession"]()


CONFIGURED = "perfgate"  # the node holding the configured workloads' items: `perfgate::gpt[fp32]`


@dataclass(eq=False)  # registered as a plugin: hashed by identity
class PerfgateSession:
    """pytest's side of the session: the hooks, the configured items' outcomes and the terminal; what was
    measured and decided is the suite's (`app.suite.GateSuite`)."""

    config: pytest.Config
    suite: GateSuite
    _configured: Verdicts | None = None
    _benchmark_json: Path | None = None

    @property
    def mode(self) -> str:
        return self.suite.request.mode

    # -- collection ---------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before -k, -m and --lf select from the items
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        if self.suite.request.project.workloads and self.config.args_source != pytest.Config.ArgsSource.ARGS:
            configured = self._configured_items(session)
            items.extend(configured)
            if configured:  # reported as collected, so "collected N items" and --collect-only count them
                report = pytest.CollectReport(CONFIGURED, "passed", None, list(configured))
                self.config.hook.pytest_collectreport(report=report)
        for item in items:
            if isinstance(item, WorkloadItem) or "perfgate" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.perfgate)
                if self.mode == "off":
                    item.add_marker(pytest.mark.skip(reason=SKIP_REASON))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The perf tests selected, for the suite's split of alpha over the session's checks."""
        if self.mode != "check":
            return
        fixtures = [(item, getattr(item, "fixturenames", ())) for item in session.items]
        self.suite.plan(
            configured=[(i.workload, i.config_name) for i, _ in fixtures if isinstance(i, WorkloadItem)],
            fixture_tests=[i.nodeid for i, names in fixtures if "perfgate" in names],
            benchmarks=[i.nodeid for i, names in fixtures if "benchmark" in names],
        )

    def _configured_items(self, session: pytest.Session) -> list[WorkloadItem]:
        project = self.suite.request.project
        try:
            loaded = configured_workloads(project)
        except PerfgateError as error:
            raise pytest.UsageError(f"perfgate: {error.one_line()} (in {project.source})") from None
        source = Path(project.source.split(" ")[0]) if project.source else self.config.rootpath
        collector = WorkloadsCollector.from_parent(session, name=CONFIGURED, nodeid=CONFIGURED, path=source)
        return [
            WorkloadItem.from_parent(
                collector, name=f"{name}[{config}]", reference=reference, workload=name, config_name=config
            )
            for reference, name in loaded
            for config in self.suite.request.configs
        ]

    # -- measuring ----------------------------------------------------------------------------------

    def configured_outcome(self, item: WorkloadItem) -> ConfigVerdict | WorkloadVerdict | str | None:
        """The verdict (check), the workload's verdict where it could not be compared, or problem text for one
        configured item; None for a stored update. Every selected configured item is measured at the first one,
        configs interleaved as `perfgate check` does."""
        if self._configured is None:
            selected = [i for i in item.session.items if isinstance(i, WorkloadItem)]
            self._configured = self.suite.check_items([(i.reference, i.workload, i.config_name) for i in selected])
        return self._configured.get((item.workload, item.config_name), "not measured")

    # -- pytest-benchmark ---------------------------------------------------------------------------

    def capture_pytest_benchmark_json(self) -> None:
        """Have pytest-benchmark write its JSON (raw round times included) so its update-json hook fires."""
        if self.config.getoption("benchmark_json", None) is None:
            handle, name = tempfile.mkstemp(prefix="perfgate-pytest-benchmark-", suffix=".json")
            os.close(handle)
            self._benchmark_json = Path(name)
            self.config.option.benchmark_json = _JsonTarget(self._benchmark_json)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.mode != "off" and "benchmark" in getattr(item, "fixturenames", ()):
            self.suite.probe()

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: Any, output_json: Any) -> None:
        if self.mode != "off":
            self.suite.judge_micro(output_json)

    # -- the end ------------------------------------------------------------------------------------

    # Plain, not a wrapper: it runs once every wrapper has started, pytest-benchmark's included, which hands
    # over its results (`pytest_benchmark_update_json`) then; and before the terminal summary is written.
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._benchmark_json is not None:
            self._benchmark_json.unlink(missing_ok=True)
        if self.suite.finish() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        text = self.suite.summary()
        if text:
            terminalreporter.write_sep("=", "perfgate")
            terminalreporter.write_line(text)


@contextmanager
def _terminal(config: pytest.Config) -> Iterator[Any]:
    """The stream progress lines go to while trials run: the terminal, past pytest's output capturing (None
    with -q)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or config.get_verbosity() < 0:
        yield None
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

    with capture.global_and_fixture_disabled() if capture else _nothing():
        terminal.ensure_newline()
        if getattr(getattr(terminal, "_tw", None), "width_of_current_line", 0):  # e.g. after the last "[100%]"
            terminal.write("\n")
    yield Stream()


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
        if isinstance(outcome, str) and session.mode != "check":  # an update's problem: no verdict to warn of
            raise PerfgateFailure(f"{self.workload} {self.config_name}: {outcome}")
        if outcome is None:
            self.user_properties.append(("perfgate_verdict", "baseline written"))
            return
        if isinstance(outcome, WorkloadVerdict):  # it could not be compared: new in the head, or a problem
            skip_if_new(outcome, f"{self.workload} {self.config_name}")
            outcome = outcome.problem or "not measured"
        if isinstance(outcome, str):
            failure = failure_of(session.suite, [], f"{self.workload} {self.config_name}: {outcome}")
        else:
            record_verdict(self.user_properties, outcome)
            failure = failure_of(session.suite, [outcome])
        if failure is not None:
            raise PerfgateFailure(failure)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, PerfgateFailure | PerfgateError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"perfgate: {self.workload} {self.config_name} ({self.reference.text})"


class PerfgateWarning(UserWarning):
    """A verdict that would fail its test, in warn-only mode (`--perfgate-warn-only`): reported, not failed."""


def failure_of(suite: GateSuite, verdicts: Sequence[ConfigVerdict], problem: str | None = None) -> str | None:
    """What fails a perf test: the workload's `problem` (it could not be compared) and the verdicts that fail the
    build (`GateSuite.failing`); None when nothing does. In warn-only mode it is a `PerfgateWarning` instead, and
    nothing fails."""
    texts = ([problem] if problem else []) + [verdict_text(v) for v in suite.failing(verdicts)]
    if not texts:
        return None
    text = "\n".join(texts)
    if suite.request.gate.warn_only:
        warnings.warn(PerfgateWarning(f"warn-only mode, not failing: {text}"), stacklevel=3)
        return None
    return text


def skip_if_new(verdict: WorkloadVerdict, what: str) -> None:
    """A workload new in a paired session's head (`WorkloadVerdict.new`) has nothing to compare with: its test is
    skipped, saying so, rather than failed."""
    if verdict.new:
        pytest.skip(f"{what}: {verdict.problem}")


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
        self._suite = session.suite
        self._node = node

    def check(self, workload: object, *, configs: str | Sequence[str] | None = None) -> WorkloadVerdict | None:
        """Run the lab on `workload` and fail this test on a supported regression (or write its baseline
        under --perfgate-update, returning None).

        `workload` is a function returning a perfgate.Workload (`perfgate.check(gpt_small)`), a Workload
        built by such a function (`perfgate.check(gpt_small())`), or a reference string (`"lm"`,
        `"perf/workloads.py:gpt_small"`). `configs` (e.g. "fp32,bf16") replaces --perfgate-configs for this test.
        """
        suite = self._suite
        try:
            reference = fixture_reference(workload, self._node.config.rootpath)
            if suite.request.mode == "update":
                problems = [text for text in suite.update([reference], configs).values() if isinstance(text, str)]
                if problems:
                    pytest.fail(f"{reference.text}: {'; '.join(problems)}", pytrace=False)
                self._node.user_properties.append(("perfgate_verdict", "baseline written"))
                return None
            result = suite.check([reference], configs, test=self._node.nodeid)
        except PerfgateError as error:
            pytest.fail(error.one_line(), pytrace=False)
        (verdict,) = result.workloads
        skip_if_new(verdict, verdict.workload)
        for config_verdict in verdict.configs:
            record_verdict(self._node.user_properties, config_verdict)
        problem = f"{verdict.workload}: {verdict.problem}" if verdict.problem else None
        failure = failure_of(suite, verdict.configs, problem)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        return verdict


@pytest.fixture
def perfgate(request: pytest.FixtureRequest) -> PerfgateFixture:
    """Measure a workload with the three-run lab and gate it: `perfgate.check(gpt_small)`."""
    session = request.config.stash[_SESSION]
    if session.mode == "off":
        pytest.skip(SKIP_REASON)
    return PerfgateFixture(session, request.node)
