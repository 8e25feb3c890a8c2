"""The history on a git branch: records pushed with plumbing only, fetched back intact, concurrent pushes kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import perfgate
from perfgate.records.history_branch import (
    DEFAULT_HISTORY_BRANCH,
    IDENTITY,
    HistoryBranchError,
    fetch_history,
    push_record,
)
from tests.helpers.git import git

RECORD = '{"perfgate_history": 1, "mode": "stored baselines", "note": "caf\u00e9 \u2713"}\n'

# One side of a race: wait until the test says go, then push five records, each retried on a lost race.
PUSHER = """
import sys, time
from pathlib import Path
from perfgate.records.history_branch import push_record

repo, side, folder = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
(folder / f"ready-{side}").touch()
while not (folder / "go").exists():
    time.sleep(0.005)
for i in range(5):
    push_record(repo, f"{side}-{i}.json", f'{{"side": "{side}", "i": {i}}}\\n', attempts=20)
"""


@pytest.fixture
def clones(tmp_path, monkeypatch):
    """(remote, a, b): a bare repository and two clones of it, each with a commit on main and a user."""
    for name in IDENTITY:
        monkeypatch.delenv(name, raising=False)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    sides = []
    for name in ("a", "b"):
        clone = tmp_path / name
        git(tmp_path, "clone", "--quiet", str(remote), name)
        git(clone, "config", "user.name", f"user {name}")
        git(clone, "config", "user.email", f"{name}@example.com")
        git(clone, "checkout", "--quiet", "-B", "main")
        (clone / "train.py").write_text(f"print('{name}')\n")
        git(clone, "add", "train.py")
        git(clone, "commit", "--quiet", "-m", f"work in {name}")
        git(clone, "push", "--quiet", "--force", "origin", "main")
        sides.append(clone)
    return remote, sides[0], sides[1]


def repository_state(repo: Path) -> dict[str, object]:
    """What a user of the checkout sees: HEAD, branches, index, status and every file's bytes."""
    files = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "symbolic": git(repo, "symbolic-ref", "HEAD"),
        "branches": git(repo, "branch", "--list"),
        "index": git(repo, "ls-files", "--stage"),
        "status": git(repo, "status", "--porcelain"),
        "files": files,
    }


@pytest.mark.e2e
def test_a_pushed_record_reaches_another_clone_and_leaves_the_checkout_alone(clones, tmp_path):
    remote, a, b = clones
    (a / "train.py").write_text("print('edited, not staged')\n")
    (a / "scratch.txt").write_text("untracked\n")
    git(a, "add", "--intent-to-add", "scratch.txt")
    before = repository_state(a)

    commit = push_record(a, "20261123T100000-abc-01.json", RECORD)

    assert repository_state(a) == before
    assert git(remote, "rev-parse", DEFAULT_HISTORY_BRANCH) == commit
    assert git(remote, "ls-tree", "-r", "--name-only", commit) == "history/20261123T100000-abc-01.json"
    assert git(remote, "log", "-1", "--format=%an <%ae> / %cn", commit) == (
        "perfgate <perfgate@users.noreply.github.com> / perfgate"
    )
    destination = b / ".perfgate" / "history"
    assert fetch_history(b, destination) == 1
    assert [p.name for p in destination.iterdir()] == ["20261123T100000-abc-01.json"]
    assert (destination / "20261123T100000-abc-01.json").read_bytes() == RECORD.encode("utf-8")
    assert git(b, "branch", "--list") == "* main"
    (b / "src").mkdir()  # from a folder inside the checkout, the paths are still the branch's
    assert push_record(b / "src", "second.json", "{}\n") != commit
    assert fetch_history(b / "src", destination) == 2


@pytest.mark.e2e
def test_two_jobs_pushing_at_once_both_end_up_in_a_linear_history(clones, tmp_path):
    remote, a, b = clones
    env = {**os.environ, "PYTHONPATH": str(Path(perfgate.__file__).resolve().parent.parent)}
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", PUSHER, str(clone), side, str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for clone, side in ((a, "a"), (b, "b"))
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{side}").exists() for side in "ab"):
        assert time.monotonic() < deadline and all(job.poll() is None for job in jobs), "a pusher did not start"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    for job in jobs:
        _, stderr = job.communicate(timeout=120)
        assert job.returncode == 0, stderr

    destination = tmp_path / "fetched"
    assert fetch_history(a, destination) == 10
    assert sorted(p.name for p in destination.iterdir()) == sorted(f"{s}-{i}.json" for s in "ab" for i in range(5))
    assert (destination / "b-3.json").read_text() == '{"side": "b", "i": 3}\n'
    commits = git(remote, "rev-list", "--parents", DEFAULT_HISTORY_BRANCH).splitlines()
    assert len(commits) == 10
    assert all(len(line.split()) <= 2 for line in commits)  # no merges
    assert sum(len(line.split()) == 1 for line in commits) == 1  # one root


@pytest.mark.e2e
def test_fetching_keeps_only_json_files_directly_under_history_and_pushing_keeps_the_rest(clones, tmp_path):
    remote, a, b = clones
    seed = tmp_path / "seed"
    git(tmp_path, "init", "--quiet", "--initial-branch=main", str(seed))
    (seed / "history" / "nested").mkdir(parents=True)
    (seed / "history" / "kept.json").write_text("{}\n")
    (seed / "history" / "notes.txt").write_text("not a record\n")
    (seed / "history" / "nested" / "deep.json").write_text("{}\n")
    (seed / "history" / "link.json").symlink_to("/etc/passwd")
    (seed / "README.md").write_text("the history branch\n")
    git(seed, "add", ".")
    git(seed, "-c", "user.name=seed", "-c", "user.email=seed@example.com", "commit", "--quiet", "-m", "seed")
    git(seed, "push", "--quiet", str(remote), f"main:refs/heads/{DEFAULT_HISTORY_BRANCH}")

    destination = tmp_path / "fetched"
    assert fetch_history(b, destination) == 1
    assert [p.name for p in destination.iterdir()] == ["kept.json"]

    commit = push_record(a, "new.json", RECORD)
    files = git(remote, "ls-tree", "-r", "--name-only", commit).splitlines()
    assert files == [
        "README.md",
        "history/kept.json",
        "history/link.json",
        "history/nested/deep.json",
        "history/new.json",
        "history/notes.txt",
    ]
    assert fetch_history(b, destination) == 2


@pytest.mark.e2e
def test_a_record_already_on_the_branch_is_kept_and_never_rewritten(clones):
    remote, a, b = clones
    commit = push_record(a, "once.json", RECORD)
    assert push_record(b, "once.json", RECORD) == commit
    with pytest.raises(HistoryBranchError, match=r"already holds a different history/once\.json"):
        push_record(b, "once.json", "{}\n")
    assert git(remote, "rev-parse", DEFAULT_HISTORY_BRANCH) == commit


@pytest.mark.e2e
def test_a_missing_remote_is_a_one_line_error_and_a_missing_branch_is_no_history(clones, tmp_path):
    remote, a, b = clones
    with pytest.raises(HistoryBranchError) as failure:
        push_record(a, "x.json", RECORD, remote="nowhere")
    message = str(failure.value)
    assert "\n" not in message
    assert "'nowhere' does not appear to be a git repository" in message
    assert "branch perfgate-history of nowhere" in message

    destination = tmp_path / "empty"
    assert fetch_history(b, destination) == 0
    assert destination.is_dir() and not any(destination.iterdir())
    assert git(remote, "for-each-ref", "--format=%(refname)") == "refs/heads/main"


@pytest.mark.e2e
@pytest.mark.parametrize("branch", ["bad..name", "-x", "@{-1}", "with space", ""])
def test_a_branch_name_git_refuses_is_an_error(clones, branch):
    _, a, _ = clones
    with pytest.raises(HistoryBranchError, match="is not a valid branch name"):
        push_record(a, "x.json", RECORD, branch=branch)


@pytest.mark.parametrize("name", ["a/b.json", "../x.json", "x..json", "x.txt", ".json", "a\\b.json", "x\n.json"])
def test_a_record_name_that_is_not_a_plain_json_file_name_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="plain file name ending in .json"):
        push_record(tmp_path, name, RECORD)


@pytest.mark.e2e
def test_history_fetches_the_branch_and_shows_its_runs(clones, tmp_path, monkeypatch, capsys):
    from perfgate.records.history import HistoryStore
    from tests.helpers.cli import run_main
    from tests.helpers.history import recorded

    _, a, b = clones
    for index in range(3):
        path = HistoryStore(tmp_path / "made").append(recorded(commit=f"{index}" * 40))
        push_record(a, path.name, path.read_text(encoding="utf-8"))
    monkeypatch.chdir(b)
    shown = run_main(capsys, "history", "--history-branch", DEFAULT_HISTORY_BRANCH)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("w fp32  (") and "; 3 runs)" in shown.stdout
    assert shown.stderr == f"fetched 3 record(s) from the history branch {DEFAULT_HISTORY_BRANCH}\n"
    assert len(list((b / ".perfgate" / "history").glob("*.json"))) == 3


def test_check_refuses_a_bad_history_branch_name_before_measuring(tmp_path, monkeypatch, capsys):
    from tests.helpers.cli import run_main

    monkeypatch.chdir(tmp_path)
    bad = run_main(capsys, "check", "lm", "--record", "--history-branch", "bad..name")
    assert bad.returncode == 2 and bad.stderr.startswith("error: 'bad..name' is not a valid branch name (")
