"""Fixtures shared by the test modules; the helpers they import are in tests/helpers/."""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_in_process
from tests.helpers.packaging import build_distributions
from tests.helpers.workloads import GATED


@pytest.fixture(scope="session")
def gated_project(tmp_path_factory):
    """A project folder whose baselines/ holds the gated workload measured on this machine (read-only)."""
    folder = tmp_path_factory.mktemp("project")
    result = run_in_process(
        "update", GATED, "--configs", "fp32", "--trials", "3", "--threads", "1", "--quiet", cwd=folder
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
