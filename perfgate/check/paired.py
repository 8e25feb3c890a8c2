"""A paired check: the working tree measured against a base commit, pair by pair, until decided."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from perfgate.check.plan import CheckPlan, paired_session
from perfgate.check.sequential import decide_sequentially
from perfgate.judge.settings import LookTracker
from perfgate.judge.verdict import Status, compare_pairs
from perfgate.judge.wording import budget_note, pairs_needed_note, pairs_to_resolve
from perfgate.measure.paired import PairedSession, base_sides, sweep_leftovers
from perfgate.records.results import RunResult
from perfgate.records.verdicts import GateResult, GateSettings, WorkloadVerdict


def decide_paired(
    session: PairedSession, settings: GateSettings, started: float, notify: Callable[[str], None] | None
) -> GateResult:
    """The paired check: the first pairs (as far as the time budget allows), then more pairs for open
    configs until each is decided or the budget or `max_trials` is reached (`decide_sequentially`). The configs
    the first look leaves open that the budget cannot decide are named then (`budget_plan`)."""
    keys = list(session.sides["head"].trials)
    budget_s = settings.budget_s(len(keys))
    for index in range(settings.first_n):
        if index and time.monotonic() - started + sum(map(session.mean_pair_s, keys)) > budget_s:
            break
        session.run_more(keys)
    tracker = LookTracker(settings, extensible=True)
    looked: list[GateResult] = []

    def judge(final: bool) -> GateResult:
        counts = {key: session.ok_pairs(key) for key in keys}
        run = session.paired_run()
        assert run.against is not None
        result = compare_pairs(run, run.against.base, settings, tracker.look(counts, final), run.against)
        if not looked and notify:  # the first look: the configs it leaves open that the budget cannot decide
            still_open = [(v.workload, v.config) for v in result.verdicts if v.status == Status.INCONCLUSIVE]
            for line in budget_plan(session, still_open, settings, started):
                notify(f"the budget will not decide {line}")
        looked.append(result)
        return result

    result, stopped = decide_sequentially(
        judge,
        lambda: {key: session.pairs(key) for key in keys},
        session.run_more,
        lambda pending: sum(map(session.mean_pair_s, pending)),
        settings,
        started,
        notify,
        unit="pair",
        extend=tracker.extend,
    )
    if stopped is not None:
        still_open = [(v.workload, v.config) for v in result.verdicts if v.status == Status.INCONCLUSIVE]
        short = budget_plan(session, still_open, settings, started)
        if short:
            stopped = f"{stopped}; {'; '.join(short)}"
    return replace(result, stopped_because=stopped, workloads=_time_needed(result, session))


def pair_logs(session: PairedSession, key: tuple[str, str]) -> list[float]:
    """The per-pair log ratios head/base of a config's pairs that ran on both sides."""
    base = {t.trial: t.samples_per_sec for t in session.sides["base"].trials[key] if t.ok and t.samples_per_sec > 0}
    return [
        math.log(t.samples_per_sec / base[t.trial])
        for t in session.sides["head"].trials[key]
        if t.ok and t.samples_per_sec > 0 and t.trial in base
    ]


def budget_plan(
    session: PairedSession, keys: Sequence[tuple[str, str]], settings: GateSettings, started: float
) -> list[str]:
    """The configs the time budget cannot decide, each in one line (`budget_note`): from each config's pair time
    and pair-to-pair noise so far, the pairs that resolving its threshold needs (at least MIN_DECIDING, at most
    the check's most), and the pairs that fit in what is left of the budget if every open config gets one more
    pair a round until it has what it needs (a config that has what it needs hands its time to the others)."""
    budget_s = settings.budget_s(len(session.sides["head"].trials))
    elapsed = time.monotonic() - started
    most = max(settings.first_n, settings.max_n)
    needs: dict[tuple[str, str], tuple[int, int]] = {}
    for key in keys:
        logs = pair_logs(session, key)
        pairs = len(logs)
        noise = statistics.stdev(logs) if pairs >= 2 else math.nan
        observed = statistics.fmean(logs) if logs else None
        needed = pairs_to_resolve(noise, pairs, settings.thresholds_for(*key).throughput, observed)
        if needed is not None and needed > pairs:
            needs[key] = (pairs, needed)
    reached = {key: pairs for key, (pairs, _) in needs.items()}
    left = budget_s - elapsed
    while True:
        pending = [key for key, (_, needed) in needs.items() if reached[key] < min(needed, most)]
        round_s = sum(map(session.mean_pair_s, pending))
        if not pending or round_s > left:
            break
        left -= round_s
        for key in pending:
            reached[key] += 1
    needed_s = elapsed + sum(
        (min(needed, most) - pairs) * session.mean_pair_s(key) for key, (pairs, needed) in needs.items()
    )
    option = settings.front_end.option("time-budget")
    return [
        budget_note(f"{key[0]} {key[1]}", reached[key], needed, budget_s, needed_s, option, most)
        for key, (_, needed) in needs.items()
        if reached[key] < needed
    ]


def run_paired_check(plan: CheckPlan, ref: str) -> GateResult:
    """Measure head and base in pairs and judge head against base, adding pairs while verdicts are open.

    The plan's `pairing`: how the pairs run (`measure.paired.takes_turns` decides turns it leaves open), and its
    `environment` (one of `measure.packages.MODES`) where the base's trials run, the head's environment or one of
    its own."""
    started = time.monotonic()
    notify = plan.notify
    remove_leftovers(notify)
    with (
        base_sides(ref, plan.pairing.environment, front_end=plan.run.front_end, notify=notify) as sides,
        paired_session(plan, sides.base, sides.head, ref, base_environment=sides.environment) as session,
    ):
        if notify:
            base = sides.base
            notify(f"measuring the working tree against {ref} ({(base.commit or '')[:10]}), checked out at {base.root}")
        result = decide_paired(session, plan.gate, started, notify)
        if plan.run.profile_dir is None:
            return result
        session.profile(plan.run.profile_dir)
        return with_profiles(result, session.paired_run())


def with_profiles(result: GateResult, run: RunResult) -> GateResult:
    """The judged check, its run now with each side's profiles (`PairedSession.profile`): the same trials, so the
    verdicts stand; the base's operator tables join the entries the diagnosis compares head with."""
    assert run.against is not None
    base = {w.name: w for w in run.against.base.workloads}
    workloads = []
    for workload in result.workloads:
        entry, side = workload.baseline, base.get(workload.workload)
        if entry is not None and side is not None:
            configs = {
                name: replace(config, top_operators=list(side.profiles[name].top_operators))
                if name in side.profiles
                else config
                for name, config in entry.configs.items()
            }
            workload = replace(workload, baseline=replace(entry, configs=configs))
        workloads.append(workload)
    return replace(result, run=run, workloads=workloads)


def remove_leftovers(notify: Callable[[str], None] | None, repo_dir: Path | None = None) -> list[str]:
    """Remove the worktrees and temporary folders that killed checks left (`measure.paired.sweep_leftovers`),
    each said on `notify`; what was removed."""
    removed = sweep_leftovers(repo_dir)
    for item in removed:
        if notify:
            notify(f"removed {item}, left by a perfgate check that was killed")
    return removed


def _time_needed(result: GateResult, session: PairedSession) -> list[WorkloadVerdict]:
    """Each open verdict's reason, with how many pairs (and minutes) resolving its threshold would take."""
    workloads = []
    for workload in result.workloads:
        configs = []
        for verdict in workload.configs:
            t = verdict.throughput if verdict.accepted is None else verdict.accepted.throughput
            if verdict.status == Status.INCONCLUSIVE and t is not None:
                pair_s = session.mean_pair_s((verdict.workload, verdict.config))
                note = pairs_needed_note(t.noise, t.n_candidate, t.threshold, pair_s)
                verdict = replace(verdict, reason=f"{verdict.reason}; {note}")
            configs.append(verdict)
        workloads.append(replace(workload, configs=configs))
    return workloads
