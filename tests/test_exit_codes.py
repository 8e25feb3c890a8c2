"""One table of exit codes (`perfgate.errors.EXIT_CODES`): shown by every command's --help and by
docs/reference.md, and each code produced by a command that ends with it.

Everything here runs in this process through the CLI's entry point, on files made by hand, but the
interrupted run, a real process sent SIGTERM (as a cancelled CI job is); no trial runs.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.cli import COMMAND_EXIT_CODES, COMMANDS, main
from perfgate.errors import EXIT_CODES, exit_code_help, exit_code_markdown
from perfgate.records.results import ConfigResult, TrialResult, load_results
from tests.helpers.cli import run_main, start_perfgate
from tests.helpers.results import results_document

ROOT = Path(__file__).parent.parent

RAISES = """\
import pathlib
import time


def broken():
    raise RuntimeError("the dataset is not downloaded")


def waits():
    pathlib.Path("loading").write_text("")
    time.sleep(120)
"""


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """`perfgate ARGS` in this process, in the test's temporary folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workloads.py").write_text(RAISES)
    return lambda *args: run_main(capsys, *args)


def help_of(capsys, *command: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_every_commands_help_ends_with_its_rows_of_the_one_table(capsys):
    assert set(COMMAND_EXIT_CODES) == set(COMMANDS)
    known = {row.code for row in EXIT_CODES}
    for command, codes in COMMAND_EXIT_CODES.items():
        assert set(codes) <= known
        shown = help_of(capsys, command)
        table = shown[shown.index("exit codes:\n") :]
        assert [line.split()[0] for line in table.splitlines()[1:] if not line.startswith("     ")] == [
            str(row.code) for row in EXIT_CODES if row.code in codes
        ], command
    assert " ".join(help_of(capsys).split()).endswith(" ".join(exit_code_help().split()))  # perfgate --help: all


def test_the_reference_shows_the_same_table():
    assert exit_code_markdown() in (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")


def test_check_lists_all_its_codes_and_report_does_not_claim_the_verdicts(capsys):
    check = help_of(capsys, "check")
    assert all(f"\n  {row.code} " in check for row in EXIT_CODES)
    report = help_of(capsys, "report")
    assert "\n  0 " in report and "\n  1 " not in report and "\n  3 " not in report


# -- each code, produced -------------------------------------------------------------------------------


def _results(folder: Path, *, failed: bool = False) -> None:
    """base.json, a run of workload w (fp32, four trials); head.json the same, or with every fp32 trial failed."""
    (folder / "base.json").write_text(json.dumps(results_document()))
    run = load_results(folder / "base.json")
    if failed:
        trials = [TrialResult("fp32", i, "failed", failure="trial process was killed by SIGKILL") for i in range(4)]
        (workload,) = run.workloads
        run = replace(run, workloads=[replace(workload, configs={"fp32": ConfigResult("fp32", trials)})])
    run.write_json(folder / "head.json")


def test_0_pass_when_the_command_did_its_work(cli, tmp_path):
    _results(tmp_path)
    result = cli("compare", "base.json", "head.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("perfgate compare: 1 no change. Exit 0 (pass).")


def test_1_fail_on_a_supported_regression(cli, tmp_path):
    document = results_document()
    (tmp_path / "base.json").write_text(json.dumps(document))
    for trial in document["workloads"][0]["configs"]["fp32"]["trials"]:
        trial["samples_per_sec"] *= 0.7
    (tmp_path / "head.json").write_text(json.dumps(document))
    result = cli("compare", "base.json", "head.json")
    assert result.returncode == 1, result.stderr
    assert result.stdout.rstrip().endswith("perfgate compare: 1 regression (w fp32). Exit 1 (fail).")


def test_2_usage_error_for_a_bad_option(cli):
    result = cli("run", "--trials", "0", "workloads.py:broken")
    assert result.returncode == 2
    assert result.stderr.startswith("error: argument --trials: ") and len(result.stderr.splitlines()) == 1


def test_3_nothing_to_compare_without_a_baseline_or_a_recorded_run(cli, tmp_path):
    _results(tmp_path)
    no_baseline = cli("compare", "head.json")
    assert no_baseline.returncode == 3, no_baseline.stderr
    assert no_baseline.stdout.rstrip().endswith("Exit 3 (nothing to compare).")
    for command in (("history",), ("export", "--to", "bencher")):
        nothing = cli(*command)
        assert nothing.returncode == 3 and nothing.stdout == ""
        assert nothing.stderr.startswith("error: no recorded run in ") and len(nothing.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", ["run", "check", "update"])
def test_4_workload_failed_when_its_function_raises(cli, command):
    result = cli(command, "--quiet", "--allow-dirty" if command == "update" else "--quiet", "workloads.py:broken")
    assert result.returncode == 4, result.stderr
    assert result.stderr == (
        "error: broken() raised RuntimeError: the dataset is not downloaded (workloads.py:broken); "
        "fix the workload function (run with --debug for the traceback)\n"
    )


def test_4_workload_failed_when_a_config_measured_before_now_fails(cli, tmp_path):
    """A config that failed (Status.FAILED) is the workload's failure, not a regression; 1 would still win."""
    _results(tmp_path, failed=True)
    result = cli("compare", "base.json", "head.json")
    assert result.returncode == 4, result.stderr
    assert result.stdout.rstrip().endswith("perfgate compare: 1 failed (w fp32). Exit 4 (workload failed).")


@pytest.mark.e2e
def test_130_interrupted_by_sigterm_while_loading_the_workload(tmp_path):
    (tmp_path / "workloads.py").write_text(RAISES)
    process = start_perfgate("run", "--quiet", "workloads.py:waits", cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (tmp_path / "loading").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "loading").exists(), "the workload function never ran"
    process.send_signal(signal.SIGTERM)  # what a cancelled CI job gets
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert stderr.startswith("interrupted: ") and "Traceback" not in stderr
