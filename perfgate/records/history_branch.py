"""The history on a git branch: records fetched from, appended to and pushed to a branch of the repository.

A CI runner is thrown away after each job, so a history folder on it is lost with it. In CI the history
lives on a branch of the repository instead (default `perfgate-history`), one file a run under
`history/`, as `perfgate.records.history` writes them. Recording fetches the branch's tip into a
private ref, builds a commit that adds one file on top of it and pushes that commit. Only git plumbing
is used (`hash-object`, `read-tree` into a temporary index, `commit-tree`), so the user's working tree,
index and HEAD are never touched.

Two jobs recording at once both build on the same tip and one of them is rejected; that one fetches the
new tip and builds again, a few times, after a short random wait. Each record is a file of its own, so
rebuilding never conflicts, and the branch's history stays linear.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfgate._files import write_atomic
from perfgate.errors import PerfgateError
from perfgate.gitrepo import GitFailed, GitNotRun, Plumbing
from perfgate.records.history import MAX_RECORD_BYTES

DEFAULT_HISTORY_BRANCH = "perfgate-history"
HISTORY_FOLDER = "history"  # the records' folder on the branch
PRIVATE_REFS = "refs/perfgate/"  # the fetched tip, kept out of refs/heads and refs/remotes
IDENTITY = {
    "GIT_AUTHOR_NAME": "perfgate",
    "GIT_AUTHOR_EMAIL": "perfgate@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "perfgate",
    "GIT_COMMITTER_EMAIL": "perfgate@users.noreply.github.com",
}
BACKOFF_S = (0.1, 1.0)


class HistoryBranchError(PerfgateError):
    """The history branch cannot be fetched or pushed."""


def push_record(
    repo: Path,
    name: str,
    text: str,
    *,
    branch: str = DEFAULT_HISTORY_BRANCH,
    remote: str = "origin",
    attempts: int = 5,
    message: str | None = None,
) -> str:
    """Add the file `history/<name>` with `text` to `branch` on `remote` and push it; the new commit's sha.

    Never touches the working tree, the index or HEAD of `repo` (git plumbing only). A branch that does not
    exist yet is started with a root commit. A push rejected because another job pushed first is built
    again on the new tip, up to `attempts` times in all. If the tip already holds `history/<name>` with the
    same text, nothing is pushed and the tip's sha is returned; with other text, HistoryBranchError.
    `name` must be a plain file name ending in .json (ValueError otherwise).
    """
    _check_name(name)
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    history = _Branch(Path(repo), branch, remote)
    path = f"{HISTORY_FOLDER}/{name}"
    with history.errors():
        history.check()
        blob = history.git.hash_object(text.encode("utf-8"))
        for attempt in range(1, attempts + 1):
            parent = history.fetch()
            if parent is not None:
                present = history.git.blob_at(parent, path)
                if present == blob:
                    return parent
                if present:
                    raise HistoryBranchError(
                        f"the history branch already holds a different {path}",
                        where=history.where,
                        hint="records are never rewritten: record under a new name",
                    )
            commit = history.git.commit_with_file(parent, path, blob, message or f"perfgate: record {name}")
            if history.git.push(remote, commit, branch):
                history.git.set_ref(history.private_ref, commit)  # only a cache of the tip
                return commit
            if attempt < attempts:
                time.sleep(random.uniform(*BACKOFF_S))
    raise HistoryBranchError(
        f"could not push the history record {name}: the branch moved under each of {attempts} attempts",
        where=history.where,
        hint="other jobs kept pushing to it; run again, or record with more attempts",
    )


def fetch_history(
    repo: Path, destination: Path, *, branch: str = DEFAULT_HISTORY_BRANCH, remote: str = "origin"
) -> int:
    """Copy the branch's records (history/*.json at the tip of remote's branch, fetched now) into
    `destination` (created if needed); how many files. A branch that does not exist yet: 0 files, no error.

    Only regular files directly under `history/` whose names end in .json (and under the size of a record)
    are copied, byte for byte and under their own names, each replacing a file of that name in
    `destination`; anything else on the branch is ignored. The history loader validates them.
    """
    history = _Branch(Path(repo), branch, remote)
    with history.errors():
        history.check()
        tip = history.fetch()
        destination = Path(destination)
        try:
            destination.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryBranchError(f"cannot create {destination}: {exc.strerror}", hint="check the path") from None
        if tip is None:
            return 0
        wanted: dict[str, str] = {}  # file name -> blob
        for entry in history.git.tree(tip, f"{HISTORY_FOLDER}/"):
            file_name = entry.path.removeprefix(f"{HISTORY_FOLDER}/")
            regular = entry.mode in ("100644", "100755") and entry.kind == "blob"
            if regular and (entry.size or 0) <= MAX_RECORD_BYTES and _plain(file_name):
                wanted[file_name] = entry.sha
        contents = history.git.blobs(list(wanted.values()))
    for blob in wanted.values():
        if blob not in contents:
            raise HistoryBranchError(f"git cat-file gave no blob for {blob}", where=history.where)
    for file_name, blob in wanted.items():
        _write_bytes_atomic(destination / file_name, contents[blob])
    return len(wanted)


def check_branch(repo: Path, branch: str = DEFAULT_HISTORY_BRANCH, remote: str = "origin") -> None:
    """HistoryBranchError now, before anything is measured, if `branch` is no valid branch name."""
    history = _Branch(Path(repo), branch, remote)
    with history.errors():
        history.check()


def _check_name(name: str) -> None:
    if not _plain(name):
        raise ValueError(f"a history record's name must be a plain file name ending in .json, not {name!r}")


def _plain(name: str) -> bool:
    """A file name that stays inside its folder: no separator, no `..`, no control character, ending in .json."""
    return (
        name.endswith(".json")
        and len(name) > len(".json")
        and not any(ch in name for ch in "/\\")
        and ".." not in name
        and name.isprintable()
    )


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write beside `path`, then rename over it (a link of that name is replaced, never followed)."""
    try:
        write_atomic(path, data, mode=0o600)
    except OSError as exc:
        raise HistoryBranchError(
            f"cannot write {path}: {exc.strerror or exc}", hint="check free space and permissions"
        ) from None


class _Branch:
    """One branch of one remote, as the history's: its private ref, how errors name it, and git's plumbing in `repo`
    (`gitrepo.Plumbing`), committing as perfgate."""

    def __init__(self, repo: Path, branch: str, remote: str) -> None:
        self.repo = repo
        self.branch = branch
        self.remote = remote
        self.private_ref = PRIVATE_REFS + branch
        self.where = f"branch {branch} of {remote}"
        self.git = Plumbing(repo, IDENTITY)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """git's failures as HistoryBranchError, saying what to check."""
        try:
            yield
        except GitNotRun as exc:
            raise HistoryBranchError(
                f"cannot run git: {exc.error.strerror}", where=str(self.repo), hint="install git and check the folder"
            ) from None
        except GitFailed as exc:
            raise HistoryBranchError(
                f"git {exc.command} failed: {exc.reason}",
                where=self.where,
                hint="check the remote's name, URL and write access (in GitHub Actions: "
                "`permissions: contents: write`)",
            ) from None

    def check(self) -> None:
        if self.remote.startswith("-"):
            raise HistoryBranchError(f"{self.remote!r} is not a remote", where=self.where, hint="name a git remote")
        if not self.git.valid_branch_name(self.branch):
            raise HistoryBranchError(
                f"{self.branch!r} is not a valid branch name", where=self.where, hint="name the history branch"
            )

    def fetch(self) -> str | None:
        """Fetch the branch's tip into the private ref; its sha, or None when the remote has no such branch."""
        return self.git.fetch(self.remote, self.branch, self.private_ref)
