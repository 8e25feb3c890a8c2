"""A check's whole life, for every front end: measure until decided, then finish.

`GateSession` owns one check the way pytest-benchmark's `BenchmarkSession` owns a session. What would fail
after minutes of measuring (references, outputs, folders, the options that do not go together) was refused
when the request was built (`app.request.gate_request`), before torch loads; `check` measures and judges
(stored baselines, pairs against a git ref, or the counts alone); `finish` writes and prints everything in one
order (the lab's table, the results file, the trend, the history record and its push, the Markdown report, the
gate's report and its warnings) and returns the exit code, which only `perfgate.outcome` decides. Every step
after the measurement runs guarded: whatever it raises becomes one `warning:` line naming the step, and the
verdict already measured stands.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from perfgate.app.request import GateRequest, Mode
from perfgate.app.sink import Sink, progress_for
from perfgate.dependencies import dependencies_required
from perfgate.errors import EXIT_USAGE, PerfgateError
from perfgate.judge.family import COMPARISONS_PER_CONFIG, SessionRate, SessionShares
from perfgate.outcome import Status, fails_build, measured_exit_code, micro_fails

if TYPE_CHECKING:
    from perfgate.app.request import PluginRequest
    from perfgate.check.micro import PairedMicro
    from perfgate.judge.diagnosis import Diagnosis
    from perfgate.judge.micro import MicroVerdict
    from perfgate.judge.verdict import ConfigVerdict, GateResult
    from perfgate.measure.lab import ProgressCallback
    from perfgate.records.baselines import StoredUpdate
    from perfgate.records.fingerprint import Fingerprint
    from perfgate.records.history import HistoryRecord, HistoryStore
    from perfgate.records.micro import MicroBenchmark
    from perfgate.records.results import MicroSection, RunResult
    from perfgate.records.shapes import Environment
    from perfgate.references import Reference

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """What a check ended with: its exit code, its verdicts and what it wrote or warned of."""

    exit_code: int
    result: GateResult | None = None
    diagnoses: tuple[Diagnosis, ...] = ()
    written: tuple[Path, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def fails(self) -> bool:
        return self.exit_code != 0


def measured(run: RunResult, sink: Sink) -> bool:
    """Whether any trial produced a measurement; an `error:` line when none did."""
    if any(t.ok for w in run.workloads for c in w.configs.values() for t in c.trials):
        return True
    sink.error("no trial produced a measurement; see the failures above")
    return False


def warn_open(result: GateResult, sink: Sink) -> int:
    """Warn of inconclusive verdicts that do not fail the build, and of acceptances nothing used; the gate's
    exit code."""
    open_verdicts = [f"{v.workload} {v.config}" for v in result.verdicts if v.status == Status.INCONCLUSIVE]
    if open_verdicts and result.exit_code == 0:
        sink.warn(f"inconclusive, not failing the build: {', '.join(open_verdicts)}")
    for line in result.unused_acceptances:
        sink.warn(line)
    return result.exit_code


def report_gate(result: GateResult, sink: Sink, diagnoses: Sequence[Diagnosis] = (), *, command: str) -> int:
    """Print the gate's report and any diagnosis, its summary line naming `command`; the gate's exit code."""
    from perfgate.report.text import format_gate

    sink.report(format_gate(result, diagnoses, command=command))
    return warn_open(result, sink)


def write_json(run: RunResult, path: Path | None, sink: Sink) -> None:
    if path is not None:
        run.write_json(path)
        sink.info(f"results written to {path}\n")


class GateSession:
    """One check, from its first trial to its exit code (`run_gate` runs the whole of it)."""

    def __init__(self, request: GateRequest, sink: Sink) -> None:
        self.request = request
        self.sink = sink
        self.result: GateResult | None = None
        self.warnings: list[str] = []
        self.written: list[Path] = []
        self._history: HistoryStore | None = None

    def check(self) -> GateResult:
        """Measure and judge, in the request's mode, until every verdict is decided or the budget is spent."""
        return self.measure(progress_for(self.request), self.sink.notify)

    def measure(self, progress: ProgressCallback | None, notify: Callable[[str], None] | None) -> GateResult:
        """`check`, with the progress display and the notes given (the pytest plugin's, on its terminal)."""
        from perfgate.records.baselines import BaselineStore

        request = self.request
        if request.mode == Mode.COUNTS:
            from perfgate.check.counts import run_counts_check

            result = run_counts_check(
                request.references,
                request.run,
                request.gate,
                against=request.against,
                store=BaselineStore(request.baseline_dir),
                progress=progress,
                notify=notify,
                environment=request.pairing.environment,
            )
        elif request.mode == Mode.PAIRED:
            from perfgate.check.paired import run_paired_check

            assert request.against is not None
            result = run_paired_check(
                request.references,
                request.run,
                request.gate,
                request.against,
                parallel=request.pairing.parallel,
                fork=request.pairing.fork,
                interleaved=request.pairing.interleaved,
                environment=request.pairing.environment,
                progress=progress,
                notify=notify,
            )
        else:
            from perfgate.check.stored import run_check

            result = run_check(
                request.references,
                request.run,
                request.gate,
                BaselineStore(request.baseline_dir),
                progress,
                notify,
                measure_unjudged=request.history is not None and request.history.record,
            )
        self.result = result
        return result

    def _after(self, step: str, action: Callable[[], T]) -> T | None:
        """`action` after the measurement: whatever it raises is one warning naming `step`, never the verdict's
        end (Ctrl-C still stops)."""
        try:
            return action()
        except Exception as error:  # noqa: BLE001 (a measured verdict outlives any later step)
            what = error.one_line() if isinstance(error, PerfgateError) else f"{type(error).__name__}: {error}"
            line = f"{step}: {what}"
            self.warnings.append(line)
            self.sink.warn(line)
            return None

    def _store(self) -> HistoryStore:
        from perfgate.records.history import HistoryStore

        if self._history is None:
            assert self.request.history is not None
            self._history = HistoryStore(self.request.history.directory)
        return self._history

    def finish(self) -> Outcome:
        """Everything after the measurement, in `perfgate check`'s order, and the exit code."""
        from perfgate.report.text import format_run

        request, sink = self.request, self.sink
        result = self.result
        assert result is not None, "finish() before check()"
        if result.run is not None:
            run = replace(result.run, gate=result.to_record(request.baseline_dir))
            result = self.result = replace(result, run=run)
            sink.info(format_run(run, peak_tflops=request.gate.project.peak_tflops) + "\n")
            write_json(run, request.outputs.json, sink)
            if request.outputs.json is not None:
                self.written.append(request.outputs.json)
            code = measured_exit_code(measured(run, sink) or bool(result.verdicts))
            if code is not None:  # nothing measured, and nothing had a baseline
                return Outcome(code, result, written=tuple(self.written))
        from perfgate.judge.diagnosis import diagnose

        judged: GateResult = result  # (for the closures below)
        diagnoses = diagnose(judged, every_config=request.diagnose_all)
        trends: list[Any] = []
        if request.outputs.markdown is not None:  # the recorded runs beside this one, charted in the report
            trends = self._after("no trend in the report", self._trends) or []
        if request.history is not None and request.history.record:
            self._record(result)
        failed_file = False
        if request.outputs.markdown is not None:
            from perfgate.records.results import write_text_atomic
            from perfgate.report.markdown import format_markdown

            details = str(request.outputs.json) if request.outputs.json else None
            path = request.outputs.markdown

            def write() -> bool:
                write_text_atomic(path, format_markdown(judged, details=details, diagnoses=diagnoses, trends=trends))
                return True

            failed_file = not self._after("--markdown not written", write)
            if not failed_file:
                self.written.append(path)
        code = report_gate(result, sink, diagnoses, command=request.command)
        if failed_file and code == 0:  # a report asked for and missing: the job must not pass unnoticed
            code = EXIT_USAGE
        return Outcome(code, result, tuple(diagnoses), tuple(self.written), tuple(self.warnings))

    def _trends(self) -> list[Any]:
        from perfgate.records.history_branch import HistoryBranchError
        from perfgate.report.history import trends_of

        assert self.result is not None and self.request.history is not None
        store = self._store()
        if self.request.history.branch is not None:
            from perfgate.records.history_branch import fetch_history

            try:
                fetch_history(Path.cwd(), store.directory, branch=self.request.history.branch)
            except HistoryBranchError as error:  # the verdicts stand; only the chart is missing
                self.sink.warn(f"no trend in the report: {error.one_line()}")
        history = store.load()
        for line in history.skipped:  # a record that cannot be read is named, never the check's end
            self.sink.warn(line)
        return trends_of(self.result, history)

    def _record(self, result: GateResult) -> None:
        """Append this check to the history, and push it to the history branch (each step guarded)."""
        from perfgate.report.history import record_of_check, unjudged_note

        history = self.request.history
        assert history is not None
        made = self._after("not recorded in the history", lambda: (record_of_check(result),))
        if made is None:  # it raised: warned
            return
        (found,) = made
        if found is None:
            self.sink.warn("nothing measured, nothing recorded in the history")
            return
        record: HistoryRecord = found
        appended = self._after("not recorded in the history", lambda: self._store().append(record))
        if appended is None:
            return
        path: Path = appended
        self.sink.info(f"recorded in the history: {path}\n")
        note = unjudged_note(result, record)
        if note:
            self.sink.info(note + "\n")
        if history.branch is not None:
            branch: str = history.branch
            from perfgate.records.history_branch import push_record

            commit = self._after(
                f"not pushed to the history branch {branch}",
                lambda: push_record(Path.cwd(), path.name, path.read_text(encoding="utf-8"), branch=branch),
            )
            if commit is not None:
                self.sink.info(f"pushed to the history branch {branch} as {commit[:12]}\n")


def run_gate(request: GateRequest, sink: Sink) -> Outcome:
    """A check's whole life: measure and judge, finish; the outcome and its exit code."""
    session = GateSession(request, sink)
    session.check()
    return session.finish()


Verdicts = dict[tuple[str, str], "ConfigVerdict | str | None"]  # (workload, config): verdict, problem, None: updated


def configured_test(workload: str, config: str) -> str:
    """A configured item's key in the session's plan (its pytest node id)."""
    return f"perfgate::{workload}[{config}]"


class GateSuite:
    """Every check of one pytest session, its pytest-benchmark tests and its outputs (`pytest --perfgate`, or
    `--perfgate-update`), owned in one place as `GateSession` owns one `perfgate check`. Each check (a fixture
    test, the configured items of one set of configs, the pytest-benchmark tests at the end) runs at its share of
    the session's one alpha (`judge.family`: a Bonferroni split over the checks, in proportion to the comparisons
    `plan` expects of each, and Holm's procedure within each check), so the session fails unchanged code at most
    alpha of the time however many checks it runs. `finish` writes the session's results file and report and says
    whether the session fails. `terminal`: entered around each measurement, it gives the stream progress lines go
    to (None: quiet)."""

    def __init__(self, request: PluginRequest, terminal: Callable[[], AbstractContextManager[Any]]) -> None:
        self.request = request
        self.terminal = terminal
        self.gates: list[GateResult] = []
        self.runs: list[RunResult] = []
        self.updates: list[StoredUpdate] = []
        self.micro: list[MicroVerdict] = []
        self.micro_updates: list[tuple[MicroBenchmark, MicroBenchmark | None]] = []
        self.micro_paired: PairedMicro | None = None  # --perfgate-against: the session pairs that judged `micro`
        self.micro_mode = "stored baselines"  # what `micro` was compared with, in words
        self.problems: list[str] = []  # what failed outside any test: the session fails
        self.written: list[Path] = []  # the results file and the report, once written
        self._probes: list[float] = []
        self._environment: Environment | None = None  # this process's, once read for pytest-benchmark
        self.shares = SessionShares(request.gate.alpha)  # the session's alpha and what its checks took of it

    def plan(
        self,
        *,
        configured: Sequence[tuple[str, str]] = (),
        fixture_tests: Sequence[str] = (),
        benchmarks: Sequence[str] = (),
    ) -> None:
        """The perf tests the session collected, which set each check's share of alpha: each configured item
        (workload, config), each test that uses the fixture (by node id: it judges the session's configs, unless it
        says otherwise) and each pytest-benchmark test (one comparison each)."""
        per_config = COMPARISONS_PER_CONFIG
        planned = {configured_test(workload, config): per_config for workload, config in configured}
        planned |= {test: per_config * len(self.request.configs) for test in fixture_tests}
        planned |= dict.fromkeys(benchmarks, 1)
        self.shares = SessionShares(self.request.gate.alpha, planned)

    def rate(self) -> SessionRate | None:
        """The one false-alarm rate the session's checks shared, over the comparisons they judged (None: none)."""
        checks = len(self.gates) + (1 if self.micro else 0)
        if not checks:
            return None
        tested = sum(1 for v in self.micro if v.throughput is not None and not math.isnan(v.throughput.p_slower))
        return SessionRate(self.request.gate.alpha, sum(g.comparisons for g in self.gates) + tested, checks)

    @contextmanager
    def _measuring(self) -> Iterator[tuple[ProgressCallback | None, Callable[[str], None] | None]]:
        from perfgate.report.progress import Progress

        with self.terminal() as stream:
            if stream is None:
                yield None, None
            else:
                yield Progress(self.request.trials, stream), lambda message: stream.write(f"perfgate: {message}\n")

    def failing(self, verdicts: Sequence[ConfigVerdict]) -> list[ConfigVerdict]:
        """The verdicts that fail their test (`outcome.fails_build`)."""
        fail_on_inconclusive = self.request.gate.fail_on_inconclusive
        return [v for v in verdicts if fails_build(v.status, fail_on_inconclusive=fail_on_inconclusive)]

    def check(
        self, references: Sequence[Reference], configs: str | Sequence[str] | None = None, *, test: str | None = None
    ) -> GateResult:
        """Measure and judge these workloads in these configs (None: the session's), stored or paired, at the
        check's share of the session's alpha; `test`: the perf test it runs for (its node id in `plan`)."""
        return self._check(references, configs, () if test is None else (test,))

    def _check(
        self, references: Sequence[Reference], configs: str | Sequence[str] | None, tests: Sequence[str]
    ) -> GateResult:
        from perfgate.app.sink import StreamSink

        with dependencies_required(), self._measuring() as (progress, notify):
            request = self.request.check(references, configs)
            divisor, self.shares = self.shares.share(tests, COMPARISONS_PER_CONFIG * request.judged)
            request = replace(request, gate=replace(request.gate, session_divisor=divisor))
            result = GateSession(request, StreamSink(quiet=True)).measure(progress, notify)
        self.gates.append(result)
        if result.run is not None:
            self.runs.append(result.run)
        return result

    def update(self, references: Sequence[Reference], configs: str | Sequence[str] | None = None) -> Verdicts:
        """Measure these workloads and write their baselines: None for each config measured, else its problem."""
        from perfgate.measure.lab import run_lab
        from perfgate.records.baselines import BaselineStore

        with dependencies_required():
            with self._measuring() as (progress, _):
                run = run_lab(references, self.request.run(configs), progress)
            self.runs.append(run)
            self.updates.extend(BaselineStore(self.request.baseline_dir).write_run(run))
        outcomes: Verdicts = {}
        for workload in run.workloads:
            for name, config in workload.configs.items():
                measured = any(t.ok for t in config.trials)
                outcomes[(workload.name, name)] = None if measured else f"the config failed: {config.failure_reason}"
        return outcomes

    def check_items(self, items: Sequence[tuple[Reference, str, str]]) -> Verdicts:
        """The selected configured items (reference, workload name, config) measured at once, configs interleaved
        as `perfgate check` does, one check per set of configs. A PerfgateError (a workload whose code fails) is
        every item's text: none re-runs."""
        from perfgate.variants import CONFIG_NAMES

        configs_of: dict[Reference, set[str]] = {}
        workload_of = {reference: workload for reference, workload, _ in items}
        for reference, _, config in items:
            configs_of.setdefault(reference, set()).add(config)
        groups: dict[tuple[str, ...], list[Reference]] = {}
        for reference, names in configs_of.items():
            groups.setdefault(tuple(c for c in CONFIG_NAMES if c in names), []).append(reference)
        outcomes: Verdicts = {}
        try:
            for configs, references in groups.items():
                if self.request.mode == "update":
                    outcomes.update(self.update(references, configs))
                    continue
                tests = [configured_test(workload_of[r], config) for r in references for config in configs]
                for workload in self._check(references, configs, tests).workloads:
                    outcomes.update({(workload.workload, config): workload.problem for config in configs})
                    outcomes.update({(v.workload, v.config): v for v in workload.configs})
        except PerfgateError as error:
            return {(workload, config): error.one_line() for _, workload, config in items}
        return outcomes

    # -- pytest-benchmark ---------------------------------------------------------------------------

    def probe(self) -> None:
        """Before the first pytest-benchmark test: the machine's speed, to read its results by (paired: none)."""
        if self.request.against is None and not self._probes:
            self._probes.append(_probe())

    def judge_micro(self, output_json: Any) -> None:
        """pytest-benchmark's results (its JSON, raw round times included): judged against their stored
        baselines, written as the baselines (update), or, paired, measured in session pairs against the ref."""
        if self.request.against is not None:
            self._pair_micro(output_json)
            return
        from perfgate.judge.micro import compare_micro
        from perfgate.records.micro import DEFAULT_RUN_NOISE, MicroStore, parse_pytest_benchmark
        from perfgate.records.summary import combine

        try:
            environment, fingerprint = _environment()
            self._environment = environment
            self._probes.append(_probe())
            measured = parse_pytest_benchmark(
                output_json,
                probe=combine(self._probes),
                measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                commit=None if environment.git is None else environment.git.sha,
            )
            store = MicroStore(self.request.baseline_dir)
            if self.request.mode == "update":
                previous = store.write(fingerprint, measured)
                self.micro_updates.extend((m, previous[m.name]) for m in measured)
                return
            gate, noise = self.request.gate, self.request.project.benchmark_noise
            self.micro_mode = f"stored baselines ({store.path})"
            self.micro = compare_micro(
                store.find(fingerprint),
                measured,
                threshold=gate.default_thresholds.throughput,
                alpha=gate.alpha / self._micro_divisor(len(measured)),
                run_noise=DEFAULT_RUN_NOISE if noise is None else noise,
                path=store.path,
            )
        except PerfgateError as error:
            self.problems.append(f"pytest-benchmark results not judged: {error.one_line()}")

    def _pair_micro(self, output_json: Any) -> None:
        """--perfgate-against: this session's run showed the benchmarks pass; session pairs of REF and the
        working tree measure them (`check.micro.run_paired_micro`)."""
        from perfgate.check.micro import run_paired_micro
        from perfgate.records.micro import parse_pytest_benchmark

        against = self.request.against
        assert against is not None
        try:
            names = [m.name for m in parse_pytest_benchmark(output_json)]
            if not names:
                return
            gate = self.request.gate
            with self._measuring() as (_, notify), dependencies_required():
                self.micro_paired = paired = run_paired_micro(
                    against,
                    names,
                    rootdir=self.request.rootpath,
                    threshold=gate.default_thresholds.throughput,
                    alpha=gate.alpha / self._micro_divisor(len(names)),
                    max_pairs=max(gate.first_n, gate.max_n),
                    min_pairs=gate.first_n,
                    time_budget_s=gate.budget_s(0),
                    notify=notify,
                    environment=self.request.pairing.environment,
                )
            self.micro = paired.verdicts
            where = f"; {paired.environments.describe()}" if paired.environments is not None else ""
            self.micro_mode = (
                f"paired: {paired.pairs} session pair{'s' if paired.pairs != 1 else ''} against {paired.ref} "
                f"({paired.base_commit[:10]}), alternating which side runs first{where}"
            )
        except PerfgateError as error:
            self.problems.append(f"pytest-benchmark tests not measured against {against}: {error.one_line()}")

    def _micro_divisor(self, benchmarks: int) -> float:
        """The pytest-benchmark tests' divisor of alpha: judged at the session's end, their family is its last
        check and takes what the others left (`judge.family`)."""
        divisor, self.shares = self.shares.share((), benchmarks, last=True)
        return divisor

    # -- the end ------------------------------------------------------------------------------------

    def finish(self) -> bool:
        """Write the session's outputs; whether the session fails although its tests passed: a pytest-benchmark
        test's verdict fails the build (`outcome.micro_fails`; paired, one that REF lacks is new: nothing
        wrong), or something failed outside any test."""
        self._write_outputs()
        fails = micro_fails(
            [v.status for v in self.micro],
            micro_paired=self.micro_paired is not None,
            fail_on_inconclusive=self.request.gate.fail_on_inconclusive,
        )
        return fails or bool(self.problems)

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

        micro, outputs = self._micro_section(), self.request.outputs
        if outputs.json is not None and (self.runs or micro is not None):
            try:
                self._results(micro).write_json(outputs.json)
                self.written.append(outputs.json)
            except PerfgateError as error:
                self.problems.append(error.one_line())
        if self.request.mode != "check":
            return
        try:
            text = self._markdown(micro)
            if outputs.markdown is not None:
                write_text_atomic(outputs.markdown, text)
                self.written.append(outputs.markdown)
            if self.gates or micro is not None or self.problems:  # a session without perf tests adds nothing
                append_job_summary(text)
        except PerfgateError as error:
            self.problems.append(error.one_line())

    def _gate(self) -> GateResult:
        """Every check of this session as one result (an empty one when nothing was checked)."""
        from perfgate.judge.verdict import GateResult, merge_results

        rate = self.rate()
        return merge_results(self.gates, rate) if self.gates else GateResult([], self.request.gate, session=rate)

    def _results(self, micro: MicroSection | None) -> RunResult:
        """The results file's document: every run merged, the check's settings (so `perfgate report` judges it
        as this session did) and the pytest-benchmark verdicts."""
        import perfgate
        from perfgate.records.results import RunResult, merge_runs

        if self.runs:
            run = merge_runs(self.runs)
        else:  # pytest-benchmark tests alone
            environment = self._environment if self._environment is not None else _environment()[0]
            run = RunResult(perfgate.__version__, datetime.now(UTC).isoformat(timespec="seconds"), environment, [])
        gate = self._gate().to_record(self.request.baseline_dir) if self.gates else None
        return replace(run, gate=gate, micro=micro)

    def _markdown(self, micro: MicroSection | None) -> str:
        from perfgate.judge.diagnosis import diagnose
        from perfgate.report.markdown import format_markdown

        diagnoses = [d for g in self.gates for d in diagnose(g)]
        details = None if self.request.outputs.json is None else str(self.request.outputs.json)
        return format_markdown(self._gate(), details=details, diagnoses=diagnoses, micro=micro, problems=self.problems)

    def summary(self) -> str | None:
        """The session's summary for the terminal (None: nothing measured, nothing to say): the checks' modes,
        every verdict in one table, the lab reading, the pytest-benchmark pairs and what was written."""
        from perfgate.formatting import printable
        from perfgate.report.text import format_pytest_summary

        text = format_pytest_summary(
            gates=self.gates,
            runs=self.runs,
            updates=self.updates,
            store_dir=self.request.baseline_dir,
            micro=self.micro,
            micro_updates=self.micro_updates,
            micro_paired=self.micro_paired is not None,
            problems=self.problems,
            peak_tflops=self.request.project.peak_tflops,
        )
        if not text:
            return None
        lines = [f"mode: {mode}" for mode in dict.fromkeys(gate.mode for gate in self.gates)]
        lines.append(text.rstrip("\n"))
        rate = self.rate() if self.request.mode == "check" else None
        if rate is not None:
            lines.append(rate.line)
        paired = self.micro_paired
        if paired is not None and paired.pairs:
            stopped = f"; undecided ones stopped at {paired.stopped_because}" if paired.stopped_because else ""
            lines.append(
                f"pytest-benchmark tests: measured in {paired.pairs} session pair{'s' if paired.pairs > 1 else ''}"
                f" against {paired.ref} ({paired.base_commit[:10]}), alternating which side runs first{stopped}"
            )
            said = f"environment: {paired.environments.describe()}" if paired.environments is not None else None
            if said is not None and said not in text:  # the workloads' checks may have said it already
                lines.append(said)
        lines += [f"{'results' if p == self.request.outputs.json else 'report'} written to {p}" for p in self.written]
        return printable("\n".join(lines))


@dependencies_required()
def _environment() -> tuple[Environment, Fingerprint]:
    """This process's environment (pytest-benchmark measured in it) and its machine's fingerprint."""
    import torch

    from perfgate.measure.environment import collect_environment
    from perfgate.records.fingerprint import machine_fingerprint

    environment = collect_environment("cpu", torch.get_num_threads())
    return environment, machine_fingerprint(environment)


def _probe() -> float:
    from perfgate.measure.device import Device
    from perfgate.measure.probe import probe_steps_per_sec

    return probe_steps_per_sec(Device())
