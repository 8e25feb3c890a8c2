"""The verdicts as JSON, and what a results file keeps of the check that judged them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from perfgate.judge.stats import ThroughputComparison
from perfgate.judge.verdict import GateResult
from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint


def gate_record(result: GateResult, baseline_dir: Path) -> dict[str, Any]:
    """What a results file keeps of a check: its settings, its mode and each config's last look, so a later
    report judges the run exactly as the check did."""
    record: dict[str, Any] = {**result.settings.record(baseline_dir), "mode": result.mode}
    record["looks"] = {f"{w}/{c}": look.to_record() for (w, c), look in result.looks.items()}
    return record


def gate_to_dict(result: GateResult) -> dict[str, Any]:
    """The verdicts as plain JSON values (NaN as null): for `perfgate report --format json`."""

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
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}

    workloads = []
    for w in result.workloads:
        configs = []
        for v in w.configs:
            m = v.memory
            configs.append(
                {
                    "config": v.config,
                    "status": v.status.value,
                    "reason": v.reason,
                    "thresholds": {"throughput": v.limits.throughput, "memory": v.limits.memory},
                    "throughput": comparison(v.throughput),
                    "adjusted": comparison(v.adjusted),
                    "machine_ratio": None if v.machine is None else v.machine.ratio,
                    "peak_memory": None
                    if m is None
                    else {"baseline_bytes": m.baseline_bytes, "current_bytes": m.candidate_bytes, "change": m.change},
                }
            )
        baseline = w.baseline
        against = result.against
        workloads.append(
            {
                "workload": w.workload,
                "problem": w.problem,
                "problem_status": None if w.problem_status is None else w.problem_status.value,
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
    return {"exit_code": result.exit_code, "mode": result.mode, "machine": machine, "workloads": workloads}
