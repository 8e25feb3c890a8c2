"""The commands other than `check` (`app.gate`): each takes its request and a sink and returns its exit code.

A lab run (`run_lab`, `update_baselines`), the paired measurements (`calibrate`, `bisect`), the commands that
render saved files (`compare`, `report`) and those that read the history (`history`, `export`). Their text goes
through the sink, so untrusted text (a history record's fields) is printed safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from perfgate.app.finish import write_results
from perfgate.app.gate import measured, report_gate, warn_open
from perfgate.app.request import (
    BisectRequest,
    CalibrationRequest,
    CompareRequest,
    ExportRequest,
    HistoryRequest,
    LabRequest,
    Outputs,
    ReportRequest,
    SeriesRequest,
)
from perfgate.app.sink import Sink, lab_progress
from perfgate.errors import EXIT_OK, EXIT_WORKLOAD_FAILED, NothingToCompareError, UsageError, WorkloadError
from perfgate.outcome import measured_exit_code

if TYPE_CHECKING:
    from perfgate.records.history import History

__all__ = ["bisect", "calibrate", "compare", "export", "history", "report", "report_gate", "run_lab", "update"]


def run_lab(request: LabRequest, sink: Sink) -> int:
    """Run the lab and print its table (--json, --markdown: also to files); exit 4 when nothing was measured."""
    from perfgate.app.judging import read_run
    from perfgate.measure.lab import run_lab as measure
    from perfgate.records.results import write_text_atomic
    from perfgate.report.markdown import format_lab_markdown
    from perfgate.report.text import format_run

    failures: dict[str, WorkloadError] = {}
    progress = lab_progress(request.run.trials, quiet=request.outputs.quiet)
    result = measure(list(request.references), request.run, progress, failures=failures)
    reading = read_run(result, request.peak_tflops)
    sink.info(format_run(reading))
    write_results(result, request.outputs.json, sink)
    if request.outputs.markdown is not None:
        details = str(request.outputs.json) if request.outputs.json else None
        write_text_atomic(request.outputs.markdown, format_lab_markdown(reading, details=details))
    return _failed(failures, sink) or measured_exit_code(measured(result, sink)) or EXIT_OK


def _failed(failures: Mapping[str, WorkloadError], sink: Sink) -> int | None:
    """One `error:` line for each workload whose own code failed while the others were measured; exit 4."""
    for error in failures.values():
        sink.error(error.one_line())
    return EXIT_WORKLOAD_FAILED if failures else None


def update(request: LabRequest, sink: Sink) -> int:
    """Measure and write this machine's baselines; the baseline folder was found writable before (the request)."""
    from perfgate.app.judging import read_run
    from perfgate.measure.environment import require_clean_tree
    from perfgate.measure.lab import run_lab as measure
    from perfgate.records.baselines import BaselineStore
    from perfgate.report.text import format_run, format_updates

    store = BaselineStore(request.baseline_dir)
    if not request.allow_dirty:
        require_clean_tree(Path.cwd(), store.directory)
    failures: dict[str, WorkloadError] = {}
    progress = lab_progress(request.run.trials, quiet=request.outputs.quiet)
    result = measure(list(request.references), request.run, progress, failures=failures)
    sink.info(format_run(read_run(result, request.peak_tflops)) + "\n")
    write_results(result, request.outputs.json, sink)
    code = _failed(failures, sink) or measured_exit_code(measured(result, sink))  # no baseline of a failed run
    if code is not None:
        return code
    sink.info(format_updates(store.write_run(result), store))
    return EXIT_OK


def calibrate(calibration_request: CalibrationRequest, sink: Sink) -> int:
    """Measure the runner's A/A noise and a planted slowdown; exit 0 once measured (it judges no code)."""
    from perfgate.app.judging import judge
    from perfgate.check.calibrate import run_calibration
    from perfgate.report.calibration import format_calibration
    from perfgate.report.text import format_gate

    request = calibration_request.check
    # the A/A's pairs are planned; the planted pass adds pairs while its verdict is open, as a check does
    pairs = calibration_request.pairs
    most = max(pairs, request.gate.max_n)
    plan = request.plan(lab_progress(pairs, quiet=request.outputs.quiet, unit="pair", most=most), sink.notify)
    calibration = run_calibration(plan, pairs=calibration_request.pairs, slowdown=calibration_request.slowdown)
    if calibration.planted.run is not None:
        write_results(calibration.planted.run, request.outputs.json, sink)
    if not request.outputs.quiet:
        aa = judge(calibration.aa, diagnosed=False)  # the runner's noise: nothing to diagnose
        sink.report("A/A " + format_gate(aa, command="perfgate calibrate (A/A)", exits=False) + "\n")
    sink.info(format_calibration(calibration))
    return EXIT_OK


def bisect(bisect_request: BisectRequest, sink: Sink) -> int:
    """Bisect GOOD..BAD with paired checks; print each step and what it found; exit 0 once it ran."""
    from perfgate.check.bisect import run_bisect
    from perfgate.report.bisection import format_bisect

    request = bisect_request.check
    gate, quiet = request.gate, request.outputs.quiet
    plan = request.plan(lab_progress(gate.first_n, quiet=quiet, unit="pair", most=gate.max_n), sink.notify)
    result = run_bisect(plan, bisect_request.good, bisect_request.bad)
    sink.info(format_bisect(result))
    return EXIT_OK


def write_outputs(outputs: Outputs, render: Callable[[str], str], sink: Sink) -> None:
    """Print the report in the form --format asks for, and write the files --report-json and --markdown name;
    `render(form)` is the report in one form (text, markdown, json)."""
    from perfgate.records.results import write_text_atomic

    sink.report(render(outputs.format), coloured=outputs.format == "text")
    for form, path in (("json", outputs.report_json), ("markdown", outputs.markdown)):
        if path is not None:
            write_text_atomic(path, render(form))


def compare(compare_request: CompareRequest, sink: Sink) -> int:
    """Judge a results file against the baselines or another file; print the report (--format), write
    --report-json and --markdown; exit with the verdict's code."""
    from perfgate.app.judging import judge
    from perfgate.check.stored import stored_baselines
    from perfgate.judge.verdict import compare_results
    from perfgate.records.baselines import BaselineStore
    from perfgate.report.render import render_gate

    request = compare_request.check
    candidate, baseline = compare_request.candidate, compare_request.baseline
    stored = (
        None if baseline is not None else stored_baselines(candidate, request.gate, BaselineStore(request.baseline_dir))
    )
    result = compare_results(candidate, request.gate, stored=stored, baseline=baseline)
    judgement = judge(result)
    details = str(compare_request.paths[-1])
    write_outputs(
        request.outputs, lambda form: render_gate(judgement, form, command="perfgate compare", details=details), sink
    )
    return warn_open(result, sink)


def report(report_request: ReportRequest, sink: Sink) -> int:
    """Render a results file: a check's as the check judged it, a lab run's as the lab's table; exits 0 once
    written (the check's own exit code is its verdict's)."""
    from perfgate.app.judging import judge_file, read_run
    from perfgate.report.markdown import COMMENT_LIMIT
    from perfgate.report.render import is_lab_run, render_gate, render_lab
    from perfgate.report.text import format_run

    path, run, outputs, project = (
        report_request.path,
        report_request.run,
        report_request.outputs,
        report_request.project,
    )
    details, limit = str(path), outputs.max_chars or COMMENT_LIMIT
    if is_lab_run(run):
        if outputs.png is not None:
            raise UsageError(
                "--png charts a check's verdicts, and this is a lab run that no check judged",
                where=str(path),
                hint="chart the results of perfgate check --json, or leave out --png",
            )
        reading = read_run(run, project().peak_tflops)
        write_outputs(outputs, lambda form: render_lab(reading, form, details=details, limit=limit), sink)
        return EXIT_OK
    # judged as the check decided it, with a pytest --perfgate session's pytest-benchmark verdicts as it decided them
    judgement = judge_file(run, project(), report_request.baseline_dir)
    if outputs.png is not None:
        from perfgate.report.chart import write_chart

        write_chart(judgement, outputs.png)

    def render(form: str) -> str:
        text = render_gate(judgement, form, command="perfgate report", exits=False, details=details, limit=limit)
        lab = "" if judgement.lab is None else format_run(judgement.lab) + "\n"
        return (lab if form == "text" and run.workloads else "") + text

    write_outputs(outputs, render, sink)
    return EXIT_OK


def load_history(store: HistoryRequest, sink: Sink, *, say_fetched: bool) -> tuple[History, Path]:
    """The history's records (the branch's fetched first, with --history-branch), each skipped one warned of;
    and the folder they came from. `say_fetched`: say how many records the branch gave."""
    from perfgate.records.history import HistoryStore

    folder = HistoryStore(store.directory)
    if store.branch is not None:
        from perfgate.records.history_branch import fetch_history

        fetched = fetch_history(Path.cwd(), folder.directory, branch=store.branch)
        if say_fetched:
            sink.note(f"fetched {fetched} record(s) from the history branch {store.branch}")
    found = folder.load()
    for line in found.skipped:
        sink.warn(line)
    return found, folder.directory


def history(request: SeriesRequest, sink: Sink) -> int:
    """Print the recorded runs, their change points and creep (--html: also the dashboard); exit 0, or 3 when
    nothing is recorded (it judges nothing)."""
    from perfgate.judge.trends import series_of
    from perfgate.report.history import format_history

    found, directory = load_history(request.history, sink, say_fetched=True)
    if not found.records:
        raise NothingToCompareError(
            f"no recorded run in {directory}",
            hint="record runs with perfgate check --record, or give --history-dir or --history-branch",
        )
    series = series_of(found, threshold=request.threshold, alpha=request.alpha)
    sink.info(format_history(series, limit=request.limit))
    if request.html is not None:
        from perfgate.records.results import write_text_atomic
        from perfgate.report.dashboard import render_dashboard

        page = request.html / "index.html"
        write_text_atomic(page, render_dashboard(series, skipped=found.skipped))
        sink.info(f"dashboard written to {page}\n")
    return EXIT_OK


def export(request: ExportRequest, sink: Sink) -> int:
    """Print one recorded run in another tool's JSON format (--output: also to a file); exit 0 once written, 3
    when no run is recorded."""
    import json

    from perfgate.app.request import check_outputs
    from perfgate.records.results import write_text_atomic
    from perfgate.report.history import export_run

    commit, json_path = request.commit, request.output
    check_outputs([(json_path, "--output")])
    found, directory = load_history(request.history, sink, say_fetched=False)
    records = [r for r in found.records if commit is None or (r.commit or "").startswith(commit)]
    if not records:
        which = f" of commit {commit}" if commit else ""
        raise NothingToCompareError(
            f"no recorded run{which} in {directory}",
            hint="record runs with perfgate check --record, or give --history-dir or --history-branch",
        )
    text = json.dumps(export_run(records[-1], request.form), indent=2, allow_nan=False) + "\n"
    sink.info(text)
    if json_path is not None:
        write_text_atomic(json_path, text)
    return EXIT_OK
