"""The verdict: measured configs against their baselines, decided once for every front end.

`compare_run` judges a run against stored baselines, `compare_pairs` a paired check's head against
its base; the one rule that turns verdicts into the build's answer is `perfgate.outcome`. A slowdown
accepted on purpose (`judge.acceptance`) is judged against its own bound and, within it, is `accepted`,
which passes. A step's exact counts (`judge.counts`) are judged beside, with no statistics: one that grew
beyond its tolerance makes the config a regression. Measuring until the verdicts are decided is
`perfgate.check`'s work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from perfgate.judge.counts import SideCounts, compare_sides, side_counts
from perfgate.judge.memory import compared_peaks, grown_parts, of_entry
from perfgate.judge.settings import levels_at
from perfgate.judge.stats import (
    LookLevels,
    compare_memory,
    compare_paired,
    compare_paired_memory,
    compare_probed,
    holm_steps,
)
from perfgate.judge.wording import accepted_reason, memory_reason, throughput_reason

# The rule that fails the build lives in perfgate/outcome.py; its names stay importable from here.
from perfgate.outcome import FAILING as FAILING
from perfgate.outcome import Status as Status
from perfgate.outcome import build_exit_code as build_exit_code
from perfgate.outcome import fails_build as fails_build
from perfgate.records.baselines import BaselineEntry, ConfigEntry, entry_from_workload
from perfgate.records.comparisons import ThroughputComparison, Verdict, combined_verdict
from perfgate.records.results import Against, RunResult, TrialResult, WorkloadResult, merge_runs
from perfgate.records.verdicts import (
    AcceptedSlowdown,
    ConfigVerdict,
    GateResult,
    GateSettings,
    Looks,
    SessionRate,
    WorkloadVerdict,
)

LOSS_TOLERANCE = 1e-3  # relative: first-step losses that differ by more mean the workload changed


Family = Mapping[tuple[str, str], tuple[float, float]]  # (workload, config) -> alpha's divisors: throughput, memory
# The stored baselines found for a machine, by workload, and the problem line of each workload without one
# (`check.stored.find_baselines` reads them from the baseline store).
Stored = tuple[Mapping[str, BaselineEntry], Mapping[str, str]]


def one_error_rate(judge: Callable[[Family | None], GateResult]) -> GateResult:
    """A check's verdicts with one false-alarm rate for the whole check: judged once with each comparison's
    own alpha, then again with alpha divided as Holm's step-down procedure divides it over every throughput and
    memory comparison of the check (`holm_divisors`), so unchanged code fails at most alpha of checks however
    many configs and metrics it judges."""
    first = judge(None)
    family = holm_divisors(first)
    result = judge(family) if any(d != (1.0, 1.0) for d in family.values()) else first
    return replace(result, comparisons=sum(1 for _ in _tests(first)), family=family)


def _as_judged(result: GateResult, family: Family) -> GateResult:
    """A result judged with the divisors a check used (its results file keeps them)."""
    return replace(result, comparisons=sum(1 for _ in _tests(result)), family=dict(family))


def holm_divisors(result: GateResult) -> dict[tuple[str, str], tuple[float, float]]:
    """Holm's step-down (`stats.holm_steps`) over the check's comparisons of "slower" (throughput) and
    "larger" (memory): each config's divisors of alpha."""
    tests = list(_tests(result))
    divisors: dict[tuple[str, str], tuple[float, float]] = {}
    for (_, key, metric), divisor in zip(tests, holm_steps([share for share, _, _ in tests]), strict=True):
        pair = list(divisors.get(key, (1.0, 1.0)))
        pair[metric] = divisor
        divisors[key] = (pair[0], pair[1])
    return divisors


def _tests(result: GateResult) -> Iterable[tuple[float, tuple[str, str], int]]:
    """(p-value / alpha, config, 0 for throughput or 1 for memory) for each comparison that has a p-value and
    sampling error. An exact memory comparison (CUDA's peak allocated memory, repeating to the byte: its p is 0
    or 1) cannot be a false alarm, so, like the exact counts, it stays out of the family and takes no share of
    alpha from the others."""
    for verdict in result.verdicts:
        key = (verdict.workload, verdict.config)
        throughput = verdict.throughput
        if throughput is not None and not math.isnan(throughput.p_slower):
            yield throughput.p_slower / throughput.alpha, key, 0
        memory = verdict.memory
        if memory is not None and not memory.exact and not math.isnan(memory.p_larger):
            yield memory.p_larger / memory.alpha, key, 1


def compare_results(
    candidate: RunResult,
    settings: GateSettings,
    *,
    stored: Stored | None = None,
    baseline: RunResult | None = None,
    looks: Looks | None = None,
    family: Family | None = None,
) -> GateResult:
    """Judge saved results against the stored baselines found for their machine (`stored`: the check layer reads
    them, `check.stored.compare_saved`), or against other saved results; a paired check's results against the base
    measured beside them. `family`: the divisors of alpha the check used (its results file keeps them), else
    Holm's over these comparisons. Counting trials (`--counts-only`) are judged by their counts alone
    (`judge_counts_only`)."""
    counted = any(w.counted_only for w in candidate.workloads)
    if counted and candidate.against is not None and baseline is None:
        return judge_counts_only(candidate, settings)
    if candidate.against is not None and baseline is None:
        against = candidate.against
        if family is not None:
            return _as_judged(_compare_pairs(candidate, against.base, settings, looks or {}, against, family), family)
        return compare_pairs(candidate, against.base, settings, looks or {}, against)
    names = [w.name for w in candidate.workloads]
    if baseline is None:
        assert stored is not None, "compare_results needs the stored baselines or a baseline run"
        baselines, problems = stored
    else:
        baselines = {w.name: entry_from_workload(baseline, w) for w in baseline.workloads}
        problems = {name: "the baseline results have no such workload" for name in names if name not in baselines}
    if counted:
        return judge_counts_only(candidate, settings, baselines=baselines, problems=problems)
    if family is not None:
        return _as_judged(_compare_run(candidate, baselines, settings, problems, looks, family), family)
    return compare_run(candidate, baselines, settings, problems, looks)


def compare_entries(
    baseline: BaselineEntry,
    candidate: BaselineEntry,
    settings: GateSettings,
    *,
    configs: Sequence[str] | None = None,
    failures: Mapping[str, str] | None = None,
    failed_trials: Mapping[str, int] | None = None,
    looks: Looks | None = None,
    paired: bool = False,
    base_name: str = "the baseline",
    family: Family | None = None,
    base_counts: Mapping[str, SideCounts] | None = None,
    head_counts: Mapping[str, SideCounts] | None = None,
) -> WorkloadVerdict:
    """Judge one workload: comparability first, then each config's throughput, memory and exact counts.

    `configs` are the configs the candidate ran (default: those it measured); `failures` gives the
    reason for each that produced no measurement, `failed_trials` how many trials of each failed.
    `looks` gives each config's look in a sequential check (none: one decision with the whole alpha).
    `paired`: the i-th trials of the two sides were measured side by side (a paired check). `family`: each
    config's divisors of alpha for throughput and memory, so the check keeps one false-alarm rate
    (`one_error_rate`). `base_counts`, `head_counts`: each config's counts picked from a side's trials
    (`judge.counts.side_counts`, which also finds the counts its trials disagree on); a config left out has
    its entry's counts.
    """
    name = candidate.workload
    changed = _workload_changes(baseline, candidate)
    if changed:
        command = "compare the same workload settings on both sides" if paired else f"run {settings.update_command}"
        return WorkloadVerdict(
            name,
            [],
            baseline,
            problem=f"not comparable: the workload's settings changed ({'; '.join(changed)}); if that was intended, "
            f"{command}" + ("" if paired else " and commit the new baseline"),
            problem_status=Status.NOT_COMPARABLE,
        )
    data_evidence = _data_evidence(baseline, candidate, base_name)
    verdicts = []
    for config in configs or list(candidate.configs):
        reason = (failures or {}).get(config)
        if reason is not None and config in baseline.configs:
            thresholds = settings.thresholds_for(name, config)
            verdicts.append(ConfigVerdict(name, config, Status.FAILED, f"the config failed: {reason}", thresholds))
            continue
        verdict = _compare_config(
            name,
            config,
            baseline.configs.get(config),
            candidate,
            settings,
            levels_at(settings, (looks or {}).get((name, config))),
            paired=paired,
            divisors=(family or {}).get((name, config), (1.0, 1.0)),
            counts=((base_counts or {}).get(config), (head_counts or {}).get(config)),
        )
        evidence = tuple(data_evidence) + _numerics_evidence(
            baseline.configs.get(config), candidate.configs.get(config)
        )
        if evidence and verdict.status not in (Status.FAILED, Status.NO_BASELINE):
            verdict = replace(verdict, evidence=evidence, reason=f"{verdict.reason}; {'; '.join(evidence)}")
        verdicts.append(_with_failed_trials(verdict, (failed_trials or {}).get(config, 0)))
    return WorkloadVerdict(name, verdicts, baseline)


def compare_run(
    run: RunResult,
    baselines: Mapping[str, BaselineEntry],
    settings: GateSettings,
    problems: Mapping[str, str] | None = None,
    looks: Looks | None = None,
) -> GateResult:
    """Judge every workload of `run` that has a baseline; `problems` are workloads that had none."""
    return one_error_rate(lambda family: _compare_run(run, baselines, settings, problems, looks, family))


def _compare_run(
    run: RunResult,
    baselines: Mapping[str, BaselineEntry],
    settings: GateSettings,
    problems: Mapping[str, str] | None,
    looks: Looks | None,
    family: Family | None,
) -> GateResult:
    workloads = [
        WorkloadVerdict(name, [], None, problem=text, problem_status=Status.NO_BASELINE)
        for name, text in (problems or {}).items()
    ]
    for workload in run.workloads:
        if workload.name not in baselines:
            continue
        failures = {name: c.failure_reason for name, c in workload.configs.items() if not any(t.ok for t in c.trials)}
        workloads.append(
            compare_entries(
                baselines[workload.name],
                entry_from_workload(run, workload),
                settings,
                configs=list(workload.configs),
                failures=failures,
                failed_trials={name: sum(1 for t in c.trials if not t.ok) for name, c in workload.configs.items()},
                looks=looks,
                family=family,
                head_counts={name: side_counts(c.trials) for name, c in workload.configs.items()},
            )
        )
    return GateResult(workloads, settings, run, looks=dict(looks or {}))


def compare_pairs(
    head: RunResult, base: RunResult, settings: GateSettings, looks: Looks, against: Against
) -> GateResult:
    """Judge a paired check: each workload's head trials against the base trials measured beside them."""
    return one_error_rate(lambda family: _compare_pairs(head, base, settings, looks, against, family))


def missing_on_base(against: Against, workload: str, done: str) -> WorkloadVerdict:
    """The verdict of a workload a paired check's base side lacks: why the base could not run it
    (`Against.problems`), else that it was not `done` ("measured", "counted") there."""
    if workload in against.new:  # a pull request that adds a workload: its first check has nothing to compare
        problem = (
            f"new: {against.ref} does not define it, so there is nothing to compare it with; measured, "
            "not gated (it is gated once the base has it)"
        )
        return WorkloadVerdict(workload, [], None, problem=problem, problem_status=Status.NO_BASELINE, new=True)
    problem = against.problems.get(workload) or f"{workload} was not {done} at {against.ref}"
    return WorkloadVerdict(workload, [], None, problem=problem, problem_status=Status.NO_BASELINE)


def _compare_pairs(
    head: RunResult, base: RunResult, settings: GateSettings, looks: Looks, against: Against, family: Family | None
) -> GateResult:
    base_workloads = {w.name: w for w in base.workloads}
    workloads = []
    for workload in head.workloads:
        base_workload = base_workloads.get(workload.name)
        if base_workload is None:
            workloads.append(missing_on_base(against, workload.name, "measured"))
            continue
        head_paired, base_paired = pair_trials(workload, base_workload)
        models = gpu_models_differ(base_paired, head_paired)
        if models is not None:
            problem = (
                f"not comparable: the base ({against.ref}) ran on {models[1]} and the head on {models[2]} "
                f"({models[0]}); timings on one GPU model say nothing about another: run both sides on one GPU "
                "model (make one GPU visible to the check with CUDA_VISIBLE_DEVICES)"
            )
            workloads.append(
                WorkloadVerdict(workload.name, [], None, problem=problem, problem_status=Status.NOT_COMPARABLE)
            )
            continue
        failures = {name: c.failure_reason for name, c in workload.configs.items() if not any(t.ok for t in c.trials)}
        verdict = compare_entries(
            entry_from_workload(base, base_paired),
            entry_from_workload(head, head_paired),
            settings,
            configs=list(workload.configs),
            failures=failures,
            failed_trials={
                name: len(c.trials) - len(head_paired.configs[name].trials) for name, c in workload.configs.items()
            },
            looks=looks,
            paired=True,
            base_name=against.ref,
            family=family,
            # every ok trial of a side, paired or not: counts are the code's, not the pair's
            base_counts={name: side_counts(c.trials) for name, c in base_workload.configs.items()},
            head_counts={name: side_counts(c.trials) for name, c in workload.configs.items()},
        )
        base_failures = {
            name: c.failure_reason for name, c in base_workload.configs.items() if not any(t.ok for t in c.trials)
        }
        configs = [
            replace(v, reason=f"the base ({against.ref}) could not run it: {base_failures[v.config]}")
            if v.status == Status.NO_BASELINE and v.config in base_failures
            else _with_one_sided_failures(v, workload, base_workload)
            for v in verdict.configs
        ]
        workloads.append(replace(verdict, configs=configs))
    return GateResult(workloads, settings, head, looks=dict(looks), against=against)


def judge_counts_only(
    run: RunResult,
    settings: GateSettings,
    *,
    baselines: Mapping[str, BaselineEntry] | None = None,
    problems: Mapping[str, str] | None = None,
) -> GateResult:
    """`--counts-only`: each config judged by its exact counts alone (`judge.counts`), against the base's counting
    trials (a paired run, `run.against`) or the stored baseline's counts (`baselines`; `problems`: workloads that
    have none). No statistics: a count beyond its tolerance is a regression, else no change."""
    workloads = [
        WorkloadVerdict(name, [], None, problem=text, problem_status=Status.NO_BASELINE)
        for name, text in (problems or {}).items()
    ]
    against = run.against
    base_workloads = {} if against is None else {w.name: w for w in against.base.workloads}
    for workload in run.workloads:
        if against is not None:
            other = base_workloads.get(workload.name)
            if other is None:
                workloads.append(missing_on_base(against, workload.name, "counted"))
                continue
            base_entry: BaselineEntry | None = entry_from_workload(against.base, other)
            base_sides = {name: side_counts(c.trials) for name, c in other.configs.items()}
            base_name, sides = f"the base ({against.ref})", ("the base", "the head")
        else:
            base_entry = (baselines or {}).get(workload.name)
            if base_entry is None:
                continue
            base_sides = {name: SideCounts(c.counts) for name, c in base_entry.configs.items()}
            base_name, sides = "the baseline", ("the baseline", "this run")
        changed = _workload_changes(base_entry, entry_from_workload(run, workload)) if base_entry else []
        if changed:
            problem = f"not comparable: the workload changed ({'; '.join(changed)}), so its counts did"
            workloads.append(
                WorkloadVerdict(workload.name, [], base_entry, problem=problem, problem_status=Status.NOT_COMPARABLE)
            )
            continue
        configs = []
        for name, config in workload.configs.items():
            thresholds = settings.thresholds_for(workload.name, name)
            acceptance = settings.acceptance(workload.name, name)
            base_counts = base_sides.get(name, SideCounts(None))
            if not any(t.ok for t in config.trials):
                configs.append(ConfigVerdict(workload.name, name, Status.FAILED, config.failure_reason, thresholds))
                continue
            if base_counts.counts is None:
                fix = f"{base_name} could not count it" if against is not None else f"run {settings.update_command}"
                reason = f"no counts of config {name} in {base_name}; {fix}"
                configs.append(ConfigVerdict(workload.name, name, Status.NO_BASELINE, reason, thresholds))
                continue
            exact = compare_sides(
                base_counts,
                side_counts(config.trials),
                settings.project.counts,
                None if acceptance is None else acceptance.slowdown,
                sides=sides,
            )
            assert exact is not None
            status = Status.REGRESSION if exact.fails else Status.NO_CHANGE
            same = all(row.outcome == "same" for row in exact.rows)
            reason = exact.reason or ("every count the same" if same else "every count within its tolerance")
            if exact.notes:
                reason += "; " + "; ".join(exact.notes)
            configs.append(ConfigVerdict(workload.name, name, status, reason, thresholds, counts=exact))
        workloads.append(WorkloadVerdict(workload.name, configs, base_entry if against is None else None))
    return GateResult(workloads, settings, run, against=against)


def _with_one_sided_failures(verdict: ConfigVerdict, head: WorkloadResult, base: WorkloadResult) -> ConfigVerdict:
    """Failed trials are evidence. A head whose trials of a config failed or timed out (hung) while every base
    trial of it ran fails the check: "the head failed in 2 of 9 trials; the base in 0 of 9", with the first error.
    Failures on both sides say the workload is flaky: said so, and no "no change" is shown (inconclusive); a
    regression the pairs show stays one. A base that fails where the head runs is named."""
    if verdict.status in (Status.FAILED, Status.NO_BASELINE, Status.NOT_COMPARABLE):
        return verdict
    head_config, base_config = head.configs.get(verdict.config), base.configs.get(verdict.config)
    if head_config is None or base_config is None:
        return verdict
    head_failed = [t for t in head_config.trials if not t.ok]
    base_failed = [t for t in base_config.trials if not t.ok]
    if not head_failed and not base_failed:
        return verdict
    counts = (
        f"the head failed in {len(head_failed)} of {len(head_config.trials)} trials; "
        f"the base in {len(base_failed)} of {len(base_config.trials)}"
    )
    if head_failed and not base_failed:
        first = head_failed[0]
        reason = f"{counts}: a head that fails where its base runs is a defect (head trial {first.trial + 1}: "
        reason += f"{first.failure}); {verdict.reason}"
        return replace(verdict, status=Status.FAILED, reason=reason, trials_failed=len(head_failed))
    if head_failed:
        first = head_failed[0]
        status = Status.INCONCLUSIVE if verdict.status == Status.NO_CHANGE else verdict.status
        shown = f"{counts}: the workload is flaky, failing on both sides (first: {first.failure})"
        return replace(verdict, status=status, reason=f"{verdict.reason}; {shown}", trials_failed=len(head_failed))
    first = base_failed[0]
    return replace(verdict, reason=f"{verdict.reason}; {counts} (base trial {first.trial + 1}: {first.failure})")


def pair_trials(head: WorkloadResult, base: WorkloadResult) -> tuple[WorkloadResult, WorkloadResult]:
    """Both sides cut to the pairs whose two trials succeeded, in pair order (a pair: the same trial index)."""
    head_configs, base_configs = {}, {}
    for name, config in head.configs.items():
        base_config = base.configs.get(name)
        base_trials = {t.trial: t for t in (base_config.trials if base_config else []) if t.ok}
        pairs = [(base_trials[t.trial], t) for t in config.trials if t.ok and t.trial in base_trials]
        head_configs[name] = replace(config, trials=[h for _, h in pairs])
        if base_config is not None:
            base_configs[name] = replace(base_config, trials=[b for b, _ in pairs])
    return replace(head, configs=head_configs), replace(base, configs=base_configs)


def gpu_models_differ(base: WorkloadResult, head: WorkloadResult) -> tuple[str, str, str] | None:
    """The first pair (`pair_trials`' order) whose two trials recorded different GPU models: the pair (`fp32 pair
    2`), the base's GPU and the head's; None when every pair ran on one model (or NVML named none)."""
    for name, config in head.configs.items():
        base_config = base.configs.get(name)
        if base_config is None:
            continue
        for index, (old, new) in enumerate(zip(base_config.trials, config.trials, strict=True)):
            old_name, new_name = _gpu_name(old), _gpu_name(new)
            if old_name and new_name and old_name != new_name:
                return f"{name} pair {index + 1}", old_name, new_name
    return None


def _gpu_name(trial: TrialResult) -> str | None:
    return None if trial.system is None or trial.system.gpu is None else trial.system.gpu.name


def _compare_config(
    workload: str,
    config: str,
    base: ConfigEntry | None,
    candidate: BaselineEntry,
    settings: GateSettings,
    levels: LookLevels,
    *,
    paired: bool = False,
    divisors: tuple[float, float] = (1.0, 1.0),
    counts: tuple[SideCounts | None, SideCounts | None] = (None, None),
) -> ConfigVerdict:
    """One config's verdict; `divisors` divide alpha for throughput and memory (`holm_divisors`); `counts`: the
    two sides' counts from their trials (None: the entry's)."""
    thresholds = settings.thresholds_for(workload, config)
    memory_alpha = levels.alpha / divisors[1]
    levels = levels.divided(divisors[0])
    measured = candidate.configs.get(config)
    if base is None:
        fix = "the base has no measurement of it" if paired else f"run {settings.update_command}"
        return ConfigVerdict(
            workload, config, Status.NO_BASELINE, f"no baseline for config {config}; {fix}", thresholds
        )
    if measured is None:
        reason = "the config failed: no trial produced a measurement"
        return ConfigVerdict(workload, config, Status.FAILED, reason, thresholds)
    throughput, adjusted, machine = _throughput(base, measured, thresholds.throughput, levels, paired, settings)
    base_memory, measured_memory = of_entry(base), of_entry(measured)
    peaks = compared_peaks(base_memory, measured_memory, "the base" if paired else "the baseline")
    memory = (  # a paired check's peaks are in pair order (`pair_trials`, `compared_peaks`)
        compare_paired_memory(
            peaks.baseline, peaks.candidate, tolerance=thresholds.memory, levels=replace(levels, alpha=memory_alpha)
        )
        if paired
        else compare_memory(
            peaks.baseline,
            peaks.candidate,
            tolerance=thresholds.memory,
            alpha=memory_alpha,
            session_noise=peaks.session_noise,
        )
    )
    parts = "" if peaks.note else grown_parts(base_memory, measured_memory)
    status = Status.combined((combined_verdict(throughput, adjusted), memory.verdict))
    sample = "pair" if paired else "trial"
    reason = throughput_reason(throughput, adjusted, machine, sample=sample)
    accepted = None
    acceptance = settings.acceptance(workload, config)
    if (
        acceptance is not None
        and acceptance.slowdown > thresholds.throughput
        and combined_verdict(throughput, adjusted) in (Verdict.REGRESSION, Verdict.INCONCLUSIVE)
    ):
        # Judged again against the accepted bound, as the threshold is: within it only when the data rule out more.
        raw, machine_adjusted, _ = _throughput(base, measured, acceptance.slowdown, levels, paired, settings)
        accepted = AcceptedSlowdown(acceptance, raw, machine_adjusted)
        if accepted.within and memory.verdict not in (Verdict.REGRESSION, Verdict.INCONCLUSIVE):
            status = Status.ACCEPTED
        else:
            status = Status.combined((Verdict.NO_CHANGE if accepted.within else accepted.verdict, memory.verdict))
        reason = accepted_reason(acceptance.describe(), raw, machine_adjusted, machine, reason, sample=sample)
    reason = "; ".join(part for part in (reason, memory_reason(memory, parts), peaks.note) if part)
    # Exact counts need no alpha (and stay out of Holm's family): one that grew beyond its tolerance fails.
    exact = compare_sides(
        counts[0] or SideCounts(base.counts),
        counts[1] or SideCounts(measured.counts),
        settings.project.counts,
        None if acceptance is None else acceptance.slowdown,
        sides=("the base", "the head") if paired else ("the baseline", "this run"),
    )
    if exact is not None and exact.fails:  # the counts lead where they alone make it a regression
        reason = f"{reason}; {exact.reason}" if status == Status.REGRESSION else f"{exact.reason}; {reason}"
        status = Status.REGRESSION
    return ConfigVerdict(
        workload,
        config,
        status,
        reason,
        thresholds,
        throughput,
        memory,
        adjusted=adjusted,
        machine=machine,
        accepted=accepted,
        counts=exact,
    )


def _throughput(
    base: ConfigEntry,
    measured: ConfigEntry,
    threshold: float,
    levels: LookLevels,
    paired: bool,
    settings: GateSettings,
) -> tuple[ThroughputComparison, ThroughputComparison | None, ThroughputComparison | None]:
    """Throughput against `threshold`: raw, machine-adjusted and the machine probe's own (those two against
    stored baselines only; a paired check's pairs need neither, and take the count test at the settings' rate)."""
    if paired:
        paired_comparison = compare_paired(
            base.samples_per_sec,
            measured.samples_per_sec,
            threshold=threshold,
            levels=levels,
            slow_rate=settings.slow_rate,
            rate_source=settings.slow_rate_source,
        )
        return paired_comparison, None, None
    probed = compare_probed(
        base.samples_per_sec,
        measured.samples_per_sec,
        base.probe_steps_per_sec,
        measured.probe_steps_per_sec,
        threshold=threshold,
        levels=levels,
    )
    return probed.raw, probed.adjusted, probed.machine


def _with_failed_trials(verdict: ConfigVerdict, failed: int) -> ConfigVerdict:
    if not failed or verdict.status == Status.FAILED:
        return verdict
    reason = f"{verdict.reason} ({failed} trial{'s' if failed > 1 else ''} failed and not counted)"
    return replace(verdict, reason=reason, trials_failed=failed)


def _workload_changes(baseline: BaselineEntry, candidate: BaselineEntry) -> list[str]:
    """The settings that make two runs incomparable: the amount of work and which samples it covers."""
    changes = []
    # A change of gradient accumulation changes how many samples a step takes, and so the slice; samples/s counts
    # every sample, so the two sides compare (the change is named as evidence: `_data_evidence`).
    # A dataset whose length changed (a pull request that adds samples) draws the slice from other samples: the data
    # changed, not the amount of work, so the sides compare and the change is named (`_data_evidence`).
    keys = ("batch_size", "steps", "warmup_steps", "seed")
    drawn_anew = _accumulation_changed(baseline, candidate) or _length_changed(baseline, candidate)
    for key in keys if drawn_anew else (*keys, "slice_indices"):
        old, new = getattr(baseline.settings, key), getattr(candidate.settings, key)
        if old is not None and new is not None and old != new:
            shown = (str(old)[:19], str(new)[:19]) if key == "slice_indices" else (old, new)
            changes.append(f"{'data-slice sample indices' if key == 'slice_indices' else key} {shown[0]} -> {shown[1]}")
    return changes


def _accumulation_changed(baseline: BaselineEntry, candidate: BaselineEntry) -> bool:
    return (baseline.settings.accumulation or 1) != (candidate.settings.accumulation or 1)


def _length_changed(baseline: BaselineEntry, candidate: BaselineEntry) -> bool:
    """Both sides recorded their dataset's length, and it differs (a baseline written before perfgate recorded
    it cannot tell: its changed slice stays not comparable)."""
    old, new = baseline.settings.dataset_length, candidate.settings.dataset_length
    return old is not None and new is not None and old != new


def _data_evidence(baseline: BaselineEntry, candidate: BaselineEntry, base_name: str) -> list[str]:
    """A changed data-slice checksum: the same samples now reach the model as different batches; a dataset whose
    length changed, which draws the slice anew; or a change of gradient accumulation, which changes the slice by
    design."""
    if _accumulation_changed(baseline, candidate):
        old_k, new_k = baseline.settings.accumulation or 1, candidate.settings.accumulation or 1
        return [f"gradient accumulation changed: {old_k} -> {new_k} micro-batches per optimizer step"]
    evidence = []
    if _length_changed(baseline, candidate):
        evidence.append(
            f"the dataset's length changed: {baseline.settings.dataset_length} -> {candidate.settings.dataset_length} "
            "samples, so each side's pinned slice is drawn from its own dataset"
        )
    old, new = baseline.data_checksum, candidate.data_checksum
    if old and new and old != new:
        evidence.append(
            f"the data pipeline's output changed (data-slice checksum {old[7:19]} in {base_name} -> {new[7:19]})"
        )
    return evidence


def _numerics_evidence(base: ConfigEntry | None, measured: ConfigEntry | None) -> tuple[str, ...]:
    """Changed first-step losses: the model, the loss or the data computes something else now."""
    if base is None or measured is None or _losses_match(base.first_losses, measured.first_losses):
        return ()
    return (
        f"the model's numerics changed (first-step losses {_losses(base.first_losses)} -> "
        f"{_losses(measured.first_losses)})",
    )


def _losses_match(old: Sequence[float], new: Sequence[float]) -> bool:
    if not old or not new:
        return True  # nothing recorded on one side: the checksum is the only evidence
    return len(old) == len(new) and all(
        math.isclose(a, b, rel_tol=LOSS_TOLERANCE, abs_tol=1e-6) for a, b in zip(old, new, strict=True)
    )


def _losses(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)


def merge_results(gates: Sequence[GateResult], session: SessionRate | None = None) -> GateResult:
    """One result from several checks of one session (`pytest --perfgate` checks each fixture test and each
    group of configured items on its own): every workload once, its configs from all of them (a later
    verdict of a config replaces an earlier), the runs merged, the settings of the first.

    `session`: the one false-alarm rate the session's checks shared (`judge.family`). Each check judged at its
    share of alpha (`GateSettings.session_divisor`); the merged result keeps the session's alpha and, for each
    config, Holm's divisors times its check's, so a later report (`check.stored.judge_saved`) judges every config at
    the level its check did."""
    if not gates:
        raise ValueError("merge_results needs at least one result")
    settings = replace(gates[0].settings, session_divisor=1.0)
    if len(gates) == 1:
        gate = gates[0]
        if session is None and gate.settings.session_divisor == 1.0:
            return gate
        return replace(gate, settings=settings, family=session_family(gate), session=session)
    workloads: dict[str, WorkloadVerdict] = {}
    for gate in gates:
        for w in gate.workloads:
            earlier = workloads.get(w.workload)
            if earlier is None or w.problem or earlier.problem:
                workloads[w.workload] = w
            else:
                configs = {v.config: v for v in earlier.configs} | {v.config: v for v in w.configs}
                workloads[w.workload] = replace(w, configs=list(configs.values()))
    runs = [g.run for g in gates if g.run is not None]
    sides = [g.against for g in gates]
    first = sides[0]
    same_base = first is not None and all(a is not None and a.base_commit == first.base_commit for a in sides)
    return replace(
        gates[0],
        workloads=list(workloads.values()),
        settings=settings,
        run=merge_runs(runs) if runs else None,
        stopped_because=next((g.stopped_because for g in gates if g.stopped_because), None),
        looks={key: look for g in gates for key, look in g.looks.items()},
        against=sides[-1] if same_base else None,
        comparisons=sum(g.comparisons for g in gates),
        family={key: divisors for g in gates for key, divisors in session_family(g).items()},
        session=session,
    )


def session_family(gate: GateResult) -> dict[tuple[str, str], tuple[float, float]]:
    """Each config's divisors of the session's alpha in a check judged at a share of it: Holm's divisors within
    the check times the check's `session_divisor` (every config the check judged, in or out of Holm's family)."""
    divisor = gate.settings.session_divisor
    if divisor == 1.0:
        return dict(gate.family)
    keys = dict.fromkeys([*gate.family, *((v.workload, v.config) for v in gate.verdicts)])
    return {key: (pair[0] * divisor, pair[1] * divisor) for key in keys for pair in [gate.family.get(key, (1.0, 1.0))]}
