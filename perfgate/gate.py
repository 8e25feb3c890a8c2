"""The verdict: measured configs against their baselines, decided once for every front end.

`compare_run` judges results that exist; `run_check` measures, judges, and runs more trials for the
configs whose verdict is still inconclusive (interleaved, up to `max_trials` or a time budget).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from perfgate.baseline import BaselineEntry, BaselineStore, ConfigEntry, entry_from_workload, fingerprint_differences
from perfgate.environment import fingerprint_key, machine_fingerprint
from perfgate.errors import UsageError
from perfgate.project import Limits, ProjectConfig
from perfgate.references import Reference
from perfgate.results import RunResult, TrialResult
from perfgate.runner import LabSession, ProgressCallback, RunSettings
from perfgate.stats import (
    DEFAULT_ALPHA,
    OUTLIER_FACTOR,
    MemoryComparison,
    ThroughputComparison,
    Verdict,
    combine_verdicts,
    compare_memory,
    compare_throughput,
    looks,
)
from perfgate.units import format_bytes, format_p_value, format_signed_pct

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_NO_BASELINE = 3
DEFAULT_MAX_TRIALS = 8
DEFAULT_TIME_BUDGET_S = 600.0
EXIT_MEANINGS = {EXIT_OK: "pass", EXIT_REGRESSION: "fail", EXIT_NO_BASELINE: "no comparable baseline"}
LOSS_TOLERANCE = 1e-3  # relative: first-step losses that differ by more mean the workload changed


class Status(StrEnum):
    """A config's outcome: the four statistical verdicts, and the reasons there is none."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    NOT_COMPARABLE = "not comparable"
    FAILED = "failed"
    NO_BASELINE = "no baseline"


@dataclass(frozen=True)
class GateSettings:
    """How a check decides: thresholds (global and per workload/config), alpha and the trial budget."""

    project: ProjectConfig = field(default_factory=ProjectConfig)
    threshold: float | None = None  # from the command line; overrides the project's global threshold
    alpha: float = DEFAULT_ALPHA
    trials: int = 3
    max_trials: int = DEFAULT_MAX_TRIALS
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    fail_on_inconclusive: bool = False
    update_command: str = "perfgate update"  # what the messages tell the user to run for a new baseline

    @property
    def looks(self) -> int:
        """How often the check may test each config (its error rates are split over them)."""
        return looks(self.trials, max(self.trials, self.max_trials))

    def limits(self, workload: str, config: str) -> Limits:
        return self.project.limits(workload, config, threshold=self.threshold)

    def record(self, baseline_dir: Path) -> dict[str, object]:
        """What a results file keeps of these settings, so a later report judges the run the same way."""
        return {
            "threshold": self.threshold,
            "alpha": self.alpha,
            "trials": self.trials,
            "max_trials": self.max_trials,
            "fail_on_inconclusive": self.fail_on_inconclusive,
            "baseline_dir": str(baseline_dir),
        }

    @classmethod
    def from_record(cls, project: ProjectConfig, record: Mapping[str, Any]) -> GateSettings:
        """Settings saved by `record` (the project's thresholds still apply)."""
        return cls(
            project=project,
            threshold=record.get("threshold"),
            alpha=float(record.get("alpha", DEFAULT_ALPHA)),
            trials=int(record.get("trials", 1)),
            max_trials=int(record.get("max_trials", 1)),
            fail_on_inconclusive=bool(record.get("fail_on_inconclusive", False)),
        )

    @classmethod
    def from_options(
        cls,
        project: ProjectConfig,
        *,
        trials: int,
        threshold: float | None = None,
        alpha: float | None = None,
        max_trials: int | None = None,
        time_budget_s: float = DEFAULT_TIME_BUDGET_S,
        fail_on_inconclusive: bool = False,
        prefix: str = "--",
        update_command: str = "perfgate update",
    ) -> GateSettings:
        """Settings from a front end's options (None: not given) over the project's; `prefix` names them."""
        if max_trials is not None and max_trials < trials:
            raise UsageError(
                f"{prefix}max-trials {max_trials} is below {prefix}trials {trials}",
                hint=f"give {prefix}max-trials at least as large as {prefix}trials (or equal, for no extra trials)",
            )
        if max_trials is None:
            max_trials = max(trials, project.max_trials or DEFAULT_MAX_TRIALS)
        if alpha is None:
            alpha = project.alpha if project.alpha is not None else DEFAULT_ALPHA
        return cls(
            project=project,
            threshold=threshold,
            alpha=alpha,
            trials=trials,
            max_trials=max_trials,
            time_budget_s=time_budget_s,
            fail_on_inconclusive=fail_on_inconclusive,
            update_command=update_command,
        )


@dataclass(frozen=True)
class ConfigVerdict:
    workload: str
    config: str
    status: Status
    reason: str  # one line that makes sense without the table
    limits: Limits
    throughput: ThroughputComparison | None = None
    memory: MemoryComparison | None = None
    trials_failed: int = 0
    adjusted: ThroughputComparison | None = None  # samples/sec per machine-probe rate
    machine: ThroughputComparison | None = None  # the machine probe itself: how fast the machine ran

    @property
    def slower(self) -> bool:
        """Throughput regressed (raw and machine-adjusted agreeing), whatever peak memory did."""
        if self.throughput is None:
            return False
        verdict = self.throughput.verdict
        if self.adjusted is not None:
            verdict = combine_verdicts(verdict, self.adjusted.verdict)
        return verdict == Verdict.REGRESSION


@dataclass(frozen=True)
class WorkloadVerdict:
    workload: str
    configs: list[ConfigVerdict]
    baseline: BaselineEntry | None = None
    problem: str | None = None  # why the workload as a whole could not be compared
    problem_status: Status | None = None  # NO_BASELINE or NOT_COMPARABLE, with `problem`


@dataclass(frozen=True)
class GateResult:
    """Every workload's verdicts; `exit_code` is the build's answer."""

    workloads: list[WorkloadVerdict]
    settings: GateSettings
    run: RunResult | None = None
    stopped_because: str | None = None  # why extra trials stopped while verdicts were still open

    @property
    def verdicts(self) -> list[ConfigVerdict]:
        return [c for w in self.workloads for c in w.configs]

    @property
    def exit_code(self) -> int:
        statuses = {v.status for v in self.verdicts}
        if statuses & {Status.REGRESSION, Status.FAILED}:
            return EXIT_REGRESSION
        if statuses & {Status.NOT_COMPARABLE, Status.NO_BASELINE} or any(w.problem for w in self.workloads):
            return EXIT_NO_BASELINE
        if Status.INCONCLUSIVE in statuses and self.settings.fail_on_inconclusive:
            return EXIT_REGRESSION
        return EXIT_OK


def missing_baseline(
    workload: str,
    store: BaselineStore,
    fingerprint: Mapping[str, object],
    entries: Mapping[str, BaselineEntry],
    update_command: str = "perfgate update",
) -> str:
    """The problem line for a workload with no entry for this machine (`entries`: the other machines')."""
    command = f"{update_command} (writes {store.path_for(workload)}; commit it)"
    if not entries:
        return f"no baseline for {workload} in {store.directory}/; run {command}"
    closest = min(entries.values(), key=lambda e: len(fingerprint_differences(dict(fingerprint), e.fingerprint)))
    differences = "; ".join(fingerprint_differences(dict(fingerprint), closest.fingerprint))
    return (
        f"no baseline for {workload} on this machine ({fingerprint_key(dict(fingerprint))}); the closest stored one "
        f"differs in {differences}; run {command}"
    )


def find_baselines(
    store: BaselineStore,
    workloads: Sequence[str],
    fingerprint: Mapping[str, object],
    update_command: str = "perfgate update",
) -> tuple[dict[str, BaselineEntry], dict[str, str]]:
    """This machine's baseline entry for each workload, and the problem line for each that has none."""
    baselines: dict[str, BaselineEntry] = {}
    problems: dict[str, str] = {}
    key = fingerprint_key(dict(fingerprint))
    for name in workloads:
        entries = store.load(name)
        if key in entries:
            baselines[name] = entries[key]
        else:
            problems[name] = missing_baseline(name, store, fingerprint, entries, update_command)
    return baselines, problems


def compare_results(
    candidate: RunResult,
    settings: GateSettings,
    *,
    store: BaselineStore | None = None,
    baseline: RunResult | None = None,
) -> GateResult:
    """Judge saved results against the stored baselines for their machine, or against other saved results."""
    names = [w.name for w in candidate.workloads]
    if baseline is None:
        assert store is not None, "compare_results needs a store or a baseline run"
        fingerprint = machine_fingerprint(candidate.environment)
        baselines, problems = find_baselines(store, names, fingerprint, settings.update_command)
    else:
        baselines = {w.name: entry_from_workload(baseline, w) for w in baseline.workloads}
        problems = {name: "the baseline results have no such workload" for name in names if name not in baselines}
    return compare_run(candidate, baselines, settings, problems)


def judge_saved(run: RunResult, project: ProjectConfig, baseline_dir: Path | None = None) -> GateResult:
    """Judge a saved results file as the check that wrote it did (its settings are in the file); a file
    from `perfgate run` is judged once with the project's settings."""
    from perfgate.baseline import DEFAULT_BASELINE_DIR

    if run.gate is None:
        settings = GateSettings.from_options(project, trials=1, max_trials=1)
    else:
        settings = GateSettings.from_record(project, run.gate)
    directory = baseline_dir or Path(str((run.gate or {}).get("baseline_dir") or DEFAULT_BASELINE_DIR))
    return compare_results(run, settings, store=BaselineStore(directory))


def compare_entries(
    baseline: BaselineEntry,
    candidate: BaselineEntry,
    settings: GateSettings,
    *,
    configs: Sequence[str] | None = None,
    failures: Mapping[str, str] | None = None,
    failed_trials: Mapping[str, int] | None = None,
) -> WorkloadVerdict:
    """Judge one workload: comparability first, then each config's throughput and memory.

    `configs` are the configs the candidate ran (default: those it measured); `failures` gives the
    reason for each that produced no measurement, `failed_trials` how many trials of each failed.
    """
    name = candidate.workload
    changed = _workload_changes(baseline, candidate)
    if changed:
        return WorkloadVerdict(
            name,
            [],
            baseline,
            problem=f"not comparable: the workload changed ({'; '.join(changed)}); if that was intended, "
            f"run {settings.update_command} and commit the new baseline",
            problem_status=Status.NOT_COMPARABLE,
        )
    verdicts = []
    for config in configs or list(candidate.configs):
        reason = (failures or {}).get(config)
        if reason is not None and config in baseline.configs:
            limits = settings.limits(name, config)
            verdicts.append(ConfigVerdict(name, config, Status.FAILED, f"the config failed: {reason}", limits))
            continue
        verdict = _compare_config(name, config, baseline.configs.get(config), candidate, settings)
        verdicts.append(_with_failed_trials(verdict, (failed_trials or {}).get(config, 0)))
    return WorkloadVerdict(name, verdicts, baseline)


def compare_run(
    run: RunResult,
    baselines: Mapping[str, BaselineEntry],
    settings: GateSettings,
    problems: Mapping[str, str] | None = None,
) -> GateResult:
    """Judge every workload of `run` that has a baseline; `problems` are workloads that had none."""
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
            )
        )
    return GateResult(workloads, settings, run)


def run_check(
    references: Sequence[Reference],
    run_settings: RunSettings,
    settings: GateSettings,
    store: BaselineStore,
    progress: ProgressCallback | None = None,
    notify: Callable[[str], None] | None = None,
) -> GateResult:
    """Measure, compare with the stored baselines, and add trials where the verdict is still open."""
    started = time.monotonic()
    with LabSession(references, run_settings, progress) as session:
        fingerprint = machine_fingerprint(session.environment)
        baselines, problems = find_baselines(store, session.workload_names, fingerprint, settings.update_command)
        session.keep(list(baselines))
        if not baselines:
            return GateResult(compare_run(session.result(), {}, settings, problems).workloads, settings, None)
        session.run_trials(settings.trials)
        stopped = None
        while True:
            result = compare_run(session.result(), baselines, settings, problems)
            pending = [
                (v.workload, v.config)
                for v in result.verdicts
                if v.status == Status.INCONCLUSIVE and len(session.trials[(v.workload, v.config)]) < settings.max_trials
            ]
            if not pending:
                open_verdicts = any(v.status == Status.INCONCLUSIVE for v in result.verdicts)
                if open_verdicts and settings.max_trials > settings.trials:
                    stopped = f"--max-trials {settings.max_trials} reached"
                break
            round_s = sum(_mean_process_s(session.trials[pair]) for pair in pending)
            if time.monotonic() - started + round_s > settings.time_budget_s:
                stopped = f"--time-budget {settings.time_budget_s:g} s reached"
                break
            if notify:
                notify(
                    f"inconclusive so far: {', '.join(f'{w} {c}' for w, c in pending)}; running one more trial of each"
                )
            session.run_more(pending)
        run = result.run
        if run_settings.profile_dir is not None:
            session.profile()
            run = session.result()  # the same trials, now with the profiles: the verdicts stand
        return GateResult(result.workloads, settings, run, stopped)


def _compare_config(
    workload: str, config: str, base: ConfigEntry | None, candidate: BaselineEntry, settings: GateSettings
) -> ConfigVerdict:
    limits = settings.limits(workload, config)
    measured = candidate.configs.get(config)
    if base is None:
        return ConfigVerdict(
            workload,
            config,
            Status.NO_BASELINE,
            f"no baseline for config {config}; run {settings.update_command}",
            limits,
        )
    if measured is None:
        reason = "the config failed: no trial produced a measurement"
        return ConfigVerdict(workload, config, Status.FAILED, reason, limits)
    if not _losses_match(base.first_losses, measured.first_losses):
        return ConfigVerdict(
            workload,
            config,
            Status.NOT_COMPARABLE,
            f"first-step losses changed ({_losses(base.first_losses)} -> {_losses(measured.first_losses)}): the model, "
            f"loss or data changed; if that was intended, run {settings.update_command}",
            limits,
        )
    throughput = compare_throughput(
        base.samples_per_sec,
        measured.samples_per_sec,
        threshold=limits.throughput,
        alpha=settings.alpha,
        looks=settings.looks,
    )
    adjusted = machine = None
    throughput_verdict = throughput.verdict
    base_probe, measured_probe = base.probe_steps_per_sec, measured.probe_steps_per_sec
    if base_probe and measured_probe:
        adjusted = compare_throughput(
            [s / p for s, p in zip(base.samples_per_sec, base_probe, strict=True)],
            [s / p for s, p in zip(measured.samples_per_sec, measured_probe, strict=True)],
            threshold=limits.throughput,
            alpha=settings.alpha,
            looks=settings.looks,
        )
        machine = compare_throughput(base_probe, measured_probe, threshold=limits.throughput)
        throughput_verdict = combine_verdicts(throughput.verdict, adjusted.verdict)
    memory = compare_memory(
        base.peak_bytes, measured.peak_bytes, tolerance=limits.memory, alpha=settings.alpha, looks=settings.looks
    )
    verdicts = {throughput_verdict, memory.verdict}
    if Verdict.REGRESSION in verdicts:
        status = Status.REGRESSION
    elif Verdict.INCONCLUSIVE in verdicts:
        status = Status.INCONCLUSIVE
    elif Verdict.IMPROVEMENT in verdicts:
        status = Status.IMPROVEMENT
    else:
        status = Status.NO_CHANGE
    reason = "; ".join(
        part for part in (throughput_reason(throughput, adjusted, machine), _memory_reason(memory)) if part
    )
    return ConfigVerdict(
        workload, config, status, reason, limits, throughput, memory, adjusted=adjusted, machine=machine
    )


def throughput_reason(
    t: ThroughputComparison,
    adjusted: ThroughputComparison | None,
    machine: ThroughputComparison | None,
    unit: str = "samples/s",
    sample: str = "trial",
) -> str:
    """One line on a throughput comparison, raw and (with the machine probe) adjusted for the machine's speed.

    `unit` names the figure compared, `sample` what each value of it came from (a trial, a session).
    """
    reason = _throughput_verdict_reason(t, unit, sample) + _outlier_note(t, sample)
    if adjusted is None or machine is None:
        return reason
    speed = f"the machine probe ran {machine.ratio:.3f}x as fast as when the baseline was measured"
    if adjusted.verdict == t.verdict:
        if abs(math.log(machine.ratio)) < math.log(1 + t.threshold):
            return reason
        return f"{reason}; {speed}, and adjusted for that the verdict is the same"
    adjusted_text = _throughput_verdict_reason(adjusted, f"{unit} per probe rate", sample)
    final = combine_verdicts(t.verdict, adjusted.verdict)
    return (
        f"{reason}; but {speed}: adjusted for that, {adjusted_text}{_outlier_note(adjusted, sample)}; so {final.value}"
    )


def _outlier_note(t: ThroughputComparison, sample: str = "trial") -> str:
    left_out = [
        f"{n} {side} {sample}{'s' if n > 1 else ''}"
        for n, side in zip(t.outliers, ("baseline", "current"), strict=True)
        if n
    ]
    if not left_out:
        return ""
    return (
        f" (left out {' and '.join(left_out)} more than {OUTLIER_FACTOR:g}x off the median: interference "
        "from another job, most likely)"
    )


def _throughput_verdict_reason(t: ThroughputComparison, unit: str, sample: str = "trial") -> str:
    change = f"{unit} {format_signed_pct(t.change)} ({t.ratio:.3f}x"
    if math.isnan(t.ci_low):
        change += f", one {sample} a side: no estimate of noise)"
    else:
        p_value = format_p_value(min(t.p_slower, t.p_faster))
        change += f", {100 * t.confidence:.1f}% CI {t.ci_low:.3f}-{t.ci_high:.3f}x, p={p_value})"
    threshold = f"{100 * t.threshold:g}%"
    if t.verdict == Verdict.REGRESSION:
        return f"{change}: a regression beyond the {threshold} threshold (p < {format_p_value(t.alpha)})"
    if t.verdict == Verdict.IMPROVEMENT:
        return f"{change}: an improvement beyond {threshold}"
    if t.verdict == Verdict.NO_CHANGE:
        return f"{change}: no regression beyond {threshold}"
    detectable = "unknown" if math.isnan(t.detectable_slowdown) else f"{100 * t.detectable_slowdown:.0f}% or more"
    noise = "unknown" if math.isnan(t.noise) else f"{100 * t.noise:.1f}%"
    return (
        f"{change}: inconclusive, the interval straddles the {threshold} threshold; with {noise} {sample}-to-{sample} "
        f"noise and {t.n_baseline}+{t.n_candidate} {sample}s it could detect slowdowns of {detectable}"
    )


def _memory_reason(m: MemoryComparison) -> str:
    if m.verdict == Verdict.NO_CHANGE:
        return ""
    change = format_signed_pct(m.change) if m.change is not None else "from zero"
    text = f"peak memory {format_bytes(m.baseline_bytes)} -> {format_bytes(m.candidate_bytes)} ({change}"
    text += f", tolerance {100 * m.tolerance:g}%"
    p_value = "no estimate of noise" if math.isnan(m.p_value) else f"p={format_p_value(m.p_value)}"
    if m.verdict == Verdict.REGRESSION:
        return f"{text}, {p_value}): a memory regression"
    if m.verdict == Verdict.IMPROVEMENT:
        return f"{text}, {p_value}): less memory"
    return f"{text}, {p_value}): inconclusive, trial-to-trial noise could explain it"


def _with_failed_trials(verdict: ConfigVerdict, failed: int) -> ConfigVerdict:
    if not failed or verdict.status == Status.FAILED:
        return verdict
    reason = f"{verdict.reason} ({failed} trial{'s' if failed > 1 else ''} failed and not counted)"
    return replace(verdict, reason=reason, trials_failed=failed)


def _workload_changes(baseline: BaselineEntry, candidate: BaselineEntry) -> list[str]:
    changes = []
    for key in ("batch_size", "steps", "warmup_steps", "seed"):
        old, new = baseline.settings.get(key), candidate.settings.get(key)
        if old is not None and old != new:
            changes.append(f"{key} {old} -> {new}")
    if baseline.data_checksum and candidate.data_checksum and baseline.data_checksum != candidate.data_checksum:
        changes.append(f"data-slice checksum {baseline.data_checksum[:12]} -> {candidate.data_checksum[:12]}")
    return changes


def _losses_match(old: Sequence[float], new: Sequence[float]) -> bool:
    if not old or not new:
        return True  # nothing recorded on one side: the checksum is the only evidence
    return len(old) == len(new) and all(
        math.isclose(a, b, rel_tol=LOSS_TOLERANCE, abs_tol=1e-6) for a, b in zip(old, new, strict=True)
    )


def _mean_process_s(trials: Sequence[TrialResult]) -> float:
    """How long one more trial of this config should take, from the trials so far."""
    times = [t.process_s for t in trials if t.process_s]
    return sum(times) / len(times) if times else 10.0


def _losses(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)


def gate_to_dict(result: GateResult) -> dict[str, Any]:
    """The verdicts as plain JSON values (NaN as null): for `perfgate report --format json`."""

    def comparison(c: ThroughputComparison | None) -> dict[str, Any] | None:
        if c is None:
            return None
        values = {
            "baseline_median": c.baseline_median,
            "candidate_median": c.candidate_median,
            "ratio": c.ratio,
            "ci_low": c.ci_low,
            "ci_high": c.ci_high,
            "confidence": c.confidence,
            "p_value": min(c.p_slower, c.p_faster),
            "trials": [c.n_baseline, c.n_candidate],
            "noise": c.noise,
            "detectable_slowdown": c.detectable_slowdown,
            "verdict": c.verdict.value,
        }
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}

    workloads = []
    for w in result.workloads:
        configs = []
        for v in w.configs:
            m = v.memory
            configs.append(
                {
                    "config": v.config,
                    "status": v.status.value,
                    "reason": v.reason,
                    "thresholds": {"throughput": v.limits.throughput, "memory": v.limits.memory},
                    "throughput": comparison(v.throughput),
                    "adjusted": comparison(v.adjusted),
                    "machine_ratio": None if v.machine is None else v.machine.ratio,
                    "peak_memory": None
                    if m is None
                    else {"baseline_bytes": m.baseline_bytes, "current_bytes": m.candidate_bytes, "change": m.change},
                }
            )
        baseline = w.baseline
        workloads.append(
            {
                "workload": w.workload,
                "problem": w.problem,
                "problem_status": None if w.problem_status is None else w.problem_status.value,
                "baseline": None
                if baseline is None
                else {"measured_at": baseline.measured_at, "commit": baseline.commit, "machine": baseline.key},
                "configs": configs,
            }
        )
    machine = None if result.run is None else fingerprint_key(machine_fingerprint(result.run.environment))
    return {"exit_code": result.exit_code, "machine": machine, "workloads": workloads}
