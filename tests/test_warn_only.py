"""Warn-only: every verdict reported, the build passed (`--warn-only`, `perfgate_warn_only`, the Action's
`fail: false`). A usage error still fails; so does a report that could not be written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.errors import (
    EXIT_INTERRUPTED,
    EXIT_NO_BASELINE,
    EXIT_NOTHING_TO_GATE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    EXIT_WORKLOAD_FAILED,
)
from perfgate.outcome import warned_exit_code
from tests.helpers.cli import run_main
from tests.helpers.results import validate_results
from tests.test_action import CHECK_ARGS, commands, run_action, saved_check


def test_warn_only_passes_a_verdicts_failures_and_nothing_else():
    for code in (EXIT_REGRESSION, EXIT_NO_BASELINE, EXIT_WORKLOAD_FAILED):
        assert warned_exit_code(code, warn_only=True) == EXIT_OK
        assert warned_exit_code(code, warn_only=False) == code
    for code in (EXIT_OK, EXIT_USAGE, EXIT_NOTHING_TO_GATE, EXIT_INTERRUPTED):
        assert warned_exit_code(code, warn_only=True) == code


def test_a_warn_only_check_is_rendered_and_judged_as_it_ran(tmp_path, monkeypatch, capsys):
    """The results file keeps warn-only; `perfgate report` says the verdict and that it did not fail the build,
    `compare --warn-only` exits 0 where `compare` exits 1, and the Action's gate step warns and passes."""
    monkeypatch.chdir(tmp_path)  # no [tool.perfgate]: the default thresholds
    results = saved_check(tmp_path / "slower", 1.5, warn_only=True)
    document = json.loads(results.read_text())
    validate_results(document)
    assert document["gate"]["warn_only"] is True
    plain = json.loads(saved_check(tmp_path / "plain", 1.5, warn_only=False).read_text())
    assert "warn_only" not in plain["gate"]  # left out when off: files stay as they were

    reported = run_main(capsys, "report", str(results))
    assert reported.returncode == 0, reported.stderr
    assert reported.stdout.rstrip().endswith(
        "The check's verdict: pass (its exit code 0): warn-only mode, the verdict (fail, exit 1) does not fail the "
        "build."
    )
    as_json = json.loads(run_main(capsys, "report", str(results), "--format", "json").stdout)
    assert (as_json["exit_code"], as_json["verdict_code"], as_json["warn_only"]) == (0, 1, True)
    markdown = run_main(capsys, "report", str(results), "--format", "markdown").stdout
    assert "### perfgate: fail (warn-only: not failing the build)" in markdown
    assert "The gate is in warn-only mode: it reports every verdict and passes the build." in markdown

    # compare judges with its own options
    baselines = str(tmp_path / "slower" / "baselines")
    assert run_main(capsys, "compare", str(results), "--baseline-dir", baselines).returncode == EXIT_REGRESSION
    warned = run_main(capsys, "compare", str(results), "--baseline-dir", baselines, "--warn-only")
    assert warned.returncode == EXIT_OK, warned.stderr
    assert (
        "REGRESSION" in warned.stdout and "Exit 0 (pass): warn-only mode, the verdict (fail, exit 1)" in warned.stdout
    )
    assert "warning: warn-only mode: the verdict would exit 1; the build passes (exit 0)" in warned.stderr

    # the Action's gate step: the file says warn-only, so the regression is a warning and the job passes
    log, job, verdict = tmp_path / "perfgate.log", tmp_path / "job-exit-code", tmp_path / "verdict-code"
    log.write_text("")
    helper = [sys.executable, "-m", "perfgate.action", "check", "0", str(results), str(log)]
    helper += ["--job-exit-code", str(job), "--verdict-code", str(verdict), "--warn-only"]
    printed = subprocess.run(helper, capture_output=True, text=True, timeout=120, check=True).stdout
    (annotation,) = commands(printed)
    assert annotation.startswith("::warning title=perfgate%3A w fp32 regression::samples/s -")
    assert annotation.endswith("(warn-only: not failing the job)")
    assert (job.read_text(), verdict.read_text()) == ("0\n", "1\n")


def test_the_actions_gate_step_judges_the_results_file_once(tmp_path, monkeypatch, capsys):
    """The annotations and the verdict code of a warn-only check read one judgement of its results file."""
    import perfgate.app.judging
    from perfgate.action import main

    monkeypatch.chdir(tmp_path)
    results = saved_check(tmp_path / "slower", 1.5, warn_only=True)
    calls = []
    judge_file = perfgate.app.judging.judge_file

    def counted(*args, **kwargs):
        calls.append(args[0])
        return judge_file(*args, **kwargs)

    monkeypatch.setattr(perfgate.app.judging, "judge_file", counted)
    log, job, verdict = tmp_path / "perfgate.log", tmp_path / "job-exit-code", tmp_path / "verdict-code"
    log.write_text("")
    argv = ["check", "0", str(results), str(log), "--job-exit-code", str(job), "--verdict-code", str(verdict)]
    assert main([*argv, "--warn-only"]) == 0
    assert (job.read_text(), verdict.read_text()) == ("0\n", "1\n")
    assert len(calls) == 1
    assert "::warning title=perfgate%3A w fp32 regression::" in capsys.readouterr().out


@pytest.mark.e2e
def test_the_action_with_fail_false_reports_a_regression_and_passes(gated_project, tmp_path):
    """`fail: false`: perfgate check --warn-only; the job summary and comment say warn-only, the regression is
    a warning annotation, the verdict output still says fail, and the job passes."""
    inputs = {"args": CHECK_ARGS, "configs": "fp32", "trials": "2", "fail": "false"}
    code, summary, outputs, stdout = run_action(gated_project, tmp_path, inputs, {"PERFGATE_TEST_PLANT": "slow"})
    assert code == 0, summary
    assert "### perfgate: fail (warn-only: not failing the build)" in summary and "| **regression** |" in summary
    assert (outputs["verdict"], outputs["exit-code"], outputs["job-exit-code"]) == ("fail", "0", "0")
    assert not [c for c in commands(stdout) if c.startswith("::error")]
    assert any(
        c.startswith("::warning title=perfgate%3A gated fp32 regression::samples/s -")
        and c.endswith("(warn-only: not failing the job)")
        for c in commands(stdout)
    )
    assert "warning: warn-only mode: the verdict would exit 1; the build passes (exit 0)" in stdout
    assert json.loads(Path(outputs["results-json"]).read_text())["gate"]["warn_only"] is True
