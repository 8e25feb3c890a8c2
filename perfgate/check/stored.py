"""A check against the stored baselines: measure, judge, and add trials while verdicts are open; and the stored
baselines read for it, or for a saved results file (`compare_saved`, `judge_saved`): the baseline store is read
here, never in `judge`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from perfgate.check.plan import CheckPlan
from perfgate.check.sequential import decide_sequentially
from perfgate.judge.settings import LookTracker
from perfgate.judge.verdict import Family, Stored, compare_results, compare_run
from perfgate.measure.lab import LabSession
from perfgate.project import ProjectConfig
from perfgate.records.baselines import DEFAULT_BASELINE_DIR, BaselineEntry, BaselineStore
from perfgate.records.fingerprint import Fingerprint, fingerprint_differences, fingerprint_key, machine_fingerprint
from perfgate.records.results import RunResult, TrialResult
from perfgate.records.verdicts import GateResult, GateSettings, Look, Looks, SessionRate


def run_check(plan: CheckPlan, store: BaselineStore, *, measure_unjudged: bool = False) -> GateResult:
    """Measure, compare with the stored baselines, and add trials where the verdict is still open.

    `measure_unjudged` (`check --record`): the workloads without a baseline are measured too, with the
    usual trials and none added (there is nothing to decide), so the history keeps them without a verdict;
    otherwise they are only named, and a check with no baseline at all measures nothing."""
    started = time.monotonic()
    settings, notify = plan.gate, plan.notify
    with LabSession(plan.references, plan.run, plan.progress) as session:
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
        if plan.run.profile_dir is not None:
            session.profile()
            run = session.result()  # the same trials, now with the profiles: the verdicts stand
        return replace(result, run=run, stopped_because=stopped)


def _mean_process_s(trials: Sequence[TrialResult]) -> float:
    """How long one more trial of this config should take, from the trials so far."""
    times = [t.process_s for t in trials if t.process_s]
    return sum(times) / len(times) if times else 10.0


def missing_baseline(
    workload: str,
    store: BaselineStore,
    fingerprint: Fingerprint,
    entries: Mapping[str, BaselineEntry],
    update_command: str = "perfgate update",
) -> str:
    """The problem line for a workload with no entry for this machine (`entries`: the other machines')."""
    command = f"{update_command} (writes {store.path_for(workload)}; commit it)"
    machine = fingerprint_key(fingerprint)
    if not entries:
        return f"no baseline for {workload} on this machine ({machine}) in {store.directory}/; run {command}"
    closest = min(entries.values(), key=lambda e: len(fingerprint_differences(fingerprint, e.fingerprint)))
    gpus = [e.fingerprint.device_name for e in entries.values() if e.fingerprint.device_type == "cuda"]
    if fingerprint.device_type == "cuda" and gpus and fingerprint.device_name not in gpus:
        # Only baselines from other GPU models: say so plainly, no list of fields.
        recorded = " and ".join(sorted({str(name) for name in gpus}))
        return (
            f"no baseline for {workload} on this GPU model: the stored baselines were recorded on {recorded}, "
            f"this machine has {fingerprint.device_name}, and timings on one GPU model say nothing about "
            f"another; record a baseline on this runner with {command}, or run the check where the baseline was taken"
        )
    differences = "; ".join(fingerprint_differences(fingerprint, closest.fingerprint))
    return (
        f"no baseline for {workload} on this machine ({machine}); the closest stored one "
        f"differs in {differences}; run {command}"
    )


def find_baselines(
    store: BaselineStore,
    workloads: Sequence[str],
    fingerprint: Fingerprint,
    update_command: str = "perfgate update",
) -> tuple[dict[str, BaselineEntry], dict[str, str]]:
    """This machine's baseline entry for each workload, and the problem line for each that has none."""
    baselines: dict[str, BaselineEntry] = {}
    problems: dict[str, str] = {}
    key = fingerprint_key(fingerprint)
    for name in workloads:
        entries = store.load(name)
        if key in entries:
            baselines[name] = entries[key]
        else:
            problems[name] = missing_baseline(name, store, fingerprint, entries, update_command)
    return baselines, problems


def judge_saved(run: RunResult, project: ProjectConfig, baseline_dir: Path | None = None) -> GateResult:
    """Judge a saved results file as the check that wrote it did (its settings are in the file); a file
    from `perfgate run` is judged once with the project's settings."""
    gate = run.gate
    if gate is None:
        settings = GateSettings.from_options(project, trials=1, max_trials=1)
        looks: dict[tuple[str, str], Look] = {}
    else:
        settings = GateSettings.from_record(project, gate)
        if gate.looks is not None:
            looks = {_config_key(key): Look.from_record(look) for key, look in gate.looks.items()}
        else:  # written before spending plans: every config judged as after the check's last look
            looks = {(w.name, c): Look(1, None, True) for w in run.workloads for c in w.configs}
    directory = baseline_dir or Path((gate.baseline_dir if gate is not None else "") or DEFAULT_BASELINE_DIR)
    family = (
        {_config_key(key): (float(pair[0]), float(pair[1])) for key, pair in gate.divisors.items()}
        if gate is not None and gate.divisors is not None
        else None  # written before one error rate per check, or by `perfgate run`: Holm's over this file
    )
    result = compare_saved(run, settings, store=BaselineStore(directory), looks=looks, family=family)
    session = None if gate is None or gate.session is None else SessionRate(settings.alpha, **gate.session)
    return replace(result, looks=looks, session=session)


def _config_key(text: str) -> tuple[str, str]:
    workload, _, config = text.rpartition("/")
    return workload, config


def stored_baselines(candidate: RunResult, settings: GateSettings, store: BaselineStore) -> Stored | None:
    """The stored baselines saved results are judged against: their machine's in `store` (`find_baselines`);
    None for a paired check's results, judged against the base measured beside them."""
    if candidate.against is not None:
        return None
    names = [w.name for w in candidate.workloads]
    return find_baselines(store, names, machine_fingerprint(candidate.environment), settings.update_command)


def compare_saved(
    candidate: RunResult,
    settings: GateSettings,
    store: BaselineStore,
    looks: Looks | None = None,
    family: Family | None = None,
) -> GateResult:
    """Judge saved results (`judge.verdict.compare_results`) against their machine's baselines in `store`, or a
    paired check's against its base."""
    stored = stored_baselines(candidate, settings, store)
    return compare_results(candidate, settings, stored=stored, looks=looks, family=family)
