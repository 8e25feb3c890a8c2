"""History: a check's record for the history store, and the history read back as series, change points and creep.

`record_of_check` turns a judged check into the record `check --record` appends
(`perfgate.records.history`). `series_of` groups the records by workload, config and machine, oldest
first; `format_history` prints a table per series with its recent runs, the change points where the level
moved (`perfgate.judge.trends`) and slow creep that adds up past the threshold while no single step does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from perfgate.formatting import format_bytes, format_signed_pct
from perfgate.judge.trends import change_points, creep
from perfgate.outcome import Status
from perfgate.records.baselines import entries_from_results
from perfgate.records.history import EXPORT_FORMATS, History, HistoryRecord, RecordedVerdict
from perfgate.records.series import ChangePoint, Creep
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


@dataclass(frozen=True)
class Run:
    """One run of a series: the commit measured, when, its trials and how it was judged."""

    commit: str | None
    recorded_at: str
    samples_per_sec: list[float]
    peak_bytes: list[int]
    verdict: str | None
    source: str

    @property
    def median(self) -> float:
        return statistics.median(self.samples_per_sec)


@dataclass(frozen=True)
class Series:
    """One workload and config on one machine, oldest run first, with what the trends found in it."""

    workload: str
    config: str
    machine: str
    runs: list[Run]
    change_points: list[ChangePoint] = field(default_factory=list)
    memory_change_points: list[ChangePoint] = field(default_factory=list)
    creep: Creep | None = None


def runs_of(history: History) -> dict[tuple[str, str, str], list[Run]]:
    """The history's runs by (workload, config, machine), oldest first, in that order of keys."""
    grouped: dict[tuple[str, str, str], list[Run]] = {}
    for record in history.records:
        for entry in record.entries:
            for config, measured in entry.configs.items():
                run = Run(
                    commit=entry.commit,
                    recorded_at=record.recorded_at,
                    samples_per_sec=measured.samples_per_sec,
                    peak_bytes=measured.peak_bytes,
                    verdict=_status_of(record, f"{entry.workload}/{config}"),
                    source=record.source,
                )
                grouped.setdefault((entry.workload, config, entry.key), []).append(run)
    return dict(sorted(grouped.items()))


def _status_of(record: HistoryRecord, key: str) -> str | None:
    """The recorded verdict's status of one config ("workload/config"), in words; None where none was recorded."""
    verdict = record.verdicts.get(key)
    return None if verdict is None else verdict.status.value


def series_of(history: History, *, threshold: float = 0.05, alpha: float = 0.01) -> list[Series]:
    """The history's series, each with its change points (samples/s and peak memory) and creep."""
    found = []
    for (workload, config, machine), runs in runs_of(history).items():
        speed = [r.samples_per_sec for r in runs]
        memory = [[float(b) for b in r.peak_bytes if b > 0] for r in runs]
        points = change_points(speed, min_change=threshold, alpha=alpha)
        memory_points = change_points(memory, min_change=threshold, alpha=alpha) if all(m for m in memory) else []
        drift = creep(speed, threshold=threshold, alpha=alpha, change_points=points)
        found.append(Series(workload, config, machine, runs, points, memory_points, drift))
    return found


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


@dataclass(frozen=True)
class Trend:
    """One gated config's recent history and this run: what the pull-request comment charts."""

    workload: str
    config: str
    labels: list[str]  # the recorded runs' commits (7 characters), then "this"
    values: list[float]  # their median samples/s, then this run's


def trends_of(result: GateResult, history: History, *, limit: int = 10) -> list[Trend]:
    """For each config this check judged, the last `limit` recorded runs of it on this machine and this run's
    median samples/s; configs without a recorded run get none."""
    if result.run is None:
        return []
    from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint

    machine = fingerprint_key(machine_fingerprint(result.run.environment))
    recorded = {(w, c): runs for (w, c, m), runs in runs_of(history).items() if m == machine}
    measured = {w.name: w for w in result.run.workloads}
    trends = []
    for verdict in result.verdicts:
        past = recorded.get((verdict.workload, verdict.config))
        workload = measured.get(verdict.workload)
        config = workload.configs.get(verdict.config) if workload else None
        now = [t.samples_per_sec for t in config.trials if t.ok] if config else []
        if past is None or not now:
            continue
        runs = past[-limit:]
        trends.append(
            Trend(
                verdict.workload,
                verdict.config,
                [(r.commit or "none")[:7] for r in runs] + ["this"],
                [r.median for r in runs] + [statistics.median(now)],
            )
        )
    return trends


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
