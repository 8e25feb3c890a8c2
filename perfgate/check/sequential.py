"""Measure until decided: more trials (or pairs) for the configs whose verdict is still open.

`measure_until_decided` is the one loop, for the workloads' checks (stored and paired: `decide_sequentially`)
and for pytest-benchmark tests in session pairs (`check.micro.decide_pairs`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from perfgate.outcome import Status
from perfgate.records.comparisons import Verdict
from perfgate.records.verdicts import ConfigVerdict, GateResult, GateSettings


def _throughput_open(verdict: ConfigVerdict) -> bool:
    """Throughput still undecided (against an accepted slowdown's bound where one applied)."""
    if verdict.throughput is None or verdict.status not in (Status.REGRESSION, Status.INCONCLUSIVE):
        return False
    return verdict.throughput_verdict == Verdict.INCONCLUSIVE


K = TypeVar("K")

# An intermittent slowdown's signature at the budget's look (`intermittent`): at least this many of head's trials
# much slower than their pair (and no base trial so, for one). Such a config is measured on past the budget up to
# its most pairs: a slow path in a third of the trials needs 20-40 pairs, and a twelfth of such checks saw it in
# one pair of the first 12 (one, not two: 94% of them caught against 90%; benchmarks/count_test.py).
INTERMITTENT_PAIRS = 1


def measure_until_decided(
    look: Callable[[bool], Sequence[K]],
    run_more: Callable[[Sequence[K]], None],
    room_for: Callable[[Sequence[K]], bool],
    notify: Callable[[Sequence[K]], None] | None = None,
) -> bool:
    """Look, and while anything is open measure one more round of it and look again, until nothing is open or
    one more round does not fit (`room_for`: the budget, the most allowed); then look once more, as the final
    look, at the same data (it spends what is left of the error rates). True when that final look ended it.

    `look(final)` judges what has new data (`final`: no more will come) and returns the keys still open that
    one more round would measure; `notify(pending)` says what runs next, before `run_more(pending)`."""
    pending = look(False)
    while pending:
        if not room_for(pending):
            look(True)
            return True
        if notify is not None:
            notify(pending)
        run_more(pending)
        pending = look(False)
    return False


def intermittent(verdict: ConfigVerdict) -> bool:
    """A verdict still open whose slow pairs fall on head's side: at least INTERMITTENT_PAIRS of head's trials
    ran much slower than their pair (the count test's cut; without one, SLOW_FACTOR 1.5x), and base's slow trials,
    if any, are at most a quarter as many. Interference hits either side alike; a slow path that head alone takes
    is what an intermittent regression looks like, and it needs more pairs than the budget gave.

    A config that already fails (its exact counts or its peak memory beyond their tolerances) is not open: no
    regression of it can pass unseen, and pairs past the budget would only narrow its throughput's interval."""
    if verdict.status != Status.INCONCLUSIVE or not _throughput_open(verdict) or verdict.throughput is None:
        return False
    count = verdict.throughput.count
    base_slow, head_slow = verdict.throughput.slow if count is None else (count.base_slow, count.head_slow)
    return head_slow >= INTERMITTENT_PAIRS and 4 * base_slow <= head_slow


def decide_sequentially(
    judge: Callable[[bool], GateResult],
    sizes: Callable[[], Mapping[tuple[str, str], int]],
    run_more: Callable[[list[tuple[str, str]]], None],
    round_s: Callable[[list[tuple[str, str]]], float],
    settings: GateSettings,
    started: float,
    notify: Callable[[str], None] | None,
    *,
    unit: str,
    extend: Callable[[list[tuple[str, str]]], None] | None = None,
) -> tuple[GateResult, str | None]:
    """Judge, and while verdicts are open add one more `unit` of each open config, until every config is
    decided, has `max_trials`, or the next round would pass the time budget (that look is then the
    last, and spends what is left of the error rates).

    With `extend` (a paired check, whose tracker held a reserve back at the budget's look), the configs that
    look leaves open with an intermittent slowdown's signature (`intermittent`) are measured on past the
    budget, up to `max_trials` pairs (by pairs, not by time), their looks spending the reserve: `extend(keys)`
    tells the tracker which."""
    most = max(settings.first_n, settings.max_n)

    def open_configs(result: GateResult, among: Sequence[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
        # A config stays open while its throughput is undecided, even when peak memory already failed it:
        # the report and the diagnosis need the throughput verdict too.
        return [
            (v.workload, v.config)
            for v in result.verdicts
            if (v.status == Status.INCONCLUSIVE or _throughput_open(v))
            and sizes().get((v.workload, v.config), most) < most
            and (among is None or (v.workload, v.config) in among)
        ]

    budget_s = settings.budget_s(len(sizes()))

    def fits(limit_s: float) -> Callable[[Sequence[tuple[str, str]]], bool]:
        return lambda pending: time.monotonic() - started + round_s(list(pending)) <= limit_s

    latest: list[GateResult] = []

    def look(final: bool, among: Sequence[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
        latest.append(judge(final))
        return open_configs(latest[-1], among)

    def say(pending: Sequence[tuple[str, str]]) -> None:
        if notify:
            notify(f"inconclusive so far: {_names(pending)}; running one more {unit} of each")

    def more(pending: Sequence[tuple[str, str]]) -> None:
        run_more(list(pending))

    budget_ended = measure_until_decided(look, more, fits(budget_s), say)
    result = latest[-1]
    stopped = f"time budget {budget_s:g} s reached"
    extensible = budget_ended and extend is not None
    extended = [key for key in open_configs(result) if key in _intermittent_keys(result)] if extensible else []
    if extend is not None and extended:
        extend(extended)
        if notify:
            notify(
                f"{_names(extended)}: the slow {unit}s fall on head's side, as an intermittent slowdown's do; "
                f"measuring on past the time budget, up to {most} {unit}s"
            )
        # By pairs, not by time: a slow path in a third of the trials needs 20-40 of them (the count test).
        budget_ended = measure_until_decided(lambda final: look(final, extended), more, lambda _: True, say)
        result = latest[-1]
        stopped = f"time budget {budget_s:g} s reached, and the extension's {most} {unit}s"
    still_open = any(v.status == Status.INCONCLUSIVE for v in result.verdicts)
    if budget_ended:  # the data did not grow at the last look, which spent what was left of the error rates
        return result, stopped if still_open else None
    if still_open and most > settings.first_n:
        return result, f"{settings.front_end.option('max-trials')} {settings.max_n} reached"
    return result, None


def _intermittent_keys(result: GateResult) -> set[tuple[str, str]]:
    return {(v.workload, v.config) for v in result.verdicts if intermittent(v)}


def _names(keys: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{w} {c}" for w, c in keys)
