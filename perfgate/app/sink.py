"""Where a command's text goes: the report and results lines on standard output, warnings, errors and progress
on standard error. Every line passes through `formatting.printable` first, so text from a history record or a
workload (its name, its error) cannot issue a terminal escape or a GitHub workflow command; colour is added
after, and only on a terminal (`report.colour.for_stream`). `stop_on_signals` makes a cancelled job (SIGTERM)
or a closed terminal (SIGHUP) stop the way Ctrl-C does: trials killed, worktrees removed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO

from perfgate.formatting import printable

if TYPE_CHECKING:
    from perfgate.app.request import GateRequest
    from perfgate.measure.lab import ProgressCallback


class Sink(Protocol):
    """Where a command writes: `report` and `info` to the user's output, `warn` and `error` beside it,
    `notify` for the progress of a check (None when quiet)."""

    def report(self, text: str, *, coloured: bool = True) -> None: ...
    def info(self, text: str) -> None: ...
    def warn(self, line: str) -> None: ...
    def error(self, line: str) -> None: ...
    def note(self, line: str) -> None: ...

    @property
    def notify(self) -> Callable[[str], None] | None: ...


class StreamSink:
    """The CLI's sink: standard output and standard error (`quiet`: no progress notes)."""

    def __init__(self, *, quiet: bool = False, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.quiet = quiet
        self.out = out
        self.err = err

    @property
    def _out(self) -> TextIO:
        return self.out or sys.stdout  # looked up at each write: tests capture sys.stdout

    @property
    def _err(self) -> TextIO:
        return self.err or sys.stderr

    def report(self, text: str, *, coloured: bool = True) -> None:
        """A report on standard output: its verdicts coloured on a terminal (never with NO_COLOR, nor in a file)."""
        from perfgate.report.colour import for_stream

        text = printable(text)
        self._out.write(for_stream(text, self._out) if coloured else text)

    def info(self, text: str) -> None:
        """Text on standard output, as given (a line ends with its own newline)."""
        self._out.write(printable(text))

    def warn(self, line: str) -> None:
        self._err.write(f"warning: {printable(line)}\n")

    def error(self, line: str) -> None:
        self._err.write(f"error: {printable(line)}\n")

    def note(self, line: str) -> None:
        """A line on standard error that is neither a warning nor an error (`fetched 3 record(s) ...`)."""
        self._err.write(f"{printable(line)}\n")

    @property
    def notify(self) -> Callable[[str], None] | None:
        if self.quiet:
            return None
        return lambda message: print(printable(message), file=self._err, flush=True)


def lab_progress(trials: int, *, quiet: bool, unit: str = "trial", most: int | None = None) -> ProgressCallback | None:
    """The progress display of a lab run (`trials` a config), or of calibrate's and bisect's paired passes
    (`unit` "pair": `trials` pairs planned a config, up to `most` where a pass adds pairs); None when quiet."""
    from perfgate.report.progress import Progress

    return None if quiet else Progress(trials, most=most, unit=unit)


def progress_for(request: GateRequest) -> ProgressCallback | None:
    """A check's progress display, bounded by its budget; one counting trial a config (and side) with
    --counts-only; None when quiet."""
    from perfgate.app.request import Mode
    from perfgate.report.progress import Progress

    if request.outputs.quiet:
        return None
    unit = "pair" if request.paired else "trial"
    if request.mode == Mode.COUNTS:  # no budget to spend
        return Progress(1, unit=unit)
    gate = request.gate
    return Progress(gate.first_n, most=gate.max_n, budget_s=gate.budget_s(request.judged), unit=unit)


def stop_on_signals() -> None:
    """A cancelled CI job is sent SIGTERM, a closed terminal SIGHUP: stop as on Ctrl-C, so trials are killed and
    a paired check's worktree is removed, instead of dying where it stands."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), interrupt)
