"""Model compute: it speaks when forward, backward and optimizer growth explains most of a slower step (a
regression verdict, or early evidence beyond the trials' noise: on a noisy machine one trial's step proves nothing),
or when, counted exactly, FLOPs per sample grew (`FLOPs per sample +38% (the model grew)`), ranked by what the phases
or the added FLOPs at the baseline's time per FLOP explain, whichever is more. With every count of the step unchanged
it is silent: the model does the same work, and the same-work rule (`dependencies`) says what is left.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfgate.judge.diagnosis.common import PHASE_NAMES, _per_step, _percent
from perfgate.judge.diagnosis.counted import _AddedOperators, _Counted
from perfgate.project import DiagnosisThresholds
from perfgate.records.diagnoses import COMPUTE, Finding, PhaseChange
from perfgate.records.diagnoses import explained as _explained

FLOPS_LINE = "model compute: FLOPs per sample"  # how a model-compute finding the counts prove begins


def _model_compute(
    phases: Sequence[PhaseChange],
    slower: bool,
    th: DiagnosisThresholds,
    changes: Sequence[str] = (),
    operators: Sequence[tuple[str, float, float]] = (),
    contention_s: float = 0.0,
    counted: _Counted | None = None,
    added: _AddedOperators | None = None,
) -> list[Finding]:
    """The compute phases explain most of a slower step; or, from the counts, FLOPs per sample grew (the finding
    then leads by what the added FLOPs explain, `_flops_share`, or the phases, whichever is more: an exact count
    is stronger evidence than a timed phase). With every count unchanged the model does the same work, and
    `_same_work` says what that leaves instead."""
    explains = _explained(phases, COMPUTE, contention_s) if slower else 0.0
    flops = counted.growth("flops_per_sample") if counted is not None else None
    if flops is None and (explains < th.explains or (counted is not None and counted.same_work)):
        return []
    grown = sorted((p for p in phases if p.phase in COMPUTE), key=lambda p: p.change_s, reverse=True)
    evidence = tuple(_per_step(p) for p in grown) + tuple(
        c for c in changes if c.startswith("the model's numerics changed")
    )
    growth = sum(p.change_s for p in phases)
    # The phases that carry the growth (each at least a fifth of the compute phases' growth), largest first.
    carrying = [p for p in grown if p.change_s > 0.2 * growth * explains] or grown[:1]
    names = " and ".join(PHASE_NAMES.get(p.phase, p.phase) for p in carrying)
    line = f"model compute: {names} explain{'s' if len(carrying) == 1 else ''} {explains:.0%} of the slower step"
    share = None
    where = "look at the model code this change touched"
    if counted is not None and flops is not None:
        flops_share = _flops_share(phases, flops) if slower else 0.0
        share = max(explains, flops_share) if slower else None
        grew = "the model grew" if counted.growth("parameters") is not None else "the same parameters do more work"
        inputs = [c for c in changes if c.startswith("the data pipeline's output changed")]
        if inputs and counted.growth("parameters") is None:
            # The same parameters on other batches: larger inputs (padding, sequence length, image size) do more work.
            where = (
                "the batches changed too: look at their shapes (padding, sequence length, image size), then the "
                "model code"
            )
            evidence = (*evidence, *inputs)
        why = f"{FLOPS_LINE} {_percent(flops)} ({grew})"
        if explains >= th.explains:
            line = f"{why}; {line.removeprefix('model compute: ')}"
        elif flops_share > 0:
            line = f"{why}; at the baseline's time per FLOP that is {flops_share:.0%} of the slower step"
        else:
            line = why + ("" if slower else "; the step is not measurably slower")
        figures = [counted.figure(n) for n in ("flops_per_sample", "parameters", "operators_per_step")]
        evidence = ("counted exactly: " + ", ".join(f for f in figures if f), *evidence)
    elif added is not None and not added.dispatch_sized:
        # Operators grew with FLOPs unchanged, each costing more than dispatch: work the FLOP count leaves out.
        line += (
            f"; +{added.now - added.before:,} operators a step, {added.flops}, {1e6 * added.per_operator_s:.0f} us "
            "each: work the FLOP count leaves out (elementwise operations, copies)"
        )
    if operators:
        name, before, now = operators[0]
        line += f"; {name} +{1000 * (now - before):.2f} ms per step"
    line += f"; {where}"
    return [Finding("model compute", line, evidence, explains=share)]


def _flops_share(phases: Sequence[PhaseChange], growth: float) -> float:
    """The share of the slower step that FLOPs per sample grown by `growth` explain at the baseline's time per FLOP:
    the compute phases' baseline time grown in proportion, over the step's growth; 1 at most, 0 without a baseline
    or a step that grew."""
    if any(p.baseline_s is None for p in phases):
        return 0.0
    step_growth = sum(p.change_s for p in phases)
    if step_growth <= 0:
        return 0.0
    compute_before = sum(p.baseline_s or 0.0 for p in phases if p.phase in COMPUTE)
    return min(1.0, compute_before * growth / step_growth)
