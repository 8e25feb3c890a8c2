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

import os
import random
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from perfgate._files import write_atomic
from perfgate.errors import PerfgateError
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
# `git push --porcelain` reasons that mean another job moved the branch first: build again on its tip.
# A lock or ref-update failure is the same race lost inside the remote, between two pushes in flight.
MOVED_REASONS = ("fetch first", "non-fast-forward", "stale info", "cannot lock ref", "failed to update ref")


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
    git = _Git(Path(repo), branch, remote)
    git.check_branch()
    path = f"{HISTORY_FOLDER}/{name}"
    blob = git.run("hash-object", "-w", "--stdin", stdin=text.encode("utf-8"))
    for attempt in range(1, attempts + 1):
        parent = git.fetch()
        if parent is not None:
            present = git.run("rev-parse", "--verify", "--quiet", f"{parent}:{path}", check=False)
            if present == blob:
                return parent
            if present:
                raise HistoryBranchError(
                    f"the history branch already holds a different {path}",
                    where=git.where,
                    hint="records are never rewritten: record under a new name",
                )
        commit = git.commit(parent, path, blob, message or f"perfgate: record {name}")
        if git.push(commit):
            git.run("update-ref", git.private_ref, commit, check=False)  # only a cache of the tip
            return commit
        if attempt < attempts:
            time.sleep(random.uniform(*BACKOFF_S))
    raise HistoryBranchError(
        f"could not push the history record {name}: the branch moved under each of {attempts} attempts",
        where=git.where,
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
    git = _Git(Path(repo), branch, remote)
    git.check_branch()
    tip = git.fetch()
    destination = Path(destination)
    try:
        destination.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HistoryBranchError(f"cannot create {destination}: {exc.strerror}", hint="check the path") from None
    if tip is None:
        return 0
    # --full-tree: the path is the branch's, whichever folder of the checkout `repo` is.
    listing = git.run("ls-tree", "--full-tree", "-z", "-l", tip, f"{HISTORY_FOLDER}/", strip=False)
    wanted: dict[str, str] = {}  # file name -> blob
    for line in filter(None, listing.split("\0")):
        info, _, path = line.partition("\t")
        mode, kind, blob, size = info.split()
        file_name = path.removeprefix(f"{HISTORY_FOLDER}/")
        if mode in ("100644", "100755") and kind == "blob" and int(size) <= MAX_RECORD_BYTES and _plain(file_name):
            wanted[file_name] = blob
    contents = git.blobs(list(wanted.values()))
    for file_name, blob in wanted.items():
        _write_bytes_atomic(destination / file_name, contents[blob])
    return len(wanted)


def check_branch(repo: Path, branch: str = DEFAULT_HISTORY_BRANCH, remote: str = "origin") -> None:
    """HistoryBranchError now, before anything is measured, if `branch` is no valid branch name."""
    _Git(Path(repo), branch, remote).check_branch()


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


class _Git:
    """git run in `repo` for one branch of one remote, with an identity to commit as and no prompts."""

    def __init__(self, repo: Path, branch: str, remote: str) -> None:
        self.repo = repo
        self.branch = branch
        self.remote = remote
        self.private_ref = PRIVATE_REFS + branch
        self.where = f"branch {branch} of {remote}"
        self.env = {**IDENTITY, **os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
        self.env.pop("GIT_INDEX_FILE", None)

    def check_branch(self) -> None:
        if self.remote.startswith("-"):
            raise HistoryBranchError(f"{self.remote!r} is not a remote", where=self.where, hint="name a git remote")
        # `--branch` alone would accept `@{-1}` (and expand it); the full ref name is checked as well.
        checks = (["--branch", self.branch], [f"refs/heads/{self.branch}"])
        if self.branch.startswith("-") or any(self._call(["check-ref-format", *args]).returncode for args in checks):
            raise HistoryBranchError(
                f"{self.branch!r} is not a valid branch name", where=self.where, hint="name the history branch"
            )

    def run(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
        strip: bool = True,
    ) -> str:
        """git's output; with `check=False`, "" when git fails."""
        result = self._call(args, stdin, env)
        if result.returncode != 0:
            if check:
                raise self._failure(args, result.stderr)
            return ""
        output = result.stdout.decode("utf-8", "surrogateescape")
        return output.strip() if strip else output

    def _call(
        self, args: Sequence[str], stdin: bytes | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                ["git", *args], cwd=self.repo, input=stdin, env=env or self.env, capture_output=True, check=False
            )
        except OSError as exc:
            raise HistoryBranchError(
                f"cannot run git: {exc.strerror}", where=str(self.repo), hint="install git and check the folder"
            ) from None

    def _failure(self, args: Sequence[str], stderr: bytes) -> HistoryBranchError:
        return HistoryBranchError(
            f"git {args[0]} failed: {_first_error(stderr)}",
            where=self.where,
            hint="check the remote's name, URL and write access (in GitHub Actions: `permissions: contents: write`)",
        )

    def fetch(self) -> str | None:
        """Fetch the branch's tip into the private ref; its sha, or None when the remote has no such branch."""
        refspec = f"+refs/heads/{self.branch}:{self.private_ref}"
        result = self._call(["fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--", self.remote, refspec])
        if result.returncode != 0:
            if b"couldn't find remote ref" not in result.stderr:
                raise self._failure(["fetch"], result.stderr)
            # A tip fetched before, from a branch deleted since, is forgotten.
            self.run("update-ref", "-d", self.private_ref, check=False)
            return None
        return self.run("rev-parse", "--verify", f"{self.private_ref}^{{commit}}")

    def commit(self, parent: str | None, path: str, blob: str, message: str) -> str:
        """A commit of `parent`'s tree (or no tree) plus `path` holding `blob`, built in a temporary index."""
        with tempfile.TemporaryDirectory(prefix="perfgate-index-") as scratch:
            env = {**self.env, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
            self.run("read-tree", *([parent] if parent else ["--empty"]), env=env)
            self.run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self.run("write-tree", env=env)
        parents = ["-p", parent] if parent else []
        return self.run("commit-tree", "--no-gpg-sign", tree, *parents, "-m", message)

    def push(self, commit: str) -> bool:
        """Push `commit` as the branch's new tip: True when pushed, False when another push got there first."""
        result = self._call(["push", "--porcelain", "--", self.remote, f"{commit}:refs/heads/{self.branch}"])
        if result.returncode == 0:
            return True
        # --porcelain: one line a ref, "!\t<src>:<dst>\t[rejected] (fetch first)" for a refused one.
        refused = [line for line in result.stdout.decode("utf-8", "replace").splitlines() if line.startswith("!\t")]
        other = [line for line in refused if not any(reason in line for reason in MOVED_REASONS)]
        if refused and not other:
            return False
        # A ref the remote refused for its own reasons (a protected branch, a hook): its porcelain reason.
        raise self._failure(["push"], other[0].split("\t")[-1].encode() if other else result.stderr)

    def blobs(self, shas: list[str]) -> dict[str, bytes]:
        """The contents of `shas`, read by one `git cat-file --batch`."""
        if not shas:
            return {}
        result = self._call(["cat-file", "--batch"], stdin="".join(f"{sha}\n" for sha in shas).encode())
        if result.returncode != 0:
            raise self._failure(["cat-file"], result.stderr)
        found: dict[str, bytes] = {}
        data, position = result.stdout, 0
        for sha in shas:
            end = data.index(b"\n", position)
            header = data[position:end].decode().split()
            if len(header) != 3 or header[1] != "blob":
                raise HistoryBranchError(f"git cat-file gave no blob for {sha}", where=self.where)
            size = int(header[2])
            found[sha] = data[end + 1 : end + 1 + size]
            position = end + 1 + size + 1  # the content, then a newline
        return found


def _first_error(stderr: bytes, fallback: str = "no message") -> str:
    """git's first error line (`fatal: ...`, `error: ...`, else its first line), without the prefix."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("fatal:", "error:"))] or lines
    if not errors:
        return fallback
    return errors[0].removeprefix("fatal:").removeprefix("error:").strip()
