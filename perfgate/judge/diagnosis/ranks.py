"""Data-parallel trials (`--nproc`), from each rank's phases and its timed all-reduce against the baseline's
ranks (`_ranks`): communication speaks when the all-reduce's time in flight grew, comm_growth of the step (backward's
longer wait for it counts for communication, not the model); load imbalance when one rank's lead over the others
grew, imbalance_growth of the step, carried by one phase (the rank and the phase are named); straggler when the same
lead is spread over the phases. Each beyond the trials' noise; silent without ranks on both sides.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfgate.judge.diagnosis.common import PHASE_NAMES, _moved
from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import ConfigEntry, rank_totals
from perfgate.records.diagnoses import Finding, Movement
from perfgate.records.results import TrialResult
from perfgate.records.summary import PHASES

RANK_SUSPECTS = frozenset({"load imbalance", "straggler"})  # data-parallel trials: a rank, named


@dataclass(frozen=True)
class _RankFindings:
    findings: list[Finding]
    waited_s: float = 0.0  # per step: how much longer backward waited for the all-reduce (not the model's compute)


def _rank_steps(ranks: Sequence[Mapping[str, float]], steps: int) -> list[dict[str, float]]:
    """A trial's ranks as seconds per step, with `busy`: the step outside backward's wait for the all-reduce.
    `steps`: how many timed steps the ranks' totals cover (every round's)."""
    out = []
    for rank in ranks:
        per_step = {k: v / steps for k, v in rank.items()}
        per_step["busy"] = per_step.get("step", 0.0) - per_step.get("comm_exposed", 0.0)
        per_step["backward"] = per_step.get("backward", 0.0) - per_step.get("comm_exposed", 0.0)
        out.append(per_step)
    return out


def _lead(ranks: Sequence[Mapping[str, float]], late: int, key: str) -> float:
    """How far rank `late` is ahead of the others' median in `key` (its time per step)."""
    others = [r.get(key, 0.0) for i, r in enumerate(ranks) if i != late]
    return ranks[late].get(key, 0.0) - statistics.median(others)


def _ranks(
    baseline: ConfigEntry | None,
    ok: Sequence[TrialResult],
    steps: int | None,
    step: Movement,
    slowdown: bool,
    th: DiagnosisThresholds,
    session_noise: float,
) -> _RankFindings:
    """The data-parallel rules, from each rank's phases and the timed all-reduce against the baseline's ranks:

    - communication: the all-reduce's time in flight grew (on the rank that waited least: the transfer itself,
      not a wait for a late rank) by comm_growth of the step and beyond its noise: a larger gradient, smaller
      buckets, `find_unused_parameters=True`;
    - load imbalance: one rank's lead over the others outside the all-reduce grew (imbalance_growth of the step,
      beyond noise), carried by one phase (`explains` of the lead or more): the rank and the phase are named;
    - straggler: the same lead, in no one phase: the rank is slow as a whole, and the others wait for it.
    """
    if baseline is None or not steps:
        return _RankFindings([])
    before = [_rank_steps(t.ranks, steps * t.rounds) for t in baseline.trials if t.ranks]
    now = [_rank_steps([rank_totals(r) for r in t.distributed.ranks], len(t.step_s)) for t in ok if t.distributed]
    if not before or not now or len(before[0]) != len(now[0]):
        return _RankFindings([])
    growth = step.change_s if slowdown and step.change_s > 0 else 0.0
    communication, waited = _communication(before, now, step, growth, th, session_noise)
    return _RankFindings([*communication, *_imbalance(before, now, step, growth, th, session_noise)], waited)


Ranks = list[list[dict[str, float]]]  # per trial, per rank: seconds (and bytes) per step (`_rank_steps`)


def _communication(
    before: Ranks, now: Ranks, step: Movement, growth: float, th: DiagnosisThresholds, session_noise: float
) -> tuple[list[Finding], float]:
    """The all-reduce's time in flight grew, on the rank that waited least; with how much longer backward waited
    for it a step (that much of the step's growth is communication's, not the model's)."""
    if not all("comm" in r for trial in before + now for r in trial):
        return [], 0.0
    flight = _moved([min(r["comm"] for r in t) for t in before], [min(r["comm"] for r in t) for t in now])
    exposed = _moved(
        [min(r["comm_exposed"] for r in t) for t in before], [min(r["comm_exposed"] for r in t) for t in now]
    )
    if not (
        flight.change_s > th.comm_growth * step.before_s and flight.beyond_noise(th.evidence_sigmas, session_noise)
    ):
        return [], 0.0
    waited = max(0.0, exposed.change_s)
    carried = [statistics.fmean(t[0].get("comm_bytes", 0.0) for t in side) / 2**20 for side in (before, now)]
    carried_text = (
        (f"the gradient all-reduced: {carried[0]:.1f} -> {carried[1]:.1f} MiB a step",) if all(carried) else ()
    )
    explains = min(1.0, waited / growth) if growth else None
    share = f"; explains {explains:.0%} of the slower step" if explains else ""
    base_step, now_step = step.before_s, step.before_s + step.change_s
    finding = Finding(
        "communication",
        f"communication: the gradient all-reduce is in flight {1000 * flight.before_s:.1f} -> "
        f"{1000 * (flight.before_s + flight.change_s):.1f} ms a step "
        f"({flight.before_s / base_step:.0%} -> {(flight.before_s + flight.change_s) / now_step:.0%} "
        f"of the step){share}",
        (
            *carried_text,
            f"backward waits for it after its last bucket: {1000 * exposed.before_s:.1f} -> "
            f"{1000 * (exposed.before_s + exposed.change_s):.1f} ms a step",
            "look at what grew the gradients or split them: parameters added, find_unused_parameters=True, "
            "a smaller bucket_cap_mb, a changed gradient dtype",
        ),
        explains=explains,
    )
    return [finding], waited


def _imbalance(
    before: Ranks, now: Ranks, step: Movement, growth: float, th: DiagnosisThresholds, session_noise: float
) -> list[Finding]:
    """One rank's lead over the others outside the all-reduce grew: a load imbalance when one phase carries it,
    a straggler when none does."""
    busy_now = [statistics.fmean(t[i]["busy"] for t in now) for i in range(len(now[0]))]
    late = max(range(len(busy_now)), key=busy_now.__getitem__)
    base_late = [max(range(len(t)), key=lambda i, t=t: t[i]["busy"]) for t in before]  # type: ignore[misc]
    lead = _moved(
        [_lead(t, i, "busy") for t, i in zip(before, base_late, strict=True)], [_lead(t, late, "busy") for t in now]
    )
    if not (
        lead.change_s > th.imbalance_growth * step.before_s and lead.beyond_noise(th.evidence_sigmas, session_noise)
    ):
        return []
    phase_leads = {
        p: statistics.fmean(_lead(t, late, p) for t in now)
        - statistics.fmean(_lead(t, i, p) for t, i in zip(before, base_late, strict=True))
        for p in PHASES
    }
    carrying = max(phase_leads, key=phase_leads.__getitem__)
    timed = all("comm_exposed" in r for t in now for r in t)
    wait_text = ""
    if timed:
        others_wait = statistics.fmean(
            statistics.fmean(r["comm_exposed"] for j, r in enumerate(t) if j != late) for t in now
        )
        wait_text = f"; the others wait {1000 * others_wait:.1f} ms a step in the all-reduce"
    explains = min(1.0, lead.change_s / growth) if growth else None
    share = f"; explains {explains:.0%} of the slower step" if explains else ""
    per_phase = ", ".join(f"{PHASE_NAMES.get(p, p)} {1000 * v:+.1f}" for p, v in phase_leads.items() if abs(v) >= 5e-5)
    by_phase = f"rank {late}'s lead by phase, ms a step: {per_phase}"
    was = f"(was {1000 * lead.before_s:.1f})"
    if phase_leads[carrying] >= th.explains * lead.change_s:
        return [
            Finding(
                "load imbalance",
                f"load imbalance: rank {late}'s {PHASE_NAMES.get(carrying, carrying)} is "
                f"{1000 * phase_leads[carrying]:.1f} ms a step longer than the other ranks'; it leads them by "
                f"{1000 * (lead.before_s + lead.change_s):.1f} ms a step {was}{wait_text}{share}",
                (
                    by_phase,
                    "data: that rank's shard or loader is slower (its samples, its workers); compute: its "
                    "inputs are larger, or its device slower",
                ),
                explains=explains,
            )
        ]
    return [
        Finding(
            "straggler",
            f"straggler: rank {late} reaches the all-reduce {1000 * (lead.before_s + lead.change_s):.1f} ms a "
            f"step after the others {was}, in no one phase{wait_text}{share}",
            (
                by_phase,
                "the rank is slow as a whole: look at what it runs on and beside (its core or device, a "
                "neighbour's job, throttling)",
            ),
            explains=explains,
        )
    ]
