"""`perfgate compare` and `perfgate report` on saved results files: formats, and results from two machines.

Both commands measure nothing, so they run in this process (`perfgate.cli.main`) on real results files.
"""

from __future__ import annotations

import copy
import json

import pytest

from perfgate.records.results import MicroSection, load_results
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
    assert "a regression beyond the 5% threshold on time per sample (samples/s below -4.8%; p < 0.01)" in (
        markdown.stdout
    )
    assert "samples/s -20.0% (0.800x" in text.stdout and "### perfgate" not in text.stdout
    as_json = run_main(capsys, "compare", "base.json", "head.json", "--format", "json")
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert document["exit_code"] == 1 and "micro" not in document
    (config,) = document["workloads"][0]["configs"]
    assert (config["config"], config["status"]) == ("fp32", "regression")
    assert config["throughput"]["ratio"] == pytest.approx(0.8)


MICRO = MicroSection(
    mode="stored baselines (baselines/pytest-benchmark.yaml)",
    paired=False,
    benchmarks=[
        micro_regression(
            "calls/s -75.0% (0.250x, 95.0% CI 0.200-0.300x, p=1.0e-06): a regression beyond the 5% threshold "
            "on time per call (calls/s below -4.8%; p < 0.01)"
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
    assert text.stdout.rstrip().endswith(
        "perfgate check: 1 regression (test_micro.py::test_augmentation). Exit 1 (fail)."
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
