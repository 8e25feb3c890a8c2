"""The history read as series, as shapes: where a series of recorded runs changed level, and slow creep
(`judge.trends` finds them; the history's reports read them)."""

from __future__ import annotations

from dataclasses import dataclass


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
