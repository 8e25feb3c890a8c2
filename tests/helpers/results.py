"""The results file's schema, and runs built by hand: trials with known phases, memory and speed (no trials run)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import perfgate
from perfgate.records.baselines import entry_from_workload
from perfgate.records.results import (
    ConfigResult,
    MicroResult,
    RunResult,
    TrialResult,
    WorkloadResult,
    WorkloadSettings,
)
from perfgate.records.shapes import Counts, Environment, PeakMemory

RESULTS_SCHEMA = Path(perfgate.__file__).parent / "records" / "schema" / "results-v2.schema.json"


def validate_results(document: dict) -> None:
    """Check a results document against the shipped JSON Schema (version 2); raises ValidationError."""
    import jsonschema

    schema = json.loads(RESULTS_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(document)


# -- a measured-looking run: workload `w`, config fp32, three trials of STEPS steps ---------------------

STEPS = 20
BASE_MS = {"data_wait": 0.1, "h2d": 0.05, "forward": 4.0, "backward": 6.0, "optimizer": 1.0}
# The few keys a hand-made run records (from_dict keeps them as they are: no `count`, so the fingerprint's default 1)
ENVIRONMENT = Environment.from_dict(
    {"device": {"type": "cpu"}, "cpu": {"model": "Test CPU", "available_cores": 8}, "threads": 2}
)


def phased_trial(index, ms, tail_ms=0.0, jitter=0.0, memory=None, system=None):
    """Trial `index` whose steps spend `ms` (milliseconds per phase) with a little jitter, and an optional
    slow last step (`tail_ms`), memory in use per step (`memory`) and system sampler figures."""
    phases = {p: [v / 1000 * (1 + jitter * ((i + index) % 3 - 1)) for i in range(STEPS)] for p, v in ms.items()}
    step_s = [sum(phases[p][i] for p in phases) for i in range(STEPS)]
    if tail_ms:
        step_s[-1] += tail_ms / 1000
    samples_per_sec = 8 * STEPS / sum(step_s)
    return TrialResult(
        config="fp32",
        trial=index,
        status="ok",
        samples_per_sec=samples_per_sec,
        step_s=step_s,
        phases_s=phases,
        first_losses=[1.0],
        data_checksum="sha256:00",
        memory=PeakMemory(kind="cpu-rss-above-setup", peak_bytes=50 << 20, reserved_bytes=None),
        memory_step_bytes=memory or [(50 << 20) + 4096 * ((i * 7) % 3) for i in range(STEPS)],
        system=system,
    )


def phased_run(ms, loader=None, tail_ms=0.0, memory=None, system=None):
    """A run of workload `w` (batch 8, STEPS steps) whose three fp32 trials spend `ms` per phase."""
    trials = [phased_trial(i, ms, tail_ms, jitter=0.01, memory=memory, system=system) for i in range(3)]
    workload = WorkloadResult(
        name="w",
        reference="w.py:w",
        settings=WorkloadSettings(
            batch_size=8, steps=STEPS, warmup_steps=1, seed=0, trials=3, threads=2, device="cpu", loader=loader or {}
        ),
        data_checksum="sha256:00",
        first_losses={"fp32": [1.0]},
        configs={"fp32": ConfigResult("fp32", trials)},
    )
    return RunResult("0.1.0", "2026-11-22T10:00:00+00:00", ENVIRONMENT, [workload])


BASELINE_RUN = phased_run(BASE_MS)
BASELINE = {"w": entry_from_workload(BASELINE_RUN, BASELINE_RUN.workloads[0])}  # the stored entry of that run


def results_document() -> dict:
    """A results document as perfgate writes one (workload w, four fp32 trials, this machine's environment)."""
    from perfgate.measure.environment import collect_environment

    document = dataclasses.replace(phased_run(BASE_MS), environment=collect_environment("cpu", 2)).to_dict()
    workload = document["workloads"][0]
    trials = workload["configs"]["fp32"]["trials"]
    trials.append({**trials[0], "trial": 3})
    workload["data_checksum"] = "sha256:" + "0" * 64
    for trial in trials:  # the fields the diagnosis tests' trials leave out
        trial["data_checksum"] = workload["data_checksum"]
        trial["memory"] = {"kind": "cpu-rss-above-setup", "peak_bytes": 50 << 20, "reserved_bytes": None}
    document = json.loads(json.dumps(document))
    validate_results(document)
    return document


def micro_regression(reason: str) -> MicroResult:
    """A pytest-benchmark test measured 4x slower than its baseline (0.250x), as a results file's `micro` keeps it."""
    return MicroResult(
        name="test_micro.py::test_augmentation",
        status="regression",
        reason=reason,
        baseline_calls_per_sec=480.0,
        current_calls_per_sec=120.0,
        ratio=0.25,
        ci_low=0.2,
        ci_high=0.3,
        p_value=1e-6,
        machine_ratio=1.01,
        rounds=57,
    )


# -- exact counts of a step, on hand-made runs ---------------------------------------------------------------


def counts(**fields):
    """One eager step of a small model on the CPU, counted; `fields` change it."""
    step = {
        "device": "cpu",
        "parameters": 1_000_000,
        "trainable_parameters": 1_000_000,
        "flops_per_sample": 2.14e8,
        "operators_per_step": 400,
        "kernels_per_step": None,
        "allocated_peak_bytes": int(28.5 * 2**20),
        "allocated_kind": "cpu-live-storage",
        "graphs": None,
        "graph_breaks": None,
        "recompiles": None,
    }
    return Counts(**{**step, **fields})


def with_trials(run, **fields):
    """The run with every trial's fields replaced (its counts, its torch calls, its compile stats, its peak)."""
    (workload,) = run.workloads
    trials = [dataclasses.replace(t, **fields) for t in workload.configs["fp32"].trials]
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])
