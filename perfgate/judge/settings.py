"""The looks of a sequential check: the error rates each look may spend under a check's settings
(`records.verdicts.GateSettings`: thresholds, alpha, the trial budget), and each config's looks as they come."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from perfgate.judge.stats import COUNT_SHARE, PASS_ERROR, LookLevels, look_levels, looks
from perfgate.records.verdicts import GateSettings, Look


def levels_at(settings: GateSettings, look: Look | None) -> LookLevels:
    """The error rates one look may spend: a spending plan over the check's looks; without a look (a judgement that
    adds no trials) the whole of them. Alpha's share of a session's check (`session_divisor`) divides each look's
    alpha (the count test's too), so its looks together spend at most that share."""
    levels = _spent_at(settings, look)
    return levels if settings.session_divisor == 1.0 else levels.divided(settings.session_divisor)


def _spent_at(settings: GateSettings, look: Look | None) -> LookLevels:
    if look is None:
        return LookLevels(settings.alpha, PASS_ERROR)
    most = max(settings.first_n, settings.max_n)
    if look.previous_n is None:  # a results file from before spending plans: an even split over the check's looks
        count = looks(settings.first_n, most)
        return LookLevels(settings.alpha / count, PASS_ERROR / count)
    levels = look_levels(
        look.n,
        look.previous_n,
        most,
        alpha=settings.alpha,
        final=look.final,
        shape=settings.spending,
        held_back=look.held_back,
        extension=look.extension,
    )
    return replace(levels, count_alpha=count_level(look, most, settings.alpha))


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
    spends only the error rates added since (`levels_at`). An `extensible` tracker (a paired check)
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
