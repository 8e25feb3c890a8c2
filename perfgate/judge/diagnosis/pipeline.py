"""The data pipeline: it speaks when data wait takes data_wait_share or more of the step, or its growth
explains most (explains) of a regressed step, or it grew data_wait_growth times the baseline's (and by 5% of the step
or more) while the DataLoader's settings changed (their change is the evidence), or the workers' CPU per step grew
and took cores the compute phases needed (`_contention_s`); hints come from the DataLoader settings. Changed
DataLoader settings are always named, as a standing finding (no suspect) when none of this holds.

With CUDA events the data wait phase is the device's idle wait before a step's work, and the host's own wait for
its batch is timed beside it (`_HostWait`): the two together tell a starved loader (the host waits, and the device
with it) from a host too slow between steps (the device waits, the host did not: a CPU bottleneck, not the loader)
and from a slow loader the device's queued work still hides (the host waits, the device does not: named, no suspect).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.judge.diagnosis.common import _moved, _per_step
from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import ConfigEntry
from perfgate.records.diagnoses import COMPUTE, DATA, Finding, Movement, PhaseChange
from perfgate.records.diagnoses import explained as _explained
from perfgate.records.results import TrialResult, WorkloadSettings


def _loader_cpu(baseline: ConfigEntry | None, ok: Sequence[TrialResult], steps: int | None) -> Movement | None:
    """How the DataLoader workers' CPU seconds per step changed; None unless every trial on both sides
    measured it (files written before perfgate did leave it out)."""
    if baseline is None or not steps or any(t.loader_cpu_s is None for t in baseline.trials):
        return None
    now = [t.system.loader_cpu_s / len(t.step_s) for t in ok if t.system and t.system.loader_cpu_s is not None]
    if len(now) < len(ok):
        return None
    return _moved([t.per_step(t.loader_cpu_s or 0.0, steps) for t in baseline.trials], now)


def _contention_s(
    loader: Movement | None,
    phases: Sequence[PhaseChange],
    cores: int | None,
    sigmas: float,
    factor: float,
    same_work: bool = False,
) -> float:
    """The step time the DataLoader workers' added CPU took from the training step, at most what the compute
    phases grew; 0 unless the workers' CPU per step grew `factor` times (`data_wait_growth`: more than a slower
    machine explains) and beyond `sigmas` standard errors of its trials' spread (`evidence_sigmas`).

    This is how a heavier augmentation slows a CPU-bound step without any wait for data: the workers keep
    up, but on a runner with few cores they run on the cores the forward and backward passes need. How much
    of their added CPU the step loses lies between two bounds. Shared fairly among the cores, a core-second of
    the workers' work costs the step 1/cores of a second (with many idle cores the estimate is small anyway): the
    estimate while the model may have changed. But torch's intra-op threads wait for each other at the end of
    every parallel operator, so a core-second taken from one of them delays all: up to the whole added CPU. On
    two cores a Python-loop masking that added 25 ms of worker CPU a step grew forward by 30 ms
    (docs/performance.md). With every count of the step unchanged (`same_work`) the model does the same work and
    nothing in it explains the compute phases' growth, so the workers' added CPU is counted whole."""
    if loader is None or not cores or loader.change_s <= 0 or not loader.beyond_noise(sigmas):
        return 0.0
    if loader.before_s + loader.change_s < factor * loader.before_s:
        return 0.0
    compute = sum(p.change_s for p in phases if p.phase in COMPUTE)
    return max(0.0, min(compute, loader.change_s if same_work else loader.change_s / cores))


@dataclass(frozen=True)
class _HostWait:
    """Where the device's idle wait and the host's wait for the batch were both timed (CUDA events), per step over the
    trials: the host's wait now and the baseline's (None where its trials did not time it), and how much of the
    device's idle wait the host's wait for the batch covers (each step's smaller of the two): the rest of the
    device's wait is the host busy with other work between steps."""

    host_s: float
    host_before_s: float | None
    loader_idle_s: float


def _host_wait(baseline: ConfigEntry | None, ok: Sequence[TrialResult], steps: int | None) -> _HostWait | None:
    """None unless every trial timed the host's wait apart (`TrialResult.data_wait_host_s`)."""
    if any(t.data_wait_host_s is None or len(t.data_wait_host_s) != len(t.step_s) for t in ok):
        return None
    host = [w for t in ok for w in t.data_wait_host_s or ()]
    idle = [
        min(w, device) for t in ok for w, device in zip(t.data_wait_host_s or (), t.phases_s["data_wait"], strict=True)
    ]
    before = None
    if baseline is not None and steps and all(t.data_wait_host_s is not None for t in baseline.trials):
        before = statistics.fmean(t.per_step(t.data_wait_host_s or 0.0, steps) for t in baseline.trials)
    return _HostWait(statistics.fmean(host), before, statistics.fmean(idle))


@dataclass(frozen=True)
class _Pipeline:
    """What the data-pipeline rule reads besides the phases: the DataLoader's settings on both sides, the
    machine's cores, the workers' CPU per step and the step time it took from training, and the host's own wait
    for its batches where it was timed apart from the device's."""

    settings: WorkloadSettings
    base_settings: WorkloadSettings | None
    cores: int | None
    loader_cpu: Movement | None
    contention_s: float
    host_wait: _HostWait | None = None


def _data_pipeline(
    phases: Sequence[PhaseChange],
    step_s: Sequence[float],
    pipeline: _Pipeline,
    slower: bool,
    th: DiagnosisThresholds,
    changes: Sequence[str] = (),
) -> list[Finding]:
    settings, cores, loader_cpu, contention = (
        pipeline.settings,
        pipeline.cores,
        pipeline.loader_cpu,
        pipeline.contention_s,
    )
    data = [p for p in phases if p.phase in DATA]
    step = statistics.fmean(step_s)
    wait_before, wait_now = sum(p.baseline_s or 0.0 for p in data), sum(p.current_s for p in data)
    share = wait_now / step if step else 0.0
    base_step = sum(p.baseline_s or 0.0 for p in phases)
    base_share = wait_before / base_step if base_step else None
    explains = _explained(phases, DATA, contention) if slower else 0.0
    changed = _loader_changes(pipeline.base_settings, settings)
    output_changed = [c for c in changes if c.startswith("the data pipeline's output changed")]
    grew_with_change = (
        bool(changed or output_changed)
        and base_share is not None
        and wait_now >= th.data_wait_growth * wait_before
        and wait_now - wait_before >= 0.05 * step  # and by a noticeable part of the step
    )
    quiet = share < th.data_wait_share and explains < th.explains and not grew_with_change
    host = pipeline.host_wait
    if quiet and not changed:
        return [] if host is None else _hidden_loader(host, phases, step, th)
    was = "" if base_share is None else f"{base_share:.0%} -> "
    timing = [_per_step(p) for p in data] + ([] if host is None else [_host_evidence(host)])
    evidence = list(timing)
    if loader_cpu is not None and loader_cpu.change_s:
        evidence.append(
            f"the DataLoader workers' CPU: {1000 * loader_cpu.before_s:.2f} -> "
            f"{1000 * (loader_cpu.before_s + loader_cpu.change_s):.2f} ms per step"
            + (f" on {cores} cores" if cores else "")
        )
    if changed:
        evidence.append(f"the DataLoader's settings changed: {', '.join(changed)}")
    evidence.extend(output_changed)
    evidence.extend(_loader_hints(settings, cores))
    line = f"data pipeline: waiting for data takes {was}{share:.0%} of the step"
    if explains >= th.explains and contention > 0:
        line = (
            f"data pipeline: waiting for data and the DataLoader workers' added CPU work explain {explains:.0%} of "
            f"the slower step (waiting {was}{share:.0%} of the step; the workers take about {1000 * contention:.2f} "
            "ms a step of the cores the training step needs); look at the Dataset, its transforms and the "
            "DataLoader settings this change touched"
        )
    elif explains >= th.explains:
        line = (
            f"data pipeline: waiting for data explains {explains:.0%} of the slower step ({was}{share:.0%} of "
            "the step); look at the Dataset, its transforms and the DataLoader settings this change touched"
        )
    line += f"; {_threads_context(settings, cores)}"  # the verdict on a pipeline depends on what it competes with
    standing = (
        explains < th.explains
        and not grew_with_change
        and base_share is not None
        and base_share >= th.data_wait_share
        and share < 1.5 * base_share
    )
    suffix = ""
    if standing:
        suffix = " (so did the baseline's)"
    elif explains < th.explains and base_share is not None and not slower:
        # More waiting for data in a step that is not measurably slower (fewer workers on a busy machine can be faster):
        # worth knowing, not a regression of the data pipeline.
        suffix = " (the step is not measurably slower)"
        standing = True
    elif quiet:
        # The settings changed but waiting for data did not grow with them: the change is named, not suspected.
        suffix = " (waiting for data did not grow with the changed settings)"
        standing = True
    line += suffix
    idle = _device_idle_s(phases)
    if host is not None and not quiet and host.loader_idle_s < 0.5 * idle:
        # The device waited, the host did not wait for its batch: the host's other work between steps set the pace.
        line = (
            f"CPU bottleneck: the device idles {1000 * idle:.2f} ms a step waiting for the host, which waits only "
            f"{1000 * host.host_s:.2f} ms for its batch: the host's own work between steps (Python, kernel launches, "
            f"copies to the host), not the DataLoader, keeps the device waiting{suffix}"
        )
        # the DataLoader's hints left out: the loader is not what the device waits for
        evidence = list(timing)
        if changed:
            evidence.append(f"the DataLoader's settings changed: {', '.join(changed)}")
        return [Finding("CPU bottleneck", line, tuple(evidence), standing, None if standing else explains)]
    return [Finding("data pipeline", line, tuple(evidence), standing)]


def _device_idle_s(phases: Sequence[PhaseChange]) -> float:
    return sum(p.current_s for p in phases if p.phase == "data_wait")


def _host_evidence(host: _HostWait) -> str:
    """`the host's wait for each batch: 0.40 -> 9.10 ms per step, 8.90 ms of it with the device idle`."""
    was = "" if host.host_before_s is None else f"{1000 * host.host_before_s:.2f} -> "
    return (
        f"the host's wait for each batch: {was}{1000 * host.host_s:.2f} ms per step, "
        f"{1000 * host.loader_idle_s:.2f} ms of it with the device idle"
    )


def _hidden_loader(
    host: _HostWait, phases: Sequence[PhaseChange], step: float, th: DiagnosisThresholds
) -> list[Finding]:
    """A loader the device does not wait for yet: the host waits data_wait_share or more of the step for its
    batches while the device works through the steps queued before. No suspect: it costs nothing now, but a
    slower loader or a faster step will show it."""
    if not step or host.host_s < th.data_wait_share * step:
        return []
    line = (
        f"data pipeline: the host waits {1000 * host.host_s:.2f} ms a step for its batch ({host.host_s / step:.0%} "
        f"of the step), hidden behind the device's queued work (the device idles {1000 * _device_idle_s(phases):.2f} "
        "ms a step): no cost yet, but a slower loader or a faster step will show it"
    )
    return [Finding("data pipeline", line, (_host_evidence(host),), standing=True)]


def _threads_context(settings: WorkloadSettings, cores: int | None) -> str:
    """`measured at 2 torch threads, num_workers=2, 2 cores`: what the DataLoader's workers shared the machine with."""
    threads = settings.threads
    workers = int((settings.loader or {}).get("num_workers", 0) or 0)
    parts = [f"measured at {threads} torch thread{'s' if threads != 1 else ''}" if threads else "measured"]
    parts.append(f"num_workers={workers}")
    if cores:
        parts.append(f"{cores} cores")
    return ", ".join(parts)


def _loader_changes(before: WorkloadSettings | None, now: WorkloadSettings) -> list[str]:
    """`num_workers 2 -> 0` for each DataLoader setting that differs from the baseline's."""
    if before is None:
        return []
    old, new = before.loader or {}, now.loader or {}
    return [
        f"{key} {old.get(key, 'default')} -> {new.get(key, 'default')}"
        for key in sorted({*old, *new})
        if old.get(key) != new.get(key)
    ]


def _loader_hints(settings: WorkloadSettings, cores: int | None) -> list[str]:
    loader = settings.loader or {}
    workers = int(loader.get("num_workers", 0) or 0)
    hints = []
    if workers == 0:
        spare = f" (this machine has {cores} cores)" if cores and cores > 1 else ""
        hints.append(f"num_workers=0: batches are loaded in the training process{spare}; try num_workers > 0")
    elif cores and workers >= cores:
        hints.append(f"num_workers={workers} with {cores} cores: the workers compete with the training process")
    if settings.device == "cuda" and not loader.get("pin_memory"):
        hints.append("pin_memory is off: host-to-device copies cannot overlap with compute")
    return hints
