"""One false-alarm rate for a session of checks: alpha split over the checks of one `pytest --perfgate` session.

A pytest session runs several checks (each fixture test's, each set of configured items', the pytest-benchmark
tests' at its end), and pytest reports each perf test's outcome as the test ends: a check's verdicts are final
when it ends. Checks judged each at the full alpha would fail a session of k unchanged checks up to k x alpha
of the time.

`SessionShares` splits alpha across the session's checks by Bonferroni, each check's share in proportion to its
comparisons, and Holm's step-down procedure runs within each check at its share (`verdict.one_error_rate`; the
pytest-benchmark tests at theirs, `judge.micro`). Why the false-alarm rate of the whole session is then at most
alpha:

- a check is given its share before it measures anything, from what the checks before it left: the shares of
  a session add up to alpha at most, however many checks run and in whatever order (a share depends on which
  checks ran before, never on what they measured);
- each check keeps its own false-alarm rate within its share (its looks spend at most the share, and Holm's
  procedure divides each look's level over its comparisons);
- by the union bound, the chance that any check of the session fails unchanged code is at most the sum of the
  shares: alpha, whatever the checks' results have in common.

Why not Holm's procedure over the whole session at its end, which would be more powerful: it needs every
comparison's p-value before it decides any, but a perf test's outcome is reported when its check ends. Judging
the merged results again at the end, on top of the checks' own decisions, would spend alpha twice.

The plan (`planned`: each perf test the session collected and the comparisons it is expected to judge) sets the
proportions: a check gets what is left times its comparisons over its comparisons plus those of the planned
tests still to come, so where the plan holds each check's share is alpha x its comparisons / all of the
session's, and the last check (pytest-benchmark's, at the session's end) takes what is left. A plan that is
wrong (a fixture test that judges more configs than the session's, a test skipped) moves power between checks,
never the session's rate. The core of it; the pytest plugin only says what it collected.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from perfgate.records.comparisons import DEFAULT_ALPHA

COMPARISONS_PER_CONFIG = 2  # a workload config's throughput ("slower") and peak memory ("larger")


@dataclass(frozen=True)
class SessionShares:
    """The session's alpha, what its checks were given of it, and the plan that sets the proportions.

    `planned`: each perf test collected (a key the session chooses) and the comparisons it is expected to
    judge; `started`: the planned tests whose checks have run; `given`: the alpha handed out so far."""

    alpha: float = DEFAULT_ALPHA
    planned: Mapping[str, int] = field(default_factory=dict)
    started: frozenset[str] = frozenset()
    given: float = 0.0
    checks: int = 0

    def share(self, tests: Collection[str], comparisons: int, *, last: bool = False) -> tuple[float, SessionShares]:
        """A check's divisor of alpha (alpha / its share) and the shares after it: the check runs for `tests`
        (planned or not) and judges at most `comparisons`; a `last` check (nothing runs after it) takes what is
        left. The shares handed out never add up to more than alpha (the module's docstring says why that is
        enough)."""
        left = max(self.alpha - self.given, 0.0)
        own = max(comparisons, 1)
        others = 0 if last else sum(n for t, n in self.planned.items() if t not in self.started and t not in tests)
        given = left * own / (own + others)
        if given <= 0.0:
            raise ValueError("the session's alpha is spent: no check may run after the last")
        after = replace(self, started=self.started | frozenset(tests), given=self.given + given, checks=self.checks + 1)
        return self.alpha / given, after
