"""`perfgate bisect GOOD BAD`: the search over commits, its refusals, and one real bisection in a git repository."""

from __future__ import annotations

import pytest

from perfgate.check.bisect import bisect
from perfgate.judge.verdict import compare_run
from perfgate.records.verdicts import GateSettings
from perfgate.report.bisection import format_bisect
from tests.helpers.cli import run_in_process, run_main
from tests.helpers.git import git
from tests.helpers.results import BASE_MS, BASELINE, phased_run
from tests.helpers.workloads import paced_source

SETTINGS = GateSettings(first_n=3, max_n=3)
SAME = compare_run(phased_run(BASE_MS), BASELINE, SETTINGS)
SLOWER = compare_run(phased_run({**BASE_MS, "forward": 8.0}), BASELINE, SETTINGS)
COMMITS = [f"{index:02d}" * 20 for index in range(1, 13)]  # twelve commits after GOOD
GOOD = "00" * 20


def checker(speed: dict[str, float], calls: list[tuple[str, str]]):
    """A paired check over made-up commits: `speed` of each commit (GOOD 1.0); slower beyond 5% is a regression."""

    def check(head: str, base: str):
        calls.append((head, base))
        return SLOWER if speed[head] < 0.95 * speed[base] else SAME

    return check


def test_the_first_commit_that_made_it_slower_is_found_in_a_few_checks():
    speed = {GOOD: 1.0} | {c: (0.9 if i >= 7 else 1.0) for i, c in enumerate(COMMITS)}
    calls: list[tuple[str, str]] = []
    result = bisect(GOOD, COMMITS[-1], COMMITS, checker(speed, calls))
    assert result.first_bad == COMMITS[7] and result.monotonic
    assert calls[0] == (COMMITS[-1], GOOD)  # BAD against GOOD first
    assert calls[-1] == (COMMITS[7], COMMITS[6])  # then the culprit against its parent
    assert len(calls) <= 2 + 4  # log2(12) rounded up, and the two checks at the ends
    text = format_bisect(result)
    assert f"first bad commit: {COMMITS[7]}\n" in text and "w fp32: regression: " in text


def test_a_slowdown_in_small_steps_is_not_blamed_on_one_commit():
    speed = {GOOD: 1.0} | {c: 0.97 ** (i + 1) for i, c in enumerate(COMMITS)}  # 3% slower each commit
    result = bisect(GOOD, COMMITS[-1], COMMITS, checker(speed, []))
    assert result.first_bad == COMMITS[1] and not result.monotonic  # reported as such; bisect still exits 0
    assert "not monotonic: 0202020202 is the first commit slower than 0000000000, but it is not slower than" in (
        format_bisect(result)
    )


def test_a_slowdown_that_came_and_went_leaves_nothing_to_find():
    speed = {GOOD: 1.0} | {c: (0.8 if 3 <= i <= 6 else 1.0) for i, c in enumerate(COMMITS)}
    calls: list[tuple[str, str]] = []
    result = bisect(GOOD, COMMITS[-1], COMMITS, checker(speed, calls))
    assert result.first_bad is None and calls == [(COMMITS[-1], GOOD)]
    assert "is not slower than 0000000000 beyond the threshold: nothing to find" in format_bisect(result)


def test_refs_that_give_no_line_of_commits_are_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for n in range(2):
        git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", f"{n}")
    monkeypatch.chdir(repo)
    backwards = run_main(capsys, "bisect", "HEAD", "HEAD~1")
    assert backwards.returncode == 2
    assert backwards.stderr.startswith("error: HEAD is not an ancestor of HEAD~1: there is no line of commits")
    same = run_main(capsys, "bisect", "HEAD", "main")
    assert same.returncode == 2 and same.stderr.startswith("error: HEAD and main are the same commit;")
    unknown = run_main(capsys, "bisect", "v9", "HEAD")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown git ref v9")
    for unused in ("--json", "--profile", "--fail-on-inconclusive", "--baseline-dir"):  # bisect's help lists none
        refused = run_main(capsys, "bisect", "HEAD~1", "HEAD", unused, "x")
        assert refused.returncode == 2
        assert refused.stderr == f"error: unrecognized arguments: {unused} x; see 'perfgate bisect --help'\n"


@pytest.mark.e2e
def test_a_real_bisection_in_worktrees_names_the_commit(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for pause in (0.005, 0.025):  # the second commit pauses five times as long a step
        (repo / "paced.py").write_text(paced_source(pause, samples=64, steps=4))
        git(repo, "add", "paced.py")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", f"pause {pause}")
    bad = git(repo, "rev-parse", "HEAD")
    (repo / "paced.py").write_text(paced_source(0.0, samples=64, steps=4))  # the working tree is neither side
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # four pairs: fewer call nothing. One timed round a trial: calibrated rounds would stretch the three pairs
    # after the first to seconds of timed steps each, which a fivefold slowdown made of sleeps does not need.
    # Forked trials, as check --against forks them: this test's subject is the search, not how a trial starts.
    args = ("--configs", "fp32", "--threads", "1", "--trials", "4", "--max-trials", "4", "--rounds", "1")
    args += ("--fork-trials", "--quiet")
    result = run_in_process("bisect", "HEAD~1", "HEAD", "paced.py:paced", *args, cwd=repo, env={"TMPDIR": str(tmp)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {bad}\n" in result.stdout
    assert "each pair measured taking turns at the training steps, trials forked from one server a side\n" in (
        result.stdout
    )
    assert "paced fp32: regression: samples/s -" in result.stdout
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # both worktrees removed
    assert not [p for p in tmp.iterdir() if p.name.startswith("perfgate-")]
