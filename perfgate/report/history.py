"""History: a check's record for the history store, and the history read back as series, change points and creep.

`record_of_check` turns a judged check into the record `check --record` appends
(`perfgate.records.history`). `format_history` prints a table per series (`records.series`: the records by
workload, config and machine, oldest first) with its recent runs, the change points where the level moved and
slow creep that adds up past the threshold while no single step does (`judge.trends.series_of` found them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from perfgate.formatting import format_bytes, format_signed_pct
from perfgate.outcome import Status
from perfgate.records.baselines import entries_from_results
from perfgate.records.history import EXPORT_FORMATS, HistoryRecord, RecordedVerdict
from perfgate.records.series import ChangePoint, Series, Trend
from perfgate.records.verdicts import GateResult

NO_STORED_BASELINE = "no stored baseline"  # the mode of a record measured with nothing to judge it against


def record_of_check(result: GateResult, now: datetime | None = None) -> HistoryRecord | None:
    """The history record of a judged check; None when it measured nothing."""
    if result.run is None:
        return None
    entries = [e for e in entries_from_results(result.run) if e.configs]
    if not entries:
        return None
    verdicts = {}
    for v in result.verdicts:
        ratio = v.throughput.ratio if v.throughput is not None else None
        finite = ratio is not None and math.isfinite(ratio)  # NaN: none
        verdicts[f"{v.workload}/{v.config}"] = RecordedVerdict(v.status, ratio if finite else None)
    against = result.against
    return HistoryRecord(
        recorded_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        mode=result.mode if verdicts or against else NO_STORED_BASELINE,
        entries=entries,
        verdicts=verdicts,
        exit_code=result.exit_code,
        base_commit=against.base_commit if against else None,
        base_ref=against.ref if against else None,
        base_entries=[e for e in entries_from_results(against.base) if e.configs] if against else [],
    )


def unjudged_note(result: GateResult, record: HistoryRecord) -> str | None:
    """The line that says the recorded workloads a check had no stored baseline for went in without a
    verdict; None when it judged every one (or was paired: a base that lacks a workload says so itself)."""
    if result.against is not None:
        return None
    recorded = {e.workload for e in record.entries}
    missing = [
        w.workload for w in result.workloads if w.problem_status == Status.NO_BASELINE and w.workload in recorded
    ]
    if not missing:
        return None
    if not record.verdicts:
        return f"{NO_STORED_BASELINE}: recorded without a verdict"
    return f"{NO_STORED_BASELINE} for {', '.join(missing)}: recorded without a verdict"


def format_history(series: Sequence[Series], *, limit: int = 10) -> str:
    """A table per series with its last `limit` runs, then its change points and creep, in words."""
    if not series:
        return "no recorded runs yet: record one with perfgate check --record\n"
    lines = []
    for s in series:
        lines.append(f"{s.workload} {s.config}  ({s.machine}; {len(s.runs)} run{'s' * (len(s.runs) != 1)})")
        lines.append(f"  {'commit':<12}  {'recorded':<20}  {'samples/s':>11}  {'peak mem':>10}  verdict")
        marks = {p.index for p in s.change_points} | {p.index for p in s.memory_change_points}
        first = max(0, len(s.runs) - limit)
        for index in range(first, len(s.runs)):
            run = s.runs[index]
            peak = format_bytes(int(statistics.median(run.peak_bytes))) if run.peak_bytes else "-"
            mark = "  <- change point" if index in marks else ""
            lines.append(
                f"  {(run.commit or '-')[:12]:<12}  {run.recorded_at[:19]:<20}  {run.median:>11,.1f}  {peak:>10}  "
                f"{run.verdict or '-'}{mark}"
            )
        for p in s.change_points:
            lines.append(f"  change point: samples/s {_change(p, lambda v: f'{v:,.1f}')} at {_at(s, p.index)}")
        for p in s.memory_change_points:
            lines.append(
                f"  change point: peak memory {_change(p, lambda v: format_bytes(int(v)))} at {_at(s, p.index)}"
            )
        if s.creep is not None:
            c = s.creep
            lines.append(
                f"  creep: samples/s {format_signed_pct(c.change)} from {_at(s, c.start)} to {_at(s, c.end)} "
                f"(p={c.p_value:.2g}), though no single step was a change point"
            )
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _change(p: ChangePoint, show: Callable[[float], str]) -> str:
    return f"{format_signed_pct(p.change)} ({show(p.before)} -> {show(p.after)}, p={p.p_value:.2g})"


def _at(s: Series, index: int) -> str:
    run = s.runs[index]
    return f"{(run.commit or 'no commit')[:12]} ({run.recorded_at[:10]})"


def export_run(record: HistoryRecord, form: str) -> Any:
    """One recorded run in another tool's format, as JSON values: each workload and config's samples/s
    (median of its trials, with their lowest and highest) and peak memory (median bytes).

    - `bencher`: Bencher Metric Format, `{"WORKLOAD CONFIG": {"throughput": {"value", "lower_value",
      "upper_value"}, "peak-memory": {"value"}}}` (`bencher run --adapter json --file FILE`).
    - `github-action-benchmark`: its `customBiggerIsBetter` list, `[{"name", "unit", "value", "range",
      "extra"}]`, samples/s only (the tool takes one direction per file).
    """
    rows = [
        (f"{entry.workload} {name}", config)
        for entry in record.entries
        for name, config in entry.configs.items()
        if config.trials
    ]
    if form == "bencher":
        return {
            name: {
                "throughput": {
                    "value": statistics.median(config.samples_per_sec),
                    "lower_value": min(config.samples_per_sec),
                    "upper_value": max(config.samples_per_sec),
                },
                "peak-memory": {"value": float(statistics.median(config.peak_bytes))},
            }
            for name, config in rows
        }
    if form == "github-action-benchmark":
        return [
            {
                "name": name,
                "unit": "samples/s",
                "value": statistics.median(config.samples_per_sec),
                "range": f"{min(config.samples_per_sec):.6g}-{max(config.samples_per_sec):.6g}",
                "extra": f"commit {(record.commit or 'none')[:12]}; {len(config.trials)} trials; {record.mode}",
            }
            for name, config in rows
        ]
    raise ValueError(f"unknown export format {form!r}; choose from {', '.join(EXPORT_FORMATS)}")


def mermaid_trend(trend: Trend) -> str:
    """A Mermaid line chart of the trend (GitHub renders it in comments and job summaries)."""
    labels = ", ".join(f'"{label}"' for label in trend.labels)
    values = ", ".join(f"{value:.1f}" for value in trend.values)
    return (
        "```mermaid\n"
        "xychart-beta\n"
        f'    title "{trend.workload} {trend.config}: samples/s, recorded runs and this one"\n'
        f"    x-axis [{labels}]\n"
        '    y-axis "samples/s"\n'
        f"    line [{values}]\n"
        "```"
    )
