"""The sdist and the wheel, built from a copy of the checkout (offline: the installed setuptools, no build
isolation) and checked by `twine check --strict`; the `built` fixture (tests/conftest.py) builds them once."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What a build can leave in a source tree: none of it may appear in (or change in) the checkout.
BUILD_LEFTOVERS = ("build", "dist", "*.egg-info", "perfgate/*.egg-info")
GIT_LEFTOVERS = ("build", "build/*", "dist", "dist/*", "*.egg-info/*")  # pathspecs (`*` matches a `/` too)


def leftovers() -> dict[str, int]:
    """Build output in the checkout (build/, dist/, *.egg-info/): each file's path and modification time."""
    found = {}
    for pattern in BUILD_LEFTOVERS:
        for path in ROOT.glob(pattern):
            for item in [path, *path.rglob("*")]:
                found[str(item.relative_to(ROOT))] = item.stat().st_mtime_ns
    return found


def git_status() -> list[str]:
    """`git status --porcelain` of the build's outputs, ignored ones included."""
    command = ["git", "status", "--porcelain", "--ignored", "--", *GIT_LEFTOVERS]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()


def copy_of_the_checkout(destination: Path) -> Path:
    """The checkout's tracked and untracked-but-not-ignored files, as they are on disk: setuptools writes
    perfgate.egg-info/ and build/ into the tree it builds, so it builds this copy, not the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is left out
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def build_distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(sdist, wheel, the copy they were built from) of the checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    before = leftovers(), git_status()
    source = copy_of_the_checkout(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation", "--outdir", str(out), str(source)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(command, cwd=out, capture_output=True, text=True, env=env)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    check = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("PASSED") == 2, check.stdout
    assert (leftovers(), git_status()) == before, "the build wrote into the checkout"
    return sdist, wheel, source


def venv_seeing_this_environment(venv: Path) -> Path:
    """A new virtual environment at `venv` that imports what this interpreter imports (torch, setuptools, the
    checkout's perfgate), with its own installs first; its python.

    `--system-site-packages` alone shows the *base* interpreter's packages: when the tests themselves run in
    a virtual environment, that is not where torch and the rest are. So a `.pth` file in the new environment
    adds this environment's site-packages after its own, each as a site directory (its `.pth` files, such as
    an editable install's, are processed too); the base's follow, as `--system-site-packages` puts them.
    """
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    if sys.prefix != sys.base_prefix:  # in a virtual environment (outside one, the base's packages are these)
        ours = [Path(folder) for folder in site.getsitepackages([sys.prefix]) if Path(folder).is_dir()]
        probe = [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        site_packages = Path(subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip())
        lines = [f"import site; site.addsitedir({str(folder)!r})\n" for folder in ours]
        (site_packages / "_outer_environment.pth").write_text("".join(lines), encoding="utf-8")
    return python
