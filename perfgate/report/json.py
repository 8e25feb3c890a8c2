"""The verdicts as JSON (read from a judged check, `records.judgement.Judgement`), and what a results file keeps of
the check that judged them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from perfgate.outcome import Status, session_exit_code, warned_exit_code
from perfgate.records.comparisons import ThroughputComparison
from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint
from perfgate.records.judgement import Judgement
from perfgate.records.reading import Utilisation
from perfgate.records.results import ConfigResult, MicroResult, MicroSection, RunResult
from perfgate.records.verdicts import GateResult, MicroVerdict


def micro_section(verdicts: Sequence[MicroVerdict], *, paired: bool = False, mode: str | None = None) -> MicroSection:
    """The pytest-benchmark tests' verdicts as the results file keeps them (`records.results.MicroSection`):
    figures of the raw comparison, NaN as None. `paired`: judged in session pairs against a git ref."""

    def finite(value: float | None) -> float | None:
        return None if value is None or not math.isfinite(value) else value

    benchmarks = []
    for v in verdicts:
        t = v.throughput
        benchmarks.append(
            MicroResult(
                name=v.name,
                status=v.status,
                reason=v.reason,
                baseline_calls_per_sec=None if t is None else finite(t.baseline_median),
                current_calls_per_sec=None if t is None else finite(t.candidate_median),
                ratio=None if t is None else finite(t.ratio),
                ci_low=None if t is None else finite(t.ci_low),
                ci_high=None if t is None else finite(t.ci_high),
                p_value=None if t is None else finite(min(t.p_slower, t.p_faster)),
                machine_ratio=None if v.machine is None else finite(v.machine.ratio),
                rounds=None if v.current is None else v.current.rounds,
            )
        )
    return MicroSection(mode or ("paired" if paired else "stored baselines"), paired, benchmarks)


def overall_verdict_code(result: GateResult, micro: MicroSection | None = None) -> int:
    """The verdicts' own answer, the gate's and the pytest-benchmark tests' (`outcome.session_exit_code`), before
    warn-only."""
    if micro is None or not micro.benchmarks:
        return result.verdict_code
    return session_exit_code(
        [v.status for v in result.verdicts],
        problems=result.failing_problems,
        micro=[Status(b.status) for b in micro.benchmarks],
        micro_paired=micro.paired,
        fail_on_inconclusive=result.settings.fail_on_inconclusive,
    )


def overall_exit_code(result: GateResult, micro: MicroSection | None = None) -> int:
    """The build's answer: `overall_verdict_code`, passed under warn-only (`outcome.warned_exit_code`)."""
    return warned_exit_code(overall_verdict_code(result, micro), warn_only=result.settings.warn_only)


def throttled_trial_records(config: ConfigResult | None, side: str | None = None) -> list[dict[str, Any]]:
    """A config's trials whose GPU was throttled (`GpuFacts.throttled`), as data: the side of a paired check
    (base, head; null otherwise), the trial as the results file numbers it, the GPU, the slowing reasons, the
    share of samples slowed and the SM clock's range. The trials stay in the verdict's figures."""
    return [
        {
            "side": side,
            "trial": t.trial,
            "gpu": t.system.gpu.name,
            "reasons": t.system.gpu.slowing_reasons,
            "slowed_share": t.system.gpu.slowed_share,
            "sm_clock_min_mhz": t.system.gpu.sm_clock_min_mhz,
            "sm_clock_max_mhz": t.system.gpu.sm_clock_max_mhz,
        }
        for t in (config.trials if config is not None else [])
        if t.ok and t.system is not None and t.system.gpu is not None and t.system.gpu.throttled
    ]


def _gate_throttled(result: GateResult, workload: str, config: str) -> list[dict[str, Any]]:
    runs: list[tuple[str | None, RunResult]] = [] if result.against is None else [("base", result.against.base)]
    runs += [] if result.run is None else [("head" if result.against is not None else None, result.run)]
    return [
        record
        for side, run in runs
        for measured in run.workloads
        if measured.name == workload
        for record in throttled_trial_records(measured.configs.get(config), side)
    ]


def _utilisations(judgement: Judgement) -> dict[tuple[str, str], Utilisation]:
    """Each (workload, config)'s utilisation in the run a check judged (`Judgement.lab`)."""
    if judgement.lab is None:
        return {}
    found = {}
    for name, read in judgement.lab.workloads.items():
        use = read.utilisation
        found.update({(name, config): u for config, u in (use.configs if use is not None else {}).items()})
    return found


def _environments(result: GateResult) -> dict[str, Any] | None:
    """Where a paired check's sides ran: the kind, why, the seconds the base's environment took to build, what the
    base declares that it did not get, the packages whose versions differ (the results file keeps every package of
    both sides) and the report's sentence (`Environments.describe`)."""
    environments = None if result.against is None else result.against.environments
    if environments is None:
        return None
    recorded = {key: value for key, value in environments.to_dict().items() if key != "packages"}
    changed = [{"name": name, "base": base, "head": head} for name, base, head in environments.changed()]
    return {**recorded, "changed": changed, "described": environments.describe()}


def gate_to_dict(judgement: Judgement) -> dict[str, Any]:
    """The verdicts as plain JSON values (NaN as null): for `perfgate report --format json`; the pytest-benchmark
    tests' verdicts of a `pytest --perfgate` session (`Judgement.micro`) count in the exit code."""
    result, micro = judgement.result, judgement.micro

    def comparison(c: ThroughputComparison | None) -> dict[str, Any] | None:
        if c is None:
            return None
        values = {
            "baseline_median": c.baseline_median,
            "candidate_median": c.candidate_median,
            "ratio": c.ratio,
            "ci_low": c.ci_low,
            "ci_high": c.ci_high,
            "confidence": c.confidence,
            "p_value": min(c.p_slower, c.p_faster),
            "trials": [c.n_baseline, c.n_candidate],
            "noise": c.noise,
            "detectable_slowdown": c.detectable_slowdown,
            "verdict": c.verdict.value,
        }
        if c.count is not None:
            count = c.count
            values["slow_pairs"] = {
                "pairs": count.pairs,
                "head": count.head_slow,
                "base": count.base_slow,
                "cut": count.cut,
                "rate": count.rate,
                "rate_source": count.rate_source or "default",
                "tested_rate": count.tested_rate,
                "p_value": count.p_value,
                "alpha": count.alpha,
                "stood_down": count.stood_down,
                "decided": c.by_count,
            }
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}

    uses = _utilisations(judgement)
    workloads = []
    for w in result.workloads:
        configs = []
        for v in w.configs:
            m = v.memory
            use = uses.get((w.workload, v.config))
            configs.append(
                {
                    "config": v.config,
                    "status": v.status.value,
                    "reason": v.reason,
                    "thresholds": {"throughput": v.thresholds.throughput, "memory": v.thresholds.memory},
                    "throughput": comparison(v.throughput),
                    "adjusted": comparison(v.adjusted),
                    "machine_ratio": None if v.machine is None else v.machine.ratio,
                    "accepted": None
                    if v.accepted is None
                    else {
                        **v.accepted.acceptance.to_record(),
                        "verdict": v.accepted.verdict.value,
                        "throughput": comparison(v.accepted.throughput),
                        "adjusted": comparison(v.accepted.adjusted),
                    },
                    "peak_memory": None
                    if m is None
                    else {
                        "baseline_bytes": m.baseline_bytes,
                        "current_bytes": m.candidate_bytes,
                        "change": m.change,
                        "ci_low": None if not math.isfinite(m.ci_low) else m.ci_low,
                        "ci_high": None if not math.isfinite(m.ci_high) else m.ci_high,
                        "verdict": m.verdict.value,
                    },
                    # counted FLOPs x samples/s of the run judged (head), and its share of the GPU's peak; null:
                    # not counted, or (mfu) no peak known
                    "achieved_flops_per_s": None if use is None else use.achieved_flops_per_s,
                    "mfu": None if use is None else use.mfu,
                    "throttled_trials": _gate_throttled(result, w.workload, v.config),
                    # the exact counts, a row per count (`records.counts.CountsComparison.to_dict`); null: not counted
                    "counts": None if v.counts is None else v.counts.to_dict(),
                }
            )
        baseline = w.baseline
        against = result.against
        workloads.append(
            {
                "workload": w.workload,
                "problem": w.problem,
                "problem_status": None if w.problem_status is None else w.problem_status.value,
                "new": w.new,
                "baseline": None
                if baseline is None
                else {
                    "measured_at": against.base.created_at if against else baseline.measured_at,
                    "commit": against.base_commit if against else baseline.commit,
                    "machine": baseline.key,
                },
                "configs": configs,
            }
        )
    machine = None if result.run is None else fingerprint_key(machine_fingerprint(result.run.environment))
    document = {
        "kind": "check",  # a lab run's document (`report.render.lab_to_dict`) says "lab"
        "exit_code": result.exit_code,
        "verdict_code": result.verdict_code,  # before warn-only: the code the verdicts alone end the check with
        "warn_only": result.settings.warn_only,
        "mode": result.mode,
        # where a paired check's two sides ran and which packages differ (`_environments`); null: not paired, or
        # written before the packages were recorded
        "environments": _environments(result),
        "machine": machine,
        "accepted": [a.to_record() for a in result.settings.accepted],  # slowdowns accepted on purpose
        "warnings": result.unused_acceptances,
        "workloads": workloads,
    }
    if micro is not None:
        document["exit_code"] = overall_exit_code(result, micro)
        document["verdict_code"] = overall_verdict_code(result, micro)
        document["micro"] = micro.to_dict()
    return document
