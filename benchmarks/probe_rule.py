"""When may the machine-adjusted test decide a stored-baseline verdict alone? The rule, by simulation.

`perfgate check` against stored baselines compares each config's samples/s raw and per machine-probe
rate (`perfgate.judge.stats.compare_probed`). The two must agree, with one exception
(`perfgate.judge.stats.combined_verdict`): a significant adjusted change whose raw estimate lies beyond
the threshold in the same direction decides although the raw test is inconclusive. Until 2026-11-24 that
held for any number of trials ("before" below); since, it needs two trials on each side ("now"): with
one, raw and adjusted must agree. A clean check of the built-in vision workload on this machine failed
the build under the old rule: its one trial ran 14% slower while its probe ran 7% faster (raw p = 0.12).

The machine (log samples/s of a trial, and log steps/s of the probe timed before and after its steps):

- the check's session differs from the baseline's by N(0, session) in log, probe and trial alike;
- within a session each trial meets a machine level N(0, machine) that the probe sees too;
- with probability `q` a neighbour slows the trial's timed steps alone by U(5%, 30%): the probe, timed
  before and after them, does not see it ("a probe that moved for reasons of its own", seen from the
  other side);
- per-trial noise N(0, 2%) on the trial and N(0, 1%) on the probe;
- the change: the candidate's steps take 1 + x as long, x = 0 (A/A), 10%, 20%.

Designs: 3 baseline trials against 1, 2 and 3 candidate trials (`--trials N --max-trials N`); alpha
0.01, threshold 5%, one look. Each cell prints the share of regression / inconclusive / no change /
improvement verdicts under both rules, from perfgate's own `compare_probed` and `combined_verdict` (the
old rule is `exception_trials=1`). The new rule only withholds calls the old one made, and only at one
trial a side, so its false-alarm rate is never higher and nothing changes from two trials on. Since
2026-11-26 there is no exception at all: raw and adjusted must agree (issue 30's audit).

    python benchmarks/probe_rule.py [--reps 20000] [--seed 20261124] [--q 0.15] [--session 0.05] \\
        [--machine 0.05]

About 5 minutes on two cores with the defaults (mostly scipy's t distribution).
"""

from __future__ import annotations

import argparse
import datetime
import math
from collections import Counter

import numpy as np

from perfgate.judge.stats import compare_probed
from perfgate.records.comparisons import Verdict, combined_verdict

ORDER = (Verdict.REGRESSION, Verdict.INCONCLUSIVE, Verdict.NO_CHANGE, Verdict.IMPROVEMENT)


def side(
    rng: np.random.Generator, n: int, session: float, args: argparse.Namespace, slowdown: float
) -> tuple[list[float], list[float]]:
    """(samples/s, probe steps/s) of `n` trials in one session."""
    level = session + rng.normal(0.0, args.machine, n)
    hit = rng.random(n) < args.q
    disturbance = np.where(hit, np.log1p(rng.uniform(0.05, 0.30, n)), 0.0)
    trial = -math.log1p(slowdown) + level - disturbance + rng.normal(0.0, 0.02, n)
    probe = level + rng.normal(0.0, 0.01, n)
    return list(1000.0 * np.exp(trial)), list(1000.0 * np.exp(probe))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=20261124)
    parser.add_argument("--q", type=float, default=0.15, help="chance that a trial's steps alone are disturbed")
    parser.add_argument("--session", type=float, default=0.05, help="s.d. of the session level, log")
    parser.add_argument("--machine", type=float, default=0.05, help="s.d. of the machine level per trial, log")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"# The probe rule by simulation ({datetime.date.today()}, {args.reps} repetitions a cell)\n")
    print(
        f"3 baseline trials; disturbed steps with probability {args.q:.0%}, session s.d. {args.session:.0%}, "
        f"machine s.d. {args.machine:.0%}; alpha 0.01, threshold 5%. Share of verdicts: regression / "
        "inconclusive / no change / improvement.\n"
    )
    print("| candidate trials | slowdown | before | now (two trials a side for the exception) |")
    print("| ---: | ---: | --- | --- |")
    for n_candidate in (1, 2, 3):
        for slowdown in (0.0, 0.10, 0.20):
            counts: dict[str, Counter[Verdict]] = {"before": Counter(), "now": Counter()}
            for _ in range(args.reps):
                base, base_probe = side(rng, 3, 0.0, args, 0.0)
                cand, cand_probe = side(rng, n_candidate, rng.normal(0.0, args.session), args, slowdown)
                compared = compare_probed(base, cand, base_probe, cand_probe, alpha=0.01)
                counts["before"][combined_verdict(compared.raw, compared.adjusted, exception_trials=1)] += 1
                counts["now"][combined_verdict(compared.raw, compared.adjusted, exception_trials=2)] += 1
            cells = [" / ".join(f"{counts[rule][v] / args.reps:.2%}" for v in ORDER) for rule in ("before", "now")]
            print(f"| {n_candidate} | {slowdown:.0%} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
