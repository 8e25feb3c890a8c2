"""Exact counts, judged without statistics: each count of a training step (`records.shapes.Counts`) against the
other side's, by its own tolerance (`project.CountTolerances`, `[tool.perfgate.counts]`); the comparison's shapes
are `records.counts`.

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
from dataclasses import dataclass, field

from perfgate.formatting import format_count
from perfgate.project import ABSOLUTE_COUNTS, REPORT, CountTolerances
from perfgate.records.counts import COUNTED, NOUNS, CountRow, CountsComparison, Outcome, Value
from perfgate.records.results import TrialResult
from perfgate.records.shapes import DEVICE_DEPENDENT_COUNTS, Counts

__all__ = ["SideCounts", "compare_counts", "compare_sides", "side_counts"]


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
    if name not in NOUNS:
        return ()
    old, new = (
        (base.break_places, head.break_places)
        if name == "graph_breaks"
        else (base.recompile_reasons, head.recompile_reasons)
    )
    return tuple((Counter(new) - Counter(old)).elements())
