"""How many pairs an intermittent slowdown needs, for any valid test and for perfgate's: issue 30's last target.

The target: a workload whose head takes a 2x slower path in about one trial in three fails every paired check it
is given (at least 10 checks). The paired design's premise is that whatever disturbs a pair (a neighbour, the
cache, the clock) hits either of its two trials alike. So the nulls a check must hold its false-alarm rate under
include every one in which each pair's log ratio head/base is symmetric about 0, interference as heavy as you like.

**The bound.** Take the slow path as the whole change: a pair is "slow" when head took the path (its log ratio
near log 2), and the other pairs are unchanged (their log ratios symmetric noise). Given the pairs' absolute log
ratios, a null that swaps each pair's sides with probability 1/2 has the same absolute values, and under it the
signs are fair coins. The likelihood ratio of the slowdown to that null is 2^k where all k slow pairs lean head's
way, and 0 otherwise; the middle pairs' signs say nothing. So (Neyman-Pearson, conditionally on the absolute
values, which a test valid under every symmetric null must respect) no test whose false-alarm rate is at most
alpha fails such a check with probability above

    E[min(1, alpha * 2^K)],   K ~ Binomial(n, q),

with n pairs and q the share of head's trials on the slow path. A sequential test is no exception: whatever it
decided by n pairs is one test on n pairs. Ten checks all fail with probability at most that to the 10th power.

**perfgate's rule.** The same simulation as `operating_characteristic.py` (its machine, its decisions: the
interval of `_decide`, Hwang-Shih-DeCani spending, the reserve held back at the budget's look and spent by the
extension for an intermittent signature), with the extension capped by pairs instead of by time (`--caps`), for
two reserves. Per cell: P(fail) of the intermittent slowdown (a third of head's trials 2x slower, 3% trial noise),
of A/A with a neighbour (one trial of a pair in ten, either side, 2x slower), and of a steady 7.5% slowdown at 6%
trial noise (the price of a larger reserve); the budget allows 12 pairs.

**A sign test on the slow pairs**, the bound's own test (exact under every symmetric null), tried beside the
t-test in the extension's looks: a share of each look's alpha goes to it, and where it finds head's side slower
(P(Binomial(slow pairs, 1/2) >= head's slow pairs) <= that share) the interval's slow end drops the alpha term and
keeps the boundary level's. Shares 0 (perfgate's rule), 0.5 and 0.8, at the caps 30 and 40.

    cd benchmarks && python intermittent_limit.py [--reps 20000] [--seed 20261126]

Prints Markdown tables; about a minute on two cores.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import math
import time

import numpy as np
import operating_characteristic as oc  # the machine and the decisions, shared (run from benchmarks/)
from power import _markdown, _pct
from scipy import stats as scipy_stats

PAIRS = (12, 16, 22, 30, 36, 40, 60)
SHARES = ((1 / 5, "1/5"), (1 / 3, "1/3"), (1 / 2, "1/2"))
ALPHAS = (0.01, 0.005, 0.0015)  # a check's alpha; Holm's first step over throughput and memory; 30% of that
CHECKS = 10  # the "every check, at least 10"
BUDGET = 12  # pairs the time budget allows before the extension
CAPS = (22, 30, 40, 60, 80)
RESERVES = (0.3, 0.6)
SIGN_CAPS = (30, 40)
SIGN_SHARES = (0.0, 0.5, 0.8)
SLOW = math.log(oc.SLOW_FACTOR) - 1e-9  # a pair is slow past this log ratio, as `stats.compare_paired` counts it


def bound(n: int, share: float, alpha: float) -> float:
    """The most P(fail) of any test at `alpha` over exchangeable pairs, with `n` pairs and a slow-path `share`."""
    k = np.arange(n + 1)
    return float((scipy_stats.binom.pmf(k, n, share) * np.minimum(1.0, alpha * 2.0**k)).sum())


def pairs_for(probability: float, share: float, alpha: float) -> int:
    """The fewest pairs at which the bound reaches `probability`."""
    n = 1
    while bound(n, share, alpha) < probability:
        n += 1
    return n


def capped_rule(cap: int, reserve: float) -> oc.Rule:
    """perfgate's rule with the extension capped at `cap` pairs, not by time, and `reserve` held back at the
    budget's look (`operating_characteristic.extension_plan` reads both from that module)."""
    oc.RESERVE = reserve
    oc.EXTENSION_BUDGETS = float(cap)  # no time cap: the pairs cap it
    return oc.Rule("capped", False, oc.DEFAULT_SPENDING, cap, extension=True)


def rule_rates(rng: np.random.Generator, reps: int, cap: int, reserve: float) -> tuple[float, float, float, float]:
    """perfgate's rule with the extension capped at `cap` pairs and `reserve` held back: P(fail) intermittent
    (1/3 at 2x), its mean pairs, A/A with a neighbour, 7.5% at 6% noise."""
    rule = capped_rule(cap, reserve)

    def outcome(noise: float, **kwargs: float) -> oc.Outcome:
        base, head = oc.paired_draws(rng, (reps, cap), noise, **kwargs)
        return oc.paired_outcomes(base, head, [rule], 1.0, [BUDGET])[(rule.name, BUDGET)]

    intermittent = outcome(0.03, slow_path=1 / 3)
    aa = outcome(0.03, neighbour=oc.NEIGHBOUR)
    steady = outcome(0.06, slowdown=0.075)
    return (
        intermittent.rate(oc.REGRESSION),
        intermittent.mean_used,
        aa.rate(oc.REGRESSION),
        steady.rate(oc.REGRESSION),
    )


def sign_decide(differences: np.ndarray, n: int, alpha: float, final: bool, share: float) -> np.ndarray:
    """An extension look's verdict codes with `share` of its alpha for the sign test on the slow pairs."""
    e = oc.paired_estimate(differences, n, None)
    bound = math.log1p(oc.THRESHOLD)
    logs = differences[:, :n]
    head_slow, base_slow = (logs <= -SLOW).sum(axis=1), (logs >= SLOW).sum(axis=1)
    slow = head_slow + base_slow
    p_slower = np.where(slow > 0, scipy_stats.binom.sf(head_slow - 1, slow, 0.5), 1.0)
    p_faster = np.where(slow > 0, scipy_stats.binom.sf(base_slow - 1, slow, 0.5), 1.0)
    narrow = oc.quantile(1 - oc.boundary_level(n, final), e.df) * e.se
    wide = np.maximum(narrow, oc.quantile(1 - alpha * (1 - share), e.df) * e.se - bound)
    high = e.difference + np.where((share > 0) & (p_slower <= alpha * share), narrow, wide)
    low = e.difference - np.where((share > 0) & (p_faster <= alpha * share), narrow, wide)
    return oc.interval_codes(e.difference, low, high, bound)


def sign_rates(rng: np.random.Generator, reps: int, cap: int, share: float) -> tuple[float, float]:
    """P(fail) of the intermittent slowdown (1/3 at 2x) and of A/A with a neighbour in 3 pairs of 10, the
    extension's looks by `sign_decide`."""
    rule = capped_rule(cap, oc.EXTENSION_RESERVE)
    rates = []
    for kwargs in ({"slow_path": 1 / 3}, {"neighbour": 0.3}):
        base, head = oc.paired_draws(rng, (reps, cap), 0.03, **kwargs)
        look = functools.partial(sign_decide, share=share)
        outcome = oc.paired_outcomes(base, head, [rule], 1.0, [BUDGET], look)[(rule.name, BUDGET)]
        rates.append(outcome.rate(oc.REGRESSION))
    return rates[0], rates[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20000, help="simulated checks per cell of perfgate's rule")
    parser.add_argument("--seed", type=int, default=20261126)
    args = parser.parse_args()
    started = time.monotonic()
    print(f"# Intermittent slowdowns: the pairs they need ({datetime.date.today()})\n")

    print("## The most any valid test can catch (P(fail) of one check)\n")
    rows = []
    for n in PAIRS:
        row = [str(n)]
        for share, _ in SHARES:
            row += [_pct(bound(n, share, alpha)) for alpha in ALPHAS]
        row.append(_pct(bound(n, 1 / 3, ALPHAS[0]) ** CHECKS))
        rows.append(row)
    header = ["pairs"] + [f"{name} at {alpha:g}" for _, name in SHARES for alpha in ALPHAS]
    print(_markdown([*header, f"1/3: {CHECKS} of {CHECKS} fail, at {ALPHAS[0]:g}"], rows))
    print(
        f"\nPairs before the bound lets {CHECKS} of {CHECKS} checks fail with probability 90% "
        f"(one check {_pct(0.9 ** (1 / CHECKS), 2)}), slow path 1/3: "
        + ", ".join(f"{pairs_for(0.9 ** (1 / CHECKS), 1 / 3, alpha)} at alpha {alpha:g}" for alpha in ALPHAS)
        + "\n"
    )

    print(f"## perfgate's rule, the extension capped by pairs (budget {BUDGET} pairs, {args.reps} checks a cell)\n")
    rng = np.random.default_rng(args.seed)
    rows = []
    for reserve in RESERVES:
        for cap in CAPS:
            caught, used, aa, steady = rule_rates(rng, args.reps, cap, reserve)
            rows.append(
                [
                    f"{reserve:g}",
                    str(cap),
                    _pct(caught),
                    f"{used:.1f}",
                    _pct(bound(cap, 1 / 3, 0.01)),
                    _pct(caught**CHECKS),
                    _pct(aa, 2),
                    _pct(steady),
                ]
            )
    header = [
        "reserve",
        "most pairs",
        "1/3 at 2x fails",
        "mean pairs",
        "bound at 1%",
        f"{CHECKS} of {CHECKS}",
        "A/A + neighbour fails",
        "7.5% at 6% noise fails",
    ]
    print(_markdown(header, rows))

    reserve = oc.EXTENSION_RESERVE
    print(f"\n## A sign test on the slow pairs beside the t-test, in the extension (reserve {reserve:g})\n")
    rows = []
    for cap in SIGN_CAPS:
        for share in SIGN_SHARES:
            caught, aa = sign_rates(rng, args.reps, cap, share)
            rows.append([str(cap), f"{share:g}", _pct(caught), _pct(aa, 2)])
    print(_markdown(["most pairs", "sign test's share", "1/3 at 2x fails", "A/A + neighbour in 3 of 10 fails"], rows))
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
