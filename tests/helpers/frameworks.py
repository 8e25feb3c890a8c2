"""What the framework adapters' end-to-end tests share: a repository with one commit per version of the workload
file, and a scratch folder for temporary files (the base worktree, the frameworks' output folders)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.git import commit, new_repository


def repository(path: Path, *versions: str) -> Path:
    """A git repository with one commit of perf/workloads.py per version."""
    new_repository(path)
    for n, source in enumerate(versions, 1):
        commit(path, {"perf/workloads.py": source}, f"version {n}")
    return path


def scratch(folder: Path) -> dict[str, str]:
    """Temporary files under the test's folder (TMPDIR for the perfgate process)."""
    folder.mkdir(exist_ok=True)
    return {"TMPDIR": str(folder)}
