"""`perfgate demo`: the README's first run. Its repository and pull requests, its summary, and the command end
to end as a new user runs it (real git, real paired checks, real trials)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perfgate import demo
from tests.helpers.cli import run_cli, run_main


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.e2e
def test_the_demos_repository_holds_main_and_one_branch_per_pull_request(tmp_path):
    repo = tmp_path / "repo"
    demo.make_repository(repo)
    assert git(repo, "branch", "--show-current") == "main"
    assert git(repo, "status", "--porcelain") == ""
    assert sorted(git(repo, "branch", "--format=%(refname:short)").split()) == ["comment-only", "deeper-model", "main"]
    deeper = git(repo, "diff", "main", "deeper-model", "--unified=0")
    assert f"-DEPTH = {demo.BASE_DEPTH}" in deeper and f"+DEPTH = {demo.DEEPER}" in deeper
    assert deeper.count("\n+") - deeper.count("\n+++") == 1  # one line changed: the depth
    comment = git(repo, "diff", "main", "comment-only", "--unified=0")
    added = [line for line in comment.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added and all('"""' in line or not line[1:].strip() or line.startswith("+    Real") for line in added)


def test_a_demo_into_a_folder_that_is_not_empty_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "keep.txt").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "demo", "--dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr == f"error: {tmp_path} is not empty (--dir); give a new or empty folder\n"
    assert (tmp_path / "keep.txt").read_text() == "mine\n"  # nothing lost


def test_the_summary_says_plainly_when_the_machine_was_too_noisy_to_decide(tmp_path):
    deeper, comment = demo.PULL_REQUESTS
    outcomes = [
        demo.Outcome(deeper, 0, "inconclusive", 0.91, None, tmp_path / "a.md", 60.0),
        demo.Outcome(comment, 0, "no change", 1.0, None, tmp_path / "b.md", 50.0),
    ]
    text = demo.summary(outcomes, tmp_path)
    assert f"too noisy to decide {deeper.title!r} within the time budget: it expected a regression" in text
    assert comment.title not in text.split("too noisy", 1)[1]  # the comment-only change was decided
    decided = [demo.Outcome(deeper, 1, "regression", 0.8, "model compute", tmp_path / "a.md", 60.0), outcomes[1]]
    assert "too noisy" not in demo.summary(decided, tmp_path)
    false_alarm = [decided[0], demo.Outcome(comment, 1, "regression", 0.9, None, tmp_path / "b.md", 50.0)]
    text = demo.summary(false_alarm, tmp_path)
    assert "too noisy" not in text  # a wrong verdict is no undecided one, and is not called so
    assert f"The check of {comment.title!r} said regression where the demo expected no change" in text


@pytest.mark.e2e
def test_perfgate_demo_checks_both_pull_requests_end_to_end_and_exits_0(tmp_path):
    """The README's first run, through the installed command (`.ci/run` runs it with its default budget): here
    with a budget of 2 s, so that each check measures its first pair and stops, whatever the machine's speed
    (a budget of 20 s took 21-58 s on this machine). The test accepts either verdict one pair supports, but only
    with the demo saying plainly that it could not decide."""
    folder = tmp_path / "demo"
    # The process's limit, not the check's: a check whose slow pairs fall on head's side measures on past its
    # budget, up to the demo's 8 pairs (30 s a pair on a machine at a third of its speed).
    result = run_cli("demo", "--dir", str(folder), "--time-budget", "2", timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for pull_request in demo.PULL_REQUESTS:
        assert f"=== pull request {pull_request.branch!r}: {pull_request.title}" in out
        assert (folder / f"{pull_request.branch}.md").read_text(encoding="utf-8").startswith("<!-- perfgate-report")
        assert str(folder / f"{pull_request.branch}.md") in out
    summary = out.split("=== perfgate demo: what the two checks decided", 1)[1]
    deeper, comment = demo.PULL_REQUESTS
    deeper_line = next(line for line in summary.splitlines() if repr(deeper.title) in line)
    comment_line = next(line for line in summary.splitlines() if repr(comment.title) in line)
    if "REGRESSION" in deeper_line:
        assert "suspect: model compute" in deeper_line and "fails the build (exit 1)" in deeper_line
    else:
        assert f"too noisy to decide {deeper.title!r}" in summary
    assert "REGRESSION" not in comment_line  # an unchanged step is never failed
    if "no change" not in comment_line:
        assert f"too noisy to decide {comment.title!r}" in summary
    assert "perfgate check --against main --configs fp32   # your working tree against main" in summary
    repo = folder / "repo"
    assert git(repo, "branch", "--show-current") == "main" and git(repo, "status", "--porcelain") == ""
    assert git(repo, "worktree", "list").count("\n") == 0  # the checks removed their base worktrees
