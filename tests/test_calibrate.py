"""`perfgate calibrate`: the runner's paired noise and a planted slowdown, outside git too."""

from __future__ import annotations

import json
import math

import pytest

from perfgate.check.calibrate import detectable_slowdown
from perfgate.judge.settings import GateSettings
from perfgate.measure.environment import torch_default_threads
from tests.helpers.cli import run_in_process
from tests.helpers.results import validate_results
from tests.helpers.workloads import TINY_FILE

TINY = f"{TINY_FILE}:tiny"


@pytest.mark.e2e
def test_calibrate_outside_git_reports_noise_and_sees_a_planted_slowdown(tmp_path):
    results = tmp_path / "planted.json"
    result = run_in_process(
        "calibrate", TINY, "--pairs", "2", "--trials", "2", "--max-trials", "2", "--time-budget", "40",
        "--slowdown", "90%", "--json", str(results), "--quiet",
        "--fork-trials",  # the subject is what calibrate reports, not how a trial process starts
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "calibration: this runner, the working tree against itself" in result.stdout
    (row,) = [line.split() for line in result.stdout.splitlines() if line.startswith("  tiny ")]
    assert row[1] == "fp32" and row[2].endswith("%")  # the pair noise was measured
    assert row[6] in ("regression", "inconclusive") and float(row[-1].rstrip("x")) < 0.8  # head took 1.9x as long
    threads = torch_default_threads()  # nothing pinned: what the user's training gets
    assert f"settings: {threads} torch thread(s) per trial (torch's default) on cpu" in result.stdout
    document = json.loads(results.read_text())
    validate_results(document)
    assert document["against"]["ref"] == "itself" and document["against"]["base_commit"] == ""


def test_the_detectable_slowdown_shrinks_with_more_pairs_and_never_undercuts_the_threshold():
    settings = GateSettings(first_n=3, max_n=20)
    few, many = detectable_slowdown(0.03, 5, settings, 0.05), detectable_slowdown(0.03, 20, settings, 0.05)
    assert 0.05 < many < few
    assert detectable_slowdown(0.001, 20, settings, 0.05) > 0.05  # beyond the threshold, whatever the noise
    assert math.isnan(detectable_slowdown(math.nan, 20, settings, 0.05))
    assert math.isnan(detectable_slowdown(0.03, 1, settings, 0.05))
