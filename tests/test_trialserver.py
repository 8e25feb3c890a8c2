"""The fork server of a paired check's trials: forked trials measure what fresh ones do, and die as they do."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from perfgate.measure.lab import RunningTrial, TrialPlace, run_trial_process, start_trial_server
from perfgate.measure.trial import TrialSpec
from perfgate.measure.trialserver import ServerGone, TrialServer
from perfgate.references import resolve_references
from tests.helpers.workloads import WORKLOADS

pytestmark = pytest.mark.e2e  # real trials, forked from a real trial server


def spec(function: str, trial: int = 0) -> TrialSpec:
    (reference,) = resolve_references([f"{WORKLOADS / 'tiny.py'}:{function}"])
    return TrialSpec(reference.text, reference.target, "fp32", trial, "cpu", 1)


def test_a_forked_trial_computes_what_a_fresh_process_does_and_the_server_serves_the_next(tmp_path):
    place = TrialPlace(name="head")
    fresh = run_trial_process(spec("tiny"), tmp_path, 120.0, TrialPlace(name="fresh"))
    server = start_trial_server(1, place, tmp_path)
    try:
        forked = [RunningTrial(spec("tiny", trial), tmp_path, 120.0, place, server).wait() for trial in (1, 2)]
    finally:
        server.close()
    assert server.process.returncode == 0  # closing its requests ends it
    for record in forked:
        assert record.result.ok, record
        assert record.result.first_losses == fresh.result.first_losses  # seeded alike: the same numbers
        assert record.result.data_checksum == fresh.result.data_checksum
        assert record.result.threads == 1
    # The child imported nothing the server had not: torch was already there.
    assert forked[0].result.process_s < fresh.result.process_s


def test_a_forked_trial_past_its_timeout_dies_with_its_process_group_and_the_server_lives_on(tmp_path):
    place = TrialPlace(name="head")
    server = start_trial_server(1, place, tmp_path)
    try:
        hanging = RunningTrial(spec("hangs"), tmp_path, 3.0, place, server)
        pid = hanging.process.pid
        assert psutil.Process(pid).ppid() == server.process.pid  # forked by the server, not started by us
        record = hanging.wait()
        assert record.result.status == "failed" and record.failure_kind == "crash"
        assert str(record.result.failure).startswith("timed out after 3 s")
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        after = RunningTrial(spec("tiny"), tmp_path, 120.0, place, server).wait()
        assert after.result.ok, after
    finally:
        server.close()


def test_a_server_that_cannot_start_is_a_one_line_error_naming_its_last_words(tmp_path):
    log = tmp_path / "server.log"
    server = TrialServer([sys.executable, "-c", "raise SystemExit('no torch here')"], dict(os.environ), None, log)
    server.process.wait()
    with pytest.raises(ServerGone, match="^the trial server (has exited|did not start a trial): no torch here$"):
        server.fork(tmp_path / "spec.json", tmp_path / "out.json", tmp_path / "trial.log", None)
    server.close()
