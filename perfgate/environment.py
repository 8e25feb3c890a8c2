"""The environment fingerprint recorded next to every result: software, hardware and git state."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def collect_environment(device_type: str, threads: int, cwd: Path | None = None) -> dict[str, Any]:
    """Versions, device, CPU, threads, platform and git state, as plain JSON-ready values."""
    import torch

    from perfgate.device import CudaDevice, Device

    device = CudaDevice() if device_type == "cuda" else Device()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "device": device.describe(),
        "cpu": {
            "model": _cpu_model(),
            "logical_cores": os.cpu_count(),
            "available_cores": available_cpus(),
            "capability": _cpu_capability(),
        },
        "threads": threads,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "git": git_state(cwd or Path.cwd()),
    }


def git_state(path: Path) -> dict[str, Any] | None:
    """Commit sha, branch and dirty flag of the repository holding `path`, or None outside one."""
    try:
        import git
    except ImportError:  # gitpython is installed, but raises ImportError when no git binary exists
        return None
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    with repo:
        try:
            sha: str | None = repo.head.commit.hexsha
        except ValueError:  # a repository with no commits yet
            sha = None
        try:
            branch: str | None = repo.active_branch.name
        except TypeError:  # detached HEAD, as in a GitHub Actions pull-request checkout
            branch = None
        try:
            dirty = repo.is_dirty(untracked_files=False)
        except git.GitCommandError:
            dirty = None
        return {"sha": sha, "branch": branch, "dirty": dirty}


def _cpu_model() -> str:
    from perfgate.device import cpu_model

    return cpu_model()


def _cpu_capability() -> str | None:
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except AttributeError:
        return None
