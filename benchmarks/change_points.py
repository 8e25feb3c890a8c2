"""How well `perfgate.judge.trends` finds steps and creep in a history of runs, by simulation.

    python benchmarks/change_points.py [--series 200] [--runs 20] [--trials 3] [--seed 0]

A simulated history is --runs runs of --trials trials each, oldest first. Each run's log level is the true
level plus N(0, noise), noise = 1%, 2%, 5% or 10% (the run-to-run noise of a CI machine), and each trial
scatters around its run's level by N(0, noise) again. The true level is flat, or steps down by 3%, 5% or
10% (throughput times 1 - step) at a random run, chosen so that both sides have at least 2 runs.

For each noise and step, over --series series, `change_points` at its defaults (min_change 0.05,
alpha 0.01) and the first table reports:

- detected: the share of step series with a change point within 1 run of the true step;
- false positives: for flat series, the share with any change point; for step series, the share with a
  change point other than the one that detected the step;
- median |error|: the median of |estimated change - true change| over the detected steps.

A 3% step is under min_change, so it should not be detected: its row measures how often noise makes it
look like 5%.

The second table is creep: a throughput falling 2% per run over 6 runs (about 10% in all), in a series of
those 6 runs alone and at the end of a --runs series otherwise flat, against flat series of the same
lengths. It reports how often `creep` (at its defaults, threshold 0.05 and alpha 0.01, given the series'
change points) flags each, and how often `change_points` reports a step in them instead.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfgate.judge.trends import change_points, creep
from perfgate.records.series import ChangePoint

NOISES = (0.01, 0.02, 0.05, 0.10)
STEPS = (0.03, 0.05, 0.10)
CREEP_PER_RUN = 0.02
CREEP_RUNS = 6
MIN_SIDE = 2  # runs on either side of a step: `change_points`' default min_size


@dataclass(frozen=True)
class StepRow:
    noise: float
    step: float  # 0 for flat series
    detected: float  # share of series (nan for flat)
    false_positives: float
    median_error: float  # nan when nothing was detected


@dataclass(frozen=True)
class CreepRow:
    noise: float
    creep_short: float  # share of the 6-run creeping series that `creep` flags
    step_short: float  # share of them with a change point
    flat_short: float  # share of flat 6-run series that `creep` flags
    creep_tail: float  # the same for creep at the end of a --runs series
    step_tail: float
    flat_tail: float


def simulate(log_levels: Sequence[float], noise: float, trials: int, rng: np.random.Generator) -> list[list[float]]:
    """Trial values (samples/s, around 1000) of runs with the given true log levels."""
    runs = []
    for level in log_levels:
        run_level = level + rng.normal(0.0, noise)
        runs.append([float(value) for value in 1000.0 * np.exp(run_level + rng.normal(0.0, noise, trials))])
    return runs


def step_levels(runs: int, step: float, position: int) -> list[float]:
    """Log levels of a series that steps to 1 - step at `position` (flat for step 0)."""
    return [float(np.log1p(-step)) if run >= position else 0.0 for run in range(runs)]


def creep_levels(runs: int) -> list[float]:
    """Log levels of a series flat until its last CREEP_RUNS runs, which fall CREEP_PER_RUN each."""
    start = runs - CREEP_RUNS
    return [max(run - start, 0) * float(np.log1p(-CREEP_PER_RUN)) for run in range(runs)]


def matched(points: Sequence[ChangePoint], position: int) -> ChangePoint | None:
    """The change point closest to the true step, when within 1 run of it."""
    near = [point for point in points if abs(point.index - position) <= 1]
    return min(near, key=lambda point: abs(point.index - position), default=None)


OTAVA = """
import json, sys
from otava.analysis import compute_change_points

out = []
for series in json.load(sys.stdin):
    found, _ = compute_change_points(series, max_pvalue=0.01, min_magnitude=0.05)
    out.append([[int(p.index), float(p.stats.forward_change_percent()) / 100] for p in found])
json.dump(out, sys.stdout)
"""


def otava_points(python: str, series: Sequence[Sequence[Sequence[float]]]) -> list[list[ChangePoint]]:
    """Apache Otava's change points (E-divisive means, its defaults but alpha 0.01 and a 5% magnitude) of each
    series' run medians, computed by `python`: an interpreter with Otava installed (it pins its own numpy)."""
    import json
    import subprocess

    medians = [[float(np.median(run)) for run in runs] for runs in series]
    done = subprocess.run([python, "-c", OTAVA], input=json.dumps(medians), capture_output=True, text=True, check=True)
    return [
        [ChangePoint(int(i), 1.0, 1.0 + change, change, 0.0) for i, change in found]
        for found in json.loads(done.stdout)
    ]


def step_row(noise: float, step: float, args: argparse.Namespace, rng: np.random.Generator) -> StepRow:
    """Detection and false-positive rates of `change_points` (or Otava's, with --otava) for one noise and
    step (0: flat)."""
    detected, false_positives, errors = 0, 0, []
    positions = [int(rng.integers(MIN_SIDE, args.runs - MIN_SIDE + 1)) for _ in range(args.series)]
    series = [simulate(step_levels(args.runs, step, p), noise, args.trials, rng) for p in positions]
    found = otava_points(args.otava, series) if args.otava else [change_points(runs) for runs in series]
    for position, points in zip(positions, found, strict=True):
        hit = matched(points, position) if step else None
        if hit is not None:
            detected += 1
            errors.append(abs(hit.change - (-step)))
        false_positives += len(points) > (hit is not None)
    return StepRow(
        noise=noise,
        step=step,
        detected=detected / args.series if step else float("nan"),
        false_positives=false_positives / args.series,
        median_error=statistics.median(errors) if errors else float("nan"),
    )


def creep_rates(
    levels: Sequence[float], noise: float, args: argparse.Namespace, rng: np.random.Generator
) -> tuple[float, float]:
    """Shares of simulated series that `creep` flags, and that have a change point."""
    crept, stepped = 0, 0
    for _ in range(args.series):
        runs = simulate(levels, noise, args.trials, rng)
        points = change_points(runs)
        stepped += bool(points)
        crept += creep(runs, change_points=points) is not None
    return crept / args.series, stepped / args.series


def creep_row(noise: float, args: argparse.Namespace, rng: np.random.Generator) -> CreepRow:
    creep_short, step_short = creep_rates(creep_levels(CREEP_RUNS), noise, args, rng)
    flat_short, _ = creep_rates([0.0] * CREEP_RUNS, noise, args, rng)
    creep_tail, step_tail = creep_rates(creep_levels(args.runs), noise, args, rng)
    flat_tail, _ = creep_rates([0.0] * args.runs, noise, args, rng)
    return CreepRow(noise, creep_short, step_short, flat_short, creep_tail, step_tail, flat_tail)


def percent(share: float) -> str:
    return "-" if share != share else f"{share:.1%}"


def step_table(rows: Sequence[StepRow]) -> str:
    lines = [
        "| noise | step | detected | false positives | median abs error |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        step = f"{row.step:.0%}" if row.step else "flat"
        lines.append(
            f"| {row.noise:.0%} | {step} | {percent(row.detected)} | {percent(row.false_positives)} "
            f"| {percent(row.median_error)} |"
        )
    return "\n".join(lines)


def creep_table(rows: Sequence[CreepRow], runs: int) -> str:
    tail = f"last {CREEP_RUNS} of {runs}"
    lines = [
        f"| noise | creep flagged ({CREEP_RUNS} runs) | step instead | flat flagged | creep flagged ({tail}) "
        f"| step instead | flat flagged ({runs} runs) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.noise:.0%} | {percent(row.creep_short)} | {percent(row.step_short)} | {percent(row.flat_short)} "
            f"| {percent(row.creep_tail)} | {percent(row.step_tail)} | {percent(row.flat_tail)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--series", type=int, default=200, help="simulated series per cell")
    parser.add_argument("--runs", type=int, default=20, help="runs per series")
    parser.add_argument("--trials", type=int, default=3, help="trials per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--otava",
        metavar="PYTHON",
        default=None,
        help="measure Apache Otava's change points instead, run by this interpreter (one with apache-otava "
        "installed, e.g. a venv of its own: it pins numpy); steps only",
    )
    args = parser.parse_args(argv)
    if args.series < 1 or args.trials < 1 or args.runs < max(2 * MIN_SIDE, CREEP_RUNS):
        parser.error(f"need --series and --trials of 1 or more and --runs of {max(2 * MIN_SIDE, CREEP_RUNS)} or more")
    rng = np.random.default_rng(args.seed)
    print(f"{args.series} series per cell, {args.runs} runs of {args.trials} trials, seed {args.seed}\n")
    print(step_table([step_row(noise, step, args, rng) for noise in NOISES for step in (0.0, *STEPS)]))
    if args.otava is None:
        print()
        print(creep_table([creep_row(noise, args, rng) for noise in NOISES], args.runs))


if __name__ == "__main__":
    main()
