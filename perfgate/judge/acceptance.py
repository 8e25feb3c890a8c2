"""The `Perf-Accept` trailers of a commit, read from git (`records.acceptance` says what an acceptance is)."""

from __future__ import annotations

import re
from pathlib import Path

from perfgate.gitrepo import Repository, find_repository
from perfgate.records.acceptance import ACCEPT_FROM, TRAILER, Acceptance, AcceptanceError, parse_acceptance

TRAILER_LINE = re.compile(rf"{TRAILER}\s*:", re.IGNORECASE)  # what a trailer line would start with


def commit_acceptances(commit: str, directory: Path, where: str = ACCEPT_FROM) -> tuple[list[Acceptance], list[str]]:
    """The `Perf-Accept` trailers of `commit`'s message, and a warning for each `Perf-Accept` line that git
    does not read as a trailer (not in the message's last paragraph, so ignored).

    A commit that is not in the repository, or a folder outside git, is a one-line error."""
    repo = find_repository(directory)
    if repo is None:
        raise AcceptanceError(
            f"{directory} is not inside a git repository", where=where, hint="run perfgate in your project's checkout"
        )
    return _acceptances(repo, commit, where)


def head_acceptances(directory: Path) -> tuple[list[Acceptance], list[str]]:
    """The trailers of HEAD, the commit the working tree is on; none outside git or before the first commit."""
    repo = find_repository(directory)
    if repo is None or repo.head_commit() is None:
        return [], []
    return _acceptances(repo, "HEAD", "HEAD")


def _acceptances(repo: Repository, commit: str, where: str) -> tuple[list[Acceptance], list[str]]:
    if not commit.strip() or commit.startswith("-"):
        raise AcceptanceError(f"{commit!r} is not a commit", where=where, hint="give a commit id, e.g. HEAD")
    sha = repo.commit_of(commit)
    if not sha:
        raise AcceptanceError(
            f"unknown commit {commit}",
            where=where,
            hint=f"fetch it first (git fetch --depth=1 origin {commit}); in GitHub Actions give actions/checkout "
            "fetch-depth: 0",
        )
    message = repo.commit_message(sha)
    acceptances = [
        parse_acceptance(value, "trailer", sha)
        for key, value in repo.trailers(message)
        if key.lower() == TRAILER.lower()
    ]
    return acceptances, _stray_lines(message, len(acceptances), sha)


def _stray_lines(message: str, trailers: int, sha: str) -> list[str]:
    """Warnings for the `Perf-Accept:` lines beyond those git read as trailers."""
    lines = [line.strip() for line in message.splitlines()[1:] if TRAILER_LINE.match(line.strip())]
    if len(lines) <= trailers:
        return []
    return [
        f"commit {sha[:7]} has {len(lines) - trailers} {TRAILER} line(s) that git does not read as trailers, "
        f"ignored: a trailer goes in the message's last paragraph, with nothing but trailers (e.g. {lines[0]!r})"
    ]
