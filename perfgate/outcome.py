"""The rule that fails the build, in one file, for every front end.

How a config's status is reached is `judge/` (statistics, counts, acceptances); what that status means for
the build is here: `FAILING` and `fails_build` (a verdict's answer), `build_exit_code` (a check's),
`session_exit_code` (a check with pytest-benchmark tests), `warned_exit_code` (warn-only: a verdict's failure
reported, the build passed), `job_exit_code` (the Action's job, with its no-baseline and first-commit
policies), `measured_exit_code` ("nothing measured": 4) and the "nothing to gate" rule (an empty workload
list: 5). The codes themselves are `errors.EXIT_CODES`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from perfgate.errors import (
    EXIT_NO_BASELINE,
    EXIT_NOTHING_TO_GATE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_WORKLOAD_FAILED,
    NothingToGateError,
    worst_exit_code,
)

__all__ = [
    "EXIT_NOTHING_TO_GATE",
    "FAILING",
    "Status",
    "build_exit_code",
    "check_something_to_gate",
    "fails_build",
    "job_exit_code",
    "measured_exit_code",
    "micro_fails",
    "session_exit_code",
    "warned_exit_code",
]


class Status(StrEnum):
    """A config's outcome: the four statistical verdicts, a slowdown accepted on purpose and within its
    bound, and the reasons there is none."""

    REGRESSION = "regression"
    ACCEPTED = "accepted"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    NOT_COMPARABLE = "not comparable"
    FAILED = "failed"
    NO_BASELINE = "no baseline"

    @classmethod
    def of(cls, verdict: str) -> Status:
        """The status of a statistical verdict (`records.comparisons.Verdict`: the same four words)."""
        return cls(str(verdict))

    @classmethod
    def combined(cls, verdicts: Iterable[str]) -> Status:
        """One status from several verdicts (throughput, memory): any regression, else any open verdict,
        else any improvement, else no change."""
        found = {str(v) for v in verdicts}
        for verdict in (cls.REGRESSION, cls.INCONCLUSIVE, cls.IMPROVEMENT):
            if verdict.value in found:
                return verdict
        return cls.NO_CHANGE


# The rule that fails the build, for every front end: the CLI's exit code, the pytest plugin's failed
# tests and the Action's error annotations all come from these functions.
FAILING = frozenset({Status.REGRESSION, Status.FAILED, Status.NOT_COMPARABLE, Status.NO_BASELINE})


def fails_build(status: Status, *, fail_on_inconclusive: bool = False, new_is_ok: bool = False) -> bool:
    """Whether a verdict of this status fails the build. `fail_on_inconclusive`: an open verdict fails too;
    `new_is_ok`: nothing to compare with is no failure (a paired check's benchmark that is new in the head)."""
    if status == Status.NO_BASELINE and new_is_ok:
        return False
    return status in FAILING or (fail_on_inconclusive and status == Status.INCONCLUSIVE)


def build_exit_code(statuses: Iterable[Status], *, problems: bool = False, fail_on_inconclusive: bool = False) -> int:
    """The build's answer (`errors.EXIT_CODES`): a regression exits 1 (an open verdict too, with
    `fail_on_inconclusive`), a config that failed 4, nothing to compare with (a workload's `problems` included)
    3, else 0; where several apply, 1 wins over 4, and 4 over 3."""
    found = set(statuses)
    applies = {
        EXIT_REGRESSION: Status.REGRESSION in found or (fail_on_inconclusive and Status.INCONCLUSIVE in found),
        EXIT_WORKLOAD_FAILED: Status.FAILED in found,
        EXIT_NO_BASELINE: bool(found & {Status.NOT_COMPARABLE, Status.NO_BASELINE}) or problems,
    }
    return worst_exit_code(code for code, applied in applies.items() if applied)


# The codes a verdict ends a check with when it fails the build: what warn-only reports and lets pass. A usage
# error (2), nothing to gate (5) and an interruption (130) still end it: the gate did not run as configured.
VERDICT_FAILURES = frozenset({EXIT_REGRESSION, EXIT_NO_BASELINE, EXIT_WORKLOAD_FAILED})


def warned_exit_code(code: int, *, warn_only: bool) -> int:
    """The build's answer under warn-only (`--warn-only`, `perfgate_warn_only`, the Action's `fail: false`): a
    verdict that fails the build (`VERDICT_FAILURES`) is reported and the build passes; any other code stands."""
    return EXIT_OK if warn_only and code in VERDICT_FAILURES else code


def session_exit_code(
    statuses: Iterable[Status],
    *,
    problems: bool = False,
    micro: Iterable[Status] = (),
    micro_paired: bool = False,
    fail_on_inconclusive: bool = False,
) -> int:
    """The build's answer for a check's verdicts and its pytest-benchmark tests' (`micro`): the same rule as
    `build_exit_code`; a paired session's benchmark that the base lacks is new, not missing."""
    found = list(statuses)
    found += [s for s in micro if not (micro_paired and s == Status.NO_BASELINE)]
    return build_exit_code(found, problems=problems, fail_on_inconclusive=fail_on_inconclusive)


def micro_fails(statuses: Iterable[Status], *, micro_paired: bool = False, fail_on_inconclusive: bool = False) -> bool:
    """Whether any pytest-benchmark test's verdict fails the session (the plugin's loop over its tests)."""
    return any(fails_build(s, fail_on_inconclusive=fail_on_inconclusive, new_is_ok=micro_paired) for s in statuses)


def job_exit_code(
    code: int,
    statuses: Iterable[Status],
    *,
    problems: bool,
    warn_no_baseline: bool,
    fail_on_inconclusive: bool = False,
) -> int:
    """The Action's job: the check's own `code`, except that a check that exited 3 (nothing to compare with)
    under the `warn` no-baseline policy, or on a first commit, is judged again on the `statuses` that are
    left once the missing baselines are set aside (`problems`: a workload problem that still counts)."""
    if warn_no_baseline and code == EXIT_NO_BASELINE:
        return build_exit_code(statuses, problems=problems, fail_on_inconclusive=fail_on_inconclusive)
    return code


def measured_exit_code(measured: bool) -> int | None:
    """Exit 4 when the command measured nothing at all (every trial failed); None: go on to the verdict."""
    return None if measured else EXIT_WORKLOAD_FAILED


def check_something_to_gate(names: Iterable[str], *, where: str = "[tool.perfgate] workloads") -> None:
    """Nothing to gate: a check, run or update whose resolved workload list is empty exits 5 instead of
    passing with nothing compared."""
    if not list(names):
        raise NothingToGateError(
            "nothing to gate: the workload list is empty",
            where=where,
            hint="name a workload on the command line or in [tool.perfgate] workloads",
        )
