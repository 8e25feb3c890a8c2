"""Runs the rules and ranks what they find. `diagnose` picks the configs (each regressed one, each whose
samples/s verdict is still open while its step is slower beyond the trials' noise, every measured one with
`every_config`; a config whose loss was not finite gets the numerics finding alone); `diagnose_config` attributes the
change of the step to its phases, decides whether the step is slower (a samples/s regression, or early evidence:
`_slower_beyond_noise`), asks each rule's module, and orders the findings by what explains the change
(`_strength`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

from perfgate.judge.diagnosis.common import DEFAULT_THRESHOLDS, _moved
from perfgate.judge.diagnosis.compute import FLOPS_LINE, _model_compute
from perfgate.judge.diagnosis.counted import COUNT_TOLERANCES, _added_operators, _counted, count_tolerances
from perfgate.judge.diagnosis.dependencies import (
    DEPENDENCIES,
    ONLY_PACKAGES,
    SAME_WORK_PACKAGES,
    _dependencies,
    _same_work,
)
from perfgate.judge.diagnosis.framework import _framework
from perfgate.judge.diagnosis.memory import _memory
from perfgate.judge.diagnosis.numerics import _numerics
from perfgate.judge.diagnosis.operators import _operators, grown_operators
from perfgate.judge.diagnosis.pipeline import _contention_s, _data_pipeline, _host_wait, _loader_cpu, _Pipeline
from perfgate.judge.diagnosis.ranks import RANK_SUSPECTS, _ranks
from perfgate.judge.diagnosis.tail import _tail_latency, _with_intermittent
from perfgate.judge.diagnosis.utilisation import _utilisation
from perfgate.naming import CLI
from perfgate.outcome import Status
from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import BaselineEntry, ConfigEntry
from perfgate.records.diagnoses import COMPUTE, DATA, SAME_WORK, Diagnosis, Finding, Movement, PhaseChange
from perfgate.records.diagnoses import explained as _explained
from perfgate.records.results import ConfigResult, Environments, TrialResult, WorkloadResult, WorkloadSettings
from perfgate.records.shapes import Environment
from perfgate.records.summary import PHASES
from perfgate.records.verdicts import ConfigVerdict, GateResult


def diagnose(
    result: GateResult, *, every_config: bool = False, thresholds: DiagnosisThresholds | None = None
) -> list[Diagnosis]:
    """A diagnosis for each regressed config (each measured config with `every_config`), and for each config
    whose samples/s verdict is still open while its step is slower beyond the trials' noise (early evidence).

    Thresholds: `thresholds`, else the project's `[tool.perfgate.diagnosis]`, else the defaults.
    """
    th = thresholds or result.settings.project.diagnosis_thresholds()
    if result.run is None:
        return []
    measured = {w.name: w for w in result.run.workloads}
    against = result.against if result.against is not None else result.run.against
    environments = None if against is None else against.environments
    environment_option = result.settings.front_end.option("environment")
    diagnoses = []
    for workload in result.workloads:
        current = measured.get(workload.workload)
        if current is None:
            continue
        for verdict in workload.configs:
            config = current.configs.get(verdict.config)
            numerics = _numerics(verdict.reason) if verdict.status == Status.FAILED else None
            if numerics is not None:
                diagnoses.append(Diagnosis(verdict.workload, verdict.config, (), (numerics,)))
                continue
            if config is None:
                continue
            open_only = not every_config and verdict.status != Status.REGRESSION
            if open_only and verdict.status != Status.INCONCLUSIVE:
                continue
            base_entry = workload.baseline
            base = base_entry.configs.get(verdict.config) if base_entry else None
            diagnosis = diagnose_config(
                verdict.workload,
                verdict.config,
                base,
                config,
                current,
                base_settings=base_entry.settings if base_entry else None,
                steps=_steps(base_entry),
                cores=_cores(result.run.environment),
                slower=verdict.slower,
                memory_regressed=verdict.memory is not None and verdict.memory.verdict == "regression",
                th=th,
                changes=verdict.evidence,
                threshold=verdict.thresholds.throughput,
                machine_ratio=verdict.machine.ratio if verdict.machine is not None else None,
                session_noise=0.0 if result.run.against is not None else th.session_noise,
                tolerances=count_tolerances(result.settings.project.counts),
                environments=environments,
                regressed=verdict.status == Status.REGRESSION or _leans_slower(verdict),
                environment_option=environment_option,
            )
            if diagnosis is not None:
                diagnosis = _with_intermittent(diagnosis, verdict.throughput)
            if diagnosis is not None and (diagnosis.early or not open_only):
                diagnoses.append(diagnosis)
    return diagnoses


def _leans_slower(verdict: ConfigVerdict) -> bool:
    """An open samples/s verdict whose pairs lean slower: the head's ratio below the base's."""
    t = verdict.throughput
    return verdict.status == Status.INCONCLUSIVE and t is not None and t.ratio < 1


def diagnose_config(
    workload: str,
    config: str,
    baseline: ConfigEntry | None,
    current: ConfigResult,
    measured: WorkloadResult,
    *,
    base_settings: WorkloadSettings | None = None,
    steps: int | None,
    cores: int | None,
    slower: bool,
    memory_regressed: bool = False,
    th: DiagnosisThresholds = DEFAULT_THRESHOLDS,
    changes: Sequence[str] = (),
    threshold: float = 0.05,
    machine_ratio: float | None = None,
    session_noise: float = 0.0,
    tolerances: Mapping[str, float] = COUNT_TOLERANCES,
    environments: Environments | None = None,
    regressed: bool = False,
    environment_option: str = CLI.option("environment"),
) -> Diagnosis | None:
    """Attribution and findings for one config; None when no trial of it succeeded. `changes` is the
    verdict's evidence of what else changed (the model's numerics, the data pipeline's output).

    The findings are ranked by what explains the change: when the step is slower (`slower`: the samples/s
    verdict is a regression; or, early evidence, the step grew past the `threshold`'s worth beyond its
    trials' noise (and, against a stored baseline, its session's `session_noise`), with the machine's own
    speed change, `machine_ratio` from the probe, taken out), the
    part that explains most of the growth leads and memory follows; otherwise memory leads when it is
    what changed. A finding true of the baseline too, or one that explains no slower step, is no suspect.
    `tolerances`: how far each count may move unnoticed (`count_tolerances`). `environments`: the packages each
    side of a paired check ran with (None: not paired, or not recorded); `regressed`: the verdict is a regression
    of any figure, or an open one that leans slower; `environment_option`: the option that gives the base its own
    environment, as the front end spells it (`_dependencies`)."""
    ok = [t for t in current.trials if t.ok and t.step_s]
    if not ok:
        return None
    phases = tuple(
        PhaseChange(
            p,
            _baseline_per_step(baseline, p, steps),
            statistics.fmean(s for t in ok for s in t.phases_s[p]),
            _movement(baseline, ok, steps, {p}).noise_s,
        )
        for p in PHASES
    )
    # Behind a failing peak-memory verdict the diagnosis is shown anyway, and the question is only which
    # finding explains the change: a step slower beyond `ranking_sigmas` puts what slowed it before memory.
    sigmas = th.ranking_sigmas if memory_regressed else th.evidence_sigmas
    loader_cpu = _loader_cpu(baseline, ok, steps)
    counted = _counted(baseline, ok, tolerances)  # None without counts on both sides (baselines written before them)
    same_work = counted is not None and counted.same_work
    contention = _contention_s(loader_cpu, phases, cores, th.evidence_sigmas, th.data_wait_growth, same_work)
    step = _movement(baseline, ok, steps, set(PHASES))
    early = not slower and _slower_beyond_noise(
        step,
        baseline,
        ok,
        steps,
        threshold,
        machine_ratio,
        sigmas,
        _contention_evidence(contention, loader_cpu, session_noise),
        session_noise,
    )
    slowdown = slower or early
    contention = contention if slowdown else 0.0
    step_s = [s for t in ok for s in t.step_s]
    profile = measured.profiles.get(config)
    grown = grown_operators(baseline.top_operators, profile.top_operators if profile else []) if baseline else []
    pipeline = _Pipeline(
        measured.settings, base_settings, cores, loader_cpu, contention, _host_wait(baseline, ok, steps)
    )
    ranks = _ranks(baseline, ok, steps, step, slowdown, th, session_noise)
    added = _added_operators(counted, ok, baseline, step, th)
    findings = [
        *ranks.findings,
        *_data_pipeline(phases, step_s, pipeline, slowdown, th, changes),
        *_model_compute(phases, slowdown, th, changes, grown, contention + ranks.waited_s, counted, added),
        *_tail_latency(step_s, baseline, slowdown, th),
        *_memory(ok, baseline, memory_regressed, th, counted),
        *_framework(ok, baseline, th, step, counted, added),
        *_utilisation(ok, th),
        *_operators(baseline, profile),
    ]
    findings = _same_work(findings, counted, slowdown, phases, th, machine_ratio)
    findings = _dependencies(findings, environments, counted, slowdown or regressed, phases, environment_option)
    findings.sort(key=lambda f: _strength(f, phases, slowdown, contention + ranks.waited_s), reverse=True)
    compile_s = _compile_times(ok, baseline)
    return Diagnosis(
        workload, config, phases, tuple(findings), compile_s, early, loader_cpu, contention, ranks.waited_s
    )


def _movement(
    baseline: ConfigEntry | None, ok: Sequence[TrialResult], steps: int | None, names: AbstractSet[str]
) -> Movement:
    """How these phases' time per step changed, and the standard error of that change (`_moved`)."""
    before = (
        [t.per_step(sum(t.phase_s.get(p, 0.0) for p in names), steps) for t in baseline.trials if t.phase_s]
        if baseline is not None and steps
        else []
    )
    now = [sum(statistics.fmean(t.phases_s[p]) for p in names if t.phases_s.get(p)) for t in ok]
    return _moved(before, now)


def _slower_beyond_noise(
    step: Movement,
    baseline: ConfigEntry | None,
    ok: Sequence[TrialResult],
    steps: int | None,
    threshold: float,
    machine_ratio: float | None,
    sigmas: float,
    contention_s: float = 0.0,
    session_noise: float = 0.0,
) -> bool:
    """Early evidence: the step (its phases together) grew by more than `threshold` (on time per sample),
    and that growth is carried by a change beyond `sigmas` standard errors of the trials' spread: the whole
    step's, or one part's that alone is the threshold's worth of the step (the data phases, the compute
    phases, or the step time the DataLoader workers' added CPU took, `_contention_s`): a part can move far
    beyond its own noise (data wait 4% -> 56% of the step) while the step as a whole is too noisy to tell.
    Each holds as measured and with the machine's own speed change (the probe's `machine_ratio`) taken out:
    both must agree, as the samples/s verdicts must. `step`: how the whole step moved (`_movement`).
    Against a stored baseline, measured in another session, `session_noise` is added to the trials' spread:
    a whole session of this run can be 10% slower than the baseline's without any change of the code, and
    `contention_s` is what `_contention_evidence` keeps of the workers' share."""
    if step.before_s <= 0:
        return False
    growth = threshold  # the threshold is on time per sample, as the gate's (`stats.slowdown_bound`)
    steps_seen = _as_measured_and_adjusted(step, machine_ratio)
    if not all(m.change_s >= growth * m.before_s for m in steps_seen):
        return False
    if all(m.beyond_noise(sigmas, session_noise) for m in steps_seen):
        return True
    needed = growth * step.before_s
    for names in (DATA, COMPUTE):
        part = _as_measured_and_adjusted(_movement(baseline, ok, steps, names), machine_ratio)
        if all(m.change_s >= needed and m.beyond_noise(sigmas, session_noise) for m in part):
            return True
    # The workers' CPU grew 1.5x or more (`_contention_s`): beyond what a slower machine explains.
    return contention_s >= needed


# Across sessions the DataLoader workers' CPU moves by itself: in a clean check against a baseline stored minutes
# before, it read 7.17 -> 14.00 ms a step with the same code while the machine probe said 1.01x (docs/performance.md).
# Against a stored baseline their added CPU is early evidence only where it grew this many times, half again that.
LOADER_CPU_SESSION_GROWTH = 3.0


def _contention_evidence(contention_s: float, loader: Movement | None, session_noise: float) -> float:
    """The workers' share of the step (`_contention_s`) as early evidence: all of it within one session (a paired
    check's sides share the machine's state), and against a stored baseline only where the workers' CPU per step
    grew `LOADER_CPU_SESSION_GROWTH` times or more; otherwise it only shares out a slowdown shown by the verdict."""
    if session_noise == 0 or contention_s == 0:
        return contention_s
    if loader is None or loader.before_s <= 0:
        return 0.0
    return contention_s if loader.before_s + loader.change_s >= LOADER_CPU_SESSION_GROWTH * loader.before_s else 0.0


def _as_measured_and_adjusted(movement: Movement, machine_ratio: float | None) -> list[Movement]:
    """The movement as measured and, with the probe's `machine_ratio`, with the machine's own speed change
    taken out (a machine running at 0.8x makes every time 1.25x)."""
    seen = [movement]
    if machine_ratio is not None and machine_ratio > 0:
        expected = movement.before_s / machine_ratio
        seen.append(Movement(expected, movement.before_s + movement.change_s - expected, movement.noise_s))
    return seen


def _compile_times(trials: Sequence[TrialResult], baseline: ConfigEntry | None) -> tuple[float | None, float] | None:
    """The compile config's one-off compile time (first step over a median step), baseline and now."""
    now = [t.compile_s for t in trials if t.compile_s is not None]
    if not now:
        return None
    before = [t.compile_s for t in (baseline.trials if baseline else []) if t.compile_s is not None]
    return (statistics.median(before) if before else None), statistics.median(now)


def _strength(finding: Finding, phases: Sequence[PhaseChange], slower: bool, contention_s: float = 0.0) -> float:
    """Order findings. Memory growth (a steady rise step over step: a leak) leads whatever else changed: it
    is a bug, and the memory pressure it brings is what slows the step. Then, with a slower step, by how
    much of its growth each explains: the data pipeline by its phases' share, model compute by the
    compute phases' share, framework overhead (many small operations, host syncs) just above model
    compute, whose phases it grows; the data-parallel rules by what they explain (backward's wait for the
    all-reduce, a rank's lead), and a rank's load imbalance or straggling that explains most of it ahead of
    the job's phases, which show the same growth without the rank; a peak-memory regression and the rest
    follow; FLOPs per sample that grew (exact counts) rank by what the phases or the added FLOPs explain, whichever
    is more, and a step slower with every count unchanged (the runtime or the machine) by the compute phases' share.
    Without a slower step, what changed leads: FLOPs per sample that grew (the model grew, and its memory with it),
    a peak-memory regression, then framework counts. Packages that changed in a paired check lead where every
    count of the step is unchanged (the same work on other packages: what else changed shows where), else follow
    what explains the step. Standing conditions and operator lists come last: they support, never lead."""
    if finding.standing:
        return -1.0
    if finding.suspect == "operators":
        return -0.5
    if finding.suspect == DEPENDENCIES:
        # The same work on other packages: the packages are the change, and the phases or a leak only where it
        # shows; otherwise a suspect behind what explains the step, beside the counts that moved.
        return 4.5 if finding.line.startswith((SAME_WORK_PACKAGES, ONLY_PACKAGES)) else 1.5
    if finding.line.startswith("memory growth"):
        return 4.0  # a steady rise is a bug whatever else changed; the memory pressure slows the step too
    if slower and finding.explains is not None:
        if finding.suspect in RANK_SUSPECTS and finding.explains >= 0.5:
            return 3.05  # explains most, and names the rank: ahead of the job's phases, which show the same growth
        return 2.02 + finding.explains  # the ranks' rules: what they explain, ahead of the phases they grow
    if slower:
        if finding.suspect == "data pipeline":
            return 2.0 + _explained(phases, DATA, contention_s)
        if finding.suspect == "model compute":
            return 2.0 + _explained(phases, COMPUTE, contention_s)
        if finding.suspect == "framework overhead":
            return 2.01 + _explained(phases, COMPUTE, contention_s)
        if finding.suspect == SAME_WORK:
            return 2.0 + _explained(phases, COMPUTE, contention_s)
        if finding.suspect == "memory":
            return 1.0
        return 0.5 if finding.suspect != "tail latency" else 0.1
    if finding.line.startswith(FLOPS_LINE):
        return 2.95  # the model grew: what else changed (its memory too) follows
    if finding.suspect == "memory":
        return 2.9
    if finding.suspect == "framework overhead":
        return 2.5
    return 1.0 if finding.suspect != "tail latency" else 0.1


def _baseline_per_step(baseline: ConfigEntry | None, phase: str, steps: int | None) -> float | None:
    if baseline is None or not steps:
        return None
    # each trial's own rounds: a base calibrated to 14 rounds is not 14 times slower per step than a head of one
    per_step = [t.per_step(t.phase_s[phase], steps) for t in baseline.trials if phase in t.phase_s]
    return statistics.fmean(per_step) if per_step else None


def _steps(entry: BaselineEntry | None) -> int | None:
    steps = entry.settings.steps if entry else None
    return int(steps) if isinstance(steps, int) and steps > 0 else None


def _cores(environment: Environment) -> int | None:
    return None if environment.cpu is None else environment.cpu.available_cores
