"""A check's life, owned by the application layer (`perfgate.app`): nothing to gate is exit 5, untrusted text is
printed safe, an unwritable folder is refused before any trial, and nothing after the measurement cancels the
verdict already measured. Real processes and real git repositories throughout; no trial runs where the point
is that none should.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from perfgate.errors import EXIT_NOTHING_TO_GATE
from perfgate.outcome import Status, build_exit_code, job_exit_code, session_exit_code
from perfgate.records.history import HistoryStore
from tests.helpers.cli import run_in_process, run_main
from tests.helpers.git import commit, git, new_repository
from tests.helpers.history import recorded
from tests.helpers.workloads import TINY_FILE

TINY = "perf/tiny.py:tiny"
ONE_TRIAL = ("--configs", "fp32", "--trials", "1", "--max-trials", "1", "--threads", "1", "--quiet")
LAB_ONE_TRIAL = ("--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet")  # update adds no trials
HOSTILE = "x\x1b]0;x\x07\n::error::pwned"


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """`perfgate ARGS` in this process, in the test's temporary folder."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_main(capsys, *args)


# -- the rule, in one file ------------------------------------------------------------------------------------


def test_the_rule_that_fails_the_build_is_one_file_and_the_old_names_still_import():
    from perfgate.judge import verdict
    from perfgate.report.json import overall_exit_code

    assert verdict.Status is Status and verdict.build_exit_code is build_exit_code
    assert callable(overall_exit_code)
    assert build_exit_code([Status.REGRESSION, Status.FAILED, Status.NO_BASELINE]) == 1
    assert build_exit_code([Status.FAILED, Status.NO_BASELINE]) == 4
    # a paired pytest-benchmark session's benchmark that the base lacks is new, not missing
    assert session_exit_code([Status.NO_CHANGE], micro=[Status.NO_BASELINE], micro_paired=True) == 0
    assert session_exit_code([Status.NO_CHANGE], micro=[Status.NO_BASELINE]) == 3
    # the Action's no-baseline policy: warn judges what is left once the missing baselines are set aside
    assert job_exit_code(3, [Status.NO_CHANGE], problems=False, warn_no_baseline=True) == 0
    assert job_exit_code(3, [Status.NO_CHANGE], problems=False, warn_no_baseline=False) == 3
    assert job_exit_code(5, [], problems=False, warn_no_baseline=True) == 5


# -- nothing to gate -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "run", "update"])
def test_an_empty_workload_list_exits_5_nothing_to_gate(cli, tmp_path, command):
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\nworkloads = []\n")
    started = time.monotonic()
    result = cli(command, "--quiet", *(["--allow-dirty"] if command == "update" else []))
    assert result.returncode == EXIT_NOTHING_TO_GATE == 5, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("error: nothing to gate: the workload list is empty (")
    assert len(result.stderr.splitlines()) == 1
    assert time.monotonic() - started < 30  # refused before anything is measured


# -- untrusted text --------------------------------------------------------------------------------------------


def _poisoned(value: object, text: str) -> tuple[object, int]:
    """`value` with every machine-describing string (the CPU model, the device's name) replaced by `text`."""
    if isinstance(value, dict):
        found, count = {}, 0
        for key, item in value.items():
            if key in ("cpu_model", "device_name"):
                found[key], count = text, count + 1
            else:
                found[key], more = _poisoned(item, text)
                count += more
        return found, count
    if isinstance(value, list):
        items = [_poisoned(item, text) for item in value]
        return [item for item, _ in items], sum(count for _, count in items)
    return value, 0


def test_history_text_cannot_write_terminal_escapes_or_workflow_commands(cli, tmp_path):
    """A record pushed by anyone who can write the history branch: its machine name holds a terminal escape
    (retitle the window) and a line that GitHub would run as a workflow command."""
    folder = tmp_path / ".perfgate" / "history"
    path = HistoryStore(folder).append(recorded())
    document, count = _poisoned(json.loads(path.read_text(encoding="utf-8")), HOSTILE)
    assert count >= 1  # the record does carry the hostile text
    document["mode"] = HOSTILE
    path.write_text(json.dumps(document), encoding="utf-8")
    result = cli("history")
    assert result.returncode in (0, 3), result.stderr
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and "\x07" not in stream
        assert not [line for line in stream.splitlines() if line.lstrip().startswith(("::", "##["))]


def test_printable_drops_controls_and_defuses_workflow_commands():
    from perfgate.formatting import printable

    plain = "lm fp32  (cpu x, 2 threads; 3 runs)\n  commit  verdict\tok\n"
    assert printable(plain) == plain  # perfgate's own text is unchanged
    shown = printable("a\x1b[31mb\x9bc\u202ed\n  ::error::x\n##[warning]y\r\n")
    assert "\x1b" not in shown and "\x9b" not in shown and "\u202e" not in shown and "\r" not in shown
    assert [line for line in shown.splitlines() if line.lstrip().startswith(("::", "##["))] == []


# -- writability before measuring ------------------------------------------------------------------------------


def test_update_refuses_an_unwritable_baseline_folder_before_measuring(cli, tmp_path):
    """A path under a regular file cannot be a folder, for root too (which `os.access` would let through)."""
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "tiny.py").write_text(TINY_FILE.read_text(encoding="utf-8"))
    (tmp_path / "a-file").write_text("not a folder\n")
    started = time.monotonic()
    result = cli("update", TINY, *LAB_ONE_TRIAL, "--allow-dirty", "--baseline-dir", "a-file/baselines")
    assert result.returncode == 2, result.stdout + result.stderr
    assert time.monotonic() - started < 10
    assert result.stdout == ""  # no lab table: nothing measured
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: cannot write in a-file/baselines") and "(--baseline-dir)" in line


@pytest.mark.skipif(not hasattr(stat, "S_IWUSR"), reason="POSIX permissions")
def test_update_refuses_a_read_only_baseline_folder_before_measuring(cli, tmp_path):
    import os

    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root writes in a read-only folder")
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "tiny.py").write_text(TINY_FILE.read_text(encoding="utf-8"))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = cli("update", TINY, *LAB_ONE_TRIAL, "--allow-dirty", "--baseline-dir", "locked")
    finally:
        locked.chmod(0o755)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.startswith("error: cannot write in locked")


# -- nothing after the measurement cancels the verdict ---------------------------------------------------------


def _refusing_origin(tmp_path: Path) -> Path:
    """A bare repository whose every push is refused (a pre-receive hook that fails)."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(origin))
    hook = origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'refused by policy' >&2\nexit 1\n")
    hook.chmod(0o755)
    return origin


@pytest.mark.e2e
def test_a_failed_record_push_keeps_the_verdict(tmp_path):
    repo = new_repository(tmp_path / "repo")
    files = {"perf/tiny.py": TINY_FILE.read_text(encoding="utf-8"), ".gitignore": ".perfgate/\n"}
    commit(repo, files, "the first commit")
    git(repo, "remote", "add", "origin", str(_refusing_origin(tmp_path)))
    checked = run_in_process("check", TINY, *ONE_TRIAL, "--record", "--history-branch", "perfgate-history", cwd=repo)
    # no stored baseline: recorded without a verdict, exit 3 as ever; the refused push changes nothing of it
    assert checked.returncode == 3, checked.stdout + checked.stderr
    assert "recorded in the history: " in checked.stdout
    assert "pushed to the history branch" not in checked.stdout
    refused = [line for line in checked.stderr.splitlines() if line.startswith("warning: not pushed")]
    assert len(refused) == 1 and refused[0].startswith("warning: not pushed to the history branch perfgate-history")
    assert "refused by policy" in refused[0] or "declined" in refused[0], refused
    assert not [line for line in checked.stderr.splitlines() if line.startswith("error: ")], checked.stderr


@pytest.mark.e2e
def test_nothing_after_the_measurement_cancels_a_measured_verdict(tmp_path, monkeypatch, capsys):
    """The steps after the measurement each fail for real (the push refused by the origin, the Markdown report's
    folder a regular file): each is one warning naming its step, the history keeps the run, the gate's report
    is printed and the exit code is the verdict's. The verdict is the saved check of tests/data (no trial)."""
    from perfgate.app.gate import GateSession
    from perfgate.app.request import GateRequest, HistoryRequest, Outputs
    from perfgate.app.sink import StreamSink
    from perfgate.check.stored import compare_saved
    from perfgate.measure.lab import RunSettings
    from perfgate.project import ProjectConfig
    from perfgate.records.baselines import BaselineStore
    from perfgate.records.results import load_results
    from perfgate.records.verdicts import GateSettings

    data = Path(__file__).parent / "data"
    repo = new_repository(tmp_path / "repo")
    commit(repo, {"README.md": "x\n"}, "the first commit")
    git(repo, "remote", "add", "origin", str(_refusing_origin(tmp_path)))
    (repo / "blocker").write_text("a file, not a folder\n")
    monkeypatch.chdir(repo)
    gate = GateSettings.from_options(ProjectConfig(), trials=1, max_trials=1)
    verdict = compare_saved(load_results(data / "results-v2.json"), gate, store=BaselineStore(data / "baselines"))
    request = GateRequest(
        references=(),
        run=RunSettings(configs=("fp32",)),
        gate=gate,
        baseline_dir=data / "baselines",
        history=HistoryRequest(repo / "history", "perfgate-history", record=True),
        outputs=Outputs(markdown=Path("blocker") / "report.md", quiet=True),
    )
    session = GateSession(request, StreamSink(quiet=True))
    session.result = verdict  # measured: what follows must not undo it
    outcome = session.finish()
    out = capsys.readouterr()
    assert verdict.exit_code == 1 and outcome.exit_code == 1  # the saved check's regression stands
    assert f"Exit {verdict.exit_code} (" in out.out and "recorded in the history: " in out.out
    warned = [line for line in out.err.splitlines() if line.startswith("warning: ")]
    assert [line.split(":")[1].strip() for line in warned] == [
        "not pushed to the history branch perfgate-history",
        "--markdown not written",
    ], warned
    assert len(list((repo / "history").glob("*.json"))) == 1
