"""A check by the exact counts alone (`--counts-only`): one untimed counting trial per config and side, no statistics.

Each trial builds the workload, runs its warm-up steps and counts one step (`perfgate.measure.counting`): FLOPs
per sample, operators, graphs, breaks and recompiles, parameters, the allocated peak. Nothing is timed, so a
pair's two trials run at the same time and a CPU runner can gate the counts of a model that trains on GPUs in
seconds; the counts are judged against the base commit's (`--against`) or the stored baseline's by their
tolerances (`perfgate.judge.counts`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from perfgate._files import OwnedTempDir
from perfgate.check.stored import find_baselines
from perfgate.judge.verdict import judge_counts_only
from perfgate.measure.lab import LabSession, Pairing, ProgressCallback, RunSettings
from perfgate.measure.packages import base_environment
from perfgate.measure.paired import PairedSession, base_checkout, changed_files
from perfgate.records.baselines import BaselineStore
from perfgate.records.fingerprint import machine_fingerprint
from perfgate.records.verdicts import GateResult, GateSettings
from perfgate.references import Reference


def counting_settings(run_settings: RunSettings) -> RunSettings:
    """The run settings of counting trials: one trial a config, one round, counts only."""
    return replace(run_settings, counts_only=True, trials=1, rounds=1)


def run_counts_check(
    references: Sequence[Reference],
    run_settings: RunSettings,
    settings: GateSettings,
    *,
    against: str | None = None,
    store: BaselineStore | None = None,
    progress: ProgressCallback | None = None,
    notify: Callable[[str], None] | None = None,
    environment: str = "auto",
) -> GateResult:
    """Count every config of the working tree and of `against` (both sides of a pair at once), or of the working
    tree alone against the stored baselines' counts (`store`: this machine's, else the workload's latest from any
    machine, whose device-dependent counts are compared only on the same device type), and judge by the counts.
    `environment`: where the base's trials run (`perfgate.measure.packages`; a dependency changes the counts too)."""
    started = time.monotonic()
    run_settings = counting_settings(run_settings)
    if against is not None:
        with (
            base_checkout(against) as (base, head),
            OwnedTempDir("perfgate-") as scratch,
            base_environment(
                environment, base.root, head.root, scratch, notify=notify, changed=changed_files(head, base)
            ) as own,
            PairedSession(
                references,
                run_settings,
                base,
                head,
                against,
                pairing=Pairing(parallel=True),
                progress=progress,
                base_environment=own,
            ) as session,
        ):
            if notify:
                notify(
                    f"counting the working tree and {against} ({(base.commit or '')[:10]}), checked out at {base.root}"
                )
            session.run_pairs(1)
            run = session.paired_run()
            result = judge_counts_only(run, settings)
    else:
        assert store is not None
        with LabSession(references, run_settings, progress) as session:
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
