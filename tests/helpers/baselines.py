"""Baseline entries built by hand: one for the store's tests (workload gpt-small, a full fingerprint, a git
commit) and one for the gate's verdicts (workload w, samples/s and the machine probe's rates per trial)."""

from __future__ import annotations

from dataclasses import replace

from perfgate.records.baselines import BaselineEntry, ConfigEntry, TrialEntry
from perfgate.records.fingerprint import Fingerprint
from perfgate.records.results import WorkloadSettings
from perfgate.records.shapes import GitState

# -- the baseline store ----------------------------------------------------------------------------------

STORE_FINGERPRINT = Fingerprint(
    device_type="cpu", device_name=None, device_count=1, cuda=None, torch="2.13.0+cpu", cpu_model="AMD EPYC", threads=2
)


def store_entry(
    *, cpu_model: str = "AMD EPYC", sps: tuple[float, ...] = (100.0, 101.0, 99.5), checksum: str = "sha256:ab"
):
    """gpt-small's entry for the machine with `cpu_model`: fp32 trials at `sps` samples/s."""
    trials = [
        TrialEntry(samples_per_sec=v, peak_bytes=1000 + i, phase_s={"data_wait": 0.01}) for i, v in enumerate(sps)
    ]
    return BaselineEntry(
        workload="gpt-small",
        fingerprint=replace(STORE_FINGERPRINT, cpu_model=cpu_model),
        measured_at="2026-11-22T10:00:00+00:00",
        perfgate_version="0.1.0",
        git=GitState.from_dict({"sha": "0123456789abcdef", "branch": "main", "dirty": False}),
        reference="perf.py:gpt_small",
        settings=WorkloadSettings(batch_size=8, steps=10, warmup_steps=1, seed=0, trials=3),
        data_checksum=checksum,
        configs={"fp32": ConfigEntry([2.5, 2.4, 2.3], trials)},
    )


# -- the gate's verdicts ---------------------------------------------------------------------------------

GATE_FINGERPRINT = Fingerprint(device_type="cpu", device_count=1, torch="2.13.0+cpu", cpu_model="AMD EPYC", threads=2)


def gate_entry(samples_per_sec, probe_steps_per_sec=None, peak_mib=50):
    """Workload w's fp32 trials: their samples/s, the machine probe's rate beside each (or none), and memory."""
    probes = probe_steps_per_sec or [None] * len(samples_per_sec)
    trials = [
        TrialEntry(samples_per_sec=s, peak_bytes=peak_mib << 20, probe_steps_per_sec=p)
        for s, p in zip(samples_per_sec, probes, strict=True)
    ]
    return BaselineEntry(
        workload="w",
        fingerprint=GATE_FINGERPRINT,
        measured_at="2026-11-22T10:00:00+00:00",
        perfgate_version="0.1.0",
        git=None,
        reference="w.py:w",
        settings=WorkloadSettings(batch_size=8, steps=10, warmup_steps=1, seed=0),
        data_checksum="sha256:00",
        configs={"fp32": ConfigEntry([2.0], trials)},
    )


# The baseline the verdicts compare with: five trials, the probe as steady as the workload.
GATE_BASE = gate_entry([500, 505, 495, 502, 498], [1000, 1010, 990, 1004, 996])
