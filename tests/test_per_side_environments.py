"""The base of a paired check in its own environment: a pull request that only bumps a pin, or rebuilds the
project's compiled extension, is measured as it is (perfgate.measure.packages)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.errors import UsageError
from perfgate.measure.packages import (
    Installer,
    _uv_flags,
    base_environment,
    installed_packages,
    overlay,
    plan,
    read_declarations,
)
from tests.helpers.environments import build_wheel, head_environment
from tests.helpers.git import commit, new_repository
from tests.helpers.workloads import WORKLOADS

# A package whose one function the workload calls every step: 1.0 pauses 4 ms, 1.0.1 the same (a bump that
# changes nothing), 1.1 pauses 16 ms (a bump that makes every step slower).
EVALDEP = 'import time\n\nVERSION = "{version}"\n\n\ndef pause():\n    time.sleep({pause_s})\n'
PYPROJECT = '[project]\nname = "demo"\nversion = "0.1"\ndependencies = [{dependencies}]\n'
WORKLOAD = """
import evaldep
from tiny import PlainSGD, Points, mlp, mse

import perfgate


def paced_loss(model, batch):
    evaldep.pause()  # waiting, not computing: a slowdown other jobs on the machine cannot blur
    return mse(model, batch)


def bench():
    return perfgate.Workload(
        name="bench", model=mlp, dataset=Points, loss=paced_loss, optimizer=PlainSGD, batch_size=8, steps=4
    )
"""
LOCK = '[[package]]\nname = "{tokenizers}"\nversion = "{version}"\n\n[[package]]\nname = "numpy"\nversion = "2.0"\n'
PAIRS = ("--configs", "fp32", "--threads", "1", "--rounds", "1", "--fork-trials", "--time-budget", "60")


def files(tmp: Path, pyproject: str, extra: dict[str, str] | None = None) -> Path:
    root = tmp
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(pyproject)
    for name, text in (extra or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


# -- what the two commits declare -------------------------------------------------------------------------------


def test_a_changed_pin_is_what_the_base_installs_and_an_unchanged_project_installs_nothing(tmp_path):
    base = read_declarations(files(tmp_path / "base", PYPROJECT.format(dependencies='"evaldep==1.0", "numpy"')))
    head = read_declarations(files(tmp_path / "head", PYPROJECT.format(dependencies='"evaldep==1.1", "numpy"')))
    wanted = plan(base, head, {"evaldep": "1.1", "numpy": "2.0"})
    assert wanted.install == ("evaldep==1.0",) and not wanted.project and wanted.needed
    assert wanted.why == "pyproject.toml differs: the base declares evaldep==1.0"
    same = plan(head, head, {"evaldep": "1.1"})
    assert (
        not same.needed and same.why == "the two commits declare the same packages and the project builds no extension"
    )
    # Only perfgate's own settings changed: nothing to install.
    settings = read_declarations(
        files(
            tmp_path / "settings",
            PYPROJECT.format(dependencies='"evaldep==1.1", "numpy"')
            + '\n[tool.perfgate]\nworkloads = ["perf/bench.py:bench"]\n',
        )
    )
    assert not plan(settings, head, {"evaldep": "1.1"}).needed


def test_optional_groups_lock_files_requirements_files_and_the_harness(tmp_path):
    base = files(
        tmp_path / "base",
        '[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["perfgate==0.0.1"]\n'
        '[project.optional-dependencies]\nviz = ["matplotlib==3.7"]\ndocs = ["sphinx==7"]\n',
        {
            "requirements-dev.txt": "# tools\n-r requirements.txt\nhypothesis==6.1  # pinned\n-e .\n",
            "uv.lock": LOCK.format(tokenizers="Tokenizers", version="0.19.0"),
        },
    )
    head = files(
        tmp_path / "head",
        '[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["perfgate==0.1"]\n'
        '[project.optional-dependencies]\nviz = ["matplotlib==3.8"]\ndocs = ["sphinx==8"]\n',
        {
            "requirements-dev.txt": "hypothesis==6.2\n",
            "uv.lock": LOCK.format(tokenizers="tokenizers", version="0.20.0"),
        },
    )
    # The head's environment has matplotlib (its viz group) and tokenizers, not sphinx (docs was not installed).
    installed = {"matplotlib": "3.8", "tokenizers": "0.20.0", "numpy": "2.0", "hypothesis": "6.2"}
    wanted = plan(read_declarations(base), read_declarations(head), installed)
    assert wanted.install == ("matplotlib==3.7", "hypothesis==6.1", "tokenizers==0.19.0")  # never perfgate itself
    assert wanted.files == ("pyproject.toml", "requirements-dev.txt", "uv.lock")


def test_a_project_that_compiles_an_extension_builds_the_base_its_own(tmp_path):
    setup = "from setuptools import Extension, setup\nsetup(ext_modules=[Extension('fast', ['fast.c'])])\n"
    root = files(tmp_path / "ext", '[build-system]\nrequires = ["setuptools"]\n', {"setup.py": setup})
    declared = read_declarations(root)
    assert declared.extension and declared.installable
    wanted = plan(declared, declared, {})
    assert wanted.project and not wanted.install
    assert wanted.why == "the project builds an extension: the base's is built from the base's sources"
    backend = files(
        tmp_path / "skbuild",
        '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n',
    )
    assert read_declarations(backend).extension


def test_the_users_pip_settings_become_uvs_flags():
    settings = {
        "index-url": ["https://mirror.example/simple"],
        "extra-index-url": ["file:///opt/a", "file:///opt/b"],
        "find-links": ["/opt/wheels", "/opt/wheels"],
        "no-index": ["true"],
    }
    assert _uv_flags(settings) == [
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///opt/a", "--extra-index-url", "file:///opt/b",
        "--index-strategy", "unsafe-best-match",
        "--find-links", "/opt/wheels",
        "--no-index",
    ]  # fmt: skip


def test_nothing_declared_differently_builds_no_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFGATE_ENVIRONMENT_CACHE", str(tmp_path / "cache"))
    declared = PYPROJECT.format(dependencies='"evaldep==1.0"')
    base, head = files(tmp_path / "base", declared), files(tmp_path / "head", declared)
    with base_environment("auto", base, head, tmp_path) as own:
        assert own.python is None and own.project is None
        assert own.record.kind == "shared" and own.record.prepare_s == 0.0 and not own.record.changed()
        assert own.record.describe().startswith("both sides ran in the head's environment (the two commits declare")
    assert not (tmp_path / "cache").exists()  # nothing built, nothing cached
    with (
        pytest.raises(UsageError, match="--environment 'both' is not one of auto, shared, per-side"),
        base_environment("both", base, head, tmp_path),
    ):
        pass


def test_shared_says_what_the_base_did_not_get(tmp_path):
    base = files(tmp_path / "base", PYPROJECT.format(dependencies='"evaldep==1.0"'))
    head = files(tmp_path / "head", PYPROJECT.format(dependencies='"evaldep==1.1"'))
    with base_environment("shared", base, head, tmp_path) as own:
        assert own.python is None and own.record.declared == ("evaldep==1.0",)
        assert own.record.describe() == (
            "both sides ran in the head's environment (--environment shared); the base declares evaldep==1.0, "
            "not installed for it"
        )


# -- the environment, built for real from local wheels ----------------------------------------------------------


@pytest.mark.e2e
def test_pip_builds_an_overlay_holding_only_what_differs_and_a_missing_pin_is_one_line_with_nothing_left(
    tmp_path, monkeypatch
):
    """pip, the fallback installer: the overlay sees this interpreter's packages (torch among them) behind the
    base's one differing package, built in seconds, then taken from the cache."""
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "evaldep", "1.0", EVALDEP.format(version="1.0", pause_s=0.004))
    monkeypatch.setenv("PERFGATE_ENVIRONMENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PERFGATE_INSTALLER", "pip")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    installer = Installer()
    assert installer.name == "pip"
    head = installed_packages()
    python, built = overlay(["evaldep==1.0"], head, installer)
    assert built
    found = installed_packages(str(python))
    assert found["evaldep"] == "1.0" and found["torch"] == head["torch"]  # torch seen, not installed again
    own = [p.name for p in (python.parent.parent / "lib").glob("python*/site-packages/*")]
    assert not any(name.startswith("torch") for name in own)
    assert overlay(["evaldep==1.0"], head, installer) == (python, False)  # the cache
    with pytest.raises(Exception, match="evaldep==9.9"):
        overlay(["evaldep==9.9"], head, installer)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [python.parent.parent.name]  # nothing half built


def bump_repository(path: Path, base_pin: str, head_pin: str) -> Path:
    """A repository whose last commit changes only the pin of evaldep."""
    new_repository(path)
    shutil.copy(WORKLOADS / "tiny.py", path / "tiny.py")
    commit(path, {"perf/bench.py": WORKLOAD, "pyproject.toml": PYPROJECT.format(dependencies=f'"{base_pin}"')}, "base")
    commit(path, {"pyproject.toml": PYPROJECT.format(dependencies=f'"{head_pin}"')}, "bump evaldep")
    return path


def check(python: Path, repo: Path, tmp_path: Path, wheels: Path, *more: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in __import__("os").environ.items() if not k.startswith("PERFGATE_")},
        "PERFGATE_ENVIRONMENT_CACHE": str(tmp_path / "cache"),
        "PIP_FIND_LINKS": str(wheels),
        "PIP_NO_INDEX": "1",  # offline: the local wheels only
        "TMPDIR": str(tmp_path / "tmp"),
    }
    (tmp_path / "tmp").mkdir(exist_ok=True)
    command = [str(python), "-m", "perfgate", "check", "perf/bench.py:bench", "--against", "HEAD~1", *PAIRS, *more]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
def test_a_pull_request_that_only_bumps_a_pin_to_a_slower_release_fails_naming_the_package(tmp_path):
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "evaldep", "1.0", EVALDEP.format(version="1.0", pause_s=0.004))
    slower = build_wheel(wheels, "evaldep", "1.1", EVALDEP.format(version="1.1", pause_s=0.016))
    python = head_environment(tmp_path / "head-env", slower)
    repo = bump_repository(tmp_path / "repo", "evaldep==1.0", "evaldep==1.1")
    done = check(python, repo, tmp_path, wheels, "--trials", "4", "--max-trials", "4", "--json", "out.json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "evaldep 1.0 -> 1.1" in done.stdout
    assert "the base ran in its own environment (pyproject.toml differs: the base declares evaldep==1.0)" in done.stdout
    document = json.loads((repo / "out.json").read_text())
    environments = document["against"]["environments"]  # each side's installed packages, recorded
    assert environments["kind"] == "per-side" and environments["prepare_s"] > 0
    assert environments["code_changed"] is False  # the pull request changed pyproject.toml alone
    assert environments["packages"]["base"]["evaldep"] == "1.0" and environments["packages"]["head"]["evaldep"] == "1.1"
    assert environments["packages"]["base"]["torch"] == environments["packages"]["head"]["torch"]
    assert "suspect dependencies" in done.stdout


@pytest.mark.e2e
def test_a_bump_to_a_release_that_changes_nothing_passes(tmp_path):
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "evaldep", "1.0", EVALDEP.format(version="1.0", pause_s=0.004))
    same = build_wheel(wheels, "evaldep", "1.0.1", EVALDEP.format(version="1.0.1", pause_s=0.004))
    python = head_environment(tmp_path / "head-env", same)
    repo = bump_repository(tmp_path / "repo", "evaldep==1.0", "evaldep==1.0.1")
    done = check(python, repo, tmp_path, wheels, "--trials", "2", "--max-trials", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "REGRESSION" not in done.stdout
    assert "packages: evaldep 1.0 -> 1.0.1" in done.stdout


@pytest.mark.e2e
def test_a_base_whose_pin_cannot_be_installed_exits_3_in_one_line_and_leaves_nothing(tmp_path):
    wheels = tmp_path / "wheels"
    head_wheel = build_wheel(wheels, "evaldep", "1.1", EVALDEP.format(version="1.1", pause_s=0.004))
    python = head_environment(tmp_path / "head-env", head_wheel)
    repo = bump_repository(tmp_path / "repo", "evaldep==0.9", "evaldep==1.1")
    done = check(python, repo, tmp_path, wheels, "--trials", "2", "--max-trials", "2")
    assert done.returncode == 3, done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert "cannot build the base's environment" in line and "evaldep==0.9" in line
    assert "--environment shared" in done.stderr
    assert not list((tmp_path / "tmp").glob("perfgate-*")) and not list((tmp_path / "cache").glob("*"))


FAST_C = """
#include <Python.h>

static PyObject *spin(PyObject *self, PyObject *args) {
    volatile double x = 0.0;
    for (long i = 0; i < SPINS; i++) x += (double)i * 1e-9;
    return PyFloat_FromDouble(x);
}

static PyObject *spins(PyObject *self, PyObject *args) { return PyLong_FromLong(SPINS); }

static PyMethodDef methods[] = {
    {"spin", spin, METH_NOARGS, "busy work"}, {"spins", spins, METH_NOARGS, "the build's SPINS"}, {NULL, NULL, 0, NULL}
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fastpath", NULL, -1, methods};
PyMODINIT_FUNC PyInit_fastpath(void) { return PyModule_Create(&module); }
"""
EXTENSION_SETUP = (
    "from setuptools import Extension, setup\n\n"
    "SPINS = [('SPINS', '{spins}')]\n"
    "setup(name='demo', version='0.1', ext_modules=[Extension('fastpath', ['fastpath.c'], define_macros=SPINS)])\n"
)
EXTENSION_WORKLOAD = """
import os

import fastpath
from tiny import PlainSGD, Points, mlp, mse

import perfgate

if os.environ.get("SPINS_LOG"):
    with open(os.environ["SPINS_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{fastpath.spins()} {fastpath.__file__}\\n")


def spinning_loss(model, batch):
    fastpath.spin()
    return mse(model, batch)


def bench():
    return perfgate.Workload(
        name="bench", model=mlp, dataset=Points, loss=spinning_loss, optimizer=PlainSGD, batch_size=8, steps=4
    )
"""


@pytest.mark.e2e
def test_a_rebuilt_extension_is_measured_from_each_sides_own_sources(tmp_path):
    """The project's C extension spins 4x longer at head: the base's is built from the base's sources (its
    trials import that build, not the head's), and the check fails."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    pytest.importorskip("setuptools", reason="builds the extension with setuptools (a Python 3.12 venv has none)")
    repo = new_repository(tmp_path / "repo")
    shutil.copy(WORKLOADS / "tiny.py", repo / "tiny.py")
    (repo / ".gitignore").write_text("build/\n*.so\n")
    committed = {
        "fastpath.c": FAST_C,
        "perf/bench.py": EXTENSION_WORKLOAD,
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n',
    }
    commit(repo, {**committed, "setup.py": EXTENSION_SETUP.format(spins=500_000)}, "base")
    commit(repo, {"setup.py": EXTENSION_SETUP.format(spins=2_000_000)}, "spin longer")
    # The head's extension, built in place as an editable install builds it.
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=repo, check=True, capture_output=True
    )
    log = tmp_path / "spins.log"
    env = {
        "SPINS_LOG": str(log),
        "PERFGATE_ENVIRONMENT_CACHE": str(tmp_path / "cache"),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    (tmp_path / "tmp").mkdir()
    command = [sys.executable, "-m", "perfgate", "check", "perf/bench.py:bench", "--against", "HEAD~1", *PAIRS]
    done = subprocess.run(
        [*command, "--trials", "4", "--max-trials", "4"],
        cwd=repo,
        env={**__import__("os").environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the project builds an extension: the base's is built from the base's sources" in done.stdout
    spins = {line.split()[0] for line in log.read_text().splitlines()}
    assert spins == {"500000", "2000000"}  # each side imported its own build
    assert not list((tmp_path / "tmp").glob("perfgate-*"))
