"""The terminal report: a table per workload, the lab reading, and warnings."""

from __future__ import annotations

from perfgate.lab import read_lab
from perfgate.results import RunResult, WorkloadResult
from perfgate.summary import PHASES

PHASE_HEADERS = {"data_wait": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd", "optimizer": "opt"}
MEMORY_NOTES = {
    "cpu-rss-above-setup": "peak mem = the trial process's peak resident memory above its level after setup",
    "cpu-rss-above-setup-lifetime-peak": (
        "peak mem = the trial process's lifetime peak resident memory above its level after setup"
    ),
    "cuda-max-allocated": "peak mem = torch.cuda.max_memory_allocated (reserved by the caching allocator in brackets)",
}


def format_bytes(count: int | None) -> str:
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_run(result: RunResult) -> str:
    """The whole report: one block per workload."""
    return "\n\n".join(format_workload(w) for w in result.workloads) + "\n"


def format_workload(workload: WorkloadResult) -> str:
    """One workload's table, the lab reading and any warnings."""
    s = workload.settings
    lines = [
        f"{workload.name}  ({workload.reference}; batch {s['batch_size']}, {s['steps']} timed steps after "
        f"{s['warmup_steps']} warm-up, {s['trials']} trials, {s['threads']} threads, {s['device']})"
    ]
    header = [
        "config",
        "samples/s",
        "step p50/p95/p99 ms",
        *(PHASE_HEADERS[p] for p in PHASES),
        "peak mem",
        "compile",
        "trials",
    ]
    rows = [header]
    memory_kinds: set[str] = set()
    failures = []
    for name, config in workload.configs.items():
        summary = config.summary
        if summary is None:
            reason = config.failure or next((t.failure for t in config.trials if t.failure), "no trial ran")
            rows.append([name, _FAILED])
            failures.append(f"{name} failed: {reason}")
            continue
        memory_kinds.update(str(t.memory.get("kind")) for t in config.trials if t.ok)
        sps = summary.samples_per_sec
        peak = format_bytes(summary.peak_bytes)
        if summary.reserved_bytes is not None:
            peak += f" ({format_bytes(summary.reserved_bytes)})"
        rows.append(
            [
                name,
                f"{sps.median:,.1f} ±{sps.spread_pct:.1f}%" if sps.n > 1 else f"{sps.median:,.1f}",
                "/".join(f"{1000 * v:.1f}" for v in (summary.step_p50_s, summary.step_p95_s, summary.step_p99_s)),
                *(f"{100 * summary.phase_share[p]:.0f}%" for p in PHASES),
                peak,
                "-" if summary.compile_s is None else f"{summary.compile_s:.1f} s",
                f"{summary.trials_ok}/{summary.trials_ok + summary.trials_failed}",
            ]
        )
        failures.extend(f"{name} trial {t.trial + 1} failed: {t.failure}" for t in config.trials if not t.ok)
    lines.extend(_table(rows))
    lines.append(
        "  samples/s: median over trials ± half their range; phases: share of step time; "
        + "; ".join(sorted(MEMORY_NOTES[k] for k in memory_kinds if k in MEMORY_NOTES))
    )
    reading = read_lab({name: config.summary for name, config in workload.configs.items()})
    lines.extend(f"  {line}" for line in reading.lines)
    lines.extend(f"  ! {message}" for message in failures + workload.warnings)
    return "\n".join(lines)


_FAILED = "failed (reason below)"


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
