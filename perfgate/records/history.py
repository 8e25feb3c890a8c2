"""The history store: every recorded check kept, one JSON file per run, never rewritten.

A baseline holds one entry per machine and an update overwrites it, so nothing of the past survives
there. `perfgate check --record` also appends the run here: its commit, time and machine, each
workload's trials (the figures a baseline keeps, in the baseline's own shape), each config's verdict,
and the mode (stored baselines, or paired against a base commit, whose trials are kept too). Trends,
change points and the dashboard read these files.

One file per run, named by its time, commit and a random part, written to a temporary name and renamed:
two jobs recording at once write two files and never conflict, and an interrupted write leaves no half
file. Reading is JSON only (nothing in a file is ever executed) and strict: a file that is not a record
this perfgate can read (corrupt, hostile, too large, from a newer perfgate) is named in a warning and
skipped, and the rest of the history still loads.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate._files import JsonError, read_json
from perfgate.errors import PerfgateError, ResultsError
from perfgate.outcome import Status
from perfgate.records.baselines import BaselineEntry, BaselineError, DocumentReader, entry_to_dict
from perfgate.records.results import write_text_atomic
from perfgate.records.shapes import field_problem, huge_integer_place

HISTORY_VERSION = 1
DEFAULT_HISTORY_DIR = Path(".perfgate/history")
EXPORT_FORMATS = ("bencher", "github-action-benchmark")  # `perfgate export`: other tools' formats of a run
MAX_RECORD_BYTES = 8 << 20  # a run's record is a few KiB a workload; anything this large is not one


class HistoryError(PerfgateError):
    """A history record that cannot be written."""


@dataclass(frozen=True)
class RecordedVerdict:
    """One config's verdict as the history keeps it: its status and the samples/s ratio (candidate/baseline;
    None where there was no throughput comparison, or it was not a number)."""

    status: Status
    ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "ratio": self.ratio}

    @classmethod
    def from_dict(cls, data: Any, where: str, reader: DocumentReader) -> RecordedVerdict:
        """Read what `to_dict` wrote, strictly: a status outside `Status`, a ratio that is not a finite number,
        or another field is a BaselineError naming the place."""
        record = reader.mapping(data, where)
        problem = field_problem(record, ("status", "ratio"), where)
        if problem is not None:
            raise reader.fail(problem)
        status = record["status"]
        if not isinstance(status, str) or status not in _STATUSES:
            raise reader.fail(f"{where}.status is {status!r}, not one of {', '.join(_STATUSES)}")
        ratio = record["ratio"]
        if ratio is not None:
            ratio = reader.number(record, "ratio", where)
        return cls(Status(status), ratio)


_STATUSES = tuple(s.value for s in Status)


@dataclass(frozen=True)
class HistoryRecord:
    """One recorded run: what was measured (`entries`, one per workload, as a baseline keeps it), how it was
    judged (`verdicts`: "workload/config" -> status and samples/s ratio) and against what (`mode`, and in a
    paired check the base commit and its side's trials, `base_entries`)."""

    recorded_at: str  # ISO 8601, UTC
    mode: str  # "stored baselines", or the paired check's description
    entries: list[BaselineEntry]
    verdicts: dict[str, RecordedVerdict] = field(default_factory=dict)  # "workload/config" -> its verdict
    exit_code: int | None = None
    base_commit: str | None = None  # paired checks: the commit measured beside the working tree
    base_ref: str | None = None
    base_entries: list[BaselineEntry] = field(default_factory=list)
    source: str = ""  # the file it was read from (empty before it is written)

    @property
    def commit(self) -> str | None:
        """The commit measured (the working tree's HEAD), if the run was in a git checkout."""
        return next((e.commit for e in self.entries if e.commit), None)

    @property
    def dirty(self) -> bool:
        return any(e.git is not None and bool(e.git.dirty) for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        def entries(items: list[BaselineEntry]) -> list[dict[str, Any]]:
            return [{"workload": e.workload, **entry_to_dict(e)} for e in items]

        return {
            "perfgate_history": HISTORY_VERSION,
            "recorded_at": self.recorded_at,
            "commit": self.commit,
            "mode": self.mode,
            "exit_code": self.exit_code,
            "base": None if self.base_commit is None else {"ref": self.base_ref, "commit": self.base_commit},
            "verdicts": {key: verdict.to_dict() for key, verdict in self.verdicts.items()},
            "entries": entries(self.entries),
            "base_entries": entries(self.base_entries),
        }


@dataclass(frozen=True)
class History:
    """The records of a history folder, oldest first, and a warning for each file that was skipped."""

    records: list[HistoryRecord]
    skipped: list[str]


class HistoryStore:
    """The history of one folder (`[tool.perfgate] history`, default .perfgate/history)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def append(self, record: HistoryRecord) -> Path:
        """Write `record` as a new file (never over another); its path."""
        stamp = "".join(ch for ch in record.recorded_at[:19] if ch.isdigit() or ch == "T")
        name = f"{stamp}-{(record.commit or 'no-commit')[:12]}-{secrets.token_hex(4)}.json"
        path = self.directory / name
        text = json.dumps(record.to_dict(), indent=1, allow_nan=False, default=str) + "\n"
        try:
            write_text_atomic(path, text)
        except ResultsError as exc:
            raise HistoryError(exc.what, hint=exc.hint) from None
        return path

    def load(self) -> History:
        """Every readable record, oldest first (by recording time, then file name); each other file skipped
        with a one-line warning naming it and what is wrong."""
        if not self.directory.is_dir():
            return History([], [])
        records: list[HistoryRecord] = []
        skipped: list[str] = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                records.append(read_record(path))
            except (HistoryError, BaselineError) as exc:
                skipped.append(f"skipped {path}: {exc.what}")
            except Exception as exc:  # whatever else a hostile file provokes: never the whole history's end
                reason = " ".join(str(exc).split())[:200]
                skipped.append(f"skipped {path}: not a record this perfgate can read ({type(exc).__name__}: {reason})")
        records.sort(key=lambda r: (r.recorded_at, r.source))
        return History(records, skipped)


def read_record(path: Path) -> HistoryRecord:
    """One record file, read strictly; HistoryError (or BaselineError for a malformed entry) on anything else."""
    try:
        if not path.is_file() or path.is_symlink():
            raise HistoryError("not a regular file")
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise HistoryError(f"larger than {MAX_RECORD_BYTES >> 20} MiB: not a run's record")
        text = path.read_text(encoding="utf-8")
        document = read_json(text, source=str(path))
    except JsonError as exc:
        problem = f"{exc.problem}{huge_integer_place(text)}"
        raise HistoryError(f"not a readable JSON record ({' '.join(problem.split())[:200]})") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HistoryError(f"not a readable JSON record ({' '.join(str(exc).split())[:200]})") from None
    return parse_record(document, source=str(path))


def parse_record(document: Any, *, source: str) -> HistoryRecord:
    reader = DocumentReader(source, update_command="perfgate check --record")
    document = reader.mapping(document, "the record")
    version = document.get("perfgate_history")
    if version != HISTORY_VERSION:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > HISTORY_VERSION
        why = "written by a newer perfgate" if newer else "not a perfgate history record"
        raise HistoryError(f"perfgate_history is {version!r}, this perfgate reads {HISTORY_VERSION}: {why}")
    recorded_at = reader.get(document, "recorded_at", str, "the record")
    mode = reader.get(document, "mode", str, "the record")

    def entries(key: str) -> list[BaselineEntry]:
        raw = document.get(key, [])
        if not isinstance(raw, list):
            raise reader.fail(f"{key} must be a list")
        found = []
        for index, item in enumerate(raw):
            item = reader.mapping(item, f"{key}[{index}]")
            workload = reader.get(item, "workload", str, f"{key}[{index}]")
            found.append(reader.entry(workload, item, f"{key}[{index}]"))
        return found

    base = document.get("base")
    if base is not None and not (isinstance(base, Mapping) and isinstance(base.get("commit"), str)):
        raise reader.fail("base must be null or a mapping with the base commit")
    verdicts = reader.mapping(document.get("verdicts", {}), "verdicts")
    exit_code = document.get("exit_code")
    return HistoryRecord(
        recorded_at=recorded_at,
        mode=mode,
        entries=entries("entries"),
        verdicts={str(k): RecordedVerdict.from_dict(v, f"verdicts[{k!r}]", reader) for k, v in verdicts.items()},
        exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
        base_commit=None if base is None else base["commit"],
        base_ref=None if base is None or not isinstance(base.get("ref"), str) else base["ref"],
        base_entries=entries("base_entries"),
        source=source,
    )
