"""Diagnosis: which part of the step explains a change, and rules that name a suspect with evidence.

Per-phase attribution compares the time per step of each phase (data wait, host-to-device copy,
forward + loss, backward, optimizer) with the baseline's, and says which phase explains how much of
the change in step time. The rules read the same figures:

- data pipeline: data wait takes data_wait_share or more of the step, or its growth explains most
  (explains) of a regressed step, or it grew data_wait_growth times the baseline's (and by 5% of the
  step or more) while the DataLoader's settings changed (their change is the evidence), or the workers'
  CPU per step grew and took cores the compute phases needed (`_contention_s`); hints come from the
  DataLoader settings. Changed DataLoader settings are always named, as a standing finding (no suspect)
  when none of this holds;
- model compute: forward, backward and optimizer growth explains most of a slower step (a regression
  verdict, or early evidence beyond the trials' noise: on a noisy machine one trial's step proves nothing),
  or, counted exactly, FLOPs per sample grew (`FLOPs per sample +38% (the model grew)`), ranked by what the
  phases or the added FLOPs at the baseline's time per FLOP explain, whichever is more;
- tail latency: p95 over p50 step time of tail_ratio or more, and tail_ratio times the baseline's (a lone
  slow step moves no p95: it is no finding);
- memory: memory in use rising step over step (a least-squares slope of memory_growth_kib per step or
  more, correlation with the step number memory_growth_fit or more: something keeps tensors or autograd
  graphs alive, the classic being a loss summed without `.item()`), or a peak-memory regression, or a counted
  allocated peak that grew, whose figure then leads the peak's finding (`allocated peak +24% (28.5 MiB ->
  35.4 MiB)`);
- framework overhead: a step calling torch_calls_growth times the baseline's torch functions, each
  added call costing at most call_overhead_us of step time (many small operations: Python and
  dispatch overhead, not compute), or, counted exactly on one device type, more operators a step with FLOPs
  per sample unchanged (`+120 operators a step`, each costing at most call_overhead_us; costlier ones are
  model compute the FLOP count leaves out), or more torch.compile graph breaks (with their places) or
  recompiles (with the guard that failed);
- runtime or machine: a slower step with every count unchanged does the same work; unless the data
  pipeline (whose finding then carries the counts), framework overhead, memory growth or a rank explains it,
  the finding says what is left: the data pipeline, the runtime or the machine;
- accelerator utilisation (CUDA, with nvidia-ml-py), from the system sampler during the timed steps,
  with SageMaker Debugger's published defaults: GPU utilisation p95 under gpu_low_percent (low utilisation),
  or GPU under gpu_idle_percent on average while the busiest CPU core is over cpu_busy_percent (a CPU bottleneck);
- data-parallel trials (`--nproc`), from each rank's phases and its timed all-reduce (`_ranks`):
  communication (the all-reduce's time in flight grew, comm_growth of the step: backward's longer wait
  for it counts for communication, not the model), load imbalance (one rank's lead over the others grew,
  imbalance_growth of the step, carried by one phase: the rank and the phase are named) and straggler (the
  same lead spread over the phases);
- numerics: a config that failed with a NaN or infinite loss;
- dependencies (a paired check whose sides ran on other package versions, `Against.environments`): a config that
  regressed, or whose open verdict leans slower, names the packages that changed; with every count of the step
  unchanged (the same work: the training code did not change what it computes) they lead, the counts and the
  phases that grew their evidence; counts that moved with them are their evidence too. Where both sides ran in
  the head's packages while the base declares others, a standing caveat says the dependency change went
  unmeasured;
- operators (with `--profile`): the operators whose self time per step grew most against the
  baseline's profile, and the trace's file name (supporting evidence, never the suspect by itself).

The exact counts (`Counts`: one untimed step on each side) are stronger evidence than the timed phases: where
both sides have them, operators that grew replace the torch calls (which FLOPs that grew silence: the calls came
with compute), the counted graph breaks replace the trials' figure, and a slower step with unchanged counts is
no model-compute finding; where the base has none (baseline files written before them) nothing here reads
them. A count moved when it changed beyond its tolerance (`count_tolerances`: the project's `[tool.perfgate.counts]`,
the counts gate's default where it only reports the count); operators, kernels
and the allocated peak are compared only between counts on one device type (`DEVICE_DEPENDENT_COUNTS`).

Each finding is one line plus its evidence. The findings are ranked by what explains the change (see
`_strength`): with a slower step, the part that explains most of its growth leads and memory follows;
without one, memory leads when it is what changed. A slower step is a samples/s regression, or, while
that verdict is still open, early evidence: the step grew past the threshold's worth beyond
evidence_sigmas standard errors of the trials' spread (the diagnosis is then shown, marked as early,
and fails nothing), or beyond ranking_sigmas when a peak-memory regression fails the build anyway (then
the question is only what explains the change). Pure functions over the gate's result: nothing here runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from perfgate.formatting import format_bytes, format_names
from perfgate.judge.memory import compared_peaks, grown_parts, of_entry, of_trials, signed_bytes
from perfgate.naming import CLI
from perfgate.outcome import Status
from perfgate.project import CountTolerances, DiagnosisThresholds
from perfgate.records.baselines import BaselineEntry, ConfigEntry, rank_totals
from perfgate.records.comparisons import ThroughputComparison
from perfgate.records.counts import COUNT_NAMES
from perfgate.records.diagnoses import COMPUTE, DATA, SAME_WORK, Diagnosis, Finding, Movement, PhaseChange
from perfgate.records.diagnoses import explained as _explained
from perfgate.records.results import ConfigResult, Environments, TrialResult, WorkloadResult, WorkloadSettings
from perfgate.records.shapes import DEVICE_DEPENDENT_COUNTS, Counts, Environment, OperatorRow, Profile
from perfgate.records.summary import PHASES, percentile
from perfgate.records.verdicts import ConfigVerdict, GateResult

DEFAULT_THRESHOLDS = DiagnosisThresholds()
PHASE_NAMES = {"data_wait": "data wait", "h2d": "host-to-device copy", "forward": "forward + loss"}
RANK_SUSPECTS = frozenset({"load imbalance", "straggler"})  # data-parallel trials: a rank, named
# The step's exact counts (`Counts`, counted on both sides): a count moved when it changed by more than the counts
# gate's default tolerance for it (`project.CountTolerances`): FLOPs per sample 2%, operators and kernels a step 5%,
# the allocated peak 5%; parameters, graphs, graph breaks and recompiles at any change.
COUNT_TOLERANCES = {
    name: float(value)
    for name, value in vars(CountTolerances()).items()
    if isinstance(value, float) and name not in ("graph_breaks", "recompiles")
}


def count_tolerances(counts: CountTolerances) -> dict[str, float]:
    """The share each relative count may move by before the diagnosis calls it moved: the project's tolerance
    (`ProjectConfig.counts`), else (a count it only reports) the counts gate's default, `COUNT_TOLERANCES`."""
    tolerances = {}
    for name, default in COUNT_TOLERANCES.items():
        value = getattr(counts, name)
        tolerances[name] = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    return tolerances


DEPENDENCIES = "dependencies"  # the suspect of a paired check whose sides ran on other package versions
SAME_WORK_PACKAGES = "dependencies: the same work on other packages"  # how a dependencies finding that leads begins
ONLY_PACKAGES = "dependencies: only the declared packages changed"  # leads too: the code is the base's
FLOPS_LINE = "model compute: FLOPs per sample"  # how a model-compute finding the counts prove begins
ALLOCATED_KINDS = {
    "cuda-max-allocated": "the CUDA allocator's peak of allocated bytes over one untimed step",
    "cpu-live-storage": "the peak of live tensor storage over one untimed eager step (what the step allocates on top "
    "of the model's, the optimizer's and the batch's tensors)",
}


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


def _with_intermittent(diagnosis: Diagnosis, throughput: ThroughputComparison | None) -> Diagnosis:
    """A slow path that head takes in some of its trial processes leads the findings where the count test found
    it (`stats.count_slow_pairs`: more much slower head pairs than the runner's rate explains, in at most half
    the pairs; in most of them the slowdown is steady): the phases average it over every trial, and it is what a
    rare lock, a recompile or a cold cache looks like."""
    count = None if throughput is None else throughput.count
    if count is None or not (count.rejects or throughput is not None and throughput.by_count):
        return diagnosis
    if 2 * count.head_slow > count.pairs:  # slow in most pairs: a steady slowdown, which the phases explain
        return diagnosis
    factor = "" if math.isnan(count.head_factor) else f" {count.head_factor:.2g}x"
    finding = Finding(
        "intermittent",
        f"intermittent: a slow path in some processes: {count.head_slow} of {count.pairs} head trials ran{factor} "
        f"slower than their pair, base trials {count.base_slow} of {count.pairs}",
        (
            "a steady slowdown slows every trial alike; a lock, a recompile or a cold cache that some processes "
            "meet slows those alone: look for what differs between runs of the same code (a timeout, a cache, "
            "a race, a data-dependent path)",
        ),
    )
    return replace(diagnosis, findings=(finding, *diagnosis.findings))


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
    contention = _contention_s(loader_cpu, phases, cores, th.evidence_sigmas, th.data_wait_growth)
    step = _movement(baseline, ok, steps, set(PHASES))
    early = not slower and _slower_beyond_noise(
        step, baseline, ok, steps, threshold, machine_ratio, sigmas, contention, session_noise
    )
    slowdown = slower or early
    contention = contention if slowdown else 0.0
    step_s = [s for t in ok for s in t.step_s]
    profile = measured.profiles.get(config)
    grown = grown_operators(baseline.top_operators, profile.top_operators if profile else []) if baseline else []
    pipeline = _Pipeline(measured.settings, base_settings, cores, loader_cpu, contention)
    ranks = _ranks(baseline, ok, steps, step, slowdown, th, session_noise)
    counted = _counted(baseline, ok, tolerances)  # None without counts on both sides (baselines written before them)
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


def _loader_cpu(baseline: ConfigEntry | None, ok: Sequence[TrialResult], steps: int | None) -> Movement | None:
    """How the DataLoader workers' CPU seconds per step changed; None unless every trial on both sides
    measured it (files written before perfgate did leave it out)."""
    if baseline is None or not steps or any(t.loader_cpu_s is None for t in baseline.trials):
        return None
    now = [t.system.loader_cpu_s / len(t.step_s) for t in ok if t.system and t.system.loader_cpu_s is not None]
    if len(now) < len(ok):
        return None
    return _moved([t.per_step(t.loader_cpu_s or 0.0, steps) for t in baseline.trials], now)


def _moved(before: Sequence[float], now: Sequence[float]) -> Movement:
    """The change of a per-step figure from `before`'s trials to `now`'s, and its standard error: the trials'
    spread on each side pooled (a side of one trial adds no spread), over both sides' trial counts."""
    if not before or not now:
        return Movement(0.0, 0.0, None)
    deviations = [v - statistics.fmean(side) for side in (before, now) if len(side) > 1 for v in side]
    freedom = len(deviations) - sum(1 for side in (before, now) if len(side) > 1)
    noise = None
    if freedom >= 1:
        noise = math.sqrt(sum(d * d for d in deviations) / freedom) * math.sqrt(1 / len(before) + 1 / len(now))
    return Movement(statistics.fmean(before), statistics.fmean(now) - statistics.fmean(before), noise)


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
    a whole session of this run can be 10% slower than the baseline's without any change of the code."""
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


def _contention_s(
    loader: Movement | None, phases: Sequence[PhaseChange], cores: int | None, sigmas: float, factor: float
) -> float:
    """The step time the DataLoader workers' added CPU took from the training step, estimated as their added
    CPU seconds per step spread over the machine's cores (on cores that are all busy, a core-second of the
    workers' work is one the training process does not get; with many idle cores the estimate is small
    anyway), and at most what the compute phases grew. 0 unless the workers' CPU per step grew `factor`
    times (`data_wait_growth`: more than a slower machine explains) and beyond `sigmas` standard errors of
    its trials' spread (`evidence_sigmas`).

    This is how a heavier augmentation slows a CPU-bound step without any wait for data: the workers keep
    up, but on a runner with few cores they run on the cores the forward and backward passes need."""
    if loader is None or not cores or loader.change_s <= 0 or not loader.beyond_noise(sigmas):
        return 0.0
    if loader.before_s + loader.change_s < factor * loader.before_s:
        return 0.0
    compute = sum(p.change_s for p in phases if p.phase in COMPUTE)
    return max(0.0, min(compute, loader.change_s / cores))


@dataclass(frozen=True)
class _Pipeline:
    """What the data-pipeline rule reads besides the phases: the DataLoader's settings on both sides, the
    machine's cores, the workers' CPU per step and the step time it took from training."""

    settings: WorkloadSettings
    base_settings: WorkloadSettings | None
    cores: int | None
    loader_cpu: Movement | None
    contention_s: float


def _data_pipeline(
    phases: Sequence[PhaseChange],
    step_s: Sequence[float],
    pipeline: _Pipeline,
    slower: bool,
    th: DiagnosisThresholds,
    changes: Sequence[str] = (),
) -> list[Finding]:
    settings, cores, loader_cpu, contention = (
        pipeline.settings,
        pipeline.cores,
        pipeline.loader_cpu,
        pipeline.contention_s,
    )
    data = [p for p in phases if p.phase in DATA]
    step = statistics.fmean(step_s)
    wait_before, wait_now = sum(p.baseline_s or 0.0 for p in data), sum(p.current_s for p in data)
    share = wait_now / step if step else 0.0
    base_step = sum(p.baseline_s or 0.0 for p in phases)
    base_share = wait_before / base_step if base_step else None
    explains = _explained(phases, DATA, contention) if slower else 0.0
    changed = _loader_changes(pipeline.base_settings, settings)
    output_changed = [c for c in changes if c.startswith("the data pipeline's output changed")]
    grew_with_change = (
        bool(changed or output_changed)
        and base_share is not None
        and wait_now >= th.data_wait_growth * wait_before
        and wait_now - wait_before >= 0.05 * step  # and by a noticeable part of the step
    )
    quiet = share < th.data_wait_share and explains < th.explains and not grew_with_change
    if quiet and not changed:
        return []
    was = "" if base_share is None else f"{base_share:.0%} -> "
    evidence = [_per_step(p) for p in data]
    if loader_cpu is not None and loader_cpu.change_s:
        evidence.append(
            f"the DataLoader workers' CPU: {1000 * loader_cpu.before_s:.2f} -> "
            f"{1000 * (loader_cpu.before_s + loader_cpu.change_s):.2f} ms per step"
            + (f" on {cores} cores" if cores else "")
        )
    if changed:
        evidence.append(f"the DataLoader's settings changed: {', '.join(changed)}")
    evidence.extend(output_changed)
    evidence.extend(_loader_hints(settings, cores))
    line = f"data pipeline: waiting for data takes {was}{share:.0%} of the step"
    if explains >= th.explains and contention > 0:
        line = (
            f"data pipeline: waiting for data and the DataLoader workers' added CPU work explain {explains:.0%} of "
            f"the slower step (waiting {was}{share:.0%} of the step; the workers take about {1000 * contention:.2f} "
            "ms a step of the cores the training step needs); look at the Dataset, its transforms and the "
            "DataLoader settings this change touched"
        )
    elif explains >= th.explains:
        line = (
            f"data pipeline: waiting for data explains {explains:.0%} of the slower step ({was}{share:.0%} of "
            "the step); look at the Dataset, its transforms and the DataLoader settings this change touched"
        )
    line += f"; {_threads_context(settings, cores)}"  # the verdict on a pipeline depends on what it competes with
    standing = (
        explains < th.explains
        and not grew_with_change
        and base_share is not None
        and base_share >= th.data_wait_share
        and share < 1.5 * base_share
    )
    if standing:
        line += " (so did the baseline's)"
    elif explains < th.explains and base_share is not None and not slower:
        # More waiting for data in a step that is not measurably slower (fewer workers on a busy machine can be faster):
        # worth knowing, not a regression of the data pipeline.
        line += " (the step is not measurably slower)"
        standing = True
    elif quiet:
        # The settings changed but waiting for data did not grow with them: the change is named, not suspected.
        line += " (waiting for data did not grow with the changed settings)"
        standing = True
    return [Finding("data pipeline", line, tuple(evidence), standing)]


def _threads_context(settings: WorkloadSettings, cores: int | None) -> str:
    """`measured at 2 torch threads, num_workers=2, 2 cores`: what the DataLoader's workers shared the machine with."""
    threads = settings.threads
    workers = int((settings.loader or {}).get("num_workers", 0) or 0)
    parts = [f"measured at {threads} torch thread{'s' if threads != 1 else ''}" if threads else "measured"]
    parts.append(f"num_workers={workers}")
    if cores:
        parts.append(f"{cores} cores")
    return ", ".join(parts)


def _loader_changes(before: WorkloadSettings | None, now: WorkloadSettings) -> list[str]:
    """`num_workers 2 -> 0` for each DataLoader setting that differs from the baseline's."""
    if before is None:
        return []
    old, new = before.loader or {}, now.loader or {}
    return [
        f"{key} {old.get(key, 'default')} -> {new.get(key, 'default')}"
        for key in sorted({*old, *new})
        if old.get(key) != new.get(key)
    ]


def _loader_hints(settings: WorkloadSettings, cores: int | None) -> list[str]:
    loader = settings.loader or {}
    workers = int(loader.get("num_workers", 0) or 0)
    hints = []
    if workers == 0:
        spare = f" (this machine has {cores} cores)" if cores and cores > 1 else ""
        hints.append(f"num_workers=0: batches are loaded in the training process{spare}; try num_workers > 0")
    elif cores and workers >= cores:
        hints.append(f"num_workers={workers} with {cores} cores: the workers compete with the training process")
    if settings.device == "cuda" and not loader.get("pin_memory"):
        hints.append("pin_memory is off: host-to-device copies cannot overlap with compute")
    return hints


def _model_compute(
    phases: Sequence[PhaseChange],
    slower: bool,
    th: DiagnosisThresholds,
    changes: Sequence[str] = (),
    operators: Sequence[tuple[str, float, float]] = (),
    contention_s: float = 0.0,
    counted: _Counted | None = None,
    added: _AddedOperators | None = None,
) -> list[Finding]:
    """The compute phases explain most of a slower step; or, from the counts, FLOPs per sample grew (the finding
    then leads by what the added FLOPs explain, `_flops_share`, or the phases, whichever is more: an exact count
    is stronger evidence than a timed phase). With every count unchanged the model does the same work, and
    `_same_work` says what that leaves instead."""
    explains = _explained(phases, COMPUTE, contention_s) if slower else 0.0
    flops = counted.growth("flops_per_sample") if counted is not None else None
    if flops is None and (explains < th.explains or (counted is not None and counted.same_work)):
        return []
    grown = sorted((p for p in phases if p.phase in COMPUTE), key=lambda p: p.change_s, reverse=True)
    evidence = tuple(_per_step(p) for p in grown) + tuple(
        c for c in changes if c.startswith("the model's numerics changed")
    )
    growth = sum(p.change_s for p in phases)
    # The phases that carry the growth (each at least a fifth of the compute phases' growth), largest first.
    carrying = [p for p in grown if p.change_s > 0.2 * growth * explains] or grown[:1]
    names = " and ".join(PHASE_NAMES.get(p.phase, p.phase) for p in carrying)
    line = f"model compute: {names} explain{'s' if len(carrying) == 1 else ''} {explains:.0%} of the slower step"
    share = None
    if counted is not None and flops is not None:
        flops_share = _flops_share(phases, flops) if slower else 0.0
        share = max(explains, flops_share) if slower else None
        grew = "the model grew" if counted.growth("parameters") is not None else "the same parameters do more work"
        why = f"{FLOPS_LINE} {_percent(flops)} ({grew})"
        if explains >= th.explains:
            line = f"{why}; {line.removeprefix('model compute: ')}"
        elif flops_share > 0:
            line = f"{why}; at the baseline's time per FLOP that is {flops_share:.0%} of the slower step"
        else:
            line = why + ("" if slower else "; the step is not measurably slower")
        figures = [counted.figure(n) for n in ("flops_per_sample", "parameters", "operators_per_step")]
        evidence = ("counted exactly: " + ", ".join(f for f in figures if f), *evidence)
    elif added is not None and not added.dispatch_sized:
        # Operators grew with FLOPs unchanged, each costing more than dispatch: work the FLOP count leaves out.
        line += (
            f"; +{added.now - added.before:,} operators a step, {added.flops}, {1e6 * added.per_operator_s:.0f} us "
            "each: work the FLOP count leaves out (elementwise operations, copies)"
        )
    if operators:
        name, before, now = operators[0]
        line += f"; {name} +{1000 * (now - before):.2f} ms per step"
    line += "; look at the model code this change touched"
    return [Finding("model compute", line, evidence, explains=share)]


def _tail_latency(
    step_s: Sequence[float], baseline: ConfigEntry | None, slower: bool, th: DiagnosisThresholds
) -> list[Finding]:
    if len(step_s) < 4:
        return []
    p50, p95 = percentile(step_s, 50), percentile(step_s, 95)
    mean, sd = statistics.fmean(step_s), statistics.pstdev(step_s)
    beyond = sum(1 for s in step_s if s > mean + th.tail_sigmas * sd) if sd > 0 else 0
    ratio = p95 / p50 if p50 > 0 else math.inf
    base = [t.step_p95_s / t.step_p50_s for t in (baseline.trials if baseline else []) if t.step_p50_s and t.step_p95_s]
    base_ratio = statistics.median(base) if base else None
    # A tail is a finding when p95 is far from the median and far beyond the baseline's own tail; a few
    # slow steps (p95 does not move for one in twenty) are what a shared machine does now and then.
    if ratio < th.tail_ratio or (base_ratio is not None and ratio < th.tail_ratio * base_ratio):
        return []
    line = f"tail latency: p95 step time is {ratio:.1f}x the median"
    evidence = [f"p50 {1000 * p50:.2f} ms, p95 {1000 * p95:.2f} ms"]
    if base_ratio is not None:
        evidence.append(f"baseline p95/p50 {base_ratio:.1f}")
    evidence.append(f"{beyond} step(s) beyond mean + {th.tail_sigmas:g} sd")
    # Without a baseline, or without a slower step, a tail is worth knowing but explains nothing.
    return [Finding("tail latency", line, tuple(evidence), standing=not slower or base_ratio is None)]


def _memory(
    trials: Sequence[TrialResult],
    baseline: ConfigEntry | None,
    regressed: bool,
    th: DiagnosisThresholds,
    counted: _Counted | None = None,
) -> list[Finding]:
    """Memory growth step over step, and the peak: the verdict's peak-memory regression and, from the counts, an
    allocated peak that grew, which leads the peak's finding with its figure (`_allocated`)."""
    findings = []
    fits = [_growth(t.memory_step_bytes) for t in trials if len(t.memory_step_bytes) >= 4]
    if fits:
        per_step, fit = statistics.median(f[0] for f in fits), statistics.median(f[1] for f in fits)
        steps = statistics.median(len(t.memory_step_bytes) for t in trials if len(t.memory_step_bytes) >= 4)
        total = per_step * (steps - 1)
        if per_step >= th.memory_growth_kib * 1024 and fit >= th.memory_growth_fit:
            findings.append(
                Finding(
                    "memory",
                    f"memory growth: memory in use rose {format_bytes(int(per_step))} per step, "
                    f"{format_bytes(int(total))} over {steps:g} timed steps",
                    (
                        f"correlation with the step number {fit:.2f} (a steady rise, not a one-off allocation)",
                        "something keeps tensors alive from step to step, often a loss summed without .item() "
                        "(it keeps each step's graph)",
                    ),
                )
            )
    allocated = _allocated(counted)
    if regressed:
        finding = _peak_memory_regression(trials, baseline)
        if allocated is not None:
            line, evidence = allocated
            finding = Finding("memory", f"{line}; {finding.line}", (*evidence, *finding.evidence))
        elif counted is not None and (pair := counted.pair("allocated_peak_bytes")) is not None:
            was, now = (format_bytes(int(v)) for v in pair)
            unchanged = (
                f"the allocated peak of one counted step is unchanged ({was} -> {now}): the growth is not in what a "
                "step allocates (the allocator's cache, the DataLoader workers, libraries, or memory kept from step "
                "to step)"
            )
            finding = Finding("memory", finding.line, (*finding.evidence, unchanged))
        findings.append(finding)
    elif allocated is not None:
        findings.append(Finding("memory", *allocated))
    return findings


def _allocated(counted: _Counted | None) -> tuple[str, tuple[str, ...]] | None:
    """`memory: allocated peak +24% (28.5 MiB -> 35.4 MiB)` and its evidence, where the counted allocated peak grew
    beyond its tolerance (on one device type, by one measure); None otherwise."""
    growth = counted.growth("allocated_peak_bytes") if counted is not None else None
    pair = counted.pair("allocated_peak_bytes") if counted is not None else None
    if counted is None or growth is None or pair is None:
        return None
    was, now = (format_bytes(int(v)) for v in pair)
    line = f"memory: allocated peak {_percent(growth)} ({was} -> {now})"
    kind = ALLOCATED_KINDS.get(counted.head.allocated_kind or "", f"counted as {counted.head.allocated_kind}")
    return line, (
        f"counted exactly: {kind}",
        "a larger activation, a tensor kept alive longer, a wider dtype or more optimizer state",
    )


def _peak_memory_regression(trials: Sequence[TrialResult], baseline: ConfigEntry | None) -> Finding:
    """`peak memory regression: 1.2 GiB -> 1.6 GiB (+410.0 MiB, loader workers +410.0 MiB: a worker keeps what
    it loads)`: the medians the verdict compared, and the part of the job that grew."""
    current = of_trials([t.memory for t in trials])
    if baseline is None:
        peak = int(statistics.median(t.peak_bytes for t in current))
        return Finding("memory", f"peak memory regression: {format_bytes(peak)}")
    base = of_entry(baseline)
    peaks = compared_peaks(base, current, "the baseline")
    was, now = int(statistics.median(peaks.baseline)), int(statistics.median(peaks.candidate))
    parts = "" if peaks.note else grown_parts(base, current)
    change = signed_bytes(now - was) + (f", {parts}" if parts else "")
    line = f"peak memory regression: {format_bytes(was)} -> {format_bytes(now)} ({change})"
    return Finding("memory", line, (peaks.note,) if peaks.note else ())


def _step_growth(
    trials: Sequence[TrialResult], baseline: ConfigEntry, step: Movement | None
) -> tuple[float, float, float]:
    """The median step before and now, and the least growth the trials support: two standard errors under the
    measured one (a machine that slowed by chance does not make added calls costly); seconds."""
    step_now = statistics.median(s for t in trials for s in t.step_s)
    step_before = statistics.median(t.step_p50_s for t in baseline.trials if t.step_p50_s) if baseline.trials else 0.0
    growth = step_now - step_before
    if step is not None and step.noise_s is not None:
        growth = min(growth, step.change_s - 2 * step.noise_s)
    return step_before, step_now, growth


def _framework(
    trials: Sequence[TrialResult],
    baseline: ConfigEntry | None,
    th: DiagnosisThresholds,
    step: Movement | None = None,
    counted: _Counted | None = None,
    added: _AddedOperators | None = None,
) -> list[Finding]:
    """Framework overhead from the counts of one eager step; `step`: how the step changed, with its noise. With
    exact counts on both sides (`counted`), operators that grew while FLOPs did not (`added`) replace the torch
    calls (the same question, counted by the dispatcher), and the torch calls say nothing where FLOPs grew (the
    added calls came with compute); graph breaks and recompiles come from the counts, with their places."""
    if baseline is None:
        return []
    findings = []
    calls = [t.torch_calls_per_step for t in trials if t.torch_calls_per_step]
    base_calls = [t.torch_calls_per_step for t in baseline.trials if t.torch_calls_per_step]
    step_before, step_now, growth = _step_growth(trials, baseline, step)
    if added is not None and added.dispatch_sized:
        # The torch calls, where they grew too, are this finding's evidence: one finding for one cause.
        grown_calls: tuple[str, ...] = ()
        if calls and base_calls and (now := statistics.median(calls)) > (before := statistics.median(base_calls)):
            grown_calls = (f"a step calls {now:g} torch functions, {now / before:.1f}x the baseline's {before:g}",)
        findings.append(_operators_finding(added, grown_calls))
    elif calls and base_calls and not (counted is not None and counted.growth("flops_per_sample") is not None):
        now, before = statistics.median(calls), statistics.median(base_calls)
        # Step time added per added call: the least growth the trials support, and a step no slower means the
        # calls cost next to nothing.
        per_call = max(0.0, growth) / (now - before) if now > before else math.inf
        if now >= th.torch_calls_growth * before and per_call <= th.call_overhead_us / 1e6:
            findings.append(
                Finding(
                    "framework overhead",
                    f"framework overhead: a step calls {now:g} torch functions, {now / before:.1f}x the baseline's "
                    f"{before:g}",
                    (
                        f"step time {1000 * step_before:.2f} -> {1000 * step_now:.2f} ms: each added call costs "
                        f"{1e6 * per_call:.1f} us, dispatch-sized, not compute",
                        "many small operations spend their time in Python and dispatch, not in compute",
                        "fuse or vectorise them, or try torch.compile (the bf16-compile config)",
                    ),
                )
            )
    syncs = [t.host_syncs_per_step for t in trials if t.host_syncs_per_step is not None]
    base_syncs = [t.host_syncs_per_step for t in baseline.trials if t.host_syncs_per_step is not None]
    now_syncs = statistics.median(syncs) if syncs else None
    before_syncs = statistics.median(base_syncs) if base_syncs else None
    if now_syncs is not None and before_syncs is not None and now_syncs > before_syncs:
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: {now_syncs:g} host sync{'' if now_syncs == 1 else 's'} per step, "
                f"the baseline {before_syncs:g}",
                (
                    ".item(), .cpu(), .tolist() and float(tensor) copy a value to the host; on an accelerator each "
                    "waits for all queued work, so the device idles while Python catches up",
                    "keep values on the device (sum losses as tensors, log every N steps) or copy with "
                    "non_blocking=True",
                ),
            )
        )
    breaks = [(t.compile_stats or {}).get("graph_breaks") for t in trials]
    base_breaks = [t.graph_breaks for t in baseline.trials if t.graph_breaks is not None]
    now_breaks = max((b for b in breaks if b is not None), default=None)
    if counted is not None and any(counted.pair(n) is not None for n in ("graph_breaks", "recompiles")):
        findings.extend(_compile_counts(counted))  # counted, with where each break is: the trials' figure says less
    elif now_breaks is not None and base_breaks and now_breaks > max(base_breaks):
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: torch.compile graph breaks {max(base_breaks)} -> {now_breaks}",
                ("each break returns to Python between compiled graphs; TORCH_LOGS=graph_breaks shows where",),
            )
        )
    findings.extend(
        Finding("framework overhead", f"framework overhead: {w}")
        for t in trials[:1]
        for w in t.warnings
        if "compiled" in w
    )
    return findings


def _operators(baseline: ConfigEntry | None, profile: Profile | None) -> list[Finding]:
    """From --profile: the operators whose self time grew most against the baseline's, and the trace."""
    if profile is None:
        return []
    if profile.failure is not None:
        return [Finding("operators", f"operators: no profile ({profile.failure})")]
    current = profile.top_operators
    trace = f"trace: {profile.trace}"
    if baseline is None or not baseline.top_operators:
        top = ", ".join(row.name for row in current[:3])
        return [
            Finding("operators", f"operators: most self time in {top or '-'} (the baseline has no profile)", (trace,))
        ]
    grown = grown_operators(baseline.top_operators, current)
    if not grown:
        return [
            Finding("operators", "operators: no operator's self time grew against the baseline's profile", (trace,))
        ]
    evidence = tuple(f"{name}: {1000 * before:.3f} -> {1000 * now:.3f} ms per step" for name, before, now in grown)
    return [Finding("operators", f"operators: {grown[0][0]} grew most", (*evidence, trace))]


@dataclass(frozen=True)
class _Counted:
    """The step's exact counts on both sides: the base's (`ConfigEntry.counts`) and this run's (one ok trial's:
    every trial counts the same step)."""

    base: Counts
    head: Counts
    tolerances: Mapping[str, float] = field(default_factory=lambda: dict(COUNT_TOLERANCES))

    @property
    def same_device(self) -> bool:
        return self.base.device == self.head.device

    def pair(self, name: str) -> tuple[float, float] | None:
        """A count on both sides; None where a side did not count it, or where it is the device's
        (`DEVICE_DEPENDENT_COUNTS`) and the sides counted on different device types (the allocated peak: or by
        different measures)."""
        if name in DEVICE_DEPENDENT_COUNTS and not self.same_device:
            return None
        if name == "allocated_peak_bytes" and self.base.allocated_kind != self.head.allocated_kind:
            return None
        before, now = getattr(self.base, name), getattr(self.head, name)
        return None if before is None or now is None else (float(before), float(now))

    def growth(self, name: str) -> float | None:
        """The count's relative growth, where it grew beyond its tolerance (`tolerances`); else None."""
        pair = self.pair(name)
        if pair is None or pair[1] <= pair[0] * (1 + self.tolerances.get(name, 0.0)):
            return None
        return pair[1] / pair[0] - 1 if pair[0] > 0 else math.inf

    def moved(self, name: str) -> bool:
        """The count changed, either way, beyond its tolerance."""
        pair = self.pair(name)
        return pair is not None and abs(pair[1] - pair[0]) > self.tolerances.get(name, 0.0) * pair[0]

    @property
    def same_work(self) -> bool:
        """Every count that both sides counted is unchanged (within its tolerance), FLOPs or operators among them."""
        compared = [name for name in COUNT_NAMES if self.pair(name) is not None]
        work = {"flops_per_sample", "operators_per_step"} & set(compared)
        return bool(work) and not any(self.moved(name) for name in compared)

    def figure(self, name: str) -> str:
        """`FLOPs per sample 2.14e8 -> 2.96e8`; empty where the count is not compared."""
        pair = self.pair(name)
        if pair is None:
            return ""
        return f"{COUNT_NAMES[name].phrase} {_count_text(name, pair[0])} -> {_count_text(name, pair[1])}"

    def figures(self) -> list[str]:
        """Each compared count's figure (trainable parameters only where they are not all the parameters)."""
        trainable_all = all(c.trainable_parameters == c.parameters for c in (self.base, self.head))
        names = [n for n in COUNT_NAMES if not (n == "trainable_parameters" and trainable_all)]
        return [f for f in map(self.figure, names) if f]


def _counted(
    baseline: ConfigEntry | None, ok: Sequence[TrialResult], tolerances: Mapping[str, float] = COUNT_TOLERANCES
) -> _Counted | None:
    """Both sides' counts; None where either side has none (a baseline file written before counts were kept)."""
    head = next((t.counts for t in ok if t.counts is not None), None)
    if baseline is None or baseline.counts is None or head is None:
        return None
    return _Counted(baseline.counts, head, dict(tolerances))


def _count_text(name: str, value: float) -> str:
    """`2.14e8` FLOPs, `28.5 MiB`, `1,234` operators."""
    if name == "allocated_peak_bytes":
        return format_bytes(int(value))
    if name == "flops_per_sample":
        mantissa, _, exponent = f"{value:.3g}".partition("e")
        return f"{mantissa}e{int(exponent)}" if exponent else mantissa
    return f"{int(value):,}"


def _percent(growth: float) -> str:
    """`+38%`; a count that was 0 grew `from 0`."""
    return f"{growth:+.0%}" if math.isfinite(growth) else "from 0"


def _flops_share(phases: Sequence[PhaseChange], growth: float) -> float:
    """The share of the slower step that FLOPs per sample grown by `growth` explain at the baseline's time per FLOP:
    the compute phases' baseline time grown in proportion, over the step's growth; 1 at most, 0 without a baseline
    or a step that grew."""
    if any(p.baseline_s is None for p in phases):
        return 0.0
    step_growth = sum(p.change_s for p in phases)
    if step_growth <= 0:
        return 0.0
    compute_before = sum(p.baseline_s or 0.0 for p in phases if p.phase in COMPUTE)
    return min(1.0, compute_before * growth / step_growth)


@dataclass(frozen=True)
class _AddedOperators:
    """Operators a step that grew (beyond their tolerance, on one device type) while FLOPs per sample did not."""

    before: int
    now: int
    flops: str  # `FLOPs per sample unchanged` (or `-20%`, or `not compared` where a side did not count them)
    step_before_s: float
    step_now_s: float
    per_operator_s: float  # step time per added operator: the least growth the trials support (`_step_growth`)
    dispatch_sized: bool  # at most call_overhead_us each: framework overhead, not compute


def _added_operators(
    counted: _Counted | None,
    ok: Sequence[TrialResult],
    baseline: ConfigEntry | None,
    step: Movement,
    th: DiagnosisThresholds,
) -> _AddedOperators | None:
    pair = counted.pair("operators_per_step") if counted is not None else None
    if counted is None or baseline is None or pair is None or counted.growth("operators_per_step") is None:
        return None
    if counted.growth("flops_per_sample") is not None:
        return None  # the model grew: its operators with it (`_model_compute`)
    before, now = int(pair[0]), int(pair[1])
    flops = counted.pair("flops_per_sample")
    if flops is None:
        flops_text = "FLOPs per sample not compared"
    elif counted.moved("flops_per_sample") and flops[0] > 0:
        flops_text = f"FLOPs per sample {_percent(flops[1] / flops[0] - 1)}"
    else:
        flops_text = "FLOPs per sample unchanged"
    step_before, step_now, growth = _step_growth(ok, baseline, step)
    per_operator = max(0.0, growth) / (now - before)
    dispatch_sized = per_operator <= th.call_overhead_us / 1e6
    return _AddedOperators(before, now, flops_text, step_before, step_now, per_operator, dispatch_sized)


def _operators_finding(added: _AddedOperators, calls: tuple[str, ...] = ()) -> Finding:
    """`framework overhead: +120 operators a step (400 -> 520), FLOPs per sample unchanged`; `calls`: the torch
    calls' figure, where they grew too."""
    return Finding(
        "framework overhead",
        f"framework overhead: +{added.now - added.before:,} operators a step ({added.before:,} -> {added.now:,}), "
        f"{added.flops}",
        (
            *calls,
            f"step time {1000 * added.step_before_s:.2f} -> {1000 * added.step_now_s:.2f} ms: each added operator "
            f"costs {1e6 * added.per_operator_s:.1f} us, dispatch-sized, not compute",
            "many small operations spend their time in Python and dispatch, not in compute",
            "fuse or vectorise them, or try torch.compile (the bf16-compile config)",
        ),
    )


def _compile_counts(counted: _Counted) -> list[Finding]:
    """New torch.compile graph breaks, named by where they happen, and new recompiles, by the guard that failed."""
    findings = []
    breaks = counted.pair("graph_breaks")
    if breaks is not None and breaks[1] > breaks[0]:
        places = [p for p in counted.head.break_places if p not in counted.base.break_places]
        places = places or counted.head.break_places
        where = format_names(list(dict.fromkeys(p.split(": ", 1)[0] for p in places)), shown=3)
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: torch.compile graph breaks {breaks[0]:g} -> {breaks[1]:g}"
                + (f", at {where}" if where else ""),
                (
                    *places,
                    "each break returns to Python between compiled graphs"
                    + ("" if places else "; TORCH_LOGS=graph_breaks shows where"),
                ),
            )
        )
    recompiles = counted.pair("recompiles")
    if recompiles is not None and recompiles[1] > recompiles[0]:
        reasons = [r for r in counted.head.recompile_reasons if r not in counted.base.recompile_reasons]
        reasons = reasons or counted.head.recompile_reasons
        first = f": {reasons[0]}" + (f" and {len(reasons) - 1} more" if len(reasons) > 1 else "") if reasons else ""
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: torch.compile recompiles {recompiles[0]:g} -> {recompiles[1]:g}{first}",
                (
                    *reasons,
                    "a guard failed (a changed shape, dtype or Python value), and the function was traced and "
                    "compiled again; mark the dimension dynamic or keep the value fixed"
                    + ("" if reasons else "; TORCH_LOGS=recompiles shows why"),
                ),
            )
        )
    return findings


def _same_work(
    findings: list[Finding],
    counted: _Counted | None,
    slower: bool,
    phases: Sequence[PhaseChange],
    th: DiagnosisThresholds,
    machine_ratio: float | None,
) -> list[Finding]:
    """A slower step whose every count is unchanged does the same work: the model did not slow it. Where the data
    pipeline explains the change, its finding gets the counts as evidence; where nothing else does (no framework
    overhead counted, no memory growth, no rank's rule that explains most of it), a finding says what is left:
    the data pipeline, the runtime or the machine."""
    if counted is None or not slower or not counted.same_work:
        return findings
    figures = "every count of the step is unchanged: " + ", ".join(counted.figures())
    data = next((f for f in findings if f.suspect == "data pipeline" and not f.standing), None)
    if data is not None:
        return [replace(f, evidence=(*f.evidence, figures)) if f is data else f for f in findings]
    if any(
        not f.standing
        and (
            f.suspect == "framework overhead"
            or f.line.startswith("memory growth")
            or (f.explains is not None and f.explains >= th.explains)
        )
        for f in findings
    ):
        return findings
    evidence = [figures]
    if not counted.same_device:
        evidence.append(
            f"operators, kernels and the allocated peak are not compared: the baseline counted on "
            f"{counted.base.device}, this run on {counted.head.device}"
        )
    evidence.extend(_per_step(p) for p in sorted(phases, key=lambda p: p.change_s, reverse=True) if p.change_s > 0)
    if machine_ratio is not None:
        evidence.append(f"the machine probe ran {machine_ratio:.2f}x as fast as when the baseline was measured")
    line = (
        f"{SAME_WORK}: the step is slower with every count unchanged, so the model does the same work; look at the "
        "data pipeline, the runtime (torch and library versions, threads, backend settings) or the machine"
    )
    return [*findings, Finding(SAME_WORK, line, tuple(evidence))]


def _dependencies(
    findings: list[Finding],
    environments: Environments | None,
    counted: _Counted | None,
    suspected: bool,
    phases: Sequence[PhaseChange],
    environment_option: str,
) -> list[Finding]:
    """A paired check whose sides ran on other package versions: where the config regressed (or leans slower,
    `suspected`), the packages that changed are a suspect. With every count of the step unchanged the code does the
    same work (the diagnosis knows no diff of the code: the counts are its cue), so the packages lead, and the
    same-work finding's counts and phases become their evidence; counts that moved are evidence that the new
    versions changed what runs, and where head changes no file but the declarations (`code_changed` False) the
    packages lead with them. Both sides in the head's packages while the base declares others: a standing
    caveat, since the check did not measure the dependency change. Nothing without the record (`environments`)."""
    if environments is None:
        return findings
    if environments.kind == "shared" and environments.declared:
        caveat = Finding(
            DEPENDENCIES,
            f"{DEPENDENCIES}: the base ran in the head's packages: a dependency change is not measured "
            f"({environment_option} per-side measures it)",
            (f"the base declares {', '.join(environments.declared)}, not installed for it",),
            standing=True,
        )
        findings = [*findings, caveat]
    changed = environments.changed_text()
    if not suspected or not changed:
        return findings
    where = (
        "the base ran in an environment built from its own declarations"
        if environments.kind == "per-side"
        else "as each side imported them"
    )
    evidence = [f"dependency change: {changed} ({where})"]
    if counted is not None and counted.same_work:
        findings = [f for f in findings if f.suspect != SAME_WORK]  # the packages are what is left: said here
        evidence.append("every count of the step is unchanged: " + ", ".join(counted.figures()))
        growth = sum(p.change_s for p in phases)  # where it shows: the phases that carry a tenth of it or more
        grown = [p for p in phases if p.baseline_s is not None and p.change_s > 0.1 * growth > 0]
        evidence.extend(_per_step(p) for p in sorted(grown, key=lambda p: p.change_s, reverse=True))
        line = (
            f"{SAME_WORK_PACKAGES} ({changed}): every count of the step is unchanged, so the change comes with the "
            "new versions; look at what they changed, or pin the base's versions to confirm"
        )
    else:
        moved = [counted.figure(name) for name in COUNT_NAMES if counted.moved(name)] if counted is not None else []
        if moved and environments.code_changed is False:
            evidence.append("counts changed with the packages: " + ", ".join(moved))
            line = (
                f"{ONLY_PACKAGES} ({changed}), no other file: the new versions changed what runs (the step's counts "
                "moved with them); look at what they changed, or pin the base's versions to confirm"
            )
        elif moved:
            evidence.append("counts changed with the packages: " + ", ".join(moved))
            line = (
                f"{DEPENDENCIES}: the packages changed ({changed}), and the step's counts with them: the new versions "
                "may have changed what runs, or the code did"
            )
        else:
            line = (
                f"{DEPENDENCIES}: the packages changed ({changed}); the step's counts were not compared on both "
                "sides, so whether the code does the same work is not known"
            )
    return [*findings, Finding(DEPENDENCIES, line, tuple(evidence))]


def _utilisation(trials: Sequence[TrialResult], th: DiagnosisThresholds) -> list[Finding]:
    gpu = [s.gpu_util_percent for t in trials if (s := t.system) and s.gpu_util_percent]
    if not gpu:
        return []
    p95 = statistics.median(g.p95 for g in gpu)
    mean = statistics.median(g.mean for g in gpu)
    cores = [s.busiest_core_percent.p95 for t in trials if (s := t.system) and s.busiest_core_percent]
    busiest = statistics.median(cores) if cores else None
    evidence = (f"GPU utilisation mean {mean:.0f}%, p95 {p95:.0f}%", f"busiest CPU core p95 {busiest or 0:.0f}%")
    if mean < th.gpu_idle_percent and busiest is not None and busiest > th.cpu_busy_percent:
        line = f"CPU bottleneck: the GPU is idle ({mean:.0f}% on average) while a CPU core is at {busiest:.0f}%"
        return [Finding("CPU bottleneck", line, evidence)]
    if p95 < th.gpu_low_percent:
        line = f"low accelerator utilisation: GPU utilisation p95 {p95:.0f}% (under {th.gpu_low_percent:g}%)"
        return [Finding("low accelerator utilisation", line, evidence)]
    return []


def _growth(values: Sequence[int]) -> tuple[float, float]:
    """Least-squares bytes per step and the correlation of memory with the step number."""
    steps = list(range(len(values)))
    if statistics.pstdev(values) == 0:
        return 0.0, 0.0
    slope = statistics.linear_regression(steps, values).slope
    return slope, statistics.correlation(steps, values)


def _numerics(reason: str) -> Finding | None:
    text = reason.lower()
    if "loss is nan" not in text and "loss is inf" not in text and "loss is -inf" not in text:
        return None
    return Finding("numerics", "numerics: the loss was not finite", (reason,))


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


def _per_step(p: PhaseChange) -> str:
    """`data wait: 0.20 -> 9.80 ms per step`."""
    was = "" if p.baseline_s is None else f"{1000 * p.baseline_s:.2f} -> "
    return f"{PHASE_NAMES.get(p.phase, p.phase)}: {was}{1000 * p.current_s:.2f} ms per step"


def grown_operators(
    baseline: Sequence[OperatorRow], current: Sequence[OperatorRow], limit: int = 5
) -> list[tuple[str, float, float]]:
    """Operators whose self time per step grew most: (name, baseline s, current s), largest growth first."""
    before = {row.name: row.self_s for row in baseline}
    growth = [(row.name, before.get(row.name, 0.0), row.self_s) for row in current]
    growth = [g for g in growth if g[2] > g[1]]
    growth.sort(key=lambda g: g[2] - g[1], reverse=True)
    return growth[:limit]
