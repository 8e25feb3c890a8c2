"""The count test of issue 42 by simulation: the paired check's operating characteristic before and after.

"Before" is the paired check of commit a31faa1: the interval of `stats._decide` at the look's alpha, the extension
past the budget for an intermittent signature capped at two more time budgets (`check/sequential.py` of that
commit, loaded from `git show`). "After" is the working tree: the count test (`stats.count_slow_pairs`) shares
each look's alpha with the interval (COUNT_SHARE), a count that rejects makes a regression of an interval beyond
the threshold at the boundary's level, and the extension runs by pairs up to 40.

Both go through perfgate's own code: `decide_sequentially` on a simulated clock (a pair takes a second, the first
look at 3 pairs, a budget of BUDGET pairs), an extensible `LookTracker` whose levels come from
`GateSettings.levels`, and `compare_paired` (before: with `slow_rate=None`, which is a31faa1's rule). One config,
throughput alone (a real check's Holm over throughput and memory only lowers the false-alarm rates).

The machine (log samples/s of a trial): a random walk of 2% per pair shared by both trials of a pair, per-trial
noise N(0, noise^2); a steady slowdown s makes head (1 + s)x slower;
- a slow path: each head trial, with probability 1/3 or 1/5, 2x slower;
- hiccups on both sides: each trial of either side, with probability 5%, 1.5x slower;
- a neighbour: in 10% (or 30%) of pairs one of the two trials, either side, 2x slower (10%: each side stalled in
  5% of pairs, the default rate exactly; 30%: three times it, where the count test must stand down).

    cd benchmarks && python count_test.py [--reps 1000] [--aa-reps 3000] [--seed 20261128]

Prints Markdown tables (progress on stderr); about 10 minutes on two cores with the defaults.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
from operating_characteristic import module_at  # run from benchmarks/
from power import _markdown, _pct, _upper_95  # the report's helpers

import perfgate.check.sequential as after_sequential
from perfgate.judge.settings import LookTracker, levels_at
from perfgate.judge.stats import COUNT_SHARE, SLOW_CUT_FLOOR, SLOW_CUT_SIGMAS, compare_paired
from perfgate.outcome import Status
from perfgate.records.comparisons import SLOW_RATE, Verdict
from perfgate.records.verdicts import ConfigVerdict, GateSettings

OLD_COMMIT = "a31faa1"
FIRST, MOST, BUDGET = 3, 40, 12
DRIFT_STEP = 0.02
THRESHOLD = 0.05


@dataclass(frozen=True)
class Machine:
    """One cell's machine: trial noise, a steady slowdown, a slow path, hiccups and a neighbour."""

    name: str
    noise: float = 0.03
    slowdown: float = 0.0
    slow_path: float = 0.0  # share of head's trials 2x slower
    hiccups: float = 0.0  # share of every trial (either side) 1.5x slower
    neighbour: float = 0.0  # share of pairs in which one trial, either side, is 2x slower

    def draw(self, rng: np.random.Generator, n: int) -> tuple[list[float], list[float]]:
        level = np.cumsum(DRIFT_STEP * rng.standard_normal(n))
        base = level + self.noise * rng.standard_normal(n)
        head = level + self.noise * rng.standard_normal(n) - math.log1p(self.slowdown)
        head -= math.log(2.0) * (rng.random(n) < self.slow_path)
        base -= math.log(1.5) * (rng.random(n) < self.hiccups)
        head -= math.log(1.5) * (rng.random(n) < self.hiccups)
        hit, on_base = rng.random(n) < self.neighbour, rng.random(n) < 0.5
        base -= math.log(2.0) * (hit & on_base)
        head -= math.log(2.0) * (hit & ~on_base)
        return list(1000 * np.exp(base)), list(1000 * np.exp(head))


AA = (
    Machine("A/A, 3% noise"),
    Machine("A/A, 6% noise", noise=0.06),
    Machine("A/A, hiccups on both sides (5% of trials 1.5x)", hiccups=0.05),
    Machine("A/A, a neighbour in 10% of pairs", neighbour=0.10),
    Machine("A/A, a neighbour in 30% of pairs", neighbour=0.30),
)
CHANGES = (
    Machine("1/3 of head 2x slower", slow_path=1 / 3),
    Machine("1/5 of head 2x slower", slow_path=1 / 5),
    Machine("1/3 of head 2x slower, a neighbour in 10%", slow_path=1 / 3, neighbour=0.10),
    Machine("steady 2.5%", slowdown=0.025),
    Machine("steady 4%", slowdown=0.04),
    Machine("steady 5%", slowdown=0.05),
    Machine("steady 7.5%", slowdown=0.075),
    Machine("steady 7.5%, 6% noise", slowdown=0.075, noise=0.06),
    Machine("steady 10%", slowdown=0.10),
)


def load_old_sequential() -> ModuleType:
    """a31faa1's perfgate/check/sequential.py as a module of its own (`git show` into a temporary file)."""
    return module_at(OLD_COMMIT, "perfgate/check/sequential.py", "perfgate_sequential")


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    pairs: int
    by_count: bool
    stood_down: bool


def decide(sequential: ModuleType, base: Sequence[float], head: Sequence[float], slow_rate: float | None) -> Decision:
    """One config through `sequential.decide_sequentially` on a simulated clock (a pair takes 1 s, a budget of
    BUDGET s), judged by `compare_paired` at the extensible tracker's levels."""
    settings = GateSettings(first_n=FIRST, max_n=MOST, time_budget_s=float(BUDGET))
    key = ("simulated", "config")
    counts = {key: FIRST}
    tracker = LookTracker(settings, extensible=True)
    latest: list[Any] = []

    def judge(final: bool) -> Any:
        look = tracker.look(dict(counts), final)[key]
        n = counts[key]
        comparison = compare_paired(base[:n], head[:n], levels=levels_at(settings, look), slow_rate=slow_rate)
        latest.append(comparison)
        verdict = ConfigVerdict(*key, Status(comparison.verdict.value), "", settings.thresholds_for(*key), comparison)
        return SimpleNamespace(verdicts=[verdict])

    def run_more(pending: list[tuple[str, str]]) -> None:
        for k in pending:
            counts[k] += 1

    clock = SimpleNamespace(monotonic=lambda: float(counts[key]))
    with mock.patch.object(sequential, "time", clock):
        sequential.decide_sequentially(
            judge, lambda: dict(counts), run_more, lambda _: 1.0, settings, 0.0, None, unit="pair",
            extend=tracker.extend,
        )  # fmt: skip
    last = latest[-1]
    count = last.count
    return Decision(last.verdict, counts[key], last.by_count, count is not None and count.stood_down)


@dataclass(frozen=True)
class Cell:
    fails: int
    reps: int
    pairs: float  # mean pairs used
    by_count: int
    stood_down: int
    extended: int


def run_cell(machine: Machine, rule: str, reps: int, seed: int, old: ModuleType) -> Cell:
    rng = np.random.default_rng(seed)
    fails = by_count = stood = extended = 0
    used = []
    for _ in range(reps):
        base, head = machine.draw(rng, MOST)
        before = rule == "before"
        d = decide(old if before else after_sequential, base, head, None if before else SLOW_RATE)
        fails += d.verdict == Verdict.REGRESSION
        by_count += d.by_count
        stood += d.stood_down
        extended += d.pairs > BUDGET
        used.append(d.pairs)
    return Cell(fails, reps, float(np.mean(used)), by_count, stood, extended)


def table(machines: Sequence[Machine], reps: int, seed: int, old: ModuleType, say: Callable[[str], None]) -> str:
    rows = []
    for index, machine in enumerate(machines):
        cells = {}
        for rule in ("before", "after"):
            started = time.monotonic()
            cells[rule] = run_cell(machine, rule, reps, seed + index, old)  # the same draws for both rules
            say(f"{machine.name}, {rule}: {cells[rule]} ({time.monotonic() - started:.0f} s)")
        b, a = cells["before"], cells["after"]
        rows.append(
            [
                machine.name,
                f"{_pct(b.fails / reps, 2)} ({b.pairs:.1f})",
                f"{_pct(a.fails / reps, 2)} ({a.pairs:.1f})",
                _pct(_upper_95(a.fails, reps), 2),
                _pct(a.by_count / reps, 1),
                _pct(a.extended / reps, 1),
                _pct(a.stood_down / reps, 1),
            ]
        )
    header = [
        "true change",
        "P(fail) before (mean pairs)",
        "after (mean pairs)",
        "after: 95% upper",
        "after: called by the count",
        "after: extended past the budget",
        "after: count stood down at the last look",
    ]
    return _markdown(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=1000, help="checks per changed cell")
    parser.add_argument("--aa-reps", type=int, default=3000, help="checks per A/A cell")
    parser.add_argument("--seed", type=int, default=20261128)
    args = parser.parse_args(argv)
    started = time.monotonic()
    old = load_old_sequential()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:5.0f} s] {text}", file=sys.stderr, flush=True)

    print(f"# The count test by simulation ({datetime.date.today()}, seed {args.seed})\n")
    print(
        f"One paired config, first look at {FIRST} pairs, a time budget of {BUDGET} pairs, at most {MOST}; alpha 1%; "
        f"the count: a pair is much slower past {SLOW_CUT_SIGMAS:g} x the pairs' robust noise (at least "
        f"{SLOW_CUT_FLOOR:g}x), the runner's rate {SLOW_RATE:.0%}, {COUNT_SHARE:.0%} of each look's alpha. "
        "Before: a31faa1's rule (no count, the extension capped at three budgets).\n"
    )
    print(f"## Unchanged code ({args.aa_reps} checks a cell)\n")
    print(table(AA, args.aa_reps, args.seed, old, say))
    print(f"\n## Changed code ({args.reps} checks a cell)\n")
    print(table(CHANGES, args.reps, args.seed + 100, old, say))
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
