"""git, behind one door: every git command perfgate runs is started here, as a `git` subprocess (`run`).

One style for every use: the paired check's repository, refs and worktrees (and the sweep of the worktrees a
killed check left), the commits a bisection walks, the Perf-Accept trailers, the working tree's state that a
run records, the history branch's plumbing, and the commands of `perfgate init` and `perfgate demo`. Every
command gets git's messages in English and never a prompt (`environment`); local queries have a time limit.

The callers keep their own wording. This module raises `GitFailed` (a command that exited with an error, with
git's message) and `GitNotRun` (git could not be started: not installed, or the folder is gone); the queries
answer None where git cannot say (outside a repository, no git).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

GIT = "git"
QUERY_TIMEOUT_S = 60.0  # a local query (rev-parse, diff, worktree list) takes milliseconds
QUIET = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}  # messages in English (they are parsed), never a prompt
# `git push --porcelain` reasons that mean another push moved the ref first: build again on its tip. A lock or
# ref-update failure is the same race lost inside the remote, between two pushes in flight.
MOVED_REASONS = ("fetch first", "non-fast-forward", "stale info", "cannot lock ref", "failed to update ref")
# A throwaway repository (`perfgate demo`'s) commits without signing (no passphrase prompt) and runs no hooks.
THROWAWAY_CONFIG = {"commit.gpgsign": "false", "core.hooksPath": "/dev/null"}


@dataclass(frozen=True)
class Done:
    """A git command that ran: its arguments (after `git` and any `-c` settings), exit status and output."""

    args: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def text(self, *, strip: bool = True) -> str:
        output = self.stdout.decode("utf-8", "surrogateescape")
        return output.strip() if strip else output

    @property
    def error_text(self) -> str:
        return self.stderr.decode("utf-8", "replace").strip()

    @property
    def first_error(self) -> str:
        """git's first error line (`fatal: ...`, `error: ...`, else its first line), without the prefix."""
        lines = [line.strip() for line in self.error_text.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith(("fatal:", "error:"))] or lines
        if not errors:
            return "no message"
        return errors[0].removeprefix("fatal:").removeprefix("error:").strip()

    @property
    def last_error(self) -> str:
        """git's last line on stderr (where `worktree add` says why), or the exit status when it said nothing."""
        lines = [line.strip() for line in self.error_text.splitlines() if line.strip()]
        return lines[-1] if lines else f"git {self.args[0] if self.args else ''} exited with {self.returncode}"


class GitFailed(Exception):
    """A git command that exited with an error; `reason`: git's first error line, unless the caller knows better."""

    def __init__(self, done: Done, reason: str | None = None) -> None:
        self.done = done
        self.command = done.args[0] if done.args else GIT
        self.reason = reason or done.first_error
        super().__init__(f"git {self.command} failed: {self.reason}")


class GitNotRun(Exception):
    """git could not be started: `error` is the OSError (FileNotFoundError: git is not installed, or the folder
    is gone)."""

    def __init__(self, error: OSError) -> None:
        self.error = error
        super().__init__(error.strerror or str(error))


def environment(extra: Mapping[str, str] | None = None, *, defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """git's environment: this process's, `defaults` under it, QUIET and `extra` over it."""
    return {**(defaults or {}), **os.environ, **QUIET, **(extra or {})}


def run(
    cwd: Path,
    *args: str,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    check: bool = False,
) -> Done:
    """`git ARGS` in `cwd`, output captured (stdin: `stdin`, else nothing); `config`: `-c key=value` settings.
    GitNotRun when git cannot start; GitFailed when it fails and `check`; subprocess.TimeoutExpired past
    `timeout_s`."""
    settings = [part for key, value in (config or {}).items() for part in ("-c", f"{key}={value}")]
    try:
        process = subprocess.run(
            [GIT, *settings, *args],
            cwd=cwd,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            env=dict(env) if env is not None else environment(),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except OSError as exc:
        raise GitNotRun(exc) from None
    done = Done(tuple(args), process.returncode, process.stdout, process.stderr)
    if check and not done.ok:
        raise GitFailed(done)
    return done


def query(cwd: Path, *args: str, strip: bool = True) -> str | None:
    """git's output, or None when git fails here (not a repository, no git, past QUERY_TIMEOUT_S)."""
    try:
        done = run(cwd, *args, timeout_s=QUERY_TIMEOUT_S)
    except (GitNotRun, subprocess.SubprocessError):
        return None
    return done.text(strip=strip) if done.ok else None


def find_repository(folder: Path) -> Repository | None:
    """The repository whose working tree holds `folder`, or None (outside one, no git, no such folder)."""
    top = query(folder, "rev-parse", "--show-toplevel")
    return Repository(Path(top).resolve()) if top else None


@dataclass(frozen=True)
class Repository:
    """A git repository, by the top folder of its working tree (a linked worktree's own top folder too)."""

    root: Path

    def query(self, *args: str, strip: bool = True) -> str | None:
        return query(self.root, *args, strip=strip)

    # --- Refs and commits ------------------------------------------------------------------------------------

    def commit_of(self, ref: str) -> str | None:
        """The commit `ref` names, or None. git itself, not a parser of its own: in a shallow clone only git
        knows that HEAD~1 is not there (a parent's id read from the commit object names a missing commit)."""
        return self.query("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")

    def head_commit(self) -> str | None:
        """HEAD's commit; None before the first commit."""
        return self.commit_of("HEAD")

    def branch(self) -> str | None:
        """The branch HEAD is on (also before its first commit); None when HEAD is detached."""
        ref = self.query("symbolic-ref", "--quiet", "HEAD")
        return ref.removeprefix("refs/heads/") if ref else None

    def remote_default_branch(self, remote: str = "origin") -> str | None:
        """The branch `remote`'s HEAD points at, as the last clone or `remote set-head` saw it; None when unknown."""
        prefix = f"refs/remotes/{remote}/"
        ref = self.query("symbolic-ref", "--quiet", f"{prefix}HEAD")
        return ref.removeprefix(prefix) if ref and ref.startswith(prefix) else None

    def shallow(self) -> bool | None:
        """Whether this is a shallow clone (the usual actions/checkout clone has depth 1); None when git cannot say."""
        answer = self.query("rev-parse", "--is-shallow-repository")
        return None if answer is None else answer == "true"

    def merge_base(self, one: str, other: str) -> str | None:
        """The best common ancestor of two commits; None when they share none."""
        return self.query("merge-base", one, other)

    def first_parent_path(self, older: str, newer: str) -> list[str]:
        """The commits after `older` up to `newer` along `newer`'s first parents, oldest first."""
        done = run(self.root, "rev-list", "--first-parent", "--reverse", "--ancestry-path", f"{older}..{newer}")
        if not done.ok:
            raise GitFailed(done)
        return done.text().split()

    def commit_message(self, commit: str) -> str:
        """The message of `commit` (an id), decoded as the commit says it is encoded."""
        done = run(self.root, "cat-file", "commit", commit, check=True)
        headers, _, message = done.stdout.partition(b"\n\n")
        encoding = "utf-8"
        for line in headers.split(b"\n"):
            if line.startswith(b"encoding "):
                encoding = line[len(b"encoding ") :].decode("ascii", "replace").strip()
        try:
            return message.decode(encoding, "replace")
        except LookupError:  # an encoding Python does not know
            return message.decode("utf-8", "replace")

    def trailers(self, message: str) -> list[tuple[str, str]]:
        """The trailers git reads in `message` (`git interpret-trailers --parse`), each (key, value), stripped."""
        done = run(self.root, "interpret-trailers", "--parse", stdin=message.encode("utf-8"), check=True)
        found = []
        for line in done.stdout.decode("utf-8", "replace").strip().splitlines():
            key, _, value = line.partition(":")
            found.append((key.strip(), value.strip()))
        return found

    # --- The working tree ------------------------------------------------------------------------------------

    def dirty(self) -> bool | None:
        """Whether tracked files differ from HEAD, staged or not (untracked files do not count); None when git
        cannot say (a repository git refuses to read: another user's, without safe.directory)."""
        options = ("--abbrev=40", "--full-index", "--raw")
        staged = self.query("diff", "--cached", *options)
        unstaged = self.query("diff", *options)
        if staged is None or unstaged is None:
            return None
        return bool(staged or unstaged)

    def status_paths(self) -> list[str] | None:
        """The paths of the tracked files with uncommitted changes, relative to the top folder; None when git
        cannot say."""
        status = self.query("status", "--porcelain", "--untracked-files=no", "-z", strip=False)
        if status is None:
            return None
        return [entry[3:] for entry in status.split("\0") if len(entry) > 3]

    def changed_since(self, commit: str) -> list[str] | None:
        """The files the working tree changes against `commit`: tracked changes and new untracked files, sorted,
        relative to the top folder; None when git cannot say."""
        diff = self.query("diff", "--name-only", commit, "--")
        untracked = self.query("ls-files", "--others", "--exclude-standard")
        if diff is None or untracked is None:
            return None
        return sorted({*diff.splitlines(), *untracked.splitlines()} - {""})

    # --- Worktrees -------------------------------------------------------------------------------------------

    def add_worktree(self, path: Path, commit: str) -> None:
        """`commit` checked out, detached, at `path`; GitFailed (`last_error` says why) when git cannot."""
        done = run(self.root, "worktree", "add", "--detach", str(path), commit)
        if not done.ok:
            raise GitFailed(done, done.last_error)

    def remove_worktree(self, path: Path, *, locked: bool = False) -> None:
        """Remove the worktree at `path`, its changes and all (`locked`: also one left locked, as a `worktree add`
        killed half-way leaves it, after unlocking it); nothing when git cannot."""
        if locked:
            self.query("worktree", "unlock", str(path))
            self.query("worktree", "remove", "--force", "--force", str(path))
        else:
            self.query("worktree", "remove", "--force", str(path))

    def prune_worktrees(self) -> None:
        """Forget the worktrees whose folders are gone; nothing when git cannot."""
        self.query("worktree", "prune")

    def worktrees(self) -> list[Path]:
        """The folders of the repository's worktrees, the main one first; none when git cannot say."""
        listing = self.query("worktree", "list", "--porcelain") or ""
        return [Path(line[len("worktree ") :]) for line in listing.splitlines() if line.startswith("worktree ")]


# --- The history branch's plumbing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeEntry:
    """One line of `git ls-tree -l`: a file (or folder) of a commit's tree."""

    mode: str
    kind: str  # "blob", "tree", "commit"
    sha: str
    size: int | None  # None for a folder
    path: str


class Plumbing:
    """git plumbing in `repo`, committing as `identity` (GIT_AUTHOR_NAME and the like, unless this process sets
    them): objects, refs, fetch and push only, so the user's working tree, index and HEAD are never touched."""

    def __init__(self, repo: Path, identity: Mapping[str, str]) -> None:
        self.repo = repo
        self.env = environment(defaults=identity)
        self.env.pop("GIT_INDEX_FILE", None)  # only a temporary index of our own is ever written

    def run(self, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> Done:
        return run(self.repo, *args, stdin=stdin, env=env or self.env)

    def output(self, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
        """git's output, stripped; GitFailed when it fails."""
        done = self.run(*args, stdin=stdin, env=env)
        if not done.ok:
            raise GitFailed(done)
        return done.text()

    def valid_branch_name(self, branch: str) -> bool:
        """Whether `branch` names a branch (`--branch` alone would accept `@{-1}`, and expand it: the full ref
        name is checked as well)."""
        if branch.startswith("-"):
            return False
        checks = (["--branch", branch], [f"refs/heads/{branch}"])
        return not any(self.run("check-ref-format", *args).returncode for args in checks)

    def hash_object(self, data: bytes) -> str:
        """Write `data` as a blob; its sha."""
        return self.output("hash-object", "-w", "--stdin", stdin=data)

    def fetch(self, remote: str, branch: str, into: str) -> str | None:
        """Fetch `branch` of `remote` into the ref `into`; the tip's sha, or None when the remote has no such
        branch (then `into`, a tip fetched before from a branch deleted since, is deleted)."""
        refspec = f"+refs/heads/{branch}:{into}"
        done = self.run("fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--", remote, refspec)
        if not done.ok:
            if b"couldn't find remote ref" not in done.stderr:
                raise GitFailed(done)
            self.run("update-ref", "-d", into)
            return None
        return self.output("rev-parse", "--verify", f"{into}^{{commit}}")

    def blob_at(self, commit: str, path: str) -> str | None:
        """The sha of the file `path` in `commit`, or None when there is none."""
        done = self.run("rev-parse", "--verify", "--quiet", f"{commit}:{path}")
        return (done.text() or None) if done.ok else None

    def commit_with_file(self, parent: str | None, path: str, blob: str, message: str) -> str:
        """A commit of `parent`'s tree (or no tree) plus `path` holding `blob`, built in a temporary index."""
        with tempfile.TemporaryDirectory(prefix="perfgate-index-") as scratch:
            env = {**self.env, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
            self.output("read-tree", *([parent] if parent else ["--empty"]), env=env)
            self.output("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self.output("write-tree", env=env)
        parents = ["-p", parent] if parent else []
        return self.output("commit-tree", "--no-gpg-sign", tree, *parents, "-m", message)

    def push(self, remote: str, commit: str, branch: str) -> bool:
        """Push `commit` as `branch`'s new tip: True when pushed, False when another push moved it first;
        GitFailed for any other refusal (a protected branch, a hook: git's porcelain reason)."""
        done = self.run("push", "--porcelain", "--", remote, f"{commit}:refs/heads/{branch}")
        if done.ok:
            return True
        # --porcelain: one line a ref, "!\t<src>:<dst>\t[rejected] (fetch first)" for a refused one.
        refused = [line for line in done.stdout.decode("utf-8", "replace").splitlines() if line.startswith("!\t")]
        other = [line for line in refused if not any(reason in line for reason in MOVED_REASONS)]
        if refused and not other:
            return False
        raise GitFailed(done, other[0].split("\t")[-1] if other else None)

    def set_ref(self, ref: str, commit: str) -> None:
        """Point `ref` at `commit`; nothing when git cannot (a cache)."""
        self.run("update-ref", ref, commit)

    def tree(self, commit: str, folder: str) -> list[TreeEntry]:
        """The entries of `folder` (with its trailing slash) in `commit`'s tree, whichever folder `repo` is."""
        listing = self.run("ls-tree", "--full-tree", "-z", "-l", commit, folder)
        if not listing.ok:
            raise GitFailed(listing)
        entries = []
        for line in filter(None, listing.text(strip=False).split("\0")):
            info, _, path = line.partition("\t")
            mode, kind, sha, size = info.split()
            entries.append(TreeEntry(mode, kind, sha, None if size == "-" else int(size), path))
        return entries

    def blobs(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The contents of the blobs `shas`, read by one `git cat-file --batch`; a sha that names no blob is left
        out."""
        if not shas:
            return {}
        done = self.run("cat-file", "--batch", stdin="".join(f"{sha}\n" for sha in shas).encode())
        if not done.ok:
            raise GitFailed(done)
        found: dict[str, bytes] = {}
        data, position = done.stdout, 0
        for sha in shas:
            end = data.index(b"\n", position)
            header = data[position:end].decode().split()
            if len(header) != 3:  # "<sha> missing": no content follows
                position = end + 1
                continue
            size = int(header[2])
            if header[1] == "blob":
                found[sha] = data[end + 1 : end + 1 + size]
            position = end + 1 + size + 1  # the content, then a newline
        return found


# --- A throwaway repository (`perfgate demo`) ---------------------------------------------------------------


class Throwaway:
    """A repository made to be thrown away: committed to as `name <email>`, never signed, with no hooks."""

    def __init__(self, path: Path, name: str, email: str) -> None:
        self.path = path
        self.config = {"user.name": name, "user.email": email, **THROWAWAY_CONFIG}

    def _run(self, *args: str) -> None:
        run(self.path, *args, config=self.config, check=True)

    def create(self, branch: str) -> None:
        """An empty repository on `branch`, whatever git's default branch name."""
        self._run("init", "--quiet")
        self._run("symbolic-ref", "HEAD", f"refs/heads/{branch}")

    def commit_all(self, message: str, *, tracked_only: bool = False) -> None:
        """Commit every file (`tracked_only`: every change to the files git tracks)."""
        if tracked_only:
            self._run("commit", "--quiet", "-am", message)
        else:
            self._run("add", ".")
            self._run("commit", "--quiet", "-m", message)

    def checkout(self, branch: str, *, new_from: str | None = None) -> None:
        """Switch to `branch` (`new_from`: a new branch started there)."""
        self._run("checkout", "--quiet", *(["-b", branch, new_from] if new_from else [branch]))
