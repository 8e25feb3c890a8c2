"""How a check decides: thresholds, alpha, the trial budget, and the looks of a sequential check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.errors import UsageError
from perfgate.judge.acceptance import Acceptance, strongest
from perfgate.judge.stats import (
    COUNT_SHARE,
    DEFAULT_ALPHA,
    DEFAULT_SPENDING,
    PASS_ERROR,
    SLOW_RATE,
    LookLevels,
    look_levels,
    looks,
)
from perfgate.naming import CLI, FrontEnd
from perfgate.project import DEFAULT_TRIALS, ProjectConfig, Thresholds
from perfgate.records.results import GateRecord

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

    @property
    def looks(self) -> int:
        """How often the check may test each config at most (after its first trials, then after each)."""
        return looks(self.first_n, max(self.first_n, self.max_n))

    def levels(self, look: Look | None) -> LookLevels:
        """The error rates one look may spend: a spending plan over the check's looks; without a look
        (a judgement that adds no trials) the whole of them. Alpha's share of a session's check
        (`session_divisor`) divides each look's alpha (the count test's too), so its looks together spend at most
        that share."""
        levels = self._spent_at(look)
        return levels if self.session_divisor == 1.0 else levels.divided(self.session_divisor)

    def _spent_at(self, look: Look | None) -> LookLevels:
        if look is None:
            return LookLevels(self.alpha, PASS_ERROR)
        if look.previous_n is None:  # a results file from before spending plans: an even split
            return LookLevels(self.alpha / self.looks, PASS_ERROR / self.looks)
        most = max(self.first_n, self.max_n)
        levels = look_levels(
            look.n,
            look.previous_n,
            most,
            alpha=self.alpha,
            final=look.final,
            shape=self.spending,
            held_back=look.held_back,
            extension=look.extension,
        )
        return replace(levels, count_alpha=count_level(look, most, self.alpha))

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
COUNT_SPENDING_POWER = 2.0


def count_level(look: Look, most: int, alpha: float) -> float:
    """The count test's level at a look (`stats.count_slow_pairs`): COUNT_SHARE of alpha, spent over the pairs up
    to `most` whatever the time budget, in proportion to (n / most)^2: a count of a few pairs can reject nothing
    at these levels, and a slow path in a third of the trials shows after 15-30 pairs. The last look of a check
    (final and not held back for an extension) spends what is left. Every path's looks together spend at most
    COUNT_SHARE x alpha (the union bound)."""
    most = max(most, look.n)  # as `look_levels`: a look past the most pairs is the last
    previous = min(look.previous_n or 0, most)
    last = look.n >= most or (look.final and not look.held_back)
    upto = most if last else min(look.n, most)
    power = COUNT_SPENDING_POWER
    return max(COUNT_SHARE * alpha * max(upto**power - previous**power, 0) / most**power, 1e-300)


class LookTracker:
    """Each config's looks in a sequential check: the sample size of its previous look, so every look
    spends only the error rates added since (`GateSettings.levels`). An `extensible` tracker (a paired check)
    holds back a reserve at the budget's final look, and `extend` spends it on the configs measured past the
    budget."""

    def __init__(self, settings: GateSettings, *, extensible: bool = False) -> None:
        self.settings = settings
        self.extensible = extensible
        self.previous: dict[tuple[str, str], int] = {}
        self.current: dict[tuple[str, str], Look] = {}
        self.extended: dict[tuple[str, str], tuple[int, int]] = {}

    def look(self, counts: Mapping[tuple[str, str], int], final: bool) -> dict[tuple[str, str], Look]:
        """The looks at these sample sizes; a config whose size did not grow since its last look keeps it."""
        most = max(self.settings.first_n, self.settings.max_n)
        for key, n in counts.items():
            before = self.previous.get(key, 0)
            extension = self.extended.get(key)
            if n <= before or n < 1:
                if final and key in self.current:  # the same data, now known to be the last look
                    look = self.current[key]
                    held = self.extensible and extension is None and look.n < most
                    self.current[key] = replace(look, final=True, held_back=held)
                continue
            last = final or n >= most
            held = self.extensible and last and extension is None and n < most
            self.current[key] = Look(n, before, last, held, extension)
            self.previous[key] = n
        return dict(self.current)

    def extend(self, keys: Sequence[tuple[str, str]]) -> None:
        """Measure these configs past the budget: their later looks share the reserve their budget look (their
        current look, held back) kept."""
        for key in keys:
            look = self.current[key]
            assert look.held_back and look.previous_n is not None, f"{key} has no held-back budget look to extend"
            self.extended[key] = (look.n, look.previous_n)
