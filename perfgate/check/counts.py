"""A check by the exact counts alone (`--counts-only`): one untimed counting trial per config and side, no statistics.

Each trial builds the workload, runs its warm-up steps and counts one step (`perfgate.measure.counting`): FLOPs
per sample, operators, graphs, breaks and recompiles, parameters, the allocated peak. Nothing is timed, so a
pair's two trials run at the same time and a CPU runner can gate the counts of a model that trains on GPUs in
seconds; the counts are judged against the base commit's (`--against`) or the stored baseline's by their
tolerances (`perfgate.judge.counts`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from perfgate.check.plan import CheckPlan, paired_session
from perfgate.check.stored import find_baselines
from perfgate.judge.verdict import judge_counts_only
from perfgate.measure.lab import LabSession, Pairing, RunSettings
from perfgate.measure.paired import base_sides
from perfgate.records.baselines import BaselineStore
from perfgate.records.fingerprint import machine_fingerprint
from perfgate.records.verdicts import GateResult


def counting_settings(run_settings: RunSettings) -> RunSettings:
    """The run settings of counting trials: one trial a config, one round, counts only, a fresh process (the
    counts are the same in a forked one, and a baseline's counts are read whichever way its trials started)."""
    return replace(run_settings, counts_only=True, trials=1, rounds=1, fork=False)


def run_counts_check(plan: CheckPlan, *, against: str | None = None, store: BaselineStore | None = None) -> GateResult:
    """Count every config of the working tree and of `against` (both sides of a pair at once), or of the working
    tree alone against the stored baselines' counts (`store`: this machine's, else the workload's latest from any
    machine, whose device-dependent counts are compared only on the same device type), and judge by the counts.
    The plan's `pairing.environment`: where the base's trials run (`perfgate.measure.packages`; a dependency changes
    the counts too); both sides of a pair run at once, whatever else the pairing says (nothing is timed)."""
    started = time.monotonic()
    settings, notify = plan.gate, plan.notify
    plan = replace(
        plan, run=counting_settings(plan.run), pairing=Pairing(parallel=True, environment=plan.pairing.environment)
    )
    if against is not None:
        with (
            base_sides(against, plan.pairing.environment, front_end=plan.run.front_end, notify=notify) as sides,
            paired_session(plan, sides.base, sides.head, against, base_environment=sides.environment) as session,
        ):
            base = sides.base
            if notify:
                notify(
                    f"counting the working tree and {against} ({(base.commit or '')[:10]}), checked out at {base.root}"
                )
            session.run_pairs(1)
            run = session.paired_run()
            result = judge_counts_only(run, settings)
    else:
        assert store is not None
        with LabSession(plan.references, plan.run, plan.progress) as session:
            fingerprint = machine_fingerprint(session.environment)
            baselines, problems = find_baselines(store, session.workload_names, fingerprint, settings.update_command)
            for name in list(problems):  # counts are the code's: another machine's baseline serves (`judge.counts`)
                entries = store.load(name)
                if entries:
                    baselines[name] = max(entries.values(), key=lambda entry: entry.measured_at)
                    del problems[name]
            session.keep(list(baselines))
            if session.workload_names:
                session.run_trials(1)
            result = judge_counts_only(session.result(), settings, baselines=baselines, problems=problems)
    if notify:
        notify(f"counted in {time.monotonic() - started:.0f} s")
    return result
