"""Fixtures shared by the test modules; the helpers they import are in tests/helpers/."""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.workloads import GATED


@pytest.fixture(scope="session")
def gated_project(tmp_path_factory):
    """A project folder whose baselines/ holds the gated workload measured on this machine (read-only)."""
    folder = tmp_path_factory.mktemp("project")
    result = run_cli("update", GATED, "--configs", "fp32", "--trials", "3", "--threads", "1", "--quiet", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "baselines/gated.yaml: new baseline for gated on " in result.stdout
    return folder
