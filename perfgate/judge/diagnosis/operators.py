"""Operators (with `--profile`): the operators whose self time per step grew most against the baseline's
profile, and the trace's file name; supporting evidence, never the suspect by itself (the ranking puts it last).
Silent without a profile; model compute names the operator that grew most (`grown_operators`).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfgate.records.baselines import ConfigEntry
from perfgate.records.diagnoses import Finding
from perfgate.records.shapes import OperatorRow, Profile


def _operators(baseline: ConfigEntry | None, profile: Profile | None) -> list[Finding]:
    """From --profile: the operators whose self time grew most against the baseline's, and the trace."""
    if profile is None:
        return []
    if profile.failure is not None:
        return [Finding("operators", f"operators: no profile ({profile.failure})")]
    current = profile.top_operators
    trace = f"trace: {profile.trace}"
    if baseline is None or not baseline.top_operators:
        top = ", ".join(row.name for row in current[:3])
        return [
            Finding("operators", f"operators: most self time in {top or '-'} (the baseline has no profile)", (trace,))
        ]
    grown = grown_operators(baseline.top_operators, current)
    if not grown:
        return [
            Finding("operators", "operators: no operator's self time grew against the baseline's profile", (trace,))
        ]
    evidence = tuple(f"{name}: {1000 * before:.3f} -> {1000 * now:.3f} ms per step" for name, before, now in grown)
    return [Finding("operators", f"operators: {grown[0][0]} grew most", (*evidence, trace))]


def grown_operators(
    baseline: Sequence[OperatorRow], current: Sequence[OperatorRow], limit: int = 5
) -> list[tuple[str, float, float]]:
    """Operators whose self time per step grew most: (name, baseline s, current s), largest growth first."""
    before = {row.name: row.self_s for row in baseline}
    growth = [(row.name, before.get(row.name, 0.0), row.self_s) for row in current]
    growth = [g for g in growth if g[2] > g[1]]
    growth.sort(key=lambda g: g[2] - g[1], reverse=True)
    return growth[:limit]
