"""What `perfgate bisect` found (`check.bisect` runs it, `report.bisection` renders it): each paired check of the
bisection, and the first bad commit."""

from __future__ import annotations

from dataclasses import dataclass

from perfgate.records.verdicts import GateResult


@dataclass(frozen=True)
class BisectStep:
    """One paired check of the bisection: `commit` measured against `base`."""

    commit: str
    base: str
    slower: bool  # a samples/s regression of any config beyond the threshold
    result: GateResult

    @property
    def evidence(self) -> list[str]:
        """The verdict line of each config that regressed (or, when none did, of each config)."""
        verdicts = [v for v in self.result.verdicts if v.slower] or self.result.verdicts
        return [f"{v.workload} {v.config}: {v.status.value}: {v.reason}" for v in verdicts]


@dataclass(frozen=True)
class BisectResult:
    good: str
    bad: str
    commits: list[str]  # after GOOD up to BAD, oldest first (BAD's first parents)
    steps: list[BisectStep]
    first_bad: str | None  # None: BAD is not slower than GOOD
    monotonic: bool  # the first bad commit is slower than its own parent too
