"""`perfgate compare` and `perfgate report` on saved results files: formats, and results from two machines.

Both commands measure nothing, so they run in this process (`perfgate.cli.main`) on real results files.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.records.results import MicroSection, load_results
from perfgate.records.verdicts import GateSettings
from perfgate.report.markdown import MARKER
from tests.helpers.cli import run_main
from tests.helpers.results import micro_regression, results_document, validate_results


def _files(folder, *, slower=0.8, environment=None):
    """base.json (four fp32 trials at about 1000 samples/s) and head.json (the same, times `slower`, on the
    machine `environment` describes, else the same one)."""
    base = results_document()
    for trial, sps in zip(base["workloads"][0]["configs"]["fp32"]["trials"], (1000, 1010, 990, 1005), strict=True):
        trial["samples_per_sec"] = sps
    head = copy.deepcopy(base)
    for trial in head["workloads"][0]["configs"]["fp32"]["trials"]:
        trial["samples_per_sec"] *= slower
    if environment is not None:
        head["environment"] = environment(copy.deepcopy(head["environment"]))
    (folder / "base.json").write_text(json.dumps(base))
    (folder / "head.json").write_text(json.dumps(head))


def _other_machine(environment):
    environment["threads"] = 4
    environment["cpu"]["model"] = "Another CPU"
    return environment


def test_two_files_from_different_machines_get_a_one_line_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, slower=1.0, environment=_other_machine)
    result = run_main(capsys, "compare", "base.json", "head.json")
    assert result.returncode == 0, result.stdout + result.stderr
    (warning,) = result.stderr.splitlines()
    assert warning.startswith("warning: base.json and head.json come from different machines (cpu_model ")
    assert "'Another CPU'" in warning and "threads 2 -> 4" in warning
    assert warning.endswith(
        "this comparison mixes the machine with the code; to judge the code alone, run "
        "perfgate check --against REF on one runner"
    )
    _files(tmp_path, slower=1.0)  # the same machine: nothing to warn about
    assert run_main(capsys, "compare", "base.json", "head.json").stderr == ""


def test_compare_renders_markdown_and_json_as_report_does_with_the_verdict_as_exit_code(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _files(tmp_path)
    text = run_main(capsys, "compare", "base.json", "head.json")
    markdown = run_main(capsys, "compare", "base.json", "head.json", "--format", "markdown")
    assert (text.returncode, markdown.returncode) == (1, 1)
    assert markdown.stdout.startswith(MARKER + "\n### perfgate: fail\n\n1 regression (w fp32).")
    assert "| fp32 | 1,002.5 | 802.0 | 0.800x (" in markdown.stdout and "| **regression** |" in markdown.stdout
    # p < 0.005: Holm's first step over the check's two comparisons (throughput and memory)
    assert (
        "a regression beyond the 5% threshold on time per sample (the whole interval lies below samples/s -4.8%; "
        "p < 0.005)" in markdown.stdout
    )
    assert "samples/s -20.0% (0.800x" in text.stdout and "### perfgate" not in text.stdout
    assert text.stdout.rstrip().endswith("perfgate compare: 1 regression (w fp32). Exit 1 (fail).")  # its own name
    as_json = run_main(capsys, "compare", "base.json", "head.json", "--format", "json")
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert document["kind"] == "check"
    assert document["exit_code"] == 1 and "micro" not in document
    (config,) = document["workloads"][0]["configs"]
    assert (config["config"], config["status"]) == ("fp32", "regression")
    assert config["throughput"]["ratio"] == pytest.approx(0.8)


def test_compare_and_report_write_json_and_markdown_files_and_print_the_format_asked_for(tmp_path, monkeypatch, capsys):
    """One way for every command: --format chooses standard output, --report-json PATH and --markdown PATH write
    files (`--json` is the results file, which compare and report do not write: refused in one line)."""
    monkeypatch.chdir(tmp_path)
    _files(tmp_path)
    printed = {form: run_main(capsys, "compare", "base.json", "head.json", "--format", form).stdout for form in FORMS}
    files = run_main(capsys, "compare", "base.json", "head.json", "--report-json", "c.json", "--markdown", "c.md")
    assert files.returncode == 1 and files.stdout == printed["text"]
    assert (tmp_path / "c.md").read_text() == printed["markdown"]
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads(printed["json"])
    renamed = run_main(capsys, "compare", "base.json", "head.json", "--json", "old.json")
    assert renamed.returncode == 2 and not (tmp_path / "old.json").exists()
    assert renamed.stderr == (
        "error: --json is not an option here: --json writes a results file, and compare writes none; "
        "use --report-json\n"
    )
    # a check's results file keeps the check's settings, so report judges it as the check did
    gate = GateSettings(first_n=4, max_n=4).to_record(Path("baselines"))
    replace(load_results(tmp_path / "head.json"), gate=gate).write_json(tmp_path / "r.json")
    (tmp_path / "baselines").mkdir()
    outputs = ("--report-json", "r-out.json", "--markdown", "r.md")
    reported = run_main(capsys, "report", "r.json", "--format", "json", *outputs)
    assert reported.returncode == 0, reported.stderr  # a report renders; it exits 0 whatever the verdict
    assert json.loads(reported.stdout) == json.loads((tmp_path / "r-out.json").read_text())
    assert json.loads(reported.stdout)["exit_code"] == 3  # the check's verdict: no baseline in baselines/
    assert (tmp_path / "r.md").read_text().startswith(MARKER + "\n### perfgate: nothing to compare\n")
    text = run_main(capsys, "report", "r.json").stdout
    assert text.rstrip().endswith("The check's verdict: nothing to compare (its exit code 3).")
    assert "Exit 3" not in text  # report exits 0: it names the check's code, it does not claim it


FORMS = ("text", "markdown", "json")


MICRO = MicroSection(
    mode="stored baselines (baselines/pytest-benchmark.yaml)",
    paired=False,
    benchmarks=[
        micro_regression(
            "calls/s -75.0% (0.250x, 95.0% CI 0.200-0.300x, p=1.0e-06): a regression beyond the 5% threshold "
            "on time per call (the whole interval lies below calls/s -4.8%; p < 0.01)"
        )
    ],
)


def test_report_shows_the_pytest_benchmark_verdicts_of_a_results_file(tmp_path, monkeypatch, capsys):
    """A results file of `pytest --perfgate --perfgate-json` that holds only pytest-benchmark tests."""
    from dataclasses import replace

    monkeypatch.chdir(tmp_path)
    _files(tmp_path)
    run = replace(load_results(tmp_path / "base.json"), workloads=[], micro=MICRO)
    run.write_json(tmp_path / "micro.json")
    validate_results(json.loads((tmp_path / "micro.json").read_text()))
    text = run_main(capsys, "report", "micro.json")
    assert text.returncode == 0, text.stderr
    assert "pytest-benchmark tests, compared with: stored baselines (baselines/pytest-benchmark.yaml)" in text.stdout
    (row,) = [line for line in text.stdout.splitlines() if line.startswith("  test_micro.py::test_augmentation ")]
    assert row.split()[1:] == ["480", "120", "0.250x", "(0.200-0.300)", "1.01x", "REGRESSION"]
    assert "  ! test_micro.py::test_augmentation: calls/s -75.0% (0.250x" in text.stdout
    assert text.stdout.rstrip().endswith(  # report exits 0: it names the check's verdict, not its own exit code
        "perfgate report: 1 regression (test_micro.py::test_augmentation). The check's verdict: fail (its exit code 1)."
    )
    markdown = run_main(capsys, "report", "micro.json", "--format", "markdown").stdout
    assert markdown.startswith(MARKER + "\n### perfgate: fail\n\n1 regression (test_micro.py::test_augmentation).")
    assert "pytest-benchmark tests compared with: stored baselines (baselines/pytest-benchmark.yaml)." in markdown
    assert (
        "| `test_micro.py::test_augmentation` | 480 | 120 | 0.250x (0.200-0.300) | 1.0e-06 | 1.01x | **regression** |"
        in (markdown)
    )
    document = json.loads(run_main(capsys, "report", "micro.json", "--format", "json").stdout)
    assert document["exit_code"] == 1 and document["micro"] == MICRO.to_dict()
