"""A results file in the form a command asks for (`perfgate report`, `perfgate compare --format`): a check's
verdicts as a check's report, a lab run (`perfgate run --json`, judged by nothing) as the lab's table."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from perfgate.judge.reading import read_lab
from perfgate.judge.utilisation import workload_utilisation
from perfgate.records.diagnoses import Diagnosis
from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint
from perfgate.records.results import MicroSection, RunResult
from perfgate.records.verdicts import GateResult
from perfgate.report import FORMATS
from perfgate.report.json import gate_to_dict, throttled_trial_records
from perfgate.report.markdown import COMMENT_LIMIT, format_lab_markdown, format_markdown
from perfgate.report.text import format_gate, format_run, lab_failures


def is_lab_run(run: RunResult) -> bool:
    """Whether a results file holds a lab run that no check judged (`perfgate run --json`, `perfgate update
    --json`): a check's file keeps the check's settings (`gate`), a `pytest --perfgate` session's its
    pytest-benchmark verdicts (`micro`)."""
    return run.gate is None and run.micro is None and run.against is None


def render_gate(
    result: GateResult,
    form: str,
    *,
    command: str,
    exits: bool = True,
    diagnoses: Sequence[Diagnosis] = (),
    micro: MicroSection | None = None,
    details: str | None = None,
    limit: int = COMMENT_LIMIT,
) -> str:
    """The verdicts as text (the gate's tables, the summary line naming `command`, with the exit code when
    the command `exits` with it), Markdown (the job summary's report, at most `limit` characters; `details`
    names the full data) or JSON (the verdicts, the diagnoses, `micro` when given)."""
    if form == "markdown":
        return format_markdown(result, limit=limit, details=details, diagnoses=diagnoses, micro=micro)
    if form == "json":
        document = {**gate_to_dict(result, micro), "diagnoses": [d.to_dict() for d in diagnoses]}
        return json.dumps(document, indent=2, allow_nan=False) + "\n"
    if form == "text":
        return format_gate(result, diagnoses, micro, command=command, exits=exits)
    raise ValueError(f"unknown report format {form!r}; one of {', '.join(FORMATS)}")


def render_lab(
    run: RunResult,
    form: str,
    *,
    details: str | None = None,
    limit: int = COMMENT_LIMIT,
    peak_tflops: Mapping[str, float] | None = None,
) -> str:
    """A lab run as the lab's table: text (as `perfgate run` prints it), Markdown (at most `limit` characters)
    or JSON (`lab_to_dict`); `peak_tflops` (`[tool.perfgate]`) replaces the GPU's peaks."""
    if form == "markdown":
        return format_lab_markdown(run, limit=limit, details=details, peak_tflops=peak_tflops)
    if form == "json":
        return json.dumps(lab_to_dict(run, peak_tflops), indent=2, allow_nan=False) + "\n"
    if form == "text":
        return format_run(run, peak_tflops=peak_tflops)
    raise ValueError(f"unknown report format {form!r}; one of {', '.join(FORMATS)}")


def lab_to_dict(run: RunResult, peak_tflops: Mapping[str, float] | None = None) -> dict[str, Any]:
    """A lab run's table as plain JSON values (NaN as null): per workload its settings and per config the
    summary the table shows (null where no trial produced a measurement, with the reason) with its achieved
    FLOP/s and MFU (null where not counted, or no peak is known), the failures, the warnings and the lab's
    reading; no verdict, so no exit code."""

    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        return value

    workloads = []
    for w in run.workloads:
        configs = []
        use = workload_utilisation(w, run.environment, peak_tflops)
        for name, config in w.configs.items():
            summary = config.summary
            counted = None if use is None else use.configs.get(name)
            configs.append(
                {
                    "config": name,
                    "summary": None if summary is None else finite(asdict(summary)),
                    "failure": None if summary is not None else config.failure_reason,
                    "throttled_trials": throttled_trial_records(config),
                    "achieved_flops_per_s": None if counted is None else counted.achieved_flops_per_s,
                    "mfu": None if counted is None else counted.mfu,
                }
            )
        reading = read_lab({name: config.summary for name, config in w.configs.items()}, use)
        workloads.append(
            {
                "workload": w.name,
                "reference": w.reference,
                "settings": w.settings.to_dict(),
                "configs": configs,
                "failures": lab_failures(w),
                "warnings": list(w.warnings),
                "reading": list(reading.lines),
            }
        )
    return {"kind": "lab", "machine": fingerprint_key(machine_fingerprint(run.environment)), "workloads": workloads}
