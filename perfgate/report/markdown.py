"""The gate's report as Markdown, for a pull request: the job summary and the PR comment.

GitHub limits a step summary to 1 MiB and a comment to 65,536 characters. The report is built from
sections in order of importance (the verdict line, the tables, then the reasons and the lab reading)
and sections that do not fit are left out with a note saying so; a table is never cut mid-row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfgate.errors import EXIT_MEANINGS
from perfgate.formatting import format_p_value
from perfgate.judge.diagnosis import Diagnosis, compile_line
from perfgate.judge.reading import read_lab
from perfgate.judge.verdict import ConfigVerdict, GateResult, Status, WorkloadVerdict
from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint
from perfgate.report.history import Trend, mermaid_trend
from perfgate.report.text import confidence_text, phase_cells, verdict_counts

COMMENT_LIMIT = 65_536  # characters in a GitHub comment
SUMMARY_LIMIT = 1 << 20  # bytes in a GitHub Actions step summary
MARKER = "<!-- perfgate-report -->"  # finds perfgate's earlier comment on a pull request
_LABELS = {
    Status.REGRESSION: "**regression**",
    Status.FAILED: "**failed**",
    Status.IMPROVEMENT: "improvement",
    Status.NO_CHANGE: "no change",
    Status.INCONCLUSIVE: "inconclusive",
    Status.NOT_COMPARABLE: "**not comparable**",
    Status.NO_BASELINE: "**no baseline**",
}


def format_markdown(
    result: GateResult,
    *,
    limit: int = COMMENT_LIMIT,
    details: str | None = None,
    diagnoses: Sequence[Diagnosis] = (),
    trends: Sequence[Trend] = (),
) -> str:
    """The report, at most `limit` characters (and bytes); `details` names where the full data is; `trends`:
    each gated config's recorded runs and this one, charted (`report.history.trends_of`)."""
    sections = [_headline(result)]
    sections += [_workload_table(w, result) for w in result.workloads]
    sections += [_diagnosis(d) for d in diagnoses]
    sections += [f"#### Trend: {t.workload} {t.config}\n\n{mermaid_trend(t)}" for t in trends]
    sections += [_reasons(w) for w in result.workloads]
    sections += [_lab_reading(result), _machine(result)]
    sections = [s for s in sections if s]
    text = MARKER + "\n"
    for index, section in enumerate(sections):
        left = len(sections) - index
        note = _truncation_note(left, details)
        candidate = text + section + "\n\n"
        if len((candidate + note).encode()) > limit:
            return text + note
        text = candidate
    return text


def _truncation_note(left_out: int, details: str | None) -> str:
    where = f"; the full data is in {details}" if details else ""
    return f"_Report shortened to fit GitHub's limit: {left_out} more section(s) left out{where}._\n"


def _headline(result: GateResult) -> str:
    code = result.exit_code
    counts = verdict_counts(result)
    line = f"### perfgate: {EXIT_MEANINGS.get(code, 'error')}\n\n{'; '.join(counts) or 'nothing compared'}."
    if code == 0 and any(v.status == Status.INCONCLUSIVE for v in result.verdicts):
        line += " Inconclusive verdicts do not fail the build."
    return line + f"\n\nCompared with: {_cell(result.mode)}."


def _workload_table(workload: WorkloadVerdict, result: GateResult) -> str:
    head = f"#### {workload.workload}\n\n"
    paired = result.against is not None
    baseline = None if paired else workload.baseline
    if baseline is not None:
        commit = f"`{baseline.commit[:10]}`" if baseline.commit else "no git commit"
        head += f"Baseline measured {baseline.measured_at} at {commit}.\n\n"
    if workload.problem:
        return head + f"{_LABELS[workload.problem_status or Status.NO_BASELINE]}: {_cell(workload.problem)}"
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
            "pair-to-pair; detects: the smallest slowdown these pairs could detect."
        )
    else:
        foot = (
            f"\n\nRatio: current/baseline of geometric means, {confidence} interval; machine: the same for "
            "perfgate's fixed probe work; noise: trial-to-trial; detects: the smallest slowdown these trials "
            "could detect."
        )
    return head + "\n".join(rows) + foot


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
        "-" if m.change is None else f"{100 * m.change:+.1f}%",
        "-" if math.isnan(t.noise) else f"{100 * t.noise:.1f}%",
        "-" if math.isnan(t.detectable_slowdown) else f"{100 * t.detectable_slowdown:.0f}%",
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
    lines = [f"- **{v.config}**: {_cell(v.reason)}" for v in workload.configs if v.status != Status.NO_CHANGE]
    return (
        f"<details><summary>{workload.workload}: why</summary>\n\n" + "\n".join(lines) + "\n\n</details>"
        if lines
        else ""
    )


def _lab_reading(result: GateResult) -> str:
    if result.run is None:
        return ""
    lines = []
    for workload in result.run.workloads:
        reading = read_lab({name: config.summary for name, config in workload.configs.items()})
        lines += [f"- {workload.name}: {line}" for line in reading.lines]
    return "#### The lab's reading\n\n" + "\n".join(lines) if lines else ""


def _machine(result: GateResult) -> str:
    if result.run is None:
        return ""
    return f"Machine: `{fingerprint_key(machine_fingerprint(result.run.environment))}`."


def _cell(text: str) -> str:
    """Text safe inside a table cell or a list item: no pipes, no line breaks."""
    return " ".join(text.replace("|", "\\|").split())
