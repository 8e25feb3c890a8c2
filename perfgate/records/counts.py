"""The exact counts of a training step compared, as shapes: each count on both sides and what it did against its
tolerance (`judge.counts` compares them; the reports and the verdicts' reasons read them), and the one table of
the counts' names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from perfgate.formatting import format_count, format_names, format_signed_pct
from perfgate.project import ABSOLUTE_COUNTS, REPORT, CountTolerances

COUNTED = tuple(f.name for f in fields(CountTolerances))  # the counts judged, in the order reports show them


@dataclass(frozen=True)
class CountName:
    """How the reports name one count of `records.shapes.Counts`: in a verdict's reason (`label`), in the
    diagnosis's findings (`phrase`) and as a table's column (`header`); None where a count is not shown there
    (trainable parameters and compiled graphs are not gated)."""

    label: str | None
    phrase: str
    header: str | None


# Every count, in the order the diagnosis compares them: the one table of their names.
COUNT_NAMES = {
    "flops_per_sample": CountName("FLOPs per sample", "FLOPs per sample", "FLOPs/sample"),
    "operators_per_step": CountName("operators per step", "operators a step", "operators/step"),
    "kernels_per_step": CountName("kernels per step", "kernels a step", "kernels/step"),
    "parameters": CountName("parameters", "parameters", "parameters"),
    "trainable_parameters": CountName(None, "trainable parameters", None),
    "allocated_peak_bytes": CountName("allocated peak", "allocated peak", "allocated peak"),
    "graphs": CountName(None, "compiled graphs", None),
    "graph_breaks": CountName("graph breaks", "graph breaks", "graph breaks"),
    "recompiles": CountName("recompiles", "recompiles", "recompiles"),
}
LABELS = {name: n.label for name, n in COUNT_NAMES.items() if n.label is not None}  # the gated counts
COUNT_HEADERS = {name: n.header for name, n in COUNT_NAMES.items() if n.header is not None}
NOUNS = {  # the counts told as how many new ones
    "graph_breaks": ("graph break", "graph breaks"),
    "recompiles": ("recompile", "recompiles"),
}

Value = int | float


class Outcome(StrEnum):
    """What a count did: unchanged, grew within its tolerance, grew beyond it, grew beyond it but within the
    slowdown accepted for the config, shrank, or could not be compared (`CountRow.why`)."""

    SAME = "same"
    WITHIN = "within"
    GREW = "grew"
    ACCEPTED = "accepted"
    FEWER = "fewer"
    NOT_COMPARED = "not compared"


@dataclass(frozen=True)
class CountRow:
    """One count on both sides and what it did; `change` is a share of the base's count (`relative`) or, for
    graph breaks and recompiles, how many more (inf: from zero; None: not compared)."""

    name: str
    base: Value | None
    head: Value | None
    change: float | None
    tolerance: float | int | str  # the project's (`CountTolerances`); REPORT: shown, never failing
    outcome: Outcome
    why: str | None = None  # not compared: why
    accepted: float | None = None  # the slowdown accepted for the config, which raised the bound
    new: tuple[str, ...] = ()  # graph breaks: the places new in the head; recompiles: the new reasons

    @property
    def label(self) -> str:
        return LABELS[self.name]

    @property
    def relative(self) -> bool:
        return self.name not in ABSOLUTE_COUNTS

    @property
    def gated(self) -> bool:
        return self.tolerance != REPORT

    @property
    def fails(self) -> bool:
        """Grew beyond its tolerance (and any accepted slowdown) where the project gates it."""
        return self.outcome == Outcome.GREW and self.gated

    @property
    def change_text(self) -> str:
        """`+38.0%`, `+1`, `from 0`; `-` where not compared."""
        if self.change is None:
            return "-"
        if math.isinf(self.change):
            return "from 0"
        return format_signed_pct(self.change) if self.relative else f"{int(self.change):+d}"

    @property
    def tolerance_text(self) -> str:
        """`+2%`, `+0`, `report`."""
        if not self.gated:
            return REPORT
        if self.relative:
            return f"+{100 * float(self.tolerance):g}%"
        return f"+{self.tolerance}"

    def describe(self) -> str:
        """One line: `FLOPs per sample +38.0% (tolerance +2%)`, `1 new graph break at model.py:42 in forward`."""
        if self.outcome == Outcome.NOT_COMPARED:
            return f"{self.label} not compared: {self.why}"
        notes = []
        if self.relative:
            text = f"{self.label} {self.change_text}"
            if self.name == "parameters" or (self.change is not None and math.isinf(self.change)):
                # one parameter more is +0.0%: the figures say what grew
                text = f"{self.label} {format_count(self.name, self.base)} -> {format_count(self.name, self.head)}"
                notes.append(self.change_text)
        else:
            count = int(self.change or 0)
            text = f"{count} new {NOUNS[self.name][count != 1]}"
            if self.new:
                text += f" at {format_names(list(self.new))}" if self.name == "graph_breaks" else ""
                text += f" ({format_names(list(self.new))})" if self.name == "recompiles" else ""
        if not self.gated:
            notes.append("reported, not gated")
        elif self.relative or self.tolerance:
            notes.append(f"tolerance {self.tolerance_text}")
        if self.outcome == Outcome.ACCEPTED and self.accepted is not None:
            notes.append(f"within the {100 * self.accepted:g}% accepted" if self.relative else "accepted")
        return text + (f" ({', '.join(notes)})" if notes else "")

    def to_dict(self) -> dict[str, Any]:
        change = None if self.change is None or math.isinf(self.change) else self.change
        return {
            "name": self.name,
            "base": self.base,
            "head": self.head,
            "change": change,
            "relative": self.relative,
            "tolerance": self.tolerance,
            "outcome": self.outcome.value,
            "why": self.why,
            "accepted": self.accepted,
            "new": list(self.new),
            "fails": self.fails,
        }


@dataclass(frozen=True)
class CountsComparison:
    """Every count of one config on both sides (rows in `COUNTED` order, a count neither side has left out)."""

    rows: tuple[CountRow, ...]
    base_device: str | None
    head_device: str | None
    accepted: float | None = None  # the slowdown accepted for the config, if any

    @property
    def failed(self) -> list[CountRow]:
        return [row for row in self.rows if row.fails]

    @property
    def fails(self) -> bool:
        return bool(self.failed)

    @property
    def reason(self) -> str:
        """The failing counts in one line (empty when none fails): `FLOPs per sample +38.0% (tolerance +2%); 1 new
        graph break at model.py:42 in forward`."""
        return "; ".join(row.describe() for row in self.failed)

    @property
    def notes(self) -> list[str]:
        """What else a reader should know: counts beyond their tolerance that pass (accepted, reported) and those
        not compared, with why (the counts not compared for one reason in one line)."""
        notes = [
            row.describe()
            for row in self.rows
            if row.outcome == Outcome.ACCEPTED or (row.outcome == Outcome.GREW and not row.fails)
        ]
        reasons: dict[str, list[str]] = {}
        for row in self.rows:
            if row.outcome == Outcome.NOT_COMPARED and row.why is not None:
                reasons.setdefault(row.why, []).append(row.label)
        for why, labels in reasons.items():
            shown = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
            notes.append(f"{shown} not compared: {why}")
        return notes

    def row(self, name: str) -> CountRow | None:
        return next((row for row in self.rows if row.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_device": self.base_device,
            "head_device": self.head_device,
            "accepted": self.accepted,
            "fails": self.fails,
            "reason": self.reason or None,
            "rows": [row.to_dict() for row in self.rows],
        }
