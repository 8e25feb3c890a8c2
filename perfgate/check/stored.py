"""A check against the stored baselines: measure, judge, and add trials while verdicts are open."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from perfgate.check.sequential import decide_sequentially
from perfgate.judge.settings import LookTracker
from perfgate.judge.verdict import compare_run, find_baselines
from perfgate.measure.lab import LabSession, ProgressCallback, RunSettings
from perfgate.records.baselines import BaselineStore
from perfgate.records.fingerprint import machine_fingerprint
from perfgate.records.results import TrialResult
from perfgate.records.verdicts import GateResult, GateSettings
from perfgate.references import Reference


def run_check(
    references: Sequence[Reference],
    run_settings: RunSettings,
    settings: GateSettings,
    store: BaselineStore,
    progress: ProgressCallback | None = None,
    notify: Callable[[str], None] | None = None,
    *,
    measure_unjudged: bool = False,
) -> GateResult:
    """Measure, compare with the stored baselines, and add trials where the verdict is still open.

    `measure_unjudged` (`check --record`): the workloads without a baseline are measured too, with the
    usual trials and none added (there is nothing to decide), so the history keeps them without a verdict;
    otherwise they are only named, and a check with no baseline at all measures nothing."""
    started = time.monotonic()
    with LabSession(references, run_settings, progress) as session:
        fingerprint = machine_fingerprint(session.environment)
        baselines, problems = find_baselines(store, session.workload_names, fingerprint, settings.update_command)
        if not measure_unjudged:
            session.keep(list(baselines))
        if not session.workload_names:
            return GateResult(compare_run(session.result(), {}, settings, problems).workloads, settings, None)
        session.run_trials(settings.first_n)
        tracker = LookTracker(settings)

        def judged() -> dict[tuple[str, str], list[TrialResult]]:
            return {key: trials for key, trials in session.trials.items() if key[0] in baselines}

        def judge(final: bool) -> GateResult:
            counts = {key: sum(t.ok for t in trials) for key, trials in judged().items()}
            return compare_run(session.result(), baselines, settings, problems, tracker.look(counts, final))

        def round_s(pending: Sequence[tuple[str, str]]) -> float:
            return sum(_mean_process_s(session.trials[pair]) for pair in pending)

        result, stopped = decide_sequentially(
            judge,
            lambda: {key: len(trials) for key, trials in judged().items()},
            session.run_more,
            round_s,
            settings,
            started,
            notify,
            unit="trial",
        )
        run = result.run
        if run_settings.profile_dir is not None:
            session.profile()
            run = session.result()  # the same trials, now with the profiles: the verdicts stand
        return replace(result, run=run, stopped_because=stopped)


def _mean_process_s(trials: Sequence[TrialResult]) -> float:
    """How long one more trial of this config should take, from the trials so far."""
    times = [t.process_s for t in trials if t.process_s]
    return sum(times) / len(times) if times else 10.0
