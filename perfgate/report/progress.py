"""A progress line on stderr while trials run: what is running, how far along, and how long at most is left.

A check's time budget bounds what is left: no round of extra trials starts that would end past it
(`check.sequential`), so "at most N s left" is the budget less the time spent, or the planned trials' own
estimate where that is longer. A lab run without a budget shows an estimate from its trials so far. Extra
trials say why they run (the verdict is still open) and how many there can be at most.
"""

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
    """Prints `[k/n] workload config trial i/t` as each trial starts and what it measured when done, with
    the time spent and a bound on the time left.

    `trials`: the planned trials (pairs) per config; `most`: the most a check may add up to (None: none
    added); `budget_s`: the check's time budget (None: a lab run, which shows an estimate); `unit`: "trial"
    or, for a paired check, "pair". On a terminal the running line is redrawn in place; in CI logs each
    finished trial is one line.
    """

    def __init__(
        self,
        trials: int,
        stream: Stream | None = None,
        *,
        most: int | None = None,
        budget_s: float | None = None,
        unit: str = "trial",
    ) -> None:
        self.stream: Stream = stream or sys.stderr
        self.trials = trials
        self.most = most
        self.budget_s = budget_s
        self.unit = unit
        self.interactive = self.stream.isatty()
        self.started = time.perf_counter()
        self.durations: list[float] = []  # wall seconds of each finished trial (pair)
        self._began: float | None = None

    def _label(self, event: TrialEvent) -> str:
        planned = event.planned
        number = planned.trial + 1
        if planned.trial < self.trials:
            of = f"{number}/{self.trials}"
        elif self.most is not None and self.most > self.trials:
            of = f"{number} of at most {self.most} (extra: the verdict is still open)"
        else:
            of = f"{number} (extra: the verdict is still open)"
        return f"[{planned.index + 1}/{event.total}] {planned.workload} {planned.config} {self.unit} {of}"

    def _planned_left(self, event: TrialEvent) -> int:
        """Trials (pairs) still planned after this one, extra ones not counted: in this batch, and for a
        paired check, in its first rounds (each a batch of its own)."""
        planned = event.planned
        left = event.total - planned.index - 1
        if self.unit == "pair" and planned.trial < self.trials:
            left += (self.trials - planned.trial - 1) * event.total
        return left

    def time_left(self, event: TrialEvent, elapsed: float) -> str:
        """`at most 40 s left (time budget 80 s)`, `about 20 s left`, or "" before any trial has finished."""
        mean = sum(self.durations) / len(self.durations) if self.durations else None
        estimate = None if mean is None else mean * self._planned_left(event)
        if self.budget_s is not None:
            bound = max(self.budget_s - elapsed, estimate or 0.0, 0.0)
            return f"at most {bound:.0f} s left (time budget {self.budget_s:g} s)"
        if estimate is None:
            return ""
        return f"about {estimate:.0f} s left"

    def __call__(self, event: TrialEvent) -> None:
        label = self._label(event)
        now = time.perf_counter()
        elapsed = now - self.started
        if event.finished is None:
            self._began = now
            if self.interactive:
                left = self.time_left(event, elapsed)
                self.stream.write(f"\r\033[K{label} running ({elapsed:.0f} s elapsed{', ' + left if left else ''})")
                self.stream.flush()
            return
        if self._began is not None:
            self.durations.append(now - self._began)
            self._began = None
        result = event.finished
        outcome = f"{result.samples_per_sec:,.1f} samples/s" if result.ok else f"failed: {result.failure}"
        if result.ok and result.counts is not None and not result.step_s:  # a counting trial: nothing timed
            outcome = "counted"
        if result.process_s is not None:
            outcome += f" ({result.process_s:.1f} s)"
        left = self.time_left(event, elapsed)
        timing = f"; {elapsed:.0f} s elapsed" + (f", {left}" if left else "")
        prefix = "\r\033[K" if self.interactive else ""
        self.stream.write(f"{prefix}{label}: {outcome}{timing}\n")
        self.stream.flush()
