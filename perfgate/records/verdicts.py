"""What a check decided, as shapes: the settings it judged by, each config's verdict, each workload's, the whole
check's result (`GateResult`), a pytest-benchmark test's verdict and a pytest session's one false-alarm rate.

`judge` decides them; every report reads them (records sit below both). `GateResult.exit_code` is the build's
answer, from the one rule in `perfgate.outcome`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.errors import UsageError
from perfgate.naming import CLI, FrontEnd
from perfgate.outcome import Status, build_exit_code, warned_exit_code
from perfgate.project import DEFAULT_TRIALS, ProjectConfig, Thresholds
from perfgate.records.acceptance import Acceptance, strongest, unused
from perfgate.records.baselines import BaselineEntry
from perfgate.records.comparisons import (
    DEFAULT_ALPHA,
    DEFAULT_SPENDING,
    SLOW_RATE,
    MemoryComparison,
    ThroughputComparison,
    Verdict,
    combined_verdict,
)
from perfgate.records.counts import CountsComparison
from perfgate.records.micro import MicroBenchmark
from perfgate.records.results import Against, GateRecord, RunResult

DEFAULT_MAX_TRIALS = 8
# A paired check's largest number of pairs per config; the time budget usually stops it first. 40, not 20: a
# slowdown on a third of the trials needs about that many (benchmarks/operating_characteristic.py).
DEFAULT_MAX_PAIRS = 40
DEFAULT_TIME_BUDGET_S = 600.0  # a check's time budget when not given: 5 minutes per config judged, 10 at most
PER_CONFIG_BUDGET_S = 300.0


@dataclass(frozen=True)
class GateSettings:
    """How a check decides: thresholds (global and per workload/config), alpha and the trial budget."""

    project: ProjectConfig = field(default_factory=ProjectConfig)
    threshold: float | None = None  # from the command line; overrides the project's global threshold
    alpha: float = DEFAULT_ALPHA
    # n is what a look counts: trials a side against stored baselines, pairs in a paired check. The first look
    # comes at `first_n` (`--trials`), the last at `max_n` (`--max-trials`) at the most.
    first_n: int = DEFAULT_TRIALS
    max_n: int = DEFAULT_MAX_TRIALS
    time_budget_s: float | None = None  # None: `budget_s`'s default, by the number of configs judged
    fail_on_inconclusive: bool = False
    warn_only: bool = False  # report every verdict and pass the build (`outcome.warned_exit_code`)
    front_end: FrontEnd = CLI  # how the messages spell options and the command that writes new baselines
    spending: str = DEFAULT_SPENDING  # how the error rates are spread over the looks (stats.spent)
    accepted: tuple[Acceptance, ...] = ()  # slowdowns accepted on purpose (`judge.acceptance`)
    # A paired check's count test (`stats.count_slow_pairs`): the runner's rate of one-sided slow pairs on unchanged
    # code, and where it came from ("" for perfgate's default; "measured by perfgate calibrate on DATE").
    slow_rate: float = SLOW_RATE
    slow_rate_source: str = ""
    # A check of a `pytest --perfgate` session of several: alpha's divisor for its share of the session's one
    # false-alarm rate (`judge.family`), dividing every look's alpha; 1 for a check alone.
    session_divisor: float = 1.0

    @property
    def update_command(self) -> str:
        return self.front_end.update_command

    def budget_s(self, configs: int) -> float:
        """The check's time budget: `time_budget_s` when given, otherwise 5 minutes for each of the `configs`
        judged and 10 at most, so a one-config check that cannot decide stops within 5 minutes while the
        three-config lab gets 10 (a budget of 0 configs, as for pytest-benchmark sessions: the 10)."""
        if self.time_budget_s is not None:
            return self.time_budget_s
        if configs <= 0:
            return DEFAULT_TIME_BUDGET_S
        return min(PER_CONFIG_BUDGET_S * configs, DEFAULT_TIME_BUDGET_S)

    def thresholds_for(self, workload: str, config: str) -> Thresholds:
        """The thresholds of one workload and config: the project's overrides, the command line's threshold."""
        return self.project.thresholds_for(workload, config, threshold=self.threshold)

    @property
    def default_thresholds(self) -> Thresholds:
        """The thresholds where no workload's override applies (pytest-benchmark tests, `perfgate history`)."""
        return self.thresholds_for("", "")

    def acceptance(self, workload: str, config: str) -> Acceptance | None:
        """The slowdown accepted for one config, if any: the most specific target, then the largest."""
        return strongest(self.accepted, workload, config)

    def to_record(
        self,
        baseline_dir: Path,
        *,
        mode: str | None = None,
        looks: Looks | None = None,
        divisors: Mapping[tuple[str, str], tuple[float, float]] | None = None,
    ) -> GateRecord:
        """What a results file keeps of a check judged with these settings (`GateResult.to_record` adds its
        mode, looks and divisors), so a later report judges the run the same way."""
        return GateRecord(
            threshold=self.threshold,
            alpha=self.alpha,
            trials=self.first_n,
            max_trials=self.max_n,
            fail_on_inconclusive=self.fail_on_inconclusive,
            baseline_dir=str(baseline_dir),
            spending=self.spending,
            accepted=tuple(a.to_record() for a in self.accepted),
            mode=mode,
            looks=None if looks is None else {f"{w}/{c}": tuple(k.to_record()) for (w, c), k in looks.items()},
            divisors=None if divisors is None else {f"{w}/{c}": (d[0], d[1]) for (w, c), d in divisors.items()},
            # the count test's rate where it is not perfgate's default (a file without it was judged at SLOW_RATE)
            slow_rate=None if self._default_slow_rate else self.slow_rate,
            slow_rate_source=None if self._default_slow_rate else self.slow_rate_source,
            warn_only=self.warn_only or None,
        )

    @property
    def _default_slow_rate(self) -> bool:
        return self.slow_rate == SLOW_RATE and not self.slow_rate_source

    @classmethod
    def from_record(cls, project: ProjectConfig, record: GateRecord) -> GateSettings:
        """Settings saved by `to_record` (the project's thresholds still apply); an older file's record lacks
        the spending plan, the acceptances and the count test's rate (the defaults). The recorded rate is the one
        the check used: a project's `slow_pair_rate` set since does not judge the file."""
        return cls(
            project=project,
            threshold=record.threshold,
            alpha=float(record.alpha),
            first_n=record.trials,
            max_n=record.max_trials,
            fail_on_inconclusive=record.fail_on_inconclusive,
            spending=record.spending or DEFAULT_SPENDING,
            accepted=tuple(Acceptance.from_record(a) for a in record.accepted or ()),
            slow_rate=SLOW_RATE if record.slow_rate is None else float(record.slow_rate),
            slow_rate_source=record.slow_rate_source or "",
            warn_only=bool(record.warn_only),
        )

    @classmethod
    def from_options(
        cls,
        project: ProjectConfig,
        *,
        trials: int,
        threshold: float | None = None,
        alpha: float | None = None,
        max_trials: int | None = None,
        time_budget_s: float | None = None,
        fail_on_inconclusive: bool = False,
        warn_only: bool = False,
        front_end: FrontEnd = CLI,
        accepted: Sequence[Acceptance] = (),
        paired: bool = False,
    ) -> GateSettings:
        """Settings from a front end's options (None: not given) over the project's. `paired`: a paired check,
        whose pairs are cheap beside a stored baseline's trials: without --max-trials it may take up to
        `DEFAULT_MAX_PAIRS` (the project's max_trials is for trials against stored baselines). The count test's
        rate is the project's `slow_pair_rate` (measured by `perfgate calibrate`), else SLOW_RATE."""
        if max_trials is not None and max_trials < trials:
            most, count = front_end.option("max-trials"), front_end.option("trials")
            raise UsageError(
                f"{most} {max_trials} is below {count} {trials}",
                hint=f"give {most} at least as large as {count} (or equal, for no extra trials)",
            )
        if max_trials is None and paired:
            max_trials = max(trials, DEFAULT_MAX_PAIRS)
        if max_trials is None:
            max_trials = max(trials, project.max_trials or DEFAULT_MAX_TRIALS)
        if alpha is None:
            alpha = project.alpha if project.alpha is not None else DEFAULT_ALPHA
        return cls(
            project=project,
            threshold=threshold,
            alpha=alpha,
            first_n=trials,
            max_n=max_trials,
            time_budget_s=time_budget_s,
            fail_on_inconclusive=fail_on_inconclusive,
            warn_only=warn_only,
            front_end=front_end,
            accepted=tuple(accepted),
            slow_rate=SLOW_RATE if project.slow_pair_rate is None else project.slow_pair_rate,
            slow_rate_source=project.slow_pair_rate_source,
        )


@dataclass(frozen=True)
class Look:
    """One test of a config in a sequential check: at `n` trials (or pairs), the previous test at
    `previous_n` (0: none; None: unknown, a file written before spending plans), `final` when no
    more will follow. A paired check's budget look is `held_back` (it keeps a reserve of the error rates for
    an extension); a look past the budget names the budget look's n and previous n (`extension`)."""

    n: int
    previous_n: int | None
    final: bool
    held_back: bool = False
    extension: tuple[int, int] | None = None

    def to_record(self) -> list[object]:
        if not self.held_back and self.extension is None:
            return [self.n, self.previous_n, self.final]
        extension = None if self.extension is None else list(self.extension)
        return [self.n, self.previous_n, self.final, self.held_back, extension]

    @classmethod
    def from_record(cls, record: Sequence[Any]) -> Look:
        n, previous_n, final, *rest = record
        held_back, extension = (bool(rest[0]), rest[1]) if rest else (False, None)
        return cls(
            int(n),
            None if previous_n is None else int(previous_n),
            bool(final),
            held_back,
            None if extension is None else (int(extension[0]), int(extension[1])),
        )


Looks = Mapping[tuple[str, str], Look]


@dataclass(frozen=True)
class AcceptedSlowdown:
    """A slowdown accepted on purpose, and the throughput judged against its bound instead of the threshold
    (raw and, against stored baselines, machine-adjusted)."""

    acceptance: Acceptance
    throughput: ThroughputComparison
    adjusted: ThroughputComparison | None = None

    @property
    def verdict(self) -> Verdict:
        return combined_verdict(self.throughput, self.adjusted)

    @property
    def within(self) -> bool:
        """The data rule out a slowdown beyond the accepted one."""
        return self.verdict in (Verdict.NO_CHANGE, Verdict.IMPROVEMENT)


@dataclass(frozen=True)
class ConfigVerdict:
    workload: str
    config: str
    status: Status
    reason: str  # one line that makes sense without the table
    thresholds: Thresholds
    throughput: ThroughputComparison | None = None
    memory: MemoryComparison | None = None
    trials_failed: int = 0
    adjusted: ThroughputComparison | None = None  # samples/sec per machine-probe rate
    machine: ThroughputComparison | None = None  # the machine probe itself: how fast the machine ran
    evidence: tuple[str, ...] = ()  # what else changed: the model's numerics, the data pipeline's output
    accepted: AcceptedSlowdown | None = None  # where a slowdown was accepted and the threshold alone did not pass
    counts: CountsComparison | None = None  # the step's exact counts against the other side's (None: not counted)

    @property
    def throughput_verdict(self) -> Verdict | None:
        """The throughput verdict that decides: against the accepted bound where one applied."""
        if self.accepted is not None:
            return self.accepted.verdict
        return None if self.throughput is None else combined_verdict(self.throughput, self.adjusted)

    @property
    def slower(self) -> bool:
        """Throughput regressed (raw and machine-adjusted agreeing), whatever peak memory did."""
        if self.throughput is None:
            return False
        return combined_verdict(self.throughput, self.adjusted) == Verdict.REGRESSION


@dataclass(frozen=True)
class WorkloadVerdict:
    workload: str
    configs: list[ConfigVerdict]
    baseline: BaselineEntry | None = None
    problem: str | None = None  # why the workload as a whole could not be compared
    problem_status: Status | None = None  # NO_BASELINE or NOT_COMPARABLE, with `problem`
    new: bool = False  # new in a paired check's head (`Against.new`): nothing to compare with, and no failure


@dataclass(frozen=True)
class GateResult:
    """Every workload's verdicts; `exit_code` is the build's answer."""

    workloads: list[WorkloadVerdict]
    settings: GateSettings
    run: RunResult | None = None
    stopped_because: str | None = None  # why extra trials stopped while verdicts were still open
    looks: Mapping[tuple[str, str], Look] = field(default_factory=dict)  # each config's last look
    against: Against | None = None  # set in a paired check: the base it measured beside the working tree
    comparisons: int = 0  # tests that share the check's one false-alarm rate (`one_error_rate`)
    family: Mapping[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # alpha's divisors used
    session: SessionRate | None = None  # a pytest session's checks: the one false-alarm rate they share

    @property
    def mode(self) -> str:
        """What the check compared with, in words, for every report."""
        if self.against is None:
            return "stored baselines"
        return self.against.describe()

    @property
    def caveat(self) -> str | None:
        """What a check against stored baselines cannot promise, for every report of one."""
        if self.against is not None or not self.verdicts or all(v.throughput is None for v in self.verdicts):
            return None  # paired, nothing judged, or judged by exact counts alone (no session to differ)
        return (
            "stored baselines were measured in another session, and a whole session can run slower than another "
            "with the same code: this check's error rates hold only for a machine as steady as the baseline's. "
            "A paired check against the base commit measures both sides here and keeps the published rates "
            "(docs/statistics.md)"
        )

    @property
    def verdicts(self) -> list[ConfigVerdict]:
        return [c for w in self.workloads for c in w.configs]

    @property
    def unused_acceptances(self) -> list[str]:
        """A warning for each accepted slowdown whose target this check did not measure."""
        return unused(self.settings.accepted, {w.workload: [v.config for v in w.configs] for w in self.workloads})

    @property
    def failing_problems(self) -> bool:
        """A workload could not be compared (exit 3 in `outcome.build_exit_code`); one new in the head fails nothing."""
        return any(w.problem and not w.new for w in self.workloads)

    @property
    def verdict_code(self) -> int:
        """The verdicts' own answer (`outcome.build_exit_code`), before warn-only."""
        return build_exit_code(
            (v.status for v in self.verdicts),
            problems=self.failing_problems,
            fail_on_inconclusive=self.settings.fail_on_inconclusive,
        )

    @property
    def exit_code(self) -> int:
        """The build's answer: the verdicts', passed under warn-only (`outcome.warned_exit_code`)."""
        return warned_exit_code(self.verdict_code, warn_only=self.settings.warn_only)

    def to_record(self, baseline_dir: Path) -> GateRecord:
        """What a results file keeps of this check: its settings, its mode, each config's last look and the
        divisors of alpha, so a later report judges the run exactly as the check did."""
        record = self.settings.to_record(baseline_dir, mode=self.mode, looks=self.looks, divisors=self.family)
        if self.session is None:
            return record
        return replace(record, session={"comparisons": self.session.comparisons, "checks": self.session.checks})


@dataclass(frozen=True)
class MicroVerdict:
    name: str
    status: Status
    reason: str
    baseline: MicroBenchmark | None = None
    current: MicroBenchmark | None = None
    throughput: ThroughputComparison | None = None
    adjusted: ThroughputComparison | None = None
    machine: ThroughputComparison | None = None


@dataclass(frozen=True)
class SessionRate:
    """The one false-alarm rate a session's checks share, as its reports state it: `alpha` over `comparisons`
    (each with a p-value: exact ones and counts are decided outside the family) in `checks` checks."""

    alpha: float
    comparisons: int
    checks: int

    @property
    def described(self) -> str:
        """`5 comparisons in 3 checks (Holm within each check's share of alpha)`."""
        checks = f"{self.checks} check{'s' if self.checks != 1 else ''}"
        how = "Holm within each check's share of alpha" if self.checks > 1 else "Holm"
        return f"{self.comparisons} comparison{'s' if self.comparisons != 1 else ''} in {checks} ({how})"

    @property
    def line(self) -> str:
        """`one false-alarm rate for the session: alpha 0.01 over 5 comparisons in 3 checks (...)`."""
        return f"one false-alarm rate for the session: alpha {self.alpha:g} over {self.described}"
