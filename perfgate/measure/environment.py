"""The environment recorded next to every result: software, hardware and git state (the fingerprint
that picks comparable baselines from it is `records.fingerprint`)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from perfgate.errors import UsageError
from perfgate.gitrepo import find_repository
from perfgate.naming import CLI, FrontEnd
from perfgate.records.shapes import CpuInfo, Environment, GitState


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads(nproc: int = 1) -> int | None:
    """Torch threads per trial when none are given: None, torch's own default, the thread count the user's
    training gets (nothing is pinned), on the CPU and CUDA, paired or not: the same rule everywhere. A
    data-parallel trial's ranks share the CPUs available.

    Pinning one thread made paired CPU trials quieter (docs/performance.md, "Quieter trials"), but it measures
    another program: a data pipeline's DataLoader workers then compete with one busy core instead of every
    core, and verdicts about the pipeline flip (docs/performance.md, "Threads: what the user runs").
    `--threads 1` keeps the quieter setting for whoever chooses it knowing that."""
    return max(1, available_cpus() // nproc) if nproc > 1 else None


def torch_default_threads() -> int:
    """The intra-op threads torch uses in a process that did not set them (OMP_NUM_THREADS, else its own rule)."""
    import torch

    return int(torch.get_num_threads())


def collect_environment(
    device_type: str, threads: int, cwd: Path | None = None, *, forked: bool = False
) -> Environment:
    """Versions, device, CPU, threads, platform and git state (`Environment.to_dict`: the files' JSON); `forked`:
    the trials are forked from one server (`--fork-trials`), whose figures are not a fresh process's, so the
    environment says `trials: forked` and the machine fingerprint files its baselines apart."""
    import torch

    from perfgate.measure.device import CudaDevice, Device

    device = CudaDevice() if device_type == "cuda" else Device()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return Environment(
        python=platform.python_version(),
        platform=platform.platform(),
        torch=str(torch.__version__),  # a str subclass (TorchVersion) that YAML's safe dumper refuses
        cuda=torch.version.cuda,
        cudnn=cudnn,
        device=device.describe(),
        cpu=CpuInfo(
            model=_cpu_model(),
            logical_cores=os.cpu_count(),
            available_cores=available_cpus(),
            capability=_cpu_capability(),
        ),
        threads=threads,
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        git=git_state(cwd or Path.cwd()),
        trials="forked" if forked else None,
    )


def git_state(path: Path) -> GitState | None:
    """Commit sha, branch, dirty and shallow flags of the repository holding `path`, or None outside one (or
    in one git refuses to read: another user's, without safe.directory).

    Whatever git cannot say is None: a repository without commits has no sha, a detached HEAD (a
    GitHub Actions pull-request checkout) no branch. None of these stops a run."""
    repo = find_repository(path)
    if repo is None:
        return None
    return GitState(sha=repo.head_commit(), branch=repo.branch(), dirty=repo.dirty(), shallow=repo.shallow())


def _cpu_model() -> str:
    from perfgate.measure.device import cpu_model

    return cpu_model()


def _cpu_capability() -> str | None:
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except AttributeError:
        return None


def dirty_paths(path: Path, ignore: Path | None = None) -> list[str] | None:
    """Tracked files with uncommitted changes in the repository holding `path` (None outside one).

    Changes under `ignore` (the baseline folder) do not count: an earlier update's uncommitted
    baselines must not block the next.
    """
    repo = find_repository(path)
    paths = None if repo is None else repo.status_paths()
    if repo is None or paths is None:
        return None
    root = repo.root
    skip = None
    if ignore is not None:
        resolved = (path / ignore).resolve() if not ignore.is_absolute() else ignore.resolve()
        skip = resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else None
    return [p for p in paths if not (skip and (p == skip or p.startswith(skip + "/")))]


def require_clean_tree(directory: Path, baseline_dir: Path, front_end: FrontEnd = CLI) -> None:
    """Refuse to measure a baseline on uncommitted changes to tracked files (the baselines' own excepted)."""
    dirty = dirty_paths(directory, ignore=baseline_dir)
    if dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise UsageError(
            f"the working tree has uncommitted changes ({shown}): a baseline must match a commit",
            hint=f"commit or stash them, or pass {front_end.option('allow-dirty')}",
        )
