"""pytest-benchmark micro-benchmarks judged against their stored baselines (`records.micro`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from perfgate.judge.stats import compare_probed, holm_steps
from perfgate.judge.wording import throughput_reason
from perfgate.outcome import Status
from perfgate.records.micro import DEFAULT_RUN_NOISE, MICRO_FILE, MIN_SESSIONS, UPDATE_COMMAND, MicroBenchmark
from perfgate.records.verdicts import MicroVerdict


def compare_micro(
    baseline: Mapping[str, MicroBenchmark],
    measured: Sequence[MicroBenchmark],
    *,
    threshold: float,
    alpha: float,
    run_noise: float = DEFAULT_RUN_NOISE,
    path: Path = Path("baselines") / MICRO_FILE,
) -> list[MicroVerdict]:
    """Judge each measured benchmark against its baseline (one look: a pytest session measures once), with one
    false-alarm rate over them: `alpha` (the benchmarks' share of the session's, `judge.family`) divided over the
    benchmarks by Holm's procedure (`stats.holm_steps`).

    `run_noise`: how much a session's speed varies from session to session (log standard deviation),
    which blocks of one session cannot show; see `stats.compare_throughput`. `path`: the baseline
    file, for the messages.
    """
    first = _compare_micro(
        baseline, measured, threshold=threshold, alphas=[alpha] * len(measured), run_noise=run_noise, path=path
    )
    shares = [v.throughput.p_slower / alpha if v.throughput is not None else math.nan for v in first]
    tested = [i for i, share in enumerate(shares) if not math.isnan(share)]
    divisors = dict(zip(tested, holm_steps([shares[i] for i in tested]), strict=True))
    if all(d == 1.0 for d in divisors.values()):
        return first
    alphas = [alpha / divisors.get(i, 1.0) for i in range(len(measured))]
    return _compare_micro(baseline, measured, threshold=threshold, alphas=alphas, run_noise=run_noise, path=path)


def _compare_micro(
    baseline: Mapping[str, MicroBenchmark],
    measured: Sequence[MicroBenchmark],
    *,
    threshold: float,
    alphas: Sequence[float],
    run_noise: float,
    path: Path,
) -> list[MicroVerdict]:
    verdicts = []
    for current, alpha in zip(measured, alphas, strict=True):
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
        probed = compare_probed(
            base_rates, current_rates, base_probes, current_probes, threshold=threshold, alpha=alpha, run_noise=noise
        )
        raw, adjusted, machine, verdict = probed.raw, probed.adjusted, probed.machine, probed.verdict
        sample = "session" if len(base.sessions) >= MIN_SESSIONS else "block"
        reason = throughput_reason(raw, adjusted, machine, unit="calls/s", sample=sample)
        verdicts.append(MicroVerdict(current.name, Status.of(verdict), reason, base, current, raw, adjusted, machine))
    return verdicts
