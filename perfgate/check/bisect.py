"""Bisect: the first commit between a good and a bad ref that made a config slower, each step a paired check.

`perfgate bisect GOOD BAD` lists the commits after GOOD up to BAD along BAD's first parents, checks BAD
against GOOD (nothing to look for unless BAD is slower), then halves the range: each step measures one
commit against GOOD in pairs, both checked out in worktrees, exactly as `check --against` measures the
working tree. The first commit slower than GOOD is then checked against its own parent: if it is not
slower than its parent, the slowdown did not come in with that commit alone (it came in steps, or came
and went), and the result says the history is not monotonic instead of blaming one commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from perfgate.check.paired import decide_paired
from perfgate.check.plan import CheckPlan, paired_session
from perfgate.errors import UsageError
from perfgate.measure.paired import commit_checkouts, open_repository, resolve_ref
from perfgate.records.bisection import BisectResult, BisectStep
from perfgate.records.verdicts import GateResult

Check = Callable[[str, str], GateResult]  # (head commit, base commit) -> the paired check's result


def commits_between(good: str, bad: str, directory: Path | None = None) -> tuple[str, str, list[str]]:
    """(GOOD's commit, BAD's commit, the commits after GOOD up to BAD along BAD's first parents, oldest first);
    a one-line error when GOOD is not an ancestor of BAD."""
    repo = open_repository(directory or Path.cwd())
    good_commit, bad_commit = resolve_ref(repo, good), resolve_ref(repo, bad)
    if good_commit == bad_commit:
        raise UsageError(f"{good} and {bad} are the same commit", hint="give an older good ref and a newer bad one")
    if repo.merge_base(good_commit, bad_commit) != good_commit:
        raise UsageError(
            f"{good} is not an ancestor of {bad}: there is no line of commits from one to the other",
            hint="give the good (older) ref first, then the bad (newer) one",
        )
    return good_commit, bad_commit, repo.first_parent_path(good_commit, bad_commit)


def bisect(
    good: str, bad: str, commits: Sequence[str], check: Check, notify: Callable[[str], None] | None = None
) -> BisectResult:
    """The bisection over `commits` (after `good`, ending with `bad`), each step `check(commit, base)`."""
    steps: list[BisectStep] = []

    def slower(commit: str, base: str) -> bool:
        if notify:
            notify(f"bisect: measuring {commit[:10]} against {base[:10]}")
        result = check(commit, base)
        step = BisectStep(commit, base, any(v.slower for v in result.verdicts), result)
        steps.append(step)
        if notify:
            notify(f"bisect: {commit[:10]} is {'slower' if step.slower else 'not slower'} than {base[:10]}")
        return step.slower

    if not slower(bad, good):
        return BisectResult(good, bad, list(commits), steps, None, True)
    low, high = -1, len(commits) - 1  # commits[low] is good (-1: GOOD itself), commits[high] is bad
    while high - low > 1:
        middle = (low + high) // 2
        if slower(commits[middle], good):
            high = middle
        else:
            low = middle
    first = commits[high]
    parent = commits[high - 1] if high > 0 else good
    monotonic = parent == good or slower(first, parent)
    return BisectResult(good, bad, list(commits), steps, first, monotonic)


def run_bisect(plan: CheckPlan, good: str, bad: str) -> BisectResult:
    """Bisect GOOD..BAD in this repository, each step a paired check measured as the user asked (the plan's
    `pairing`: `--parallel-pairs`, `--fork-trials`, `--[no-]interleaved-pairs`, as check --against)."""
    good_commit, bad_commit, commits = commits_between(good, bad)

    def check(head: str, base: str) -> GateResult:
        started = time.monotonic()
        with (
            commit_checkouts(base, head) as (base_side, head_side, root),
            paired_session(plan, base_side, head_side, base[:12], repo_root=root) as session,
        ):
            return decide_paired(session, plan.gate, started, None)

    return bisect(good_commit, bad_commit, commits, check, plan.notify)
