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

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from perfgate.app.finish import write_report, write_results
from perfgate.app.request import GateRequest, Mode
from perfgate.app.sink import Sink, progress_for
from perfgate.errors import EXIT_USAGE, PerfgateError
from perfgate.outcome import Status, measured_exit_code, warned_exit_code

if TYPE_CHECKING:
    from perfgate.measure.lab import ProgressCallback
    from perfgate.records.history import HistoryRecord, HistoryStore
    from perfgate.records.judgement import Judgement
    from perfgate.records.results import RunResult
    from perfgate.records.series import Trend
    from perfgate.records.verdicts import GateResult

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """What a check ended with: its exit code, its verdicts and what it wrote or warned of."""

    exit_code: int
    result: GateResult | None = None
    judgement: Judgement | None = None  # the verdicts judged once, as every report read them
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
    if open_verdicts and result.verdict_code == 0:
        sink.warn(f"inconclusive, not failing the build: {', '.join(open_verdicts)}")
    if result.verdict_code != result.exit_code:
        warn_passed(sink, "the verdict", result.verdict_code)
    for line in result.unused_acceptances:
        sink.warn(line)
    return result.exit_code


def warn_passed(sink: Sink, what: str, code: int) -> None:
    """The line that says warn-only mode passed what would have failed the build (`outcome.warned_exit_code`)."""
    sink.warn(f"warn-only mode: {what} would exit {code}; the build passes (exit 0)")


def report_gate(judgement: Judgement, sink: Sink, *, command: str) -> int:
    """Print the gate's report and any diagnosis, its summary line naming `command`; the gate's exit code."""
    from perfgate.report.text import format_gate

    sink.report(format_gate(judgement, command=command))
    return warn_open(judgement.result, sink)


class GateSession:
    """One check, from its first trial to its exit code (`run_gate` runs the whole of it)."""

    def __init__(self, request: GateRequest, sink: Sink) -> None:
        self.request = request
        self.sink = sink
        self.result: GateResult | None = None
        self.warnings: list[str] = []
        self.written: list[Path] = []
        self.recorded: list[Path] = []  # the history records this check appended
        self._history: HistoryStore | None = None

    def check(self) -> GateResult:
        """Measure and judge, in the request's mode, until every verdict is decided or the budget is spent."""
        return self.measure(progress_for(self.request), self.sink.notify)

    def measure(self, progress: ProgressCallback | None, notify: Callable[[str], None] | None) -> GateResult:
        """`check`, with the progress display and the notes given (the pytest plugin's, on its terminal)."""
        from perfgate.records.baselines import BaselineStore

        request = self.request
        plan = request.plan(progress, notify)
        if request.mode == Mode.COUNTS:
            from perfgate.check.counts import run_counts_check

            result = run_counts_check(plan, against=request.against, store=BaselineStore(request.baseline_dir))
        elif request.mode == Mode.PAIRED:
            from perfgate.check.paired import run_paired_check

            assert request.against is not None
            result = run_paired_check(plan, request.against)
        else:
            from perfgate.check.stored import run_check

            record = request.history is not None and request.history.record
            result = run_check(plan, BaselineStore(request.baseline_dir), measure_unjudged=record)
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
        """Everything after the measurement, in `perfgate check`'s order, and the exit code: the verdicts judged
        once (`app.judging.judge`), and every report read from that judgement."""
        from perfgate.app.judging import judge
        from perfgate.report.text import format_run

        request, sink = self.request, self.sink
        result = self.result
        assert result is not None, "finish() before check()"
        if result.run is not None:
            run = replace(result.run, gate=result.to_record(request.baseline_dir))
            result = self.result = replace(result, run=run)
        judgement = judge(result, every_config=request.diagnose_all)
        if judgement.lab is not None:
            run = judgement.lab.run
            sink.info(format_run(judgement.lab) + "\n")
            write_results(run, request.outputs.json, sink)
            if request.outputs.json is not None:
                self.written.append(request.outputs.json)
            code = measured_exit_code(measured(run, sink) or bool(result.verdicts))
            if code is not None:  # nothing measured, and nothing had a baseline
                if request.gate.warn_only:
                    warn_passed(sink, "the check", code)
                code = warned_exit_code(code, warn_only=request.gate.warn_only)
                return Outcome(code, result, judgement, written=tuple(self.written))
        if request.outputs.markdown is not None:  # the recorded runs beside this one, charted in the report
            judgement = replace(judgement, trends=tuple(self._after("no trend in the report", self._trends) or ()))
        if request.history is not None and request.history.record:
            self.record(result)
        failed_file = False
        if request.outputs.markdown is not None:
            judged: Judgement = judgement  # (for the closure below)

            def write() -> bool:
                write_report(judged, request.outputs, self.written)
                return True

            failed_file = not self._after("--markdown not written", write)
        code = report_gate(judgement, sink, command=request.command)
        if failed_file and code == 0:  # a report asked for and missing: the job must not pass unnoticed
            code = EXIT_USAGE
        return Outcome(code, result, judgement, tuple(self.written), tuple(self.warnings))

    def _trends(self) -> list[Trend]:
        from perfgate.records.history_branch import HistoryBranchError
        from perfgate.records.series import trends_of

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

    def record(self, result: GateResult) -> None:
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
        self.recorded.append(path)
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
    """A check's whole life: measure and judge, finish; the outcome and its exit code. In warn-only mode a check
    that stops before any verdict for a verdict's reason (no baseline at all: 3, the workload failed: 4) says why
    and passes."""
    session = GateSession(request, sink)
    try:
        session.check()
    except PerfgateError as error:
        code = warned_exit_code(error.exit_code, warn_only=request.gate.warn_only)
        if code == error.exit_code:
            raise
        sink.error(error.one_line())
        warn_passed(sink, "the check", error.exit_code)
        return Outcome(code)
    return session.finish()
