"""Fixtures shared by the test modules; the helpers they import are in tests/helpers/."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import scipy.stats  # noqa: F401  (see below)
import torch  # noqa: F401  (see below)

from tests.helpers.cli import run_in_process
from tests.helpers.packaging import build_distributions
from tests.helpers.sharing import MachineLock, runs_alone, shared_files_first
from tests.helpers.workloads import GATED

_MACHINE_LOCK = pytest.StashKey[MachineLock]()
# Imported before any test: pytester takes the modules a test imported out of sys.modules when it ends, and
# numpy's compiled modules (which scipy.stats imports) and torch's cannot be loaded twice in a process. A pytester
# test that runs a perfgate command in this process, or a pytest session that collects a project's workloads
# (`runpytest_inprocess`), would otherwise break every later test that needs scipy.stats or torch.


@pytest.hookimpl(trylast=True)  # after pytest's own tmp_path plugin has set up the base folder
def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker takes the suite's machine lock around every test (tests/helpers/sharing.py):
    a test that reads timings runs alone, the others beside each other.

    The suite measures on the CPU unless a test asks for a device: its checks are written against the CPU's figures
    (resident memory above setup, the host clock, gloo ranks), and on a GPU machine `--device auto` would measure
    them on the card. `PERFGATE_DEVICE` is perfgate's own setting (`--device`), read by every check a test starts,
    in this process or another; the tests that need CUDA (marked `gpu`) name the device themselves. A
    PERFGATE_DEVICE of the caller's is kept (`PERFGATE_DEVICE=auto pytest` measures the checks on the card)."""
    os.environ.setdefault("PERFGATE_DEVICE", "cpu")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # The workers' base folders are popen-gwN inside the run's own: its files are the run's, and pytest's
        # rotation of old base folders removes them.
        run_folder = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
        config.stash[_MACHINE_LOCK] = MachineLock(run_folder, workerinput["testrunuid"])
        # The pytest sessions that tests start are no xdist workers: with these inherited, pytest-benchmark
        # would take them for one and gate nothing.
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            os.environ.pop(name, None)


# Every process the suite starts compiles with one inductor cache: the caller's, else torch's default for this user
# (what a user's runs share), named before any test points TMPDIR into its own folder, which would give each
# test's compiles an empty cache (a cold compile of a small model costs seconds more than a cached one). Importing
# lightning (tests/test_framework_lightning.py, at collection) sets it in this process, to that default.
_USER = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
_INDUCTOR_CACHE = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
    tempfile.gettempdir(), "torchinductor_" + _USER
)
# Where PYTHONDONTWRITEBYTECODE is set (CI images often set it), each of the several hundred Python processes the
# suite starts would compile perfgate's modules anew: 0.05 s in a trial, 0.15 s in a `perfgate` command, 0.3 s in a
# pytest session, on this machine. The processes the suite starts keep their bytecode instead, in one folder of
# their own (PYTHONPYCACHEPREFIX), so that no source folder gets a __pycache__ that the setting was there to prevent.
# A caller's own prefix is kept; what the run compiled in its temporary folders is removed when it ends.
_BYTECODE_CACHE = os.path.join(tempfile.gettempdir(), "perfgate-tests-bytecode_" + _USER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        os.environ.setdefault("PYTHONPYCACHEPREFIX", _BYTECODE_CACHE)
    if _MACHINE_LOCK in config.stash:
        shared_files_first(items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The bytecode the run compiled in the temporary folder (the tests' projects, perfgate's worktrees) goes with
    it; the interpreter's own (a virtual environment there, as CI's) stays for the next run."""
    if os.environ.get("PYTHONPYCACHEPREFIX") != _BYTECODE_CACHE:
        return
    # Python files bytecode under the path it imported from, as given (perfgate's worktrees in TMPDIR) or resolved
    # (pytest's tmp_path): where the temporary folder is reached through a link (macOS's /tmp), both.
    keep = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    temporary = {Path(tempfile.gettempdir()).absolute(), Path(tempfile.gettempdir()).resolve()}
    for mirror in (Path(_BYTECODE_CACHE + str(base)) for base in temporary):
        for folder in mirror.iterdir() if mirror.is_dir() else []:
            source = Path(str(folder).removeprefix(_BYTECODE_CACHE)).resolve()
            if not any(path.is_relative_to(source) for path in keep):
                shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """From the test's setup (its module and session fixtures' too) to its teardown."""
    lock = item.config.stash.get(_MACHINE_LOCK, None)
    if lock is None:
        return (yield)
    lock.acquire(alone=runs_alone(item))
    try:
        return (yield)
    finally:
        lock.release()


@pytest.fixture(scope="session")
def gated_project(tmp_path_factory):
    """A project folder whose baselines/ holds the gated workload measured on this machine (read-only).

    Five trials: a trial of this workload times about 10 ms of steps, so one trial that a busy machine
    slowed 2x leaves three trials' Welch interval (2 degrees of freedom) too wide for even a 6x planted
    slowdown to lie wholly beyond the threshold under a session's share of alpha."""
    folder = tmp_path_factory.mktemp("project")
    result = run_in_process(
        "update", GATED, "--configs", "fp32", "--trials", "5", "--threads", "1", "--quiet", cwd=folder
    )
    assert result.returncode == 0, result.stderr
    assert "baselines/gated.yaml: new baseline for gated on " in result.stdout
    return folder


@pytest.fixture(autouse=True)
def _no_job_summary_of_the_runner(monkeypatch):
    """Under GitHub Actions, perfgate appends its reports to `GITHUB_STEP_SUMMARY`: the tests' own runs must
    not write into the job summary of the CI that runs them. A test of the summary sets its own file."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture(autouse=True)
def _plain_output(monkeypatch):
    """The tests read perfgate's plain text: a FORCE_COLOR of the machine that runs them must not colour it.
    A test of colour sets its own."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """(sdist, wheel, the copy they were built from) of this checkout, built once a session."""
    return build_distributions(tmp_path_factory)
