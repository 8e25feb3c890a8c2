"""Where the user's own code is imported from: the same folders in perfgate's process, which loads every workload
before a trial starts (a bad reference or a missing module fails at once), and in every trial.

A workload file in `perf/` that imports the project's own package (`from mymodel import Net`) needs the project's
root on `sys.path`; `python -m perfgate` has the current folder there and the `perfgate` console script does not,
and a `src/` layout is on neither unless installed. Every lab and every side of a paired check imports from the
repository's source folders (`source_folders`: its root, `src/`, folders of it already on `sys.path`, and the package
folders of editable installs), ahead of anything installed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from perfgate.gitrepo import find_repository


def project_root(folder: Path) -> Path:
    """The top folder of the git repository holding `folder`, else `folder` itself."""
    repo = find_repository(folder)
    return repo.root if repo is not None else folder.resolve()


def source_folders(repo_root: Path) -> list[Path]:
    """The repository's folders Python imports the user's code from: editable installs' package folders,
    folders on sys.path, `src/`, and the root; in the working tree's coordinates."""
    found: list[Path] = []
    for finder in sys.meta_path:  # setuptools' editable finders map package names to folders
        module = sys.modules.get(getattr(finder, "__module__", "") or "")
        mapping = getattr(module, "MAPPING", None)
        if isinstance(mapping, dict):
            found.extend(Path(str(location)).resolve().parent for location in mapping.values())
    found.extend(Path(entry or ".").resolve() for entry in sys.path)
    found.extend([repo_root / "src", repo_root])
    folders = []
    installed = {Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}}
    for folder in found:
        if any(inside(folder, prefix) for prefix in installed) or "site-packages" in folder.parts:
            continue  # a virtual environment inside the repository: installed packages, not the user's code
        if folder.is_dir() and inside(folder, repo_root) and folder not in folders:
            folders.append(folder)
    return folders


def import_from(sources: Sequence[Path]) -> None:
    """Put `sources` first on this process's `sys.path` (those not on it already), as the trials will have them."""
    sys.path[:0] = [str(p) for p in sources if str(p) not in sys.path]


def inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def relative(path: Path, folder: Path) -> Path:
    return path.resolve().relative_to(folder.resolve())
