"""A progress line on stderr while trials run: what is running and how far along the lab is."""

from __future__ import annotations

import sys
import time
from typing import Protocol

from perfgate.measure.lab import TrialEvent


class Stream(Protocol):
    def write(self, text: str, /) -> object: ...
    def flush(self) -> None: ...
    def isatty(self) -> bool: ...


class Progress:
    """Prints `[k/n] workload config trial i/t` as each trial starts and what it measured when done.

    On a terminal the running line is redrawn in place; in CI logs each finished trial is one line.
    """

    def __init__(self, trials: int, stream: Stream | None = None) -> None:
        self.stream: Stream = stream or sys.stderr
        self.trials = trials
        self.interactive = self.stream.isatty()
        self.started = time.perf_counter()

    def __call__(self, event: TrialEvent) -> None:
        planned = event.planned
        of = f"/{self.trials}" if planned.trial < self.trials else " (extra)"
        label = f"[{planned.index + 1}/{event.total}] {planned.workload} {planned.config} trial {planned.trial + 1}{of}"
        elapsed = time.perf_counter() - self.started
        if event.finished is None:
            if self.interactive:
                self.stream.write(f"\r\033[K{label} running ({elapsed:.0f} s elapsed)")
                self.stream.flush()
            return
        result = event.finished
        outcome = f"{result.samples_per_sec:,.1f} samples/s" if result.ok else f"failed: {result.failure}"
        if result.process_s is not None:
            outcome += f" ({result.process_s:.1f} s)"
        prefix = "\r\033[K" if self.interactive else ""
        self.stream.write(f"{prefix}{label}: {outcome}\n")
        self.stream.flush()
