"""Exact counts, judged without statistics: each count of a training step (`records.shapes.Counts`) against the
other side's, by its own tolerance (`project.CountTolerances`, `[tool.perfgate.counts]`).

With the seed, the shapes and the data slice fixed, two runs of the same code count the same, so a count that
grew beyond its tolerance fails the build with no alpha and no trials to add; only growth fails, fewer never
does. A count the trials of one side disagree on is not deterministic: shown, never gated. Operators, kernels
and the allocated peak depend on the backend and are compared only between runs on one device type
(`records.shapes.DEVICE_DEPENDENT_COUNTS`). A slowdown accepted for a config (`judge.acceptance`) raises the
shares to the accepted percentage and accepts new graph breaks and recompiles.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from perfgate.formatting import format_bytes, format_names, format_signed_pct
from perfgate.project import ABSOLUTE_COUNTS, REPORT, CountTolerances
from perfgate.records.results import TrialResult
from perfgate.records.shapes import DEVICE_DEPENDENT_COUNTS, Counts

__all__ = [
    "COUNTED",
    "COUNT_HEADERS",
    "COUNT_NAMES",
    "LABELS",
    "REPORT",
    "CountName",
    "CountRow",
    "CountTolerances",
    "CountsComparison",
    "Outcome",
    "SideCounts",
    "compare_counts",
    "compare_sides",
    "format_count",
    "side_counts",
]

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
_NOUNS = {"graph_breaks": ("graph break", "graph breaks"), "recompiles": ("recompile", "recompiles")}

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


def format_count(name: str, value: Value | None) -> str:
    """A count as the reports show it: FLOPs in engineering notation (`1.76e8`), bytes in binary units, the
    others whole (`124,416`)."""
    if value is None:
        return "-"
    if name == "allocated_peak_bytes":
        return format_bytes(int(value))
    if name == "flops_per_sample":
        if abs(value) < 1000:
            return f"{value:.3g}"
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{int(value):,}"


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
            text = f"{count} new {_NOUNS[self.name][count != 1]}"
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


@dataclass(frozen=True)
class SideCounts:
    """One side's counts (its first ok trial's) and each count its ok trials disagree on, with the values seen."""

    counts: Counts | None
    unsteady: Mapping[str, tuple[Value | None, ...]] = field(default_factory=dict)


def side_counts(trials: Iterable[TrialResult]) -> SideCounts:
    """The counts of a side's ok trials: the first's, and each count on which they differ (in the order seen)."""
    counted = [t.counts for t in trials if t.ok and t.counts is not None]
    if not counted:
        return SideCounts(None)
    unsteady = {}
    for name in COUNTED:
        values = tuple(dict.fromkeys(getattr(c, name) for c in counted))
        if len(values) > 1:
            unsteady[name] = values
    return SideCounts(counted[0], unsteady)


def compare_sides(
    base: SideCounts,
    head: SideCounts,
    tolerances: CountTolerances,
    accepted: float | None = None,
    *,
    sides: tuple[str, str] = ("the base", "the head"),
) -> CountsComparison | None:
    """`compare_counts` of two sides picked by `side_counts`: a count either side's trials disagree on is
    not compared ("not deterministic: 400, 402 in the head's trials")."""
    unsteady: dict[str, str] = {}
    for side, picked in ((sides[1], head), (sides[0], base)):
        for name, values in picked.unsteady.items():
            shown = ", ".join(format_count(name, v) for v in values)
            unsteady.setdefault(name, f"not deterministic: {shown} in {side}'s trials")
    return compare_counts(base.counts, head.counts, tolerances, accepted, unsteady=unsteady, sides=sides)


def compare_counts(
    base: Counts | None,
    head: Counts | None,
    tolerances: CountTolerances,
    accepted: float | None = None,
    *,
    unsteady: Mapping[str, str] | None = None,
    sides: tuple[str, str] = ("the base", "the head"),
) -> CountsComparison | None:
    """Each count of `head` against `base` by its tolerance; None when neither side counted.

    `accepted`: the slowdown accepted for the config (a fraction), which raises each share's tolerance to it and
    accepts new graph breaks and recompiles. `unsteady`: counts not compared, and why (`compare_sides`).
    `sides` name the two sides in the reasons (`the baseline`, `this run` against stored baselines).
    """
    if base is None and head is None:
        return None
    rows = []
    for name in COUNTED:
        old = None if base is None else getattr(base, name)
        new = None if head is None else getattr(head, name)
        if old is None and new is None:
            continue
        tolerance = getattr(tolerances, name)
        why = _not_compared(name, base, head, old, new, sides) or (unsteady or {}).get(name)
        if why is not None:
            rows.append(CountRow(name, old, new, None, tolerance, Outcome.NOT_COMPARED, why))
            continue
        assert base is not None and head is not None and old is not None and new is not None
        rows.append(_row(name, old, new, tolerance, None if tolerance == REPORT else accepted, base, head))
    return CountsComparison(
        tuple(rows), None if base is None else base.device, None if head is None else head.device, accepted
    )


def _not_compared(
    name: str,
    base: Counts | None,
    head: Counts | None,
    old: Value | None,
    new: Value | None,
    sides: tuple[str, str],
) -> str | None:
    if old is None:
        return f"not counted in {sides[0]}"
    if new is None:
        return f"not counted in {sides[1]}"
    assert base is not None and head is not None
    if name in DEVICE_DEPENDENT_COUNTS and base.device != head.device:
        return (
            f"counted on {base.device} in {sides[0]} and on {head.device} in {sides[1]}, and backends run "
            "different operators and kernels"
        )
    if name == "allocated_peak_bytes" and base.allocated_kind != head.allocated_kind:
        return f"measured as {base.allocated_kind} in {sides[0]} and as {head.allocated_kind} in {sides[1]}"
    return None


def _row(
    name: str, old: Value, new: Value, tolerance: float | int | str, accepted: float | None, base: Counts, head: Counts
) -> CountRow:
    relative = name not in ABSOLUTE_COUNTS
    same = math.isclose(new, old, rel_tol=1e-9) if isinstance(new, float) else new == old
    change = 0.0 if same else float(new - old) if not relative else new / old - 1 if old else math.inf
    if same:
        outcome = Outcome.SAME
    elif new < old:
        outcome = Outcome.FEWER
    elif tolerance != REPORT and change <= float(tolerance):
        outcome = Outcome.WITHIN
    elif accepted is not None and (not relative or change <= accepted):
        outcome = Outcome.ACCEPTED
    else:
        outcome = Outcome.GREW
    return CountRow(name, old, new, change, tolerance, outcome, accepted=accepted, new=_new(name, base, head))


def _new(name: str, base: Counts, head: Counts) -> tuple[str, ...]:
    """The graph breaks' places, or the recompiles' reasons, in the head and not in the base (each as often as
    it is new)."""
    if name not in _NOUNS:
        return ()
    old, new = (
        (base.break_places, head.break_places)
        if name == "graph_breaks"
        else (base.recompile_reasons, head.recompile_reasons)
    )
    return tuple((Counter(new) - Counter(old)).elements())
