"""One gate result in the form a command asks for: `perfgate report` and `perfgate compare --format`."""

from __future__ import annotations

import json
from collections.abc import Sequence

from perfgate.judge.diagnosis import Diagnosis
from perfgate.judge.verdict import GateResult
from perfgate.records.results import MicroSection
from perfgate.report.json import gate_to_dict
from perfgate.report.markdown import COMMENT_LIMIT, format_markdown
from perfgate.report.text import format_gate

FORMATS = ("text", "markdown", "json")


def render_gate(
    result: GateResult,
    form: str,
    *,
    diagnoses: Sequence[Diagnosis] = (),
    micro: MicroSection | None = None,
    details: str | None = None,
    limit: int = COMMENT_LIMIT,
) -> str:
    """The verdicts as text (the gate's tables), Markdown (the job summary's report, at most `limit`
    characters; `details` names the full data) or JSON (the verdicts, the diagnoses, `micro` when given)."""
    if form == "markdown":
        return format_markdown(result, limit=limit, details=details, diagnoses=diagnoses, micro=micro)
    if form == "json":
        document = {**gate_to_dict(result, micro), "diagnoses": [d.to_dict() for d in diagnoses]}
        return json.dumps(document, indent=2, allow_nan=False) + "\n"
    if form == "text":
        return format_gate(result, diagnoses, micro)
    raise ValueError(f"unknown report format {form!r}; one of {', '.join(FORMATS)}")
