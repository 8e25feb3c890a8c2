"""Micro-benchmarks timed by pytest-benchmark: their records and baselines (`judge.micro` judges them).

pytest-benchmark times a function over many rounds inside one process and, by default, compares runs
with a bare threshold on one statistic. perfgate reads its JSON (the raw per-round times) instead.
All rounds of a session come from one process, so they show noise within a session, not from one
session to the next, which on a shared machine is the larger part. Hence two ways to judge:

- with MIN_SESSIONS or more update sessions of the baseline's commit stored (run
  `pytest --perfgate-update` that many times), the sessions are the samples: the current session's
  calls per second is tested against them (Welch's test with one sample a side borrows the
  baseline's variance), so each benchmark's own session-to-session noise sets the bar;
- with fewer, the rounds are cut into up to MAX_BLOCKS contiguous blocks (each gives the calls per
  second of its median round, so one interrupted round spoils one block, not the estimate), and an
  assumed session-to-session noise (`benchmark_noise`, DEFAULT_RUN_NOISE) is added to the variance.

Either way the comparison is made raw and divided by the machine probe's rate in the same session,
and a verdict needs both to agree (`records.comparisons.combine_verdicts`). `benchmarks/microbench.py` measures
false alarms and detection on a shared machine. Baselines live in one file,
`baselines/pytest-benchmark.yaml`: per machine type, per benchmark.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate._files import MAX_INTEGER_DIGITS
from perfgate.errors import ResultsError
from perfgate.naming import PYTEST
from perfgate.records.baselines import (
    BaselineError,
    DocumentReader,
    dump_yaml,
    load_yaml,
    round_figure,
    version_hint,
)
from perfgate.records.fingerprint import Fingerprint, fingerprint_key
from perfgate.records.locking import locked_folder
from perfgate.records.results import write_text_atomic
from perfgate.records.shapes import ShapeError

MICRO_SCHEMA_VERSION = 1
MICRO_FILE = "pytest-benchmark.yaml"
MAX_BLOCKS = 10
MAX_SESSIONS = 5  # update sessions of one commit kept per benchmark
MIN_SESSIONS = 3  # from this many, the sessions' own spread replaces the assumed run-to-run noise
DEFAULT_RUN_NOISE = 0.10  # session-to-session noise on a shared runner: benchmarks/microbench.py, docs/performance.md
UPDATE_COMMAND = PYTEST.update_command
_HEADER = (
    "# perfgate baseline for pytest-benchmark tests, written by `pytest --perfgate-update`: review changes like code.\n"
    "# Per machine type and benchmark: calls per second in blocks of rounds, and the machine probe's rate.\n"
)


@dataclass(frozen=True)
class MicroBenchmark:
    """One pytest-benchmark test as measured in one session."""

    name: str  # pytest-benchmark's fullname, e.g. tests/test_augment.py::test_flip[224]
    rounds: int
    block_calls_per_sec: list[float]  # per contiguous block of rounds: 1 / its median seconds per call
    median_s: float
    min_s: float
    probe_steps_per_sec: float | None = None  # the machine probe in the session that measured it
    measured_at: str = ""
    commit: str | None = None
    sessions: list[Session] = field(default_factory=list)  # this commit's update sessions, oldest first

    @property
    def calls_per_sec(self) -> float:
        """The session's figure: calls per second of its median round."""
        return 1.0 / self.median_s

    @property
    def session(self) -> Session:
        return Session(self.calls_per_sec, self.probe_steps_per_sec)


@dataclass(frozen=True)
class Session:
    """One update session's figure for a benchmark, and the machine probe's rate in that session."""

    calls_per_sec: float
    probe_steps_per_sec: float | None = None


@dataclass(frozen=True)
class MicroMachine:
    """One machine type's entry: its fingerprint and its benchmarks by name."""

    fingerprint: Fingerprint
    benchmarks: dict[str, MicroBenchmark]


def block_rates(times: Sequence[float], max_blocks: int = MAX_BLOCKS) -> list[float]:
    """Calls per second of each contiguous block's median round (as many blocks as rounds, up to max_blocks)."""
    if not times:
        raise ValueError("no rounds")
    blocks = min(len(times), max_blocks)
    edges = [round(i * len(times) / blocks) for i in range(blocks + 1)]
    return [1.0 / statistics.median(times[edges[i] : edges[i + 1]]) for i in range(blocks)]


def parse_pytest_benchmark(
    document: Any, *, probe: float | None = None, measured_at: str = "", commit: str | None = None
) -> list[MicroBenchmark]:
    """The benchmarks of a pytest-benchmark JSON document (its `--benchmark-json` format, with raw data)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("benchmarks"), list):
        raise ResultsError("not a pytest-benchmark JSON document (no 'benchmarks' list)")
    measured = []
    for item in document["benchmarks"]:
        name = item.get("fullname") if isinstance(item, Mapping) else None
        stats = item.get("stats") if isinstance(item, Mapping) else None
        data = stats.get("data") if isinstance(stats, Mapping) else None
        if not isinstance(name, str) or not isinstance(data, list):
            raise ResultsError(
                f"pytest-benchmark result {name or '?'} has no raw round times",
                hint="perfgate needs pytest-benchmark's JSON with its data (as --benchmark-json writes it)",
            )
        times = [float(t) for t in data if _finite_positive(t)]
        if not times:
            continue  # pytest-benchmark disabled or the function never ran
        measured.append(
            MicroBenchmark(
                name=name,
                rounds=len(times),
                block_calls_per_sec=block_rates(times),
                median_s=statistics.median(times),
                min_s=min(times),
                probe_steps_per_sec=probe,
                measured_at=measured_at,
                commit=commit,
            )
        )
    return measured


def _finite_positive(value: Any) -> bool:
    """A round time to keep: a positive finite number (an integer too long for a float, from a hostile file, is
    none: `math.isfinite` would overflow on it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int) and abs(value) >= 10**MAX_INTEGER_DIGITS:
        return False
    return math.isfinite(value) and value > 0


class MicroStore:
    """`pytest-benchmark.yaml` in the baseline directory: benchmarks per machine type."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / MICRO_FILE

    def load(self) -> dict[str, MicroMachine]:
        """Every machine type's entry, by key (empty when there is no file yet)."""
        if not self.path.is_file():
            return {}
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BaselineError(f"cannot read {self.path}: {exc}", hint="check the file") from exc
        return parse_micro_baseline(text, source=str(self.path))

    def find(self, fingerprint: Fingerprint) -> dict[str, MicroBenchmark]:
        machine = self.load().get(fingerprint_key(fingerprint))
        return machine.benchmarks if machine else {}

    def write(self, fingerprint: Fingerprint, measured: Sequence[MicroBenchmark]) -> dict[str, MicroBenchmark | None]:
        """Store `measured` for this machine (other benchmarks and machines are kept); returns the previous ones."""
        with locked_folder(self.path.parent):
            return self._write(fingerprint, measured)

    def _write(self, fingerprint: Fingerprint, measured: Sequence[MicroBenchmark]) -> dict[str, MicroBenchmark | None]:
        machines = self.load()
        key = fingerprint_key(fingerprint)
        stored = dict(machines[key].benchmarks) if key in machines else {}
        previous = {m.name: stored.get(m.name) for m in measured}
        stored.update({m.name: with_history(m, stored.get(m.name)) for m in measured})
        machines[key] = MicroMachine(fingerprint, dict(sorted(stored.items())))
        document = {
            "schema_version": MICRO_SCHEMA_VERSION,
            "machines": {
                k: {
                    "fingerprint": machines[k].fingerprint.to_dict(),
                    "benchmarks": {name: _to_dict(b) for name, b in machines[k].benchmarks.items()},
                }
                for k in sorted(machines)
            },
        }
        write_text_atomic(self.path, dump_yaml(_HEADER, document))
        return previous


def with_history(measured: MicroBenchmark, previous: MicroBenchmark | None) -> MicroBenchmark:
    """`measured` carrying the update sessions of its commit: sessions of one commit add up (the last
    MAX_SESSIONS are kept), a session of another commit starts over."""
    earlier = previous.sessions if previous is not None and previous.commit == measured.commit else []
    return replace(measured, sessions=[*earlier, measured.session][-MAX_SESSIONS:])


def _to_dict(b: MicroBenchmark) -> dict[str, Any]:
    return {
        "rounds": b.rounds,
        "median_s": round_figure(b.median_s),
        "min_s": round_figure(b.min_s),
        "probe_steps_per_sec": round_figure(b.probe_steps_per_sec),
        "measured_at": b.measured_at,
        "commit": b.commit,
        "block_calls_per_sec": [round_figure(r) for r in b.block_calls_per_sec],
        "sessions": [
            {"calls_per_sec": round_figure(x.calls_per_sec), "probe_steps_per_sec": round_figure(x.probe_steps_per_sec)}
            for x in b.sessions
        ],
    }


def parse_micro_baseline(text: str, *, source: str) -> dict[str, MicroMachine]:
    reader = DocumentReader(source, UPDATE_COMMAND)
    document = reader.mapping(load_yaml(text, source=source, update_command=UPDATE_COMMAND), "the file")
    if document.get("schema_version") != MICRO_SCHEMA_VERSION:
        raise BaselineError(
            f"unsupported schema_version {document.get('schema_version')!r} (this perfgate reads "
            f"{MICRO_SCHEMA_VERSION})",
            where=source,
            hint=version_hint(document.get("schema_version"), UPDATE_COMMAND),
        )
    machines: dict[str, MicroMachine] = {}
    for key, machine in reader.mapping(document.get("machines"), "machines").items():
        where = f"machines[{key!r}]"
        machine = reader.mapping(machine, where)
        try:
            fingerprint = Fingerprint.from_dict(reader.mapping(machine.get("fingerprint"), f"{where}.fingerprint"))
        except ShapeError as exc:
            raise reader.fail(f"{where}: {exc}") from None
        benchmarks = {}
        for name, raw in reader.mapping(machine.get("benchmarks"), f"{where}.benchmarks").items():
            here = f"{where}.benchmarks[{name!r}]"
            raw = reader.mapping(raw, here)
            rates = raw.get("block_calls_per_sec")
            if not isinstance(rates, list) or not rates:
                raise reader.fail(f"{here}.block_calls_per_sec must be a non-empty list")
            values = [reader.number({"rate": r}, "rate", f"{here}.block_calls_per_sec") for r in rates]
            if not all(values):
                raise reader.fail(f"{here}.block_calls_per_sec must be positive")
            commit = raw.get("commit")
            sessions_raw = raw.get("sessions", [])
            if not isinstance(sessions_raw, list):
                raise reader.fail(f"{here}.sessions must be a list")
            sessions = []
            for index, item in enumerate(sessions_raw):
                item = reader.mapping(item, f"{here}.sessions[{index}]")
                rate = reader.number(item, "calls_per_sec", f"{here}.sessions[{index}]")
                if not rate:
                    raise reader.fail(f"{here}.sessions[{index}].calls_per_sec must be positive")
                probe = reader.number(item, "probe_steps_per_sec", f"{here}.sessions[{index}]", optional=True)
                sessions.append(Session(rate, probe or None))
            if not reader.number(raw, "median_s", here):
                raise reader.fail(f"{here}.median_s must be positive")
            benchmarks[str(name)] = MicroBenchmark(
                name=str(name),
                rounds=int(reader.number(raw, "rounds", here) or 0),
                block_calls_per_sec=[float(v or 0) for v in values],
                median_s=float(reader.number(raw, "median_s", here) or 0),
                min_s=float(reader.number(raw, "min_s", here) or 0),
                probe_steps_per_sec=reader.number(raw, "probe_steps_per_sec", here, optional=True) or None,
                measured_at=str(raw.get("measured_at") or ""),
                commit=commit if isinstance(commit, str) else None,
                sessions=sessions,
            )
        machines[fingerprint_key(fingerprint)] = MicroMachine(fingerprint, benchmarks)
    return machines
