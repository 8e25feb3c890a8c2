"""Threads: a trial runs with the thread count the user's training gets (torch's own, or the workload's), and
a pinned count only where the run asks for one."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.errors import WorkloadError
from perfgate.measure.environment import default_threads, torch_default_threads
from perfgate.measure.lab import RunningTrial, RunSettings, TrialPlace, trial_environment
from perfgate.measure.trial import TrialSpec
from perfgate.references import resolve_references
from tests.workloads.tiny import _tiny

# Under pytest-xdist these run beside other tests: nothing here reads a verdict or a figure that load changes.
pytestmark = pytest.mark.shares_machine

TINY = Path(__file__).parent / "workloads" / "tiny.py"


def test_a_trial_gets_torchs_own_thread_count_unless_the_run_asks_for_one():
    assert default_threads() is None
    assert default_threads(nproc=2) >= 1  # a data-parallel trial's ranks share the CPUs
    assert RunSettings(configs=("fp32",)).torch_threads == torch_default_threads()
    assert RunSettings(configs=("fp32",), threads=3).torch_threads == 3


def test_threads_are_pinned_in_the_trials_environment_only_when_asked_for(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    assert "OMP_NUM_THREADS" not in trial_environment(None)
    pinned = trial_environment(1)
    assert pinned["OMP_NUM_THREADS"] == pinned["MKL_NUM_THREADS"] == "1"


@pytest.mark.parametrize("threads", [0, -1, True, 1.5, "2"])
def test_a_workloads_thread_count_must_be_a_whole_number_of_at_least_one(threads):
    with pytest.raises(WorkloadError, match="threads must be an integer >= 1 or None"):
        _tiny(threads=threads)


@pytest.mark.parametrize(("asked", "expected"), [(None, 1), (2, 2)])
def test_the_workloads_own_thread_count_is_used_and_the_runs_overrides_it(tmp_path, asked, expected):
    (reference,) = resolve_references([f"{TINY}:tiny_one_thread"])
    spec = TrialSpec(reference.text, reference.target, "fp32", 0, "cpu", asked)
    record = RunningTrial(spec, tmp_path, 120.0, TrialPlace()).wait()
    assert record.result.ok, record.result.failure
    assert record.result.threads == expected
