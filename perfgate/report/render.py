"""A results file in the form a command asks for (`perfgate report`, `perfgate compare --format`): a check's
verdicts (judged once, `records.judgement.Judgement`) as a check's report, a lab run (`perfgate run --json`,
judged by nothing, read by the lab) as the lab's table."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint
from perfgate.records.judgement import Judgement, RunReading
from perfgate.records.results import RunResult
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
    judgement: Judgement,
    form: str,
    *,
    command: str,
    exits: bool = True,
    details: str | None = None,
    limit: int = COMMENT_LIMIT,
) -> str:
    """A judged check as text (the gate's tables, the summary line naming `command`, with the exit code when
    the command `exits` with it), Markdown (the job summary's report, at most `limit` characters; `details`
    names the full data) or JSON (the verdicts, the diagnoses, the pytest-benchmark tests' verdicts if any)."""
    if form == "markdown":
        return format_markdown(judgement, limit=limit, details=details)
    if form == "json":
        document = {**gate_to_dict(judgement), "diagnoses": [d.to_dict() for d in judgement.diagnoses]}
        return json.dumps(document, indent=2, allow_nan=False) + "\n"
    if form == "text":
        return format_gate(judgement, command=command, exits=exits)
    raise ValueError(f"unknown report format {form!r}; one of {', '.join(FORMATS)}")


def render_lab(reading: RunReading, form: str, *, details: str | None = None, limit: int = COMMENT_LIMIT) -> str:
    """A lab run, read by the lab, as the lab's table: text (as `perfgate run` prints it), Markdown (at most `limit`
    characters) or JSON (`lab_to_dict`)."""
    if form == "markdown":
        return format_lab_markdown(reading, limit=limit, details=details)
    if form == "json":
        return json.dumps(lab_to_dict(reading), indent=2, allow_nan=False) + "\n"
    if form == "text":
        return format_run(reading)
    raise ValueError(f"unknown report format {form!r}; one of {', '.join(FORMATS)}")


def lab_to_dict(reading: RunReading) -> dict[str, Any]:
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

    run = reading.run
    workloads = []
    for w in run.workloads:
        configs = []
        use = reading.of(w.name).utilisation
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
        workloads.append(
            {
                "workload": w.name,
                "reference": w.reference,
                "settings": w.settings.to_dict(),
                "configs": configs,
                "failures": lab_failures(w),
                "warnings": list(w.warnings),
                "reading": list(reading.of(w.name).reading.lines),
            }
        )
    return {"kind": "lab", "machine": fingerprint_key(machine_fingerprint(run.environment)), "workloads": workloads}
