"""The history read as series: its runs grouped by workload, config and machine (`runs_of`), each series with
where it changed level and slow creep (`judge.trends.series_of` finds them; the history's reports read them),
and a check's configs beside their recorded runs (`trends_of`: what the pull-request comment charts)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint
from perfgate.records.history import History, HistoryRecord
from perfgate.records.verdicts import GateResult


@dataclass(frozen=True)
class ChangePoint:
    """A change of level between two segments of a series of runs."""

    index: int  # the first run of the new level (0-based index into the series as given)
    before: float  # median of the trials of the runs in the segment before
    after: float  # median of the trials of the runs in the segment after
    change: float  # after / before - 1 (negative: slower for samples/s, less memory for peak memory)
    p_value: float  # Welch's two-sided t-test of the run levels (median log trial) of the two segments


@dataclass(frozen=True)
class Creep:
    """A drift over a window of runs that adds up to a change no single step makes."""

    start: int  # index of the first run of the window
    end: int  # index of the last run
    change: float  # the fitted line's end over its start, minus 1; negative: slower for samples/s
    p_value: float  # two-sided t-test of the least-squares slope of the run levels


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
