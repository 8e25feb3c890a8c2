"""Memory: it speaks when memory in use rises step over step (a least-squares slope of memory_growth_kib per
step or more, correlation with the step number memory_growth_fit or more: something keeps tensors or autograd graphs
alive, the classic being a loss summed without `.item()`), on a peak-memory regression, or where a counted allocated
peak grew, whose figure then leads the peak's finding (`allocated peak +24% (28.5 MiB -> 35.4 MiB)`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from perfgate.formatting import format_bytes
from perfgate.judge.diagnosis.common import _percent
from perfgate.judge.diagnosis.counted import _Counted
from perfgate.judge.memory import compared_peaks, grown_parts, of_entry, of_trials, signed_bytes
from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import ConfigEntry
from perfgate.records.diagnoses import Finding
from perfgate.records.results import TrialResult

ALLOCATED_KINDS = {
    "cuda-max-allocated": "the CUDA allocator's peak of allocated bytes over one untimed step",
    "cpu-live-storage": "the peak of live tensor storage over one untimed eager step (what the step allocates on top "
    "of the model's, the optimizer's and the batch's tensors)",
}


def _memory(
    trials: Sequence[TrialResult],
    baseline: ConfigEntry | None,
    regressed: bool,
    th: DiagnosisThresholds,
    counted: _Counted | None = None,
) -> list[Finding]:
    """Memory growth step over step, and the peak: the verdict's peak-memory regression and, from the counts, an
    allocated peak that grew, which leads the peak's finding with its figure (`_allocated`)."""
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
    allocated = _allocated(counted)
    if regressed:
        finding = _peak_memory_regression(trials, baseline)
        if allocated is not None:
            line, evidence = allocated
            finding = Finding("memory", f"{line}; {finding.line}", (*evidence, *finding.evidence))
        elif counted is not None and (pair := counted.pair("allocated_peak_bytes")) is not None:
            was, now = (format_bytes(int(v)) for v in pair)
            unchanged = (
                f"the allocated peak of one counted step is unchanged ({was} -> {now}): the growth is not in what a "
                "step allocates (the allocator's cache, the DataLoader workers, libraries, or memory kept from step "
                "to step)"
            )
            finding = Finding("memory", finding.line, (*finding.evidence, unchanged))
        findings.append(finding)
    elif allocated is not None:
        findings.append(Finding("memory", *allocated))
    return findings


def _allocated(counted: _Counted | None) -> tuple[str, tuple[str, ...]] | None:
    """`memory: allocated peak +24% (28.5 MiB -> 35.4 MiB)` and its evidence, where the counted allocated peak grew
    beyond its tolerance (on one device type, by one measure); None otherwise."""
    growth = counted.growth("allocated_peak_bytes") if counted is not None else None
    pair = counted.pair("allocated_peak_bytes") if counted is not None else None
    if counted is None or growth is None or pair is None:
        return None
    was, now = (format_bytes(int(v)) for v in pair)
    line = f"memory: allocated peak {_percent(growth)} ({was} -> {now})"
    kind = ALLOCATED_KINDS.get(counted.head.allocated_kind or "", f"counted as {counted.head.allocated_kind}")
    return line, (
        f"counted exactly: {kind}",
        "a larger activation, a tensor kept alive longer, a wider dtype or more optimizer state",
    )


def _peak_memory_regression(trials: Sequence[TrialResult], baseline: ConfigEntry | None) -> Finding:
    """`peak memory regression: 1.2 GiB -> 1.6 GiB (+410.0 MiB, loader workers +410.0 MiB: a worker keeps what
    it loads)`: the medians the verdict compared, and the part of the job that grew."""
    current = of_trials([t.memory for t in trials])
    if baseline is None:
        peak = int(statistics.median(t.peak_bytes for t in current))
        return Finding("memory", f"peak memory regression: {format_bytes(peak)}")
    base = of_entry(baseline)
    peaks = compared_peaks(base, current, "the baseline")
    was, now = int(statistics.median(peaks.baseline)), int(statistics.median(peaks.candidate))
    parts = "" if peaks.note else grown_parts(base, current)
    change = signed_bytes(now - was) + (f", {parts}" if parts else "")
    line = f"peak memory regression: {format_bytes(was)} -> {format_bytes(now)} ({change})"
    return Finding("memory", line, (peaks.note,) if peaks.note else ())


def _growth(values: Sequence[int]) -> tuple[float, float]:
    """Least-squares bytes per step and the correlation of memory with the step number."""
    steps = list(range(len(values)))
    if statistics.pstdev(values) == 0:
        return 0.0, 0.0
    slope = statistics.linear_regression(steps, values).slope
    return slope, statistics.correlation(steps, values)
