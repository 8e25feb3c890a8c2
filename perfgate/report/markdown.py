"""The gate's report as Markdown, for a pull request: the job summary and the PR comment.

GitHub limits a step summary to 1 MiB and a comment to 65,536 characters. The report is built from
sections in order of importance (the verdict line, the tables, then the reasons and the lab reading)
and sections that do not fit are left out with a note saying so; a table is never cut mid-row.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from perfgate.errors import EXIT_MEANINGS, ResultsError
from perfgate.formatting import format_bytes, format_p_value, format_pct, format_signed_pct
from perfgate.outcome import Status
from perfgate.records.counts import COUNT_HEADERS
from perfgate.records.diagnoses import Diagnosis
from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint
from perfgate.records.judgement import Judgement, RunReading, WorkloadReading
from perfgate.records.results import MicroSection, RunResult, WorkloadResult
from perfgate.records.summary import PHASES
from perfgate.records.verdicts import ConfigVerdict, GateResult, WorkloadVerdict
from perfgate.report.history import mermaid_trend
from perfgate.report.json import overall_exit_code, overall_verdict_code
from perfgate.report.text import (
    compile_line,
    confidence_text,
    count_cell,
    count_columns,
    counts_footnote,
    counts_notes,
    environments_text,
    gate_throttled_trials,
    lab_cells,
    lab_failures,
    lab_footnote,
    lab_header,
    lab_settings_text,
    limits_text,
    phase_cells,
    rank_cells,
    ranked_jobs,
    throttled_trials,
    unused_parameters_note,
    verdict_counts,
)

COMMENT_LIMIT = 65_536  # characters in a GitHub comment
SUMMARY_LIMIT = 1 << 20  # bytes in a GitHub Actions step summary
# The headline's sentence on the two sides' environments: its packages are at most eight (`Environments.changed_text`),
# but the reasons and the base's declarations come from the project's files.
ENVIRONMENT_CHARS = 1000
MARKER = "<!-- perfgate-report -->"  # finds perfgate's earlier comment on a pull request
_LABELS = {
    Status.REGRESSION: "**regression**",
    Status.ACCEPTED: "accepted",
    Status.FAILED: "**failed**",
    Status.IMPROVEMENT: "improvement",
    Status.NO_CHANGE: "no change",
    Status.INCONCLUSIVE: "inconclusive",
    Status.NOT_COMPARABLE: "**not comparable**",
    Status.NO_BASELINE: "**no baseline**",
}


def format_markdown(judgement: Judgement, *, limit: int = COMMENT_LIMIT, details: str | None = None) -> str:
    """The report of a judged check, at most `limit` characters (and bytes); `details` names where the full data
    is. Beside the verdicts and the diagnoses it shows the judgement's trends (each gated config's recorded runs and
    this one, charted), the pytest-benchmark tests' verdicts (`pytest --perfgate`) and the problems (what failed
    outside any verdict)."""
    result, micro, problems = judgement.result, judgement.micro, judgement.problems
    sections = [_headline(result, micro, problems)]
    sections += [_workload_table(w, judgement) for w in result.workloads]
    sections += [_micro_table(micro)] if micro is not None and micro.benchmarks else []
    sections += [_diagnosis(d) for d in judgement.diagnoses]
    sections += [f"#### Trend: {t.workload} {t.config}\n\n{mermaid_trend(t)}" for t in judgement.trends]
    sections += [_reasons(w) for w in result.workloads]
    sections += [_ranks(result), _lab_reading(judgement), _machine(result)]
    return _fit(sections, limit, details)


def format_lab_markdown(reading: RunReading, *, limit: int = COMMENT_LIMIT, details: str | None = None) -> str:
    """A lab run's report (`perfgate run`: measured, judged by nothing, read by the lab): per workload the lab's
    table, its footnote, failures and reading, then the machine; at most `limit` characters, as `format_markdown`."""
    run = reading.run
    measured = f"{len(run.workloads)} workload{'s' * (len(run.workloads) != 1)} measured"
    sections = [
        f"### perfgate run: the lab's table\n\n{measured}; no verdict (`perfgate compare` judges a lab run "
        "against the baselines)."
    ]
    sections += [_lab_table(workload, reading.of(workload.name)) for workload in run.workloads]
    sections.append(_ranks_of(run))
    sections.append(f"Machine: `{fingerprint_key(machine_fingerprint(run.environment))}`.")
    return _fit(sections, limit, details)


def _lab_table(workload: WorkloadResult, read: WorkloadReading) -> str:
    use = read.utilisation
    header = lab_header(use)
    rows = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    for name, config in workload.configs.items():
        cells = lab_cells(config, use)
        shown = ["**failed**", *["-"] * (len(header) - 2)] if cells is None else cells
        rows.append("| " + " | ".join([name, *shown]) + " |")
    notes = [f"- {_cell(line)}" for line in read.reading.lines]
    notes += [f"- **{_cell(message)}**" for message in lab_failures(workload) + workload.warnings]
    notes += [f"- {_cell(note)}" for note in throttled_trials(workload)]
    text = f"#### {workload.name}\n\n{_cell(lab_settings_text(workload))}.\n\n" + "\n".join(rows)
    text += f"\n\n{_cell(lab_footnote(workload))}."
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def _fit(sections: Sequence[str], limit: int, details: str | None) -> str:
    """The sections after the marker, as many as fit in `limit` characters (and bytes), whole, in order; a
    note says how many were left out."""
    sections = [s for s in sections if s]
    text = MARKER + "\n"
    for index, section in enumerate(sections):
        note = _truncation_note(len(sections) - index, details)
        candidate = text + section + "\n\n"
        if len((candidate + note).encode()) > limit:
            return text + note
        text = candidate
    return text


def _truncation_note(left_out: int, details: str | None) -> str:
    where = f"; the full data is in {details}" if details else ""
    return f"_Report shortened to fit GitHub's limit: {left_out} more section(s) left out{where}._\n"


def _headline(result: GateResult, micro: MicroSection | None = None, problems: Sequence[str] = ()) -> str:
    code = overall_verdict_code(result, micro)
    if problems and code == 0:
        code = 1  # something failed outside any verdict (pytest --perfgate fails the session)
    warned = result.settings.warn_only and overall_exit_code(result, micro) == 0 and code != 0
    counts = verdict_counts(result, micro)
    mode = " (warn-only: not failing the build)" if warned else ""
    line = f"### perfgate: {EXIT_MEANINGS.get(code, 'error')}{mode}\n\n{'; '.join(counts) or 'nothing compared'}."
    if warned:
        line += " The gate is in warn-only mode: it reports every verdict and passes the build."
    statuses = [v.status for v in result.verdicts] + [Status(b.status) for b in (micro.benchmarks if micro else [])]
    if code == 0 and Status.INCONCLUSIVE in statuses:
        line += " Inconclusive verdicts do not fail the build."
    if result.stopped_because and Status.INCONCLUSIVE in statuses:
        line += f" Extra pairs stopped: {_cell(result.stopped_because)}."
    line += "".join(f"\n\n**Problem**: {_cell(problem)}" for problem in problems)
    line += "".join(f"\n\n**Warning**: {_cell(text)}" for text in result.unused_acceptances)
    compared = [f"Compared with: {_cell(result.mode)}."] if result.workloads or not micro else []
    if result.caveat and compared:
        compared.append(f"Note: {_cell(result.caveat)}.")
    if (environment := environments_text(result)) is not None and compared:
        compared.append(f"Environment: {_cell(_shortened(environment, ENVIRONMENT_CHARS))}.")
    if result.settings.accepted:
        compared.append(f"Slowdowns accepted: {_cell('; '.join(a.shown for a in result.settings.accepted))}.")
    if micro is not None and micro.benchmarks:
        compared.append(f"pytest-benchmark tests compared with: {_cell(micro.mode)}.")
    if result.session is not None:
        rate = result.session.line
        compared.append(f"{rate[0].upper()}{_cell(rate[1:])}.")
    return line + "\n\n" + " ".join(compared)


def _workload_table(workload: WorkloadVerdict, judgement: Judgement) -> str:
    result = judgement.result
    head = f"#### {workload.workload}\n\n"
    paired = result.against is not None
    baseline = None if paired else workload.baseline
    if baseline is not None:
        commit = f"`{baseline.commit[:10]}`" if baseline.commit else "no git commit"
        head += f"Baseline measured {baseline.measured_at} at {commit}.\n\n"
    if workload.problem:
        if workload.new:  # the problem says "new: ..."
            return head + _cell(workload.problem)
        return head + f"{_LABELS[workload.problem_status or Status.NO_BASELINE]}: {_cell(workload.problem)}"
    if all(v.throughput is None for v in workload.configs) and any(v.counts for v in workload.configs):
        return head + "Judged by the exact counts alone (`--counts-only`): nothing was timed." + _counts_table(workload)
    sides = "base samples/s | head samples/s" if paired else "baseline samples/s | current samples/s"
    rows = [
        f"| config | {sides} | ratio (CI) | p | machine | peak memory | noise | detects | "
        f"{'pairs' if paired else 'trials'} | verdict |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    rows += [_row(v, paired) for v in workload.configs]
    confidence = confidence_text(workload)
    if paired:
        foot = (
            f"\n\nRatio: geometric mean of the per-pair ratios head/base, {confidence} interval; noise: "
            "pair-to-pair; detects: the smallest slowdown (in samples/s) these pairs could detect."
        )
    else:
        foot = (
            f"\n\nRatio: current/baseline of geometric means, {confidence} interval; machine: the same for "
            "perfgate's fixed probe work; noise: trial-to-trial; detects: the smallest slowdown (in samples/s) "
            "these trials could detect."
        )
    thresholds = sorted({v.thresholds.throughput for v in workload.configs})
    if thresholds:
        foot += f" Threshold: {', '.join(limits_text(t, judgement.bound(t)) for t in thresholds)}."
    throttled = gate_throttled_trials(workload.workload, result)
    if throttled:  # kept in the figures, as the runner's noise; said beside the table
        foot += "\n\n" + "\n".join(f"- {_cell(note)}" for note in throttled)
    return head + "\n".join(rows) + foot + _counts_table(workload)


def _counts_table(workload: WorkloadVerdict) -> str:
    """The exact counts, a config a row and a count a column (a failing count in bold), after the gate's table."""
    columns = count_columns(workload)
    if not columns:
        return ""
    rows = [
        "| counts | " + " | ".join(COUNT_HEADERS[name] for name in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for v in workload.configs:
        if v.counts is not None:
            cells = []
            for name in columns:
                row = v.counts.row(name)
                text = _cell(count_cell(row))
                cells.append(f"**{text}**" if row is not None and row.fails else text)
            rows.append(f"| {v.config} | " + " | ".join(cells) + " |")
    notes = "".join(f"\n- {_cell(note)}" for note in counts_notes(workload))
    footnote = _cell(counts_footnote(workload))
    return "\n\n" + "\n".join(rows) + f"\n\n{footnote[0].upper()}{footnote[1:]}." + (f"\n{notes}" if notes else "")


def _micro_table(micro: MicroSection) -> str:
    sides = "base calls/s | head calls/s" if micro.paired else "baseline calls/s | current calls/s"
    rows = [
        f"| pytest-benchmark test | {sides} | ratio (CI) | p | machine | verdict |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for b in micro.benchmarks:
        interval = "" if b.ci_low is None or b.ci_high is None else f" ({b.ci_low:.3f}-{b.ci_high:.3f})"
        label = "new" if micro.paired and b.status == Status.NO_BASELINE else _LABELS[Status(b.status)]
        cells = [
            f"`{_cell(b.name)}`",
            "-" if b.baseline_calls_per_sec is None else f"{b.baseline_calls_per_sec:,.4g}",
            "-" if b.current_calls_per_sec is None else f"{b.current_calls_per_sec:,.4g}",
            "-" if b.ratio is None else f"{b.ratio:.3f}x{interval}",
            "-" if b.p_value is None else format_p_value(b.p_value),
            "-" if b.machine_ratio is None else f"{b.machine_ratio:.2f}x",
            label,
        ]
        rows.append("| " + " | ".join(cells) + " |")
    reasons = [f"- `{_cell(b.name)}`: {_cell(b.reason)}" for b in micro.benchmarks if b.status != Status.NO_CHANGE]
    why = "\n\n<details><summary>pytest-benchmark tests: why</summary>\n\n" + "\n".join(reasons) + "\n\n</details>"
    return (
        "#### pytest-benchmark tests\n\n"
        + "\n".join(rows)
        + "\n\nCalls/s of the median round; ratio: current/baseline, 95% interval."
        + (why if reasons else "")
    )


def _row(v: ConfigVerdict, paired: bool = False) -> str:
    t, m = v.throughput, v.memory
    if t is None or m is None:
        return f"| {v.config} | - | - | - | - | - | - | - | - | - | {_LABELS[v.status]} |"
    interval = "" if math.isnan(t.ci_low) else f" ({t.ci_low:.3f}-{t.ci_high:.3f})"
    cells = [
        v.config,
        f"{t.baseline_median:,.1f}",
        f"{t.candidate_median:,.1f}",
        f"{t.ratio:.3f}x{interval}",
        "-" if math.isnan(t.p_slower) else format_p_value(min(t.p_slower, t.p_faster)),
        "-" if v.machine is None else f"{v.machine.ratio:.2f}x",
        "-" if m.change is None else format_signed_pct(m.change),
        "-" if math.isnan(t.noise) else f"{100 * t.noise:.1f}%",
        "-" if math.isnan(t.detectable_slowdown) else format_pct(t.detectable_slowdown),
        str(t.n_candidate) if paired else f"{t.n_baseline}+{t.n_candidate}",
        _LABELS[v.status],
    ]
    return "| " + " | ".join(cells) + " |"


def _diagnosis(d: Diagnosis) -> str:
    name = d.suspect or "none"  # the headline starts with it: bold the name, keep what follows plain
    rest = _cell(d.headline[len(name) :])
    suspect = f"**{name}** {rest}" if rest else f"**{name}**"
    lines = [f"#### Diagnosis: {d.workload} {d.config}", "", f"Suspect: {suspect}", ""]
    for finding in d.findings:
        lines.append(f"- {_cell(finding.line)}")
        lines.extend(f"  - {_cell(e)}" for e in finding.evidence)
    if d.phases:
        lines += [
            "",
            "| phase | baseline ms/step | current ms/step | change | share of change |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        lines += [f"| {p.phase} | {' | '.join(phase_cells(d, p))} |" for p in d.phases]
    if d.compile_s is not None:
        lines += ["", compile_line(d.compile_s)]
    return "\n".join(lines)


def _reasons(workload: WorkloadVerdict) -> str:
    lines = [  # what changed (numerics, data) is shown whatever the verdict
        f"- **{v.config}**: {_cell(v.reason)}" for v in workload.configs if v.status != Status.NO_CHANGE or v.evidence
    ]
    return (
        f"<details><summary>{workload.workload}: why</summary>\n\n" + "\n".join(lines) + "\n\n</details>"
        if lines
        else ""
    )


def _ranks(result: GateResult) -> str:
    return "" if result.run is None else _ranks_of(result.run)


def _ranks_of(run: RunResult) -> str:
    """Each data-parallel config's ranks, folded: ms per timed step, the all-reduce and what backward waited."""
    blocks = []
    for workload in run.workloads:
        for name, config in workload.configs.items():
            jobs, ranks = ranked_jobs(config.trials)
            if not ranks:
                continue
            rows = [
                "| rank | samples/s | step p50 ms | "
                + " | ".join(f"{p} ms" for p in PHASES)
                + " | all-reduce ms | waited ms | peak mem |",
                "|" + " ---: |" * (len(PHASES) + 6),
            ]
            rows += ["| " + " | ".join([*rank_cells(r), format_bytes(r.peak_bytes)]) + " |" for r in ranks]
            summary = f"{workload.name} {name}: {jobs[0].nproc} ranks ({jobs[0].backend})"
            if (unused := unused_parameters_note(jobs)) is not None:
                rows += ["", _cell(unused[0].upper() + unused[1:]) + "."]
            blocks.append(f"<details><summary>{summary}</summary>\n\n" + "\n".join(rows) + "\n\n</details>")
    return "\n\n".join(blocks)


def _lab_reading(judgement: Judgement) -> str:
    lab = judgement.lab
    if lab is None:
        return ""
    lines = []
    for workload in lab.run.workloads:
        lines += [f"- {workload.name}: {line}" for line in lab.of(workload.name).reading.lines]
    return "#### The lab's reading\n\n" + "\n".join(lines) if lines else ""


def _machine(result: GateResult) -> str:
    if result.run is None:
        return ""
    return f"Machine: `{fingerprint_key(machine_fingerprint(result.run.environment))}`."


def _shortened(text: str, most: int) -> str:
    """`text` at most `most` characters, cut at a word (a line from outside, in the headline that every report
    keeps)."""
    return text if len(text) <= most else text[: most - 3].rsplit(" ", 1)[0] + "..."


def _cell(text: str) -> str:
    """Text safe inside a table cell or a list item: no pipes, no line breaks."""
    return " ".join(text.replace("|", "\\|").split())


def append_job_summary(text: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append `text` to the GitHub Actions job summary ($GITHUB_STEP_SUMMARY), as the Action does with the
    report `perfgate check --markdown` writes; the file it appended to, or None outside GitHub Actions.

    GitHub shows at most 1 MiB of a step's summary: a report is cut to fit `SUMMARY_LIMIT` with
    `format_markdown(limit=...)` before it comes here."""
    target = (os.environ if environ is None else environ).get("GITHUB_STEP_SUMMARY", "").strip()
    if not target:
        return None
    path = Path(target)
    try:
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise ResultsError(
            f"cannot append to the job summary {path}: {exc.strerror}", hint="check GITHUB_STEP_SUMMARY"
        ) from exc
    return path
