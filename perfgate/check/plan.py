"""What every check is given: the workloads, how the lab runs them, how the gate judges them, how pairs run, and
where progress and notes go. The application layer builds one from its request (`app.request.GateRequest.plan`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.measure.lab import DEFAULT_PAIRING, Pairing, ProgressCallback, RunSettings
from perfgate.measure.paired import Checkout, PairedSession
from perfgate.records.verdicts import GateSettings
from perfgate.references import Reference


@dataclass(frozen=True)
class CheckPlan:
    """A check's inputs, passed whole (`run_check`, `run_paired_check`, `run_counts_check`, `run_bisect`,
    `run_calibration`): `pairing` is read only where pairs run (its `environment` where a base commit is
    measured)."""

    references: Sequence[Reference]
    run: RunSettings
    gate: GateSettings
    pairing: Pairing = DEFAULT_PAIRING
    progress: ProgressCallback | None = None
    notify: Callable[[str], None] | None = None


def paired_session(plan: CheckPlan, base: Checkout, head: Checkout, ref: str, **options: Any) -> PairedSession:
    """The lab of a paired check of `plan`'s workloads: head against base (`ref` names it), its pairs run as the
    plan's `pairing` says, their rounds leaving the gate's time budget room for the pairs a decision needs;
    `options`: the rest of `PairedSession`'s (a planted slowdown, the base's environment)."""
    return PairedSession(
        plan.references,
        plan.run,
        base,
        head,
        ref,
        pairing=plan.pairing,
        progress=plan.progress,
        budget_s=plan.gate.budget_s,
        **options,
    )
