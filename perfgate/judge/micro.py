"""pytest-benchmark micro-benchmarks judged against their stored baselines (`records.micro`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.judge.stats import ThroughputComparison, combine_verdicts, compare_throughput
from perfgate.judge.verdict import Status
from perfgate.judge.wording import throughput_reason
from perfgate.records.micro import DEFAULT_RUN_NOISE, MICRO_FILE, MIN_SESSIONS, UPDATE_COMMAND, MicroBenchmark


@dataclass(frozen=True)
class MicroVerdict:
    name: str
    status: Status
    reason: str
    baseline: MicroBenchmark | None = None
    current: MicroBenchmark | None = None
    throughput: ThroughputComparison | None = None
    adjusted: ThroughputComparison | None = None
    machine: ThroughputComparison | None = None


def compare_micro(
    baseline: Mapping[str, MicroBenchmark],
    measured: Sequence[MicroBenchmark],
    *,
    threshold: float,
    alpha: float,
    run_noise: float = DEFAULT_RUN_NOISE,
    path: Path = Path("baselines") / MICRO_FILE,
) -> list[MicroVerdict]:
    """Judge each measured benchmark against its baseline (one look: a pytest session measures once).

    `run_noise`: how much a session's speed varies from session to session (log standard deviation),
    which blocks of one session cannot show; see `stats.compare_throughput`. `path`: the baseline
    file, for the messages.
    """
    verdicts = []
    for current in measured:
        base = baseline.get(current.name)
        if base is None:
            reason = f"no baseline for this benchmark on this machine; run {UPDATE_COMMAND} and commit {path}"
            verdicts.append(MicroVerdict(current.name, Status.NO_BASELINE, reason, current=current))
            continue
        if len(base.sessions) >= MIN_SESSIONS:  # the baseline's own sessions show its run-to-run noise
            base_rates = [s.calls_per_sec for s in base.sessions]
            base_probes = [s.probe_steps_per_sec for s in base.sessions]
            current_rates, current_probes, noise = [current.calls_per_sec], [current.probe_steps_per_sec], 0.0
        else:  # blocks of one session each, plus the assumed run-to-run noise
            base_rates, current_rates = base.block_calls_per_sec, current.block_calls_per_sec
            base_probes = [base.probe_steps_per_sec] * len(base_rates)
            current_probes = [current.probe_steps_per_sec] * len(current_rates)
            noise = run_noise
        raw = compare_throughput(base_rates, current_rates, threshold=threshold, alpha=alpha, run_noise=noise)
        adjusted = machine = None
        verdict = raw.verdict
        if all(base_probes) and all(current_probes):
            adjusted = compare_throughput(
                [r / p for r, p in zip(base_rates, base_probes, strict=True) if p],
                [r / p for r, p in zip(current_rates, current_probes, strict=True) if p],
                threshold=threshold,
                alpha=alpha,
                run_noise=noise,
            )
            machine = compare_throughput([p for p in base_probes if p], [p for p in current_probes if p])
            verdict = combine_verdicts(raw.verdict, adjusted.verdict)
        sample = "session" if len(base.sessions) >= MIN_SESSIONS else "block"
        reason = throughput_reason(raw, adjusted, machine, unit="calls/s", sample=sample)
        verdicts.append(MicroVerdict(current.name, Status.of(verdict), reason, base, current, raw, adjusted, machine))
    return verdicts
