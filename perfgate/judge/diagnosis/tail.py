"""Tail latency and intermittent slow paths. Tail latency speaks when p95 over p50 step time is tail_ratio or
more, and tail_ratio times the baseline's (a lone slow step moves no p95: it is no finding). Intermittent leads the
findings where the count test found more much slower head pairs than the runner's rate explains, in at most half the
pairs: a slow path that some trial processes take (a rare lock, a recompile, a cold cache), which the phases average
over every trial.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import ConfigEntry
from perfgate.records.comparisons import ThroughputComparison
from perfgate.records.diagnoses import Diagnosis, Finding
from perfgate.records.summary import percentile


def _with_intermittent(diagnosis: Diagnosis, throughput: ThroughputComparison | None) -> Diagnosis:
    """A slow path that head takes in some of its trial processes leads the findings where the count test found
    it (`stats.count_slow_pairs`: more much slower head pairs than the runner's rate explains, in at most half
    the pairs; in most of them the slowdown is steady): the phases average it over every trial, and it is what a
    rare lock, a recompile or a cold cache looks like."""
    count = None if throughput is None else throughput.count
    if count is None or not (count.rejects or throughput is not None and throughput.by_count):
        return diagnosis
    if 2 * count.head_slow > count.pairs:  # slow in most pairs: a steady slowdown, which the phases explain
        return diagnosis
    factor = "" if math.isnan(count.head_factor) else f" {count.head_factor:.2g}x"
    finding = Finding(
        "intermittent",
        f"intermittent: a slow path in some processes: {count.head_slow} of {count.pairs} head trials ran{factor} "
        f"slower than their pair, base trials {count.base_slow} of {count.pairs}",
        (
            "a steady slowdown slows every trial alike; a lock, a recompile or a cold cache that some processes "
            "meet slows those alone: look for what differs between runs of the same code (a timeout, a cache, "
            "a race, a data-dependent path)",
        ),
    )
    return replace(diagnosis, findings=(finding, *diagnosis.findings))


def _tail_latency(
    step_s: Sequence[float], baseline: ConfigEntry | None, slower: bool, th: DiagnosisThresholds
) -> list[Finding]:
    if len(step_s) < 4:
        return []
    p50, p95 = percentile(step_s, 50), percentile(step_s, 95)
    mean, sd = statistics.fmean(step_s), statistics.pstdev(step_s)
    beyond = sum(1 for s in step_s if s > mean + th.tail_sigmas * sd) if sd > 0 else 0
    ratio = p95 / p50 if p50 > 0 else math.inf
    base = [t.step_p95_s / t.step_p50_s for t in (baseline.trials if baseline else []) if t.step_p50_s and t.step_p95_s]
    base_ratio = statistics.median(base) if base else None
    # A tail is a finding when p95 is far from the median and far beyond the baseline's own tail; a few
    # slow steps (p95 does not move for one in twenty) are what a shared machine does now and then.
    if ratio < th.tail_ratio or (base_ratio is not None and ratio < th.tail_ratio * base_ratio):
        return []
    line = f"tail latency: p95 step time is {ratio:.1f}x the median"
    evidence = [f"p50 {1000 * p50:.2f} ms, p95 {1000 * p95:.2f} ms"]
    if base_ratio is not None:
        evidence.append(f"baseline p95/p50 {base_ratio:.1f}")
    evidence.append(f"{beyond} step(s) beyond mean + {th.tail_sigmas:g} sd")
    # Without a baseline, or without a slower step, a tail is worth knowing but explains nothing.
    return [Finding("tail latency", line, tuple(evidence), standing=not slower or base_ratio is None)]
