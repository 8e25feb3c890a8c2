"""Accelerator utilisation (CUDA, with nvidia-ml-py), from the system sampler during the timed steps,
with SageMaker Debugger's published defaults: it speaks when GPU utilisation p95 is under gpu_low_percent (low
utilisation), or the GPU is under gpu_idle_percent on average while the busiest CPU core is over cpu_busy_percent (a
CPU bottleneck); silent without GPU samples.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from perfgate.project import DiagnosisThresholds
from perfgate.records.diagnoses import Finding
from perfgate.records.results import TrialResult


def _utilisation(trials: Sequence[TrialResult], th: DiagnosisThresholds) -> list[Finding]:
    gpu = [s.gpu_util_percent for t in trials if (s := t.system) and s.gpu_util_percent]
    if not gpu:
        return []
    p95 = statistics.median(g.p95 for g in gpu)
    mean = statistics.median(g.mean for g in gpu)
    cores = [s.busiest_core_percent.p95 for t in trials if (s := t.system) and s.busiest_core_percent]
    busiest = statistics.median(cores) if cores else None
    evidence = (f"GPU utilisation mean {mean:.0f}%, p95 {p95:.0f}%", f"busiest CPU core p95 {busiest or 0:.0f}%")
    if mean < th.gpu_idle_percent and busiest is not None and busiest > th.cpu_busy_percent:
        line = f"CPU bottleneck: the GPU is idle ({mean:.0f}% on average) while a CPU core is at {busiest:.0f}%"
        return [Finding("CPU bottleneck", line, evidence)]
    if p95 < th.gpu_low_percent:
        line = f"low accelerator utilisation: GPU utilisation p95 {p95:.0f}% (under {th.gpu_low_percent:g}%)"
        return [Finding("low accelerator utilisation", line, evidence)]
    return []
