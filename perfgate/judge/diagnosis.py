"""Diagnosis: which part of the step explains a change, and rules that name a suspect with evidence.

Per-phase attribution compares the time per step of each phase (data wait, host-to-device copy,
forward + loss, backward, optimizer) with the baseline's, and says which phase explains how much of
the change in step time. The rules read the same figures:

- data pipeline: data wait takes data_wait_share or more of the step, or its growth explains most
  (explains) of a regressed step, or it grew data_wait_growth times the baseline's (and by 5% of the
  step or more) while the DataLoader's settings changed (their change is the evidence); hints come from
  the DataLoader settings;
- model compute: forward, backward and optimizer growth explains most of a regressed step (only a
  regression verdict counts as slower: on a noisy machine one trial's step time proves nothing);
- tail latency: p95 over p50 step time of tail_ratio or more (and tail_ratio times the baseline's), or
  steps beyond mean + 3 sd;
- memory: memory in use rising step over step (a least-squares slope of memory_growth_kib per step or
  more, correlation with the step number memory_growth_fit or more: something keeps tensors or autograd
  graphs alive, the classic being a loss summed without `.item()`), or a peak-memory regression;
- framework overhead: a step calling torch_calls_growth times the baseline's torch functions, each
  added call costing at most call_overhead_us of step time (many small operations: Python and
  dispatch overhead, not compute), or more torch.compile graph breaks;
- accelerator utilisation (CUDA, with nvidia-ml-py), from the system sampler during the timed steps,
  with SageMaker Debugger's published defaults: GPU utilisation p95 under gpu_low_percent (low utilisation),
  or GPU under gpu_idle_percent on average while the busiest CPU core is over cpu_busy_percent (a CPU bottleneck);
- numerics: a config that failed with a NaN or infinite loss;
- operators (with `--profile`): the operators whose self time per step grew most against the
  baseline's profile, and the trace's file name (supporting evidence, never the suspect by itself).

Each finding is one line plus its evidence. Pure functions over the gate's result: nothing here runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfgate.formatting import format_bytes
from perfgate.judge.verdict import GateResult, Status
from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import BaselineEntry, ConfigEntry
from perfgate.records.results import ConfigResult, TrialResult, WorkloadResult
from perfgate.records.summary import PHASES, operator_self_s, percentile

Thresholds = DiagnosisThresholds  # the name the rules use
DEFAULT_THRESHOLDS = Thresholds()
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
    suspect: str  # "data pipeline", "model compute", "tail latency", "memory", "numerics", ...
    line: str
    evidence: tuple[str, ...] = ()
    standing: bool = False  # true of the baseline as well: worth knowing, but it explains no change


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
    compile_s: tuple[float | None, float] | None = None  # (baseline, current) one-off compile time

    def to_dict(self) -> dict[str, Any]:
        """The diagnosis as data (`perfgate report --format json`): times in seconds per step."""
        return {
            "workload": self.workload,
            "config": self.config,
            "suspect": self.suspect,
            "findings": [
                {"suspect": f.suspect, "line": f.line, "evidence": list(f.evidence), "standing": f.standing}
                for f in self.findings
            ],
            "phases": [
                {"phase": p.phase, "baseline_s": p.baseline_s, "current_s": p.current_s, "share": self.share(p)}
                for p in self.phases
            ],
            "compile_s": None
            if self.compile_s is None
            else {"baseline": self.compile_s[0], "current": self.compile_s[1]},
        }

    def share(self, phase: PhaseChange) -> float | None:
        """The share of the step's change that this phase accounts for; None without a baseline or change."""
        if any(p.baseline_s is None for p in self.phases):
            return None
        total = sum(p.change_s for p in self.phases)
        before = sum(p.baseline_s or 0.0 for p in self.phases)
        if before <= 0 or abs(total) < 0.05 * before:  # under 5% of the step: noise, no change to share out
            return None
        return phase.change_s / total

    @property
    def suspect(self) -> str | None:
        """The strongest finding's suspect; standing conditions and operator lists only support one."""
        return next((f.suspect for f in self.findings if f.suspect != "operators" and not f.standing), None)


def diagnose(
    result: GateResult, *, every_config: bool = False, thresholds: Thresholds | None = None
) -> list[Diagnosis]:
    """A diagnosis for each regressed config (each measured config with `every_config`).

    Thresholds: `thresholds`, else the project's `[tool.perfgate.diagnosis]`, else the defaults.
    """
    th = thresholds or result.settings.project.diagnosis_thresholds()
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
            numerics = _numerics(verdict.reason) if verdict.status == Status.FAILED else None
            if numerics is not None:
                diagnoses.append(Diagnosis(verdict.workload, verdict.config, (), (numerics,)))
                continue
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
                base_settings=base_entry.settings if base_entry else None,
                steps=_steps(base_entry),
                cores=_cores(result.run.environment),
                slower=verdict.slower,
                memory_regressed=verdict.memory is not None and verdict.memory.verdict == "regression",
                th=th,
                changes=verdict.evidence,
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
    base_settings: Mapping[str, Any] | None = None,
    steps: int | None,
    cores: int | None,
    slower: bool,
    memory_regressed: bool = False,
    th: Thresholds = DEFAULT_THRESHOLDS,
    changes: Sequence[str] = (),
) -> Diagnosis | None:
    """Attribution and findings for one config; None when no trial of it succeeded. `changes` is the
    verdict's evidence of what else changed (the model's numerics, the data pipeline's output)."""
    ok = [t for t in current.trials if t.ok and t.step_s]
    if not ok:
        return None
    phases = tuple(
        PhaseChange(p, _baseline_per_step(baseline, p, steps), statistics.fmean(s for t in ok for s in t.phases_s[p]))
        for p in PHASES
    )
    step_s = [s for t in ok for s in t.step_s]
    findings = [
        *_data_pipeline(phases, step_s, measured.settings, base_settings, cores, slower, th, changes),
        *_model_compute(phases, slower, th, changes),
        *_tail_latency(step_s, baseline, slower, th),
        *_memory(ok, baseline, memory_regressed, th),
        *_framework(ok, baseline, th),
        *_utilisation(ok, th),
        *_operators(baseline, measured.profiles.get(config)),
    ]
    findings.sort(key=lambda f: _strength(f, phases, slower), reverse=True)
    return Diagnosis(workload, config, phases, tuple(findings), _compile_times(ok, baseline))


def _compile_times(trials: Sequence[TrialResult], baseline: ConfigEntry | None) -> tuple[float | None, float] | None:
    """The compile config's one-off compile time (first step over a median step), baseline and now."""
    now = [t.compile_s for t in trials if t.compile_s is not None]
    if not now:
        return None
    before = [t.compile_s for t in (baseline.trials if baseline else []) if t.compile_s is not None]
    return (statistics.median(before) if before else None), statistics.median(now)


def compile_line(times: tuple[float | None, float]) -> str:
    """`compile: 21.0 -> 24.5 s (once per process, outside the step times)`."""
    before, now = times
    was = "" if before is None else f"{before:.1f} -> "
    return f"compile: {was}{now:.1f} s (once per process, outside the step times)"


def _data_pipeline(
    phases: Sequence[PhaseChange],
    step_s: Sequence[float],
    settings: Mapping[str, Any],
    base_settings: Mapping[str, Any] | None,
    cores: int | None,
    slower: bool,
    th: Thresholds,
    changes: Sequence[str] = (),
) -> list[Finding]:
    data = [p for p in phases if p.phase in ("data_wait", "h2d")]
    step = statistics.fmean(step_s)
    wait_before, wait_now = sum(p.baseline_s or 0.0 for p in data), sum(p.current_s for p in data)
    share = wait_now / step if step else 0.0
    base_step = sum(p.baseline_s or 0.0 for p in phases)
    base_share = wait_before / base_step if base_step else None
    explains = _explained(phases, {"data_wait", "h2d"}) if slower else 0.0
    changed = _loader_changes(base_settings, settings)
    output_changed = [c for c in changes if c.startswith("the data pipeline's output changed")]
    grew_with_change = (
        bool(changed or output_changed)
        and base_share is not None
        and wait_now >= th.data_wait_growth * wait_before
        and wait_now - wait_before >= 0.05 * step  # and by a noticeable part of the step
    )
    if share < th.data_wait_share and explains < th.explains and not grew_with_change:
        return []
    was = "" if base_share is None else f"{base_share:.0%} -> "
    evidence = [_per_step(p) for p in data]
    if explains >= th.explains:
        evidence.append(f"explains {explains:.0%} of the slower step")
    if changed:
        evidence.append(f"the DataLoader's settings changed: {', '.join(changed)}")
    evidence.extend(output_changed)
    evidence.extend(_loader_hints(settings, cores))
    line = f"data pipeline: waiting for data takes {was}{share:.0%} of the step"
    standing = (
        explains < th.explains
        and not grew_with_change
        and base_share is not None
        and base_share >= th.data_wait_share
        and share < 1.5 * base_share
    )
    if standing:
        line += " (so did the baseline's)"
    return [Finding("data pipeline", line, tuple(evidence), standing)]


def _loader_changes(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[str]:
    """`num_workers 2 -> 0` for each DataLoader setting that differs from the baseline's."""
    if before is None:
        return []
    old, new = before.get("loader") or {}, now.get("loader") or {}
    return [
        f"{key} {old.get(key, 'default')} -> {new.get(key, 'default')}"
        for key in sorted({*old, *new})
        if old.get(key) != new.get(key)
    ]


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


def _model_compute(
    phases: Sequence[PhaseChange], slower: bool, th: Thresholds, changes: Sequence[str] = ()
) -> list[Finding]:
    compute = {"forward", "backward", "optimizer"}
    explains = _explained(phases, compute) if slower else 0.0
    if explains < th.explains:
        return []
    grown = sorted((p for p in phases if p.phase in compute), key=lambda p: p.change_s, reverse=True)
    evidence = tuple(_per_step(p) for p in grown) + tuple(
        c for c in changes if c.startswith("the model's numerics changed")
    )
    top = PHASE_NAMES.get(grown[0].phase, grown[0].phase)
    line = f"model compute: {top} grew most; compute phases explain {explains:.0%} of the slower step"
    return [Finding("model compute", line, evidence)]


def _tail_latency(step_s: Sequence[float], baseline: ConfigEntry | None, slower: bool, th: Thresholds) -> list[Finding]:
    if len(step_s) < 4:
        return []
    p50, p95 = percentile(step_s, 50), percentile(step_s, 95)
    mean, sd = statistics.fmean(step_s), statistics.pstdev(step_s)
    beyond = sum(1 for s in step_s if s > mean + th.tail_sigmas * sd) if sd > 0 else 0
    ratio = p95 / p50 if p50 > 0 else math.inf
    base = [t.step_p95_s / t.step_p50_s for t in (baseline.trials if baseline else []) if t.step_p50_s and t.step_p95_s]
    base_ratio = statistics.median(base) if base else None
    tail = ratio >= th.tail_ratio and (base_ratio is None or ratio >= th.tail_ratio * base_ratio)  # new, not the usual
    if not tail and not beyond:
        return []
    if not tail:
        line = f"tail latency: {beyond} of {len(step_s)} steps took longer than mean + {th.tail_sigmas:g} sd"
    else:
        line = f"tail latency: p95 step time is {ratio:.1f}x the median"
    evidence = [f"p50 {1000 * p50:.2f} ms, p95 {1000 * p95:.2f} ms"]
    if base_ratio is not None:
        evidence.append(f"baseline p95/p50 {base_ratio:.1f}")
    evidence.append(f"{beyond} step(s) beyond mean + {th.tail_sigmas:g} sd")
    # A few slow steps are what a shared machine does now and then: a suspect only in a regression.
    return [Finding("tail latency", line, tuple(evidence), standing=not slower)]


def _memory(
    trials: Sequence[TrialResult], baseline: ConfigEntry | None, regressed: bool, th: Thresholds
) -> list[Finding]:
    findings = []
    fits = [_growth(t.memory_step_bytes) for t in trials if len(t.memory_step_bytes) >= 4]
    if fits:
        per_step, fit = statistics.median(f[0] for f in fits), statistics.median(f[1] for f in fits)
        steps = statistics.median(len(t.memory_step_bytes) for t in trials if len(t.memory_step_bytes) >= 4)
        total = per_step * (steps - 1)
        if per_step >= th.memory_growth_kib * 1024 and fit >= th.memory_growth_fit:
            findings.append(
                Finding(
                    "memory",
                    f"memory growth: memory in use rose {format_bytes(int(per_step))} per step, "
                    f"{format_bytes(int(total))} over {steps:g} timed steps",
                    (
                        f"correlation with the step number {fit:.2f} (a steady rise, not a one-off allocation)",
                        "something keeps tensors alive from step to step, often a loss summed without .item() "
                        "(it keeps each step's graph)",
                    ),
                )
            )
    if regressed:
        peaks = [t.memory.get("peak_bytes", 0) for t in trials]
        was = f"{format_bytes(int(statistics.median(baseline.peak_bytes)))} -> " if baseline else ""
        findings.append(
            Finding("memory", f"peak memory regression: {was}{format_bytes(int(statistics.median(peaks)))}")
        )
    return findings


def _framework(trials: Sequence[TrialResult], baseline: ConfigEntry | None, th: Thresholds) -> list[Finding]:
    if baseline is None:
        return []
    findings = []
    calls = [t.torch_calls_per_step for t in trials if t.torch_calls_per_step]
    base_calls = [t.torch_calls_per_step for t in baseline.trials if t.torch_calls_per_step]
    step_now = statistics.median(s for t in trials for s in t.step_s)
    step_before = statistics.median(t.step_p50_s for t in baseline.trials if t.step_p50_s) if baseline.trials else 0.0
    if calls and base_calls:
        now, before = statistics.median(calls), statistics.median(base_calls)
        # Step time added per added call; a step no slower (noise) means the calls cost next to nothing.
        per_call = max(0.0, step_now - step_before) / (now - before) if now > before else math.inf
        if now >= th.torch_calls_growth * before and per_call <= th.call_overhead_us / 1e6:
            findings.append(
                Finding(
                    "framework overhead",
                    f"framework overhead: a step calls {now:g} torch functions, {now / before:.1f}x the baseline's "
                    f"{before:g}",
                    (
                        f"step time {1000 * step_before:.2f} -> {1000 * step_now:.2f} ms: each added call costs "
                        f"{1e6 * per_call:.1f} us, dispatch-sized, not compute",
                        "many small operations spend their time in Python and dispatch, not in compute",
                        "fuse or vectorise them, or try torch.compile (the bf16-compile config)",
                    ),
                )
            )
    syncs = [t.host_syncs_per_step for t in trials if t.host_syncs_per_step is not None]
    base_syncs = [t.host_syncs_per_step for t in baseline.trials if t.host_syncs_per_step is not None]
    now_syncs = statistics.median(syncs) if syncs else None
    before_syncs = statistics.median(base_syncs) if base_syncs else None
    if now_syncs is not None and before_syncs is not None and now_syncs > before_syncs:
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: {now_syncs:g} host sync{'' if now_syncs == 1 else 's'} per step, "
                f"the baseline {before_syncs:g}",
                (
                    ".item(), .cpu(), .tolist() and float(tensor) copy a value to the host; on an accelerator each "
                    "waits for all queued work, so the device idles while Python catches up",
                    "keep values on the device (sum losses as tensors, log every N steps) or copy with "
                    "non_blocking=True",
                ),
            )
        )
    breaks = [(t.compile_stats or {}).get("graph_breaks") for t in trials]
    base_breaks = [t.graph_breaks for t in baseline.trials if t.graph_breaks is not None]
    now_breaks = max((b for b in breaks if b is not None), default=None)
    if now_breaks is not None and base_breaks and now_breaks > max(base_breaks):
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: torch.compile graph breaks {max(base_breaks)} -> {now_breaks}",
                ("each break returns to Python between compiled graphs; TORCH_LOGS=graph_breaks shows where",),
            )
        )
    findings.extend(
        Finding("framework overhead", f"framework overhead: {w}")
        for t in trials[:1]
        for w in t.warnings
        if "compiled" in w
    )
    return findings


def _operators(baseline: ConfigEntry | None, profile: Mapping[str, Any] | None) -> list[Finding]:
    """From --profile: the operators whose self time grew most against the baseline's, and the trace."""
    if not profile:
        return []
    if "failure" in profile:
        return [Finding("operators", f"operators: no profile ({profile['failure']})")]
    current = profile.get("top_operators") or []
    trace = f"trace: {profile.get('trace')}"
    if baseline is None or not baseline.top_operators:
        top = ", ".join(row["name"] for row in current[:3])
        return [
            Finding("operators", f"operators: most self time in {top or '-'} (the baseline has no profile)", (trace,))
        ]
    grown = grown_operators(baseline.top_operators, current)
    if not grown:
        return [
            Finding("operators", "operators: no operator's self time grew against the baseline's profile", (trace,))
        ]
    evidence = tuple(f"{name}: {1000 * before:.3f} -> {1000 * now:.3f} ms per step" for name, before, now in grown)
    return [Finding("operators", f"operators: {grown[0][0]} grew most", (*evidence, trace))]


def _utilisation(trials: Sequence[TrialResult], th: Thresholds) -> list[Finding]:
    gpu = [s["gpu_util_percent"] for t in trials if (s := t.system or {}).get("gpu_util_percent")]
    if not gpu:
        return []
    p95 = statistics.median(g["p95"] for g in gpu)
    mean = statistics.median(g["mean"] for g in gpu)
    cores = [s["busiest_core_percent"]["p95"] for t in trials if (s := t.system or {}).get("busiest_core_percent")]
    busiest = statistics.median(cores) if cores else None
    evidence = (f"GPU utilisation mean {mean:.0f}%, p95 {p95:.0f}%", f"busiest CPU core p95 {busiest or 0:.0f}%")
    if mean < th.gpu_idle_percent and busiest is not None and busiest > th.cpu_busy_percent:
        line = f"CPU bottleneck: the GPU is idle ({mean:.0f}% on average) while a CPU core is at {busiest:.0f}%"
        return [Finding("CPU bottleneck", line, evidence)]
    if p95 < th.gpu_low_percent:
        line = f"low accelerator utilisation: GPU utilisation p95 {p95:.0f}% (under {th.gpu_low_percent:g}%)"
        return [Finding("low accelerator utilisation", line, evidence)]
    return []


def _growth(values: Sequence[int]) -> tuple[float, float]:
    """Least-squares bytes per step and the correlation of memory with the step number."""
    steps = list(range(len(values)))
    if statistics.pstdev(values) == 0:
        return 0.0, 0.0
    slope = statistics.linear_regression(steps, values).slope
    return slope, statistics.correlation(steps, values)


def _numerics(reason: str) -> Finding | None:
    text = reason.lower()
    if "loss is nan" not in text and "loss is inf" not in text and "loss is -inf" not in text:
        return None
    return Finding("numerics", "numerics: the loss was not finite", (reason,))


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
    if finding.suspect == "operators":
        return 0.0  # supporting detail, never the suspect over a rule
    if finding.suspect == "framework overhead":
        return 1.2  # more specific than a phase's growth, which many small operations also show
    if finding.line.startswith("memory growth"):
        return 1.5  # a steady rise is a bug whatever else changed, and often slows the step too
    if finding.suspect == "memory":
        return 0.45
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


def grown_operators(
    baseline: list[dict[str, Any]], current: list[dict[str, Any]], limit: int = 5
) -> list[tuple[str, float, float]]:
    """Operators whose self time per step grew most: (name, baseline s, current s), largest growth first."""
    before = {row["name"]: operator_self_s(row) for row in baseline}
    growth = [(row["name"], before.get(row["name"], 0.0), operator_self_s(row)) for row in current]
    growth = [g for g in growth if g[2] > g[1]]
    growth.sort(key=lambda g: g[2] - g[1], reverse=True)
    return growth[:limit]
