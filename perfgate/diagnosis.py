"""Diagnosis: which part of the step explains a change, and rules that name a suspect with evidence.

Per-phase attribution compares the time per step of each phase (data wait, host-to-device copy,
forward + loss, backward, optimizer) with the baseline's, and says which phase explains how much of
the change in step time. The rules read the same figures:

- data pipeline: data wait takes DATA_WAIT_SHARE or more of the step, or its growth explains most
  (EXPLAINS) of a slower step; hints come from the DataLoader settings;
- model compute: forward, backward and optimizer growth explains most of a slower step;
- tail latency: p95 over p50 step time of TAIL_RATIO or more, or steps beyond mean + 3 sd.

Each finding is one line plus its evidence. Pure functions over the gate's result: nothing here runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfgate.baseline import BaselineEntry, ConfigEntry
from perfgate.gate import GateResult, Status
from perfgate.results import ConfigResult, WorkloadResult
from perfgate.summary import PHASES, percentile

DATA_WAIT_SHARE = 0.20  # of the step: the loader, not the model, sets the pace
EXPLAINS = 0.5  # a phase whose growth is at least half of the step's growth explains it
TAIL_RATIO = 1.5  # p95 / p50 of step times
TAIL_SIGMAS = 3.0
PHASE_NAMES = {"data_wait": "data wait", "h2d": "host-to-device copy", "forward": "forward + loss"}
SUSPECT_OF_PHASE = {
    "data_wait": "data pipeline",
    "h2d": "data pipeline",
    "forward": "model compute",
    "backward": "model compute",
    "optimizer": "model compute",
}


@dataclass(frozen=True)
class Finding:
    suspect: str  # "data pipeline", "model compute", "tail latency"
    line: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    baseline_s: float | None  # per step; None without a baseline
    current_s: float

    @property
    def change_s(self) -> float:
        return self.current_s - (self.baseline_s or 0.0)


@dataclass(frozen=True)
class Diagnosis:
    workload: str
    config: str
    phases: tuple[PhaseChange, ...]
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def suspect(self) -> str | None:
        """The first finding's suspect: findings come strongest first."""
        return self.findings[0].suspect if self.findings else None


def diagnose(result: GateResult, *, every_config: bool = False) -> list[Diagnosis]:
    """A diagnosis for each regressed config (each measured config with `every_config`)."""
    if result.run is None:
        return []
    measured = {w.name: w for w in result.run.workloads}
    diagnoses = []
    for workload in result.workloads:
        current = measured.get(workload.workload)
        if current is None:
            continue
        for verdict in workload.configs:
            config = current.configs.get(verdict.config)
            if config is None or not (every_config or verdict.status == Status.REGRESSION):
                continue
            base_entry = workload.baseline
            base = base_entry.configs.get(verdict.config) if base_entry else None
            diagnosis = diagnose_config(
                verdict.workload,
                verdict.config,
                base,
                config,
                current,
                steps=_steps(base_entry),
                cores=_cores(result.run.environment),
                slower=verdict.status == Status.REGRESSION,
            )
            if diagnosis is not None:
                diagnoses.append(diagnosis)
    return diagnoses


def diagnose_config(
    workload: str,
    config: str,
    baseline: ConfigEntry | None,
    current: ConfigResult,
    measured: WorkloadResult,
    *,
    steps: int | None,
    cores: int | None,
    slower: bool,
) -> Diagnosis | None:
    """Attribution and findings for one config; None when no trial of it succeeded."""
    ok = [t for t in current.trials if t.ok and t.step_s]
    if not ok:
        return None
    phases = tuple(
        PhaseChange(p, _baseline_per_step(baseline, p, steps), statistics.fmean(s for t in ok for s in t.phases_s[p]))
        for p in PHASES
    )
    step_s = [s for t in ok for s in t.step_s]
    findings = [
        *_data_pipeline(phases, step_s, measured.settings, cores, slower),
        *_model_compute(phases, slower),
        *_tail_latency(step_s, baseline),
    ]
    findings.sort(key=lambda f: _strength(f, phases, slower), reverse=True)
    return Diagnosis(workload, config, phases, tuple(findings))


def _data_pipeline(
    phases: Sequence[PhaseChange], step_s: Sequence[float], settings: Mapping[str, Any], cores: int | None, slower: bool
) -> list[Finding]:
    data = [p for p in phases if p.phase in ("data_wait", "h2d")]
    step = statistics.fmean(step_s)
    share = sum(p.current_s for p in data) / step if step else 0.0
    base_step = sum(p.baseline_s or 0.0 for p in phases)
    base_share = sum(p.baseline_s or 0.0 for p in data) / base_step if base_step else None
    explains = _explained(phases, {"data_wait", "h2d"}) if slower else 0.0
    if share < DATA_WAIT_SHARE and explains < EXPLAINS:
        return []
    was = "" if base_share is None else f"{base_share:.0%} -> "
    evidence = [_per_step(p) for p in data]
    if explains >= EXPLAINS:
        evidence.append(f"explains {explains:.0%} of the slower step")
    evidence.extend(_loader_hints(settings, cores))
    line = f"data pipeline: waiting for data takes {was}{share:.0%} of the step"
    return [Finding("data pipeline", line, tuple(evidence))]


def _loader_hints(settings: Mapping[str, Any], cores: int | None) -> list[str]:
    loader = settings.get("loader") or {}
    workers = int(loader.get("num_workers", 0) or 0)
    hints = []
    if workers == 0:
        spare = f" (this machine has {cores} cores)" if cores and cores > 1 else ""
        hints.append(f"num_workers=0: batches are loaded in the training process{spare}; try num_workers > 0")
    elif cores and workers >= cores:
        hints.append(f"num_workers={workers} with {cores} cores: the workers compete with the training process")
    if settings.get("device") == "cuda" and not loader.get("pin_memory"):
        hints.append("pin_memory is off: host-to-device copies cannot overlap with compute")
    return hints


def _model_compute(phases: Sequence[PhaseChange], slower: bool) -> list[Finding]:
    compute = {"forward", "backward", "optimizer"}
    explains = _explained(phases, compute) if slower else 0.0
    if explains < EXPLAINS:
        return []
    grown = sorted((p for p in phases if p.phase in compute), key=lambda p: p.change_s, reverse=True)
    evidence = tuple(_per_step(p) for p in grown)
    top = PHASE_NAMES.get(grown[0].phase, grown[0].phase)
    line = f"model compute: {top} grew most; compute phases explain {explains:.0%} of the slower step"
    return [Finding("model compute", line, evidence)]


def _tail_latency(step_s: Sequence[float], baseline: ConfigEntry | None) -> list[Finding]:
    if len(step_s) < 4:
        return []
    p50, p95 = percentile(step_s, 50), percentile(step_s, 95)
    mean, sd = statistics.fmean(step_s), statistics.pstdev(step_s)
    beyond = sum(1 for s in step_s if s > mean + TAIL_SIGMAS * sd) if sd > 0 else 0
    ratio = p95 / p50 if p50 > 0 else math.inf
    if ratio < TAIL_RATIO and not beyond:
        return []
    base = [t.step_p95_s / t.step_p50_s for t in (baseline.trials if baseline else []) if t.step_p50_s and t.step_p95_s]
    base_ratio = statistics.median(base) if base else None
    if ratio < TAIL_RATIO:
        line = f"tail latency: {beyond} of {len(step_s)} steps took longer than mean + {TAIL_SIGMAS:g} sd"
    else:
        line = f"tail latency: p95 step time is {ratio:.1f}x the median"
    evidence = [f"p50 {1000 * p50:.2f} ms, p95 {1000 * p95:.2f} ms"]
    if base_ratio is not None:
        evidence.append(f"baseline p95/p50 {base_ratio:.1f}")
    evidence.append(f"{beyond} step(s) beyond mean + {TAIL_SIGMAS:g} sd")
    return [Finding("tail latency", line, tuple(evidence))]


def _explained(phases: Sequence[PhaseChange], names: set[str]) -> float:
    """The share of the step's growth that these phases account for (0 when the step did not grow)."""
    if any(p.baseline_s is None for p in phases):
        return 0.0
    growth = sum(p.change_s for p in phases)
    if growth <= 0:
        return 0.0
    return sum(p.change_s for p in phases if p.phase in names) / growth


def _strength(finding: Finding, phases: Sequence[PhaseChange], slower: bool) -> float:
    """Order findings: what explains the slowdown first, then standing conditions, tails last."""
    if finding.suspect == "data pipeline":
        return _explained(phases, {"data_wait", "h2d"}) if slower else 0.5
    if finding.suspect == "model compute":
        return _explained(phases, {"forward", "backward", "optimizer"})
    return 0.1


def _baseline_per_step(baseline: ConfigEntry | None, phase: str, steps: int | None) -> float | None:
    if baseline is None or not steps:
        return None
    totals = [t.phase_s[phase] for t in baseline.trials if phase in t.phase_s]
    return statistics.fmean(totals) / steps if totals else None


def _steps(entry: BaselineEntry | None) -> int | None:
    steps = (entry.settings if entry else {}).get("steps")
    return int(steps) if isinstance(steps, int) and steps > 0 else None


def _cores(environment: Mapping[str, Any]) -> int | None:
    cores = (environment.get("cpu") or {}).get("available_cores")
    return int(cores) if isinstance(cores, int) else None


def _per_step(p: PhaseChange) -> str:
    """`data wait: 0.20 -> 9.80 ms per step`."""
    was = "" if p.baseline_s is None else f"{1000 * p.baseline_s:.2f} -> "
    return f"{PHASE_NAMES.get(p.phase, p.phase)}: {was}{1000 * p.current_s:.2f} ms per step"
