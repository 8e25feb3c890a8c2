"""The error types perfgate raises, each carrying where it happened and what to do."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The exit codes of every perfgate command, the one table: `perfgate COMMAND --help` shows each command's
# rows of it, docs/reference.md shows all of it (tests/test_exit_codes.py holds the two to this table).
EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NO_BASELINE = 3
EXIT_WORKLOAD_FAILED = 4
EXIT_NOTHING_TO_GATE = 5
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class ExitCode:
    """One row of the table: the code, its name (as the gate's summary line shows it) and what it means."""

    code: int
    name: str
    meaning: str


EXIT_CODES = (
    ExitCode(EXIT_OK, "pass", "the command did its work and no verdict fails the build"),
    ExitCode(
        EXIT_REGRESSION,
        "fail",
        "a supported regression fails the build (or, with --fail-on-inconclusive, a verdict that stayed open)",
    ),
    ExitCode(EXIT_USAGE, "usage error", "a bad option, argument, file or configuration"),
    ExitCode(
        EXIT_NO_BASELINE,
        "nothing to compare",
        "no comparable baseline (none for this machine, or the workload's amount of work changed), no recorded run, "
        "or a paired check's base whose declared packages cannot be installed",
    ),
    ExitCode(
        EXIT_WORKLOAD_FAILED,
        "workload failed",
        "the workload raised, hung or produced no measurement (in a check: a config that was measured before "
        "and now fails)",
    ),
    ExitCode(
        EXIT_NOTHING_TO_GATE,
        "nothing to gate",
        "the workload list is empty (for example `workloads = []` in [tool.perfgate]): nothing was measured or judged",
    ),
    ExitCode(
        EXIT_INTERRUPTED,
        "interrupted",
        "stopped by Ctrl-C, SIGTERM or SIGHUP (trials stopped; no file is left half-written)",
    ),
)
EXIT_MEANINGS = {row.code: row.name for row in EXIT_CODES}
SEVERITY = (EXIT_REGRESSION, EXIT_WORKLOAD_FAILED, EXIT_NO_BASELINE)  # when several apply, the first wins


def worst_exit_code(codes: Iterable[int]) -> int:
    """The one code for several findings: a regression (1) wins over a failed workload (4), which wins over
    nothing to compare (3); else 0."""
    found = set(codes)
    return next((code for code in SEVERITY if code in found), EXIT_OK)


def exit_code_help(codes: Iterable[int] | None = None) -> str:
    """The table's rows for `codes` (default: all), as a command's `--help` ends with them."""
    wanted = None if codes is None else set(codes)
    rows = [row for row in EXIT_CODES if wanted is None or row.code in wanted]
    return "exit codes:\n" + "\n".join(f"  {row.code:<4} {row.name}: {row.meaning}" for row in rows)


def exit_code_markdown() -> str:
    """The whole table as docs/reference.md shows it."""
    rows = ["| code | name | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{row.code}` | {row.name} | {row.meaning} |" for row in EXIT_CODES]
    return "\n".join(rows) + "\n"


class PerfgateError(Exception):
    """Base class: a message, where it happened, and what the user can do about it."""

    exit_code = EXIT_USAGE

    def __init__(
        self, what: str, *, where: str | None = None, hint: str | None = None, details: str | None = None
    ) -> None:
        super().__init__(what)
        self.what = what
        self.where = where
        self.hint = hint
        self.details = details  # e.g. a trial process's traceback, shown with --debug

    def one_line(self) -> str:
        """Render as `<what> (<where>); <hint>` on one line."""
        text = self.what
        if self.where:
            text += f" ({self.where})"
        if self.hint:
            text += f"; {self.hint}"
        return " ".join(text.split())

    def __str__(self) -> str:
        return self.one_line()


class UsageError(PerfgateError):
    """A bad option value or combination on the command line or in configuration."""


class WorkloadReferenceError(PerfgateError):
    """A workload reference that cannot be resolved (missing file, module or function)."""


class WorkloadError(PerfgateError):
    """The user's workload is invalid or its code failed while being measured."""

    exit_code = EXIT_WORKLOAD_FAILED


class NothingToCompareError(PerfgateError):
    """Nothing to judge or show: no comparable baseline, or no recorded run."""

    exit_code = EXIT_NO_BASELINE


class NothingToGateError(PerfgateError):
    """Nothing to gate: the resolved workload list is empty."""

    exit_code = EXIT_NOTHING_TO_GATE


class ResultsError(PerfgateError):
    """A results file that cannot be read or written."""


class TrialRecordError(PerfgateError):
    """A trial process's record that is not a `TrialResult`: a field unknown, missing or out of its vocabulary."""
