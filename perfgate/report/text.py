"""The terminal report: a table per workload, the lab reading, and warnings; it reads a judged check
(`records.judgement.Judgement`) or a lab run's reading, and judges nothing itself."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from perfgate.errors import EXIT_MEANINGS
from perfgate.formatting import (
    format_bytes,
    format_count,
    format_names,
    format_p_value,
    format_pct,
    format_signed,
    format_signed_pct,
)
from perfgate.outcome import Status
from perfgate.project import REPORT
from perfgate.records.baselines import BaselineEntry, BaselineStore, StoredUpdate
from perfgate.records.comparisons import SLOW_FACTOR, ThroughputComparison
from perfgate.records.counts import COUNT_HEADERS, COUNTED, CountRow, Outcome
from perfgate.records.diagnoses import Diagnosis, PhaseChange
from perfgate.records.judgement import Judgement, RunReading, WorkloadReading
from perfgate.records.micro import MICRO_FILE, MicroBenchmark
from perfgate.records.reading import Utilisation, WorkloadUtilisation, format_flops, format_share
from perfgate.records.results import ConfigResult, MicroSection, RunResult, TrialResult, WorkloadResult
from perfgate.records.shapes import Distributed, GpuFacts
from perfgate.records.summary import PHASES, RankSummary, summarize_ranks
from perfgate.records.verdicts import ConfigVerdict, GateResult, WorkloadVerdict
from perfgate.report.json import overall_exit_code, overall_verdict_code

PHASE_HEADERS = {"data_wait": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd", "optimizer": "opt"}
MEMORY_NOTES = {
    "cpu-job-above-setup": (
        "peak mem = the job's: the training process's peak resident memory above its level after setup, plus its "
        "DataLoader workers' peak unique memory"
    ),
    "cpu-job-above-setup-lifetime-peak": (
        "peak mem = the job's: the training process's lifetime peak resident memory above its level after setup, "
        "plus its DataLoader workers' peak unique memory"
    ),
    "cpu-rss-above-setup": "peak mem = the trial process's peak resident memory above its level after setup",
    "cpu-rss-above-setup-lifetime-peak": (
        "peak mem = the trial process's lifetime peak resident memory above its level after setup"
    ),
    "cuda-max-allocated": "peak mem = torch.cuda.max_memory_allocated (reserved by the caching allocator in brackets)",
}


def format_run(reading: RunReading) -> str:
    """The whole report of a measured run: one block per workload, with the lab's reading of it."""
    return "\n\n".join(format_workload(w, reading.of(w.name)) for w in reading.run.workloads) + "\n"


def format_workload(workload: WorkloadResult, read: WorkloadReading) -> str:
    """One workload's table, the lab reading and any warnings."""
    if workload.counted_only:
        return format_counted_workload(workload)
    lines = [f"{workload.name}  ({lab_settings_text(workload)})"]
    use = read.utilisation
    rows = [lab_header(use)]
    for name, config in workload.configs.items():
        cells = lab_cells(config, use)
        rows.append([name, _FAILED] if cells is None else [name, *cells])
    lines.extend(_table(rows))
    lines.append(f"  {lab_footnote(workload)}")
    for name, config in workload.configs.items():
        lines.extend(format_ranks(name, config.trials))
    lines.extend(f"  {line}" for line in read.reading.lines)
    lines.extend(f"  ! {message}" for message in lab_failures(workload) + workload.warnings)
    lines.extend(f"  ! {note}" for note in throttled_trials(workload))
    return "\n".join(lines)


_FAILED = "failed (reason below)"


def format_counted_workload(workload: WorkloadResult) -> str:
    """A `--counts-only` workload: each config's exact counts (a config a row, a count a column), what counting
    took, and where torch.compile's graphs broke."""
    s = workload.settings
    lines = [
        f"{workload.name}  ({workload.reference}; batch {s.batch_size}, counted after {s.warmup_steps} warm-up "
        f"steps, {s.device})"
    ]
    counted = {
        name: next((t.counts for t in c.trials if t.ok and t.counts), None) for name, c in workload.configs.items()
    }
    columns = [
        name for name in COUNTED if any(c is not None and getattr(c, name) is not None for c in counted.values())
    ]
    rows = [["config", *(COUNT_HEADERS[name] for name in columns), "counting"]]
    for name, counts in counted.items():
        if counts is None:
            rows.append([name, _FAILED])
            continue
        cells = [format_count(column, getattr(counts, column)) for column in columns]
        rows.append([name, *cells, f"{counts.counting_s:.1f} s"])
    lines.extend(_table(rows))
    lines.append("  counts: exact, from one untimed step after the warm-up steps; nothing timed (--counts-only)")
    for name, counts in counted.items():
        lines.extend(f"  ! {name} graph break at {place}" for place in (counts.break_places if counts else []))
    lines.extend(f"  ! {message}" for message in lab_failures(workload, each_trial=True) + workload.warnings)
    return "\n".join(lines)


def flops_cell(use: Utilisation | None) -> str:
    """The lab table's FLOP/s cell: `376 TFLOP/s (38%)`, `12.3 GFLOP/s` without a peak, `-` where not counted."""
    if use is None:
        return "-"
    mfu = use.mfu
    return format_flops(use.achieved_flops_per_s) + ("" if mfu is None else f" ({format_share(mfu)})")


LAB_HEADER = ["config", "samples/s", "step p50/p95/p99 ms", *(PHASE_HEADERS[p] for p in PHASES)]
LAB_HEADER += ["peak mem", "compile", "trials"]
FLOPS_HEADER = "FLOP/s (MFU)"  # after samples/s, where a config's FLOPs were counted


def lab_header(use: WorkloadUtilisation | None = None) -> list[str]:
    """The lab table's header: `LAB_HEADER`, with the FLOP/s column where the workload's FLOPs were counted."""
    return LAB_HEADER if use is None else [*LAB_HEADER[:2], FLOPS_HEADER, *LAB_HEADER[2:]]


def lab_settings_text(workload: WorkloadResult) -> str:
    """How the workload was measured, in one line: `lm.py:lm; batch 8, 20 timed steps after 3 warm-up, ...`."""
    s = workload.settings
    return (
        f"{workload.reference}; batch {s.batch_size}"
        + (f" x {s.accumulation} micro-batches" if s.accumulation else "")
        + f", {s.steps} timed steps after {s.warmup_steps} warm-up, "
        f"{s.trials} trial{'s' if s.trials != 1 else ''}, {s.threads} thread{'s' if s.threads != 1 else ''}, "
        f"{s.device}" + (f", {s.nproc} ranks" if s.nproc else "")
    )


def lab_cells(config: ConfigResult, use: WorkloadUtilisation | None = None) -> list[str] | None:
    """One config's row of the lab's table after its name (`lab_header(use)`), as both reports show it; None when
    no trial produced a measurement."""
    summary = config.summary
    if summary is None:
        return None
    sps = summary.samples_per_sec
    peak = format_bytes(summary.peak_bytes)
    if summary.reserved_bytes is not None:
        peak += f" ({format_bytes(summary.reserved_bytes)})"
    return [
        f"{sps.median:,.1f} ±{sps.spread_pct:.1f}%" if sps.n > 1 else f"{sps.median:,.1f}",
        *([] if use is None else [flops_cell(use.configs.get(config.config))]),
        "/".join(f"{1000 * v:.1f}" for v in (summary.step_p50_s, summary.step_p95_s, summary.step_p99_s)),
        *(f"{100 * summary.phase_share[p]:.0f}%" for p in PHASES),
        peak,
        "-" if summary.compile_s is None else f"{summary.compile_s:.1f} s",
        f"{summary.trials_ok}/{summary.trials_ok + summary.trials_failed}",
    ]


def lab_footnote(workload: WorkloadResult) -> str:
    """What the lab's columns mean, peak memory as this workload's trials measured it."""
    kinds = {str(t.memory.kind if t.memory else None) for c in workload.configs.values() for t in c.trials if t.ok}
    return "samples/s: median over trials ± half their range; phases: share of step time; " + "; ".join(
        sorted(MEMORY_NOTES[k] for k in kinds if k in MEMORY_NOTES)
    )


def lab_failures(workload: WorkloadResult, *, each_trial: bool = False) -> list[str]:
    """Each config that produced no measurement, and each failed trial of the others, with the reason;
    `each_trial` (a `--counts-only` workload, whose configs have no timed summary): every failed trial."""
    failures = []
    for name, config in workload.configs.items():
        if config.summary is None and not each_trial:
            failures.append(f"{name} failed: {config.failure_reason}")
        else:
            failures.extend(f"{name} trial {t.trial + 1} failed: {t.failure}" for t in config.trials if not t.ok)
    return failures


def throttle_note(gpu: GpuFacts) -> str:
    """What slowed a throttled trial's GPU, in one line: `throttled (power cap) in 40% of samples; SM clock
    1410-1980 MHz; up to 83 C, 300 W of 300 W`."""
    text = f"throttled ({', '.join(gpu.slowing_reasons)}) in {gpu.slowed_share:.0%} of samples"
    if gpu.sm_clock_min_mhz is not None and gpu.sm_clock_max_mhz is not None:
        text += f"; SM clock {gpu.sm_clock_min_mhz:.0f}-{gpu.sm_clock_max_mhz:.0f} MHz"
        if gpu.sm_clock_limit_mhz is not None:
            text += f" of {gpu.sm_clock_limit_mhz:.0f}"
    heat = [] if gpu.temperature_max_c is None else [f"{gpu.temperature_max_c:.0f} C"]
    if gpu.power_max_w is not None:
        limit = "" if gpu.power_limit_w is None else f" of {gpu.power_limit_w:.0f} W"
        heat.append(f"{gpu.power_max_w:.0f} W{limit}")
    return text + (f"; up to {', '.join(heat)}" if heat else "")


def throttled_trials(workload: WorkloadResult, side: str | None = None) -> list[str]:
    """Each trial whose GPU ran slower than it could in a meaningful share of its samples (`GpuFacts.throttled`),
    in one line: `fp32 trial 3: throttled (power cap) in 40% of samples; ...`; `side` (base, head) names the
    side of a paired check. The trials stay in the figures: throttling is the runner's noise, never dropped."""
    label = "" if side is None else f" {side}"
    return [
        f"{name}{label} trial {t.trial + 1}: {throttle_note(t.system.gpu)}"
        for name, config in workload.configs.items()
        for t in config.trials
        if t.ok and t.system is not None and t.system.gpu is not None and t.system.gpu.throttled
    ]


def gate_throttled_trials(workload: str, result: GateResult) -> list[str]:
    """`throttled_trials` of `workload` on every side a check measured: base and head in a paired check."""
    sides: list[tuple[str | None, RunResult]] = []
    if result.against is not None:
        sides.append(("base", result.against.base))
    if result.run is not None:
        sides.append(("head" if result.against is not None else None, result.run))
    return [
        note
        for side, run in sides
        for measured in run.workloads
        if measured.name == workload
        for note in throttled_trials(measured, side)
    ]


def ranked_jobs(trials: Sequence[TrialResult]) -> tuple[list[Distributed], list[RankSummary]]:
    """A config's data-parallel jobs (its good trials') and each rank's summary over them; empty for one process."""
    jobs = [t.distributed for t in trials if t.ok and t.distributed is not None]
    return jobs, summarize_ranks(jobs)


def rank_cells(r: RankSummary) -> list[str]:
    """One rank's row, as both reports show it: rank, samples/s, step p50, each phase, the all-reduce in flight
    and backward's wait for it, in ms per timed step."""
    return [
        str(r.rank),
        f"{r.samples_per_sec:,.1f}",
        f"{1000 * r.step_p50_s:.1f}",
        *(f"{1000 * r.phase_s[p]:.1f}" for p in PHASES),
        "-" if r.comm_s is None else f"{1000 * r.comm_s:.1f}",
        "-" if r.comm_exposed_s is None else f"{1000 * r.comm_exposed_s:.1f}",
    ]


def format_ranks(config: str, trials: Sequence[TrialResult]) -> list[str]:
    """A data-parallel config's per-rank table (nothing for one process): each rank's samples/s, step, phases
    in ms per step, the gradient all-reduce in flight and backward's wait for it, and peak memory."""
    jobs, ranks = ranked_jobs(trials)
    if not ranks:
        return []
    job = jobs[0]
    header = ["rank", "samples/s", "step p50 ms", *(f"{PHASE_HEADERS[p]} ms" for p in PHASES)]
    header += ["all-reduce ms", "waited ms", "overlap", "peak mem"]
    rows = [header]
    for r in ranks:
        overlap = "-" if r.overlap is None else f"{r.overlap:.0%}"
        rows.append([*rank_cells(r), overlap, format_bytes(r.peak_bytes)])
    fastest = max(ranks, key=lambda r: r.samples_per_sec)
    slowest = min(ranks, key=lambda r: r.samples_per_sec)
    spread = 1 - slowest.samples_per_sec / fastest.samples_per_sec if fastest.samples_per_sec else 0.0
    steps = statistics.fmean(r.step_p50_s for r in ranks)
    comm = [r.comm_s for r in ranks if r.comm_s is not None]
    share = f"; the all-reduce in flight {statistics.fmean(comm) / steps:.0%} of a step" if comm and steps else ""
    carried = [r.comm_bytes for t in jobs for r in t.ranks if r.comm_bytes]
    if carried:
        buckets = max(r.buckets or 0 for t in jobs for r in t.ranks)
        share += f", carrying {max(carried) / 2**20:.1f} MiB of gradient in {buckets} bucket{'s' * (buckets != 1)}"
    lines = [f"  {config}: {job.nproc} ranks ({job.backend}, {job.wrapper}), per rank, ms per timed step:"]
    lines.extend(f"  {line}" for line in _table(rows))
    lines.append(
        f"    samples/s: the job's is all ranks' samples over the slowest rank's time; rank {slowest.rank} is "
        f"{spread:.1%} slower than rank {fastest.rank}{share}; waited: backward waiting for the all-reduce "
        "after its last bucket"
    )
    if (unused := unused_parameters_note(jobs)) is not None:
        lines.append(f"    {unused}")
    return lines


def unused_parameters_note(jobs: Sequence[Distributed]) -> str | None:
    """The parameters a data-parallel model's loss does not use, as both reports say it: how many, the first few,
    and what DDP does about them at what cost; None where there are none."""
    unused = next((job.unused_parameters for job in jobs if job.unused_parameters is not None), None)
    if unused is None:
        return None
    count = len(unused.names)
    text = f"unused parameters: {count} get no gradient from the loss ({format_names(unused.names)})"
    if unused.find_unused_parameters:
        return (
            f"{text}; DDP ran with find_unused_parameters=True, as training this model needs: it walks the step's "
            f"autograd graph ({unused.autograd_nodes} nodes) from the outputs every step to find them, a cost "
            "inside each step's forward (not timed apart), and the all-reduce still carries their gradients"
        )
    if unused.find_unused_parameters is False:
        return f"{text}; DDP ran without find_unused_parameters (the workload's wrap)"
    return f"{text}; the model is not DistributedDataParallel (the workload's wrap)"


def _table(rows: list[list[str]]) -> list[str]:
    full = [row for row in rows if len(row) == len(rows[0])]
    widths = [max(len(row[i]) for row in full) for i in range(len(rows[0]))]
    out = []
    for index, row in enumerate(rows):
        if len(row) != len(widths):  # a failed config: its name and a note, no columns
            out.append(f"  {row[0].ljust(widths[0])}  {row[1]}")
            continue
        cells = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  " + "  ".join(cells).rstrip())
        if index == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    return out


_STATUS_LABELS = {
    "regression": "REGRESSION",
    "accepted": "accepted",
    "failed": "FAILED",
    "improvement": "improvement",
    "no change": "no change",
    "inconclusive": "inconclusive",
    "not comparable": "NOT COMPARABLE",
    "no baseline": "NO BASELINE",
}


def format_gate(judgement: Judgement, *, command: str, exits: bool = True) -> str:
    """The gate's report: per workload a table of baseline against current, any diagnosis, the
    pytest-benchmark tests' verdicts (from `pytest --perfgate`), the verdict line, which names
    `command` (`perfgate compare`) and, when the command `exits` with the verdict's code, that code."""
    result, diagnoses, micro = judgement.result, judgement.diagnoses, judgement.micro
    blocks = [f"compared with: {result.mode}" + (f"\n! {result.caveat}" if result.caveat else "")]
    if (environment := environments_text(result)) is not None:
        blocks[0] += f"\nenvironment: {environment}"
    if result.settings.accepted:
        blocks[0] += f"\nslowdowns accepted: {'; '.join(a.shown for a in result.settings.accepted)}"
    blocks += [_format_gate_workload(w, judgement) for w in result.workloads]
    if diagnoses:
        blocks.append(format_diagnoses(diagnoses).rstrip("\n"))
    if micro is not None and micro.benchmarks:
        blocks.append(f"pytest-benchmark tests, compared with: {micro.mode}\n" + "\n".join(format_micro(micro)))
    return "\n\n".join(blocks + [format_gate_summary(result, micro, command=command, exits=exits)]) + "\n"


def environments_text(result: GateResult) -> str | None:
    """Where a paired check's two sides ran, in words (`Environments.describe`): one shared environment or the
    base in its own, and the packages that differ; None where the check was not paired or its results were
    written before the packages were recorded."""
    against = result.against
    if against is None or against.environments is None:
        return None
    return against.environments.describe()


def verdict_counts(result: GateResult, micro: MicroSection | None = None) -> list[str]:
    """`2 no change`, `1 regression (lm-small bf16)`: each status that occurs, naming what needs a look."""
    parts = []
    for status in Status:
        names = [f"{v.workload} {v.config}" for v in result.verdicts if v.status == status]
        names += [w.workload for w in result.workloads if w.problem_status == status and not w.new]
        names += [b.name for b in (micro.benchmarks if micro else []) if b.status == status]
        if names:
            listed = f" ({', '.join(names)})" if status not in (Status.NO_CHANGE, Status.IMPROVEMENT) else ""
            parts.append(f"{len(names)} {status.value}{listed}")
    new = [w.workload for w in result.workloads if w.new]
    if new:
        parts.append(f"{len(new)} new ({', '.join(new)})")
    return parts


def format_gate_summary(
    result: GateResult, micro: MicroSection | None = None, *, command: str, exits: bool = True
) -> str:
    """One line for the build log, from `command`: what failed or stayed open, and the exit code; a command
    that does not exit with it (`perfgate report`) gives it as the check's verdict."""
    parts = verdict_counts(result, micro)
    code, verdict = overall_exit_code(result, micro), overall_verdict_code(result, micro)
    meaning = EXIT_MEANINGS[code]
    outcome = f"Exit {code} ({meaning})." if exits else f"The check's verdict: {meaning} (its exit code {code})."
    if verdict != code:  # warn-only passed a failing verdict: say what it was
        said = f"the verdict ({EXIT_MEANINGS[verdict]}, exit {verdict}) does not fail the build"
        outcome = f"{outcome[:-1]}: warn-only mode, {said}."
    line = f"{command}: {'; '.join(parts) or 'nothing compared'}. {outcome}"
    if (
        code == 0
        and any(v.status == Status.INCONCLUSIVE for v in result.verdicts)
        or (code == 0 and micro is not None and any(b.status == Status.INCONCLUSIVE for b in micro.benchmarks))
    ):
        line += " Inconclusive verdicts do not fail the build (--fail-on-inconclusive makes them)."
    if result.stopped_because and any(v.status == Status.INCONCLUSIVE for v in result.verdicts):
        line += f" Extra trials stopped: {result.stopped_because}."
    return line


def _format_gate_workload(workload: WorkloadVerdict, judgement: Judgement) -> str:
    result = judgement.result
    paired = result.against is not None
    lines = [f"gate: {workload.workload}" + ("" if paired else _baseline_note(workload))]
    if workload.problem:
        lines.append(f"  ! {workload.problem}")
        return "\n".join(lines)
    if all(v.throughput is None for v in workload.configs) and any(v.counts for v in workload.configs):
        lines.extend(
            f"  {'!' if v.status != Status.NO_CHANGE else ' '} {v.config}: {v.reason}" for v in workload.configs
        )
        lines.extend(format_counts(workload))  # a --counts-only check: the counts decide
        return "\n".join(lines)
    sides = ["base s/s", "head s/s"] if paired else ["baseline s/s", "current s/s"]
    rows = [["config", *sides, "ratio", "CI", "p", "machine", "peak mem", "pairs" if paired else "trials", "verdict"]]
    for verdict in workload.configs:
        t, m = verdict.throughput, verdict.memory
        if t is None or m is None:
            rows.append([verdict.config, *["-"] * 8, _STATUS_LABELS[verdict.status.value]])
            continue
        memory = "-" if m.change is None else format_signed_pct(m.change)
        rows.append(
            [
                verdict.config,
                f"{t.baseline_median:,.1f}",
                f"{t.candidate_median:,.1f}",
                f"{t.ratio:.3f}x",
                "-" if math.isnan(t.ci_low) else f"{t.ci_low:.3f}-{t.ci_high:.3f}",
                "-" if math.isnan(t.p_slower) else format_p_value(min(t.p_slower, t.p_faster)),
                "-" if verdict.machine is None else f"{verdict.machine.ratio:.2f}x",
                memory,
                str(t.n_candidate) if paired else f"{t.n_baseline}+{t.n_candidate}",
                _STATUS_LABELS[verdict.status.value],
            ]
        )
    lines.extend(_table(rows))
    limits = sorted({(v.thresholds.throughput, v.thresholds.memory) for v in workload.configs})
    limit_text = ", ".join(f"{limits_text(a, judgement.bound(a))}, peak memory {100 * b:g}%" for a, b in limits)
    if paired:
        explained = (
            "samples/s: medians over each side's trials; ratio: geometric mean of the per-pair ratios head/base "
            "(each pair measured side by side, so the machine's drift drops out)"
        )
    else:
        explained = (
            "samples/s: medians over trials; ratio: of geometric means, current/baseline; machine: the same for "
            "perfgate's fixed probe work, how fast the machine itself ran (verdicts need the raw and the "
            "machine-adjusted ratio to agree)"
        )
    lines.append(
        f"  {explained}; thresholds: {limit_text}; {family_text(result)}, one-sided over all looks; "
        f"CI: {confidence_text(workload)}"
    )
    for verdict in workload.configs:
        if verdict.status != Status.NO_CHANGE or verdict.evidence:  # what changed is shown whatever the verdict
            lines.append(f"  {'!' if verdict.status != Status.IMPROVEMENT else '+'} {verdict.config}: {verdict.reason}")
    lines.extend(format_counts(workload))
    lines.extend(f"  ! {note}" for note in gate_throttled_trials(workload.workload, result))
    return "\n".join(lines)


def family_text(result: GateResult) -> str:
    """Over what the check's alpha was one false-alarm rate: the check's comparisons, or a pytest session's
    comparisons in all of its checks (`judge.family`)."""
    session = result.session
    if session is None:
        return f"alpha {result.settings.alpha:g} for the whole check ({result.comparisons} comparisons, Holm)"
    return f"alpha {session.alpha:g} for the whole session, over {session.described}"


def count_columns(workload: WorkloadVerdict) -> list[str]:
    """The counts any config of the workload has, in `records.counts.COUNTED` order (the counts table's columns)."""
    present = {row.name for v in workload.configs if v.counts is not None for row in v.counts.rows}
    return [name for name in COUNTED if name in present]


def count_cell(row: CountRow | None) -> str:
    """One count of one config, as both reports show it: the value where unchanged, else `base -> head` and
    the change with what it did against its tolerance (`1.76e8 -> 2.43e8 (+38.0%, fails)`)."""
    if row is None:
        return "-"
    base, head = format_count(row.name, row.base), format_count(row.name, row.head)
    if row.outcome == Outcome.SAME:
        return head
    if row.outcome == Outcome.NOT_COMPARED:
        if row.base is None or row.head is None:
            return f"{head if row.base is None else base} (not compared)"
        return f"{base} -> {head} (not compared)"
    said = {
        Outcome.WITHIN: "within",
        Outcome.GREW: "fails" if row.gated else "reported",
        Outcome.ACCEPTED: "accepted",
    }.get(row.outcome)
    return f"{base} -> {head} ({row.change_text}{f', {said}' if said else ''})"


def counts_footnote(workload: WorkloadVerdict) -> str:
    """What the counts table shows, with each count's tolerance."""
    tolerances = {
        row.name: row.tolerance_text for v in workload.configs if v.counts is not None for row in v.counts.rows
    }
    shown = ", ".join(f"{COUNT_HEADERS[name]} {tolerances[name]}" for name in COUNTED if name in tolerances)
    reported = "; report: shown, never failing" if REPORT in tolerances.values() else ""
    return (
        "counts: exact, from one untimed step (no statistics); only growth beyond its tolerance fails a count "
        f"({shown}{reported})"
    )


def counts_notes(workload: WorkloadVerdict) -> list[str]:
    """Each config's counts that grew and pass (accepted, reported) or were not compared, and why."""
    return [f"{v.config} counts: {note}" for v in workload.configs if v.counts is not None for note in v.counts.notes]


def format_counts(workload: WorkloadVerdict) -> list[str]:
    """The workload's counts table (a config a row, a count a column), its footnote and notes; nothing where no
    config was counted."""
    columns = count_columns(workload)
    if not columns:
        return []
    rows = [["counts", *(COUNT_HEADERS[name] for name in columns)]]
    for v in workload.configs:
        if v.counts is not None:
            rows.append([v.config, *(count_cell(v.counts.row(name)) for name in columns)])
    lines = _table(rows)
    lines.append(f"  {counts_footnote(workload)}")
    lines.extend(f"  ! {note}" for note in counts_notes(workload))
    return lines


def confidence_text(workload: WorkloadVerdict) -> str:
    """The intervals' level: 95% for a single look; in a sequential check, the boundary's level at the look that
    ended it (docs/statistics.md, "The boundary level"), high at early looks and lower at later ones, while alpha
    bounds its false alarms over every look."""
    levels = sorted({round(100 * v.throughput.confidence, 1) for v in workload.configs if v.throughput is not None})
    if not levels or levels == [95.0]:
        return "95%"
    shown = (
        "-".join(f"{level:g}%" for level in (levels[0], levels[-1]) if level) if len(levels) > 1 else f"{levels[0]:g}%"
    )
    return f"{shown} (the sequential test's level at its last look; alpha, not this level, bounds false alarms)"


def _baseline_note(workload: WorkloadVerdict) -> str:
    entry = workload.baseline
    if entry is None:
        return ""
    commit = f"commit {entry.commit[:10]}" if entry.commit else "no git commit"
    return f"  (baseline measured {entry.measured_at} at {commit}; {entry.key})"


def format_updates(updates: list[StoredUpdate], store: BaselineStore) -> str:
    """What `perfgate update` changed, one block per workload file."""
    lines = []
    for update in updates:
        if update.stored is None:
            lines.append(f"{update.measured.workload}: every config failed; baseline not written")
        else:
            path = store.path_for(update.measured.workload)
            lines.append(format_update(update.measured, update.previous, update.stored, path))
    return "\n".join(lines) + "\n"


def format_update(entry: BaselineEntry, previous: BaselineEntry | None, stored: BaselineEntry, path: Path) -> str:
    """What `perfgate update` changed in one workload's baseline file (`entry` is what was measured)."""
    if previous is None:
        head = f"{path}: new baseline for {entry.workload} on {entry.key}"
    else:
        head = f"{path}: updated {entry.workload} on {entry.key} (was measured {previous.measured_at})"
    lines = [head]
    for name, config in entry.configs.items():
        new_sps = statistics.median(config.samples_per_sec)
        new_peak = int(statistics.median(config.peak_bytes))
        old = previous.configs.get(name) if previous else None
        if old is None:
            lines.append(f"  {name}: {new_sps:,.1f} samples/s, peak mem {format_bytes(new_peak)} (new)")
        else:
            old_sps = statistics.median(old.samples_per_sec)
            old_peak = int(statistics.median(old.peak_bytes))
            lines.append(
                f"  {name}: {old_sps:,.1f} -> {new_sps:,.1f} samples/s ({format_signed_pct(new_sps / old_sps - 1)}), "
                f"peak mem {format_bytes(old_peak)} -> {format_bytes(new_peak)}"
            )
        middle = statistics.median(config.samples_per_sec)
        slow = sum(v * SLOW_FACTOR <= middle for v in config.samples_per_sec)
        if slow:
            lines.append(
                f"  ! {name}: {slow} trial{'s' if slow > 1 else ''} {SLOW_FACTOR:g}x or more slower than the "
                "median (another job on the machine?): checks count every trial, so such a baseline widens their "
                "intervals; rerunning perfgate update when the machine is quieter gives a better baseline"
            )
    dropped = sorted(set(previous.configs) - set(stored.configs)) if previous else []
    if dropped:
        lines.append(f"  removed: {', '.join(dropped)} (not measured with these settings)")
    return "\n".join(lines)


def format_pytest_summary(
    judgement: Judgement,
    *,
    updates: Sequence[StoredUpdate],
    store_dir: Path,
    micro_updates: Sequence[tuple[MicroBenchmark, MicroBenchmark | None]] = (),
) -> str:
    """One summary for a pytest session, judged once by the session (`judgement`): every check's verdicts in one
    table, the lab reading of each run, the checks' diagnoses, the pytest-benchmark tests' verdicts (paired: from
    session pairs against a git ref, base and head, not from stored baselines); and what was written."""
    gates, diagnoses, micro, problems = judgement.checks, judgement.diagnoses, judgement.micro, judgement.problems
    lines = [f"environment: {text}" for text in dict.fromkeys(filter(None, map(environments_text, gates)))]
    paired = bool(gates) and all(g.against is not None for g in gates)
    sides = ["base s/s", "head s/s"] if paired else ["baseline s/s", "current s/s"]
    rows = [["workload", "config", *sides, "ratio (CI)", "peak mem", "verdict"]]
    notes = []
    for gate in gates:
        for workload in gate.workloads:
            if workload.problem:
                status = workload.problem_status or Status.NO_BASELINE
                label = "new" if workload.new else _STATUS_LABELS[status.value]
                rows.append([workload.workload, "-", "-", "-", "-", "-", label])
                notes.append(f"! {workload.workload}: {workload.problem}")
            for verdict in workload.configs:
                t, m = verdict.throughput, verdict.memory
                rows.append(
                    [
                        verdict.workload,
                        verdict.config,
                        "-" if t is None else f"{t.baseline_median:,.1f}",
                        "-" if t is None else f"{t.candidate_median:,.1f}",
                        "-" if t is None else _ratio_cell(t),
                        "-" if m is None or m.change is None else format_signed_pct(m.change),
                        _STATUS_LABELS[verdict.status.value],
                    ]
                )
                if verdict.status != Status.NO_CHANGE:
                    notes.append(
                        f"{'+' if verdict.status == Status.IMPROVEMENT else '!'} {_name(verdict)}: {verdict.reason}"
                    )
    if len(rows) > 1:
        lines.extend(_table(rows))
        lines.extend(f"  {note}" for note in notes)
    for run in judgement.runs:
        for measured in run.run.workloads:
            lines.extend(f"  lab, {measured.name}: {line}" for line in run.of(measured.name).reading.lines)
    if diagnoses:
        lines.append(format_diagnoses(diagnoses).rstrip("\n"))
    if updates:
        lines.append(format_updates(list(updates), BaselineStore(store_dir)).rstrip("\n"))
    if micro is not None and micro.benchmarks:
        lines.extend(format_micro(micro))
    for timed, previous in micro_updates:
        new = statistics.median(timed.block_calls_per_sec)
        change = ""
        if previous is not None:
            old = statistics.median(previous.block_calls_per_sec)
            change = f"{old:,.4g} -> "
        lines.append(
            f"{Path(store_dir) / MICRO_FILE}: {timed.name}: {change}{new:,.4g} calls/s "
            f"({timed.rounds} rounds){' (new)' if previous is None else ''}"
        )
    lines.extend(f"! {problem}" for problem in problems)
    return "\n".join(lines) + "\n" if lines else ""


def format_micro(section: MicroSection) -> list[str]:
    """The pytest-benchmark tests' table (calls/s of the median round) and a line per verdict that needs a look."""
    paired = section.paired
    columns = ["base calls/s", "head calls/s"] if paired else ["baseline calls/s", "current calls/s"]
    rows = [["pytest-benchmark test", *columns, "ratio (CI)", "machine", "verdict"]]
    for b in section.benchmarks:
        rows.append(
            [
                b.name,
                "-" if b.baseline_calls_per_sec is None else f"{b.baseline_calls_per_sec:,.4g}",
                "-" if b.current_calls_per_sec is None else f"{b.current_calls_per_sec:,.4g}",
                "-" if b.ratio is None else _interval_cell(b.ratio, b.ci_low, b.ci_high),
                "-" if b.machine_ratio is None else f"{b.machine_ratio:.2f}x",
                "new" if paired and b.status == Status.NO_BASELINE else _STATUS_LABELS[b.status],
            ]
        )
    lines = _table(rows)
    lines.extend(f"  ! {b.name}: {b.reason}" for b in section.benchmarks if b.status != Status.NO_CHANGE)
    return lines


def limits_text(threshold: float, bound: float) -> str:
    """A throughput threshold in its one unit, with the samples/s `bound` it sets (`Judgement.bound`): `5% on time
    per sample (samples/s -4.8%)`."""
    return f"{100 * threshold:g}% on time per sample (samples/s {format_signed_pct(bound - 1)})"


def _interval_cell(ratio: float, low: float | None, high: float | None) -> str:
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return f"{ratio:.3f}x"
    return f"{ratio:.3f}x ({low:.3f}-{high:.3f})"


def _ratio_cell(t: ThroughputComparison) -> str:
    return _interval_cell(t.ratio, t.ci_low, t.ci_high)


def _name(verdict: ConfigVerdict) -> str:
    return f"{verdict.workload} {verdict.config}"


def phase_cells(d: Diagnosis, p: PhaseChange) -> list[str]:
    """Baseline, current, change (ms per step) and share of the step's change, for the phase tables."""
    share = d.share(p)
    return [
        "-" if p.baseline_s is None else f"{1000 * p.baseline_s:.2f}",
        f"{1000 * p.current_s:.2f}",
        "-" if p.baseline_s is None else format_signed(1000 * p.change_s, 2),
        "-" if share is None else format_pct(share),
    ]


def compile_line(times: tuple[float | None, float]) -> str:
    """`compile: 21.0 -> 24.5 s (once per process, outside the step times)`."""
    before, now = times
    was = "" if before is None else f"{before:.1f} -> "
    return f"compile: {was}{now:.1f} s (once per process, outside the step times)"


def format_diagnoses(diagnoses: Sequence[Diagnosis]) -> str:
    """The Diagnosis section: per config, the suspect, each finding with its evidence, the phase table."""
    if not diagnoses:
        return ""
    lines = ["diagnosis:"]
    for d in diagnoses:
        lines.append(f"  {d.workload} {d.config}: suspect {d.headline}")
        for finding in d.findings:
            lines.append(f"    - {finding.line}")
            lines.extend(f"        {e}" for e in finding.evidence)
        if d.phases:
            rows = [["phase", "baseline ms/step", "current ms/step", "change", "share of change"]]
            rows += [[p.phase, *phase_cells(d, p)] for p in d.phases]
            lines.extend("  " + line for line in _table(rows))
        if d.compile_s is not None:
            lines.append(f"  {compile_line(d.compile_s)}")
    return "\n".join(lines) + "\n"
