"""The Markdown report: a real table for GitHub, and shortened, never cut mid-row, to fit its limits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from markdown_it import MarkdownIt

from perfgate.app.finish import write_report
from perfgate.app.judging import judge
from perfgate.app.request import Outputs
from perfgate.judge.verdict import Status, compare_entries, merge_results
from perfgate.records.verdicts import GateResult, GateSettings, WorkloadVerdict
from perfgate.report.markdown import MARKER, append_job_summary, format_markdown
from perfgate.report.text import confidence_text
from tests.helpers.baselines import GATE_BASE, gate_entry

SETTINGS = GateSettings(first_n=3, max_n=3)


def result(*candidates):
    return GateResult([compare_entries(GATE_BASE, c, SETTINGS) for c in candidates], SETTINGS)


def tables(text):
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    return [t for t in tokens if t.type == "table_open"], [t for t in tokens if t.type == "tr_open"]


def test_the_report_is_a_table_github_renders_with_the_verdict_first():
    text = format_markdown(judge(result(gate_entry([430, 432, 428], [1000, 1002, 998])), diagnosed=False))
    assert text.startswith(MARKER + "\n### perfgate: fail\n\n1 regression (w fp32).")
    found, rows = tables(text)
    assert len(found) == 1 and len(rows) == 2  # header and one config
    assert "| fp32 | 500.0 | 430.0 | 0.860x (" in text and "| **regression** |" in text
    assert "Baseline measured 2026-11-22T10:00:00+00:00 at no git commit." in text
    assert "<details><summary>w: why</summary>" in text
    assert (
        "a regression beyond the 5% threshold on time per sample "
        "(the whole interval lies below samples/s -4.8%; p < 0.01)" in text
    )


def test_text_from_outside_is_kept_on_one_line_and_its_pipes_escaped():
    problem = WorkloadVerdict("w", [], None, problem="no baseline | for\nw", problem_status=Status.NO_BASELINE)
    text = format_markdown(judge(GateResult([problem], SETTINGS), diagnosed=False))
    assert "**no baseline**: no baseline \\| for w" in text
    assert "### perfgate: nothing to compare" in text


def test_a_report_over_the_limit_is_shortened_with_a_note_and_whole_sections():
    many = result(*[gate_entry([430 + i, 432, 428], [1000, 1002, 998]) for i in range(40)])
    full = format_markdown(judge(many, diagnosed=False), limit=10**7)
    short = format_markdown(judge(many, diagnosed=False), limit=4000, details="results.json")
    assert len(full) > 4000 >= len(short.encode())
    assert short.endswith("more section(s) left out; the full data is in results.json._\n")
    assert short.startswith(MARKER + "\n### perfgate: fail")
    _, rows = tables(short)
    assert all(line.count("|") == 12 for line in short.splitlines() if line.startswith("| fp32"))
    assert rows  # at least one whole table made it


def test_the_chart_is_a_valid_png_with_a_row_per_config(tmp_path):
    from PIL import Image

    from perfgate.report.chart import write_chart

    path = tmp_path / "out" / "chart.png"
    write_chart(
        judge(
            result(gate_entry([430, 432, 428], [1000, 1002, 998]), gate_entry([500, 505, 498], [1000, 1004, 996])),
            diagnosed=False,
        ),
        path,
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        width, height = image.size
    assert width == 990 and height > 200


def test_the_checks_of_one_pytest_session_merge_into_one_report():
    """pytest --perfgate checks each fixture test on its own: one workload checked twice, one config each."""
    fp32 = result(gate_entry([430, 432, 428], [1000, 1002, 998]))
    (verdict,) = fp32.verdicts
    bf16 = GateResult([WorkloadVerdict("w", [replace(verdict, config="bf16", status=Status.NO_CHANGE)])], SETTINGS)
    other = GateResult(
        [WorkloadVerdict("v", [], None, problem="no baseline for v", problem_status=Status.NO_BASELINE)], SETTINGS
    )
    merged = merge_results([fp32, bf16, other])
    assert [(w.workload, [v.config for v in w.configs]) for w in merged.workloads] == [
        ("w", ["fp32", "bf16"]),
        ("v", []),
    ]
    assert merged.exit_code == 1 and merge_results([fp32]) is fp32
    text = format_markdown(judge(merged, diagnosed=False))
    assert text.startswith(MARKER + "\n### perfgate: fail\n\n1 regression (w fp32); 1 no change; 1 no baseline (v).")
    assert len(tables(text)[0]) == 1  # one table for w, whichever check measured its configs


def test_the_job_summary_gets_the_report_appended_only_under_github_actions(tmp_path):
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    text = format_markdown(judge(result(gate_entry([430, 432, 428], [1000, 1002, 998])), diagnosed=False))
    assert append_job_summary(text, {"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    assert summary.read_text() == "earlier step\n" + text
    assert append_job_summary(text, {}) is None and append_job_summary(text, {"GITHUB_STEP_SUMMARY": ""}) is None


def test_what_changed_is_shown_even_when_the_verdict_is_no_change():
    """A changed model computes other losses at the same speed: the verdict is "no change", and the report
    (terminal and Markdown) still says what changed."""
    from perfgate.judge.verdict import compare_run
    from perfgate.records.baselines import entry_from_workload
    from perfgate.report.text import format_gate
    from tests.helpers.results import BASE_MS, phased_run

    base = phased_run(BASE_MS)
    (workload,) = base.workloads
    changed = replace(base, workloads=[replace(workload, first_losses={"fp32": [2.0]})])
    result = compare_run(changed, {"w": entry_from_workload(base, workload)}, GateSettings(first_n=3, max_n=3))
    (verdict,) = result.verdicts
    assert verdict.status == Status.NO_CHANGE
    text = format_gate(judge(result, diagnosed=False), command="perfgate check")
    assert "! fp32: " in text and "the model's numerics changed (first-step losses 1 -> 2)" in text
    assert "the model's numerics changed (first-step losses 1 -> 2)" in format_markdown(judge(result, diagnosed=False))


def test_one_judgement_goes_to_the_report_file_and_the_job_summary(tmp_path, monkeypatch):
    """`app.finish.write_report`, the one way `perfgate check` and `pytest --perfgate` write the Markdown report: the
    judgement's report, naming the results file, to its file and, asked, to the job summary; nothing asked,
    nothing written."""
    judgement = judge(result(gate_entry([430, 432, 428], [1000, 1002, 998])))
    assert judgement.bounds == {0.05: 1 / 1.05} and judgement.diagnoses == ()  # no run: nothing to diagnose
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    outputs = Outputs(json=tmp_path / "results.json", markdown=tmp_path / "report.md")
    written: list[Path] = []
    write_report(judgement, outputs, written, job_summary=True)
    text = format_markdown(judgement, details=str(tmp_path / "results.json"))
    assert text.startswith(MARKER + "\n### perfgate: fail")
    assert written == [outputs.markdown] and outputs.markdown.read_text() == text == summary.read_text()
    summary.unlink()
    write_report(judgement, Outputs(json=tmp_path / "results.json"), written)
    assert written == [outputs.markdown] and not summary.exists()


def test_the_intervals_level_says_what_it_is_and_that_alpha_bounds_false_alarms():
    """A sequential check's interval is at its boundary's level at the last look (docs/statistics.md): 96% at 4
    pairs, 40% or less at a budget's last look. The label gives that level and does not pass it off as coverage."""
    (workload,) = result(gate_entry([430, 432, 428], [1000, 1002, 998])).workloads
    (verdict,) = workload.configs
    single = replace(verdict, throughput=replace(verdict.throughput, confidence=0.95))
    assert confidence_text(replace(workload, configs=[single])) == "95%"  # one look at 95%
    late = replace(verdict, throughput=replace(verdict.throughput, confidence=0.735))
    early = replace(verdict, config="bf16", throughput=replace(verdict.throughput, confidence=0.96))
    text = confidence_text(replace(workload, configs=[late, early]))
    assert text.startswith("73.5%-96% (the sequential test's level at its last look; ")
    assert text.endswith("alpha, not this level, bounds false alarms)")
    assert text in format_markdown(judge(GateResult([replace(workload, configs=[late, early])], SETTINGS)))
