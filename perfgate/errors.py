"""The error types perfgate raises, each carrying where it happened and what to do."""

from __future__ import annotations

EXIT_OK = 0  # every verdict passed
EXIT_REGRESSION = 1  # a supported regression, a failed config (or, when asked, an open verdict)
EXIT_USAGE = 2  # a usage or input error
EXIT_NO_BASELINE = 3  # nothing comparable to judge against
EXIT_MEANINGS = {EXIT_OK: "pass", EXIT_REGRESSION: "fail", EXIT_NO_BASELINE: "no comparable baseline"}


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


class ResultsError(PerfgateError):
    """A results file that cannot be read or written."""


class TrialRecordError(PerfgateError):
    """A trial process's record that is not a `TrialResult`: a field unknown, missing or out of its vocabulary."""
