"""History records built by hand: a check of the measured-looking workload `w` (no trials run)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from perfgate.judge.verdict import compare_run
from perfgate.records.history import HistoryRecord
from perfgate.records.shapes import GitState
from perfgate.records.verdicts import GateSettings
from perfgate.report.history import record_of_check
from tests.helpers.results import BASE_MS, BASELINE, phased_run

SETTINGS = GateSettings(first_n=3, max_n=3)


def recorded(ms=BASE_MS, *, commit="a" * 40, at="2026-11-23T10:00:00+00:00", scale=1.0) -> HistoryRecord:
    """The record of a check of workload `w` whose steps spend `ms`, its samples/s scaled by `scale`."""
    run = phased_run(ms)
    (workload,) = run.workloads
    trials = [
        dataclasses.replace(t, samples_per_sec=t.samples_per_sec * scale) for t in workload.configs["fp32"].trials
    ]
    configs = {"fp32": dataclasses.replace(workload.configs["fp32"], trials=trials)}
    environment = dataclasses.replace(run.environment, git=GitState(sha=commit, dirty=False))
    run = dataclasses.replace(run, environment=environment, workloads=[dataclasses.replace(workload, configs=configs)])
    record = record_of_check(compare_run(run, BASELINE, SETTINGS), now=datetime.fromisoformat(at))
    assert record is not None
    return record
