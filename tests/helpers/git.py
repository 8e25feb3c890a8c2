"""git, run for real in a repository under a test's temporary folder."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(cwd: Path, *args: str) -> str:
    """Run git in a real repository under the test's temporary folder; its output, stripped."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def new_repository(path: Path) -> Path:
    """An empty git repository at `path` (branch main), with an author configured."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "ci@example.com")
    git(path, "config", "user.name", "CI")
    return path


def commit(repo: Path, files: dict[str, str], message: str, *, allow_empty: bool = False) -> str:
    """Write `files` (path relative to `repo` -> text) and commit everything; the new commit's SHA.
    `allow_empty`: a commit that changes no file (a message alone, as a trailer test needs)."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", *(["--allow-empty"] if allow_empty else []), "-m", message)
    return git(repo, "rev-parse", "HEAD")
