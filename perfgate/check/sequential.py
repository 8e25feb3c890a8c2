"""Measure until decided: more trials (or pairs) for the configs whose verdict is still open."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from perfgate.judge.settings import GateSettings
from perfgate.judge.stats import Verdict
from perfgate.judge.verdict import ConfigVerdict, GateResult, Status


def _throughput_open(verdict: ConfigVerdict) -> bool:
    """Throughput still undecided (against an accepted slowdown's bound where one applied)."""
    if verdict.throughput is None or verdict.status not in (Status.REGRESSION, Status.INCONCLUSIVE):
        return False
    return verdict.throughput_verdict == Verdict.INCONCLUSIVE


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
) -> tuple[GateResult, str | None]:
    """Judge, and while verdicts are open add one more `unit` of each open config, until every config is
    decided, has `max_trials`, or the next round would pass the time budget (that look is then the
    last, and spends what is left of the error rates)."""
    most = max(settings.trials, settings.max_trials)

    def open_configs(result: GateResult) -> list[tuple[str, str]]:
        # A config stays open while its throughput is undecided, even when peak memory already failed it:
        # the report and the diagnosis need the throughput verdict too.
        return [
            (v.workload, v.config)
            for v in result.verdicts
            if (v.status == Status.INCONCLUSIVE or _throughput_open(v))
            and sizes().get((v.workload, v.config), most) < most
        ]

    budget_s = settings.budget_s(len(sizes()))

    def budget_left_after(pending: list[tuple[str, str]]) -> bool:
        return time.monotonic() - started + round_s(pending) <= budget_s

    result = judge(False)
    while True:
        pending = open_configs(result)
        if not pending:
            if any(v.status == Status.INCONCLUSIVE for v in result.verdicts) and most > settings.trials:
                return result, f"{settings.front_end.option('max-trials')} {settings.max_trials} reached"
            return result, None
        if not budget_left_after(pending):
            # The data will not grow: look once more as the last look, with what is left of the error rates.
            final = judge(True)
            if any(v.status == Status.INCONCLUSIVE for v in final.verdicts):
                return final, f"time budget {budget_s:g} s reached"
            return final, None
        if notify:
            notify(f"inconclusive so far: {', '.join(f'{w} {c}' for w, c in pending)}; running one more {unit} of each")
        run_more(pending)
        result = judge(False)
