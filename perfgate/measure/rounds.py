"""Timed rounds: how many times a trial runs its pinned slice's timed steps, so the runner's time goes to measuring.

A trial process pays once for starting Python, importing torch, building the dataset, model and DataLoader,
the warm-up, the machine probe and the checksum pass; its timed steps over the pinned slice take what they
take. On a small model that was a fifth of the runner's time (docs/performance.md, "Trials that measure"),
and every second not spent in timed steps is sensitivity a paired check does not get. A trial can instead
run the slice's timed steps several times over (rounds), one DataLoader iterator feeding them all, so its
fixed cost is paid once for more measuring.

Like pyperf's loop calibration, the count is calibrated once and then fixed: a paired check's first pair of
each workload and config runs one round, and its wall time and timed steps give the count every later pair
of that config runs (both sides alike, so a pair stays comparable). Runs without a base time the slice once
unless asked (`--rounds N`): a stored baseline and its check are two sessions, which would calibrate two
counts. samples/sec is per sample, so a trial of several rounds reads the same figure as one round: rounds
only lengthen the time it is averaged over. The trial process is still the unit of the statistics.
"""

from __future__ import annotations

import math

TARGET_SHARE = 0.65  # of the runner's time in timed steps (the bar is 60%; a margin for the noise)
MAX_ROUNDS = 16
MAX_TIMED_S = 30.0  # a trial's timed steps are not stretched beyond this, so a check still fits several pairs
# The pairs of each config a check's time budget must still fit once rounds lengthen them: a decision needs 4
# (`records.comparisons.MIN_DECIDING`), and one more keeps it within reach of a pair that ran long. Without this
# floor, a GPU-sized workload whose trials cost 15 s to start got 6 rounds and 3 pairs in its 200 s a config, and
# decided neither an A/A check nor a planted 7.5% slowdown; with it, 2 rounds and 5 pairs decide both 99-100% of
# the time (benchmarks/host_hiccups.py, docs/performance.md "Host hiccups").
LEAST_PAIRS = 5


def calibrated_rounds(wall_s: float, timed_s: float, rounds: int = 1, *, pair_s: float | None = None) -> int:
    """The rounds that put TARGET_SHARE of the runner's time into timed steps, from a trial (or pair) that ran
    `rounds` rounds: `wall_s` of runner time, `timed_s` of it in timed steps (both sides' for a pair). `pair_s`: the
    longest a later pair (or trial) may take, its fixed cost and its rounds together (`pair_limit_s`); one round at
    the least."""
    if not (math.isfinite(wall_s) and math.isfinite(timed_s)) or timed_s <= 0 or wall_s <= 0 or rounds < 1:
        return 1
    per_round = timed_s / rounds
    overhead = max(0.0, wall_s - timed_s)
    needed = TARGET_SHARE / (1 - TARGET_SHARE) * overhead / per_round
    most = max(1, min(MAX_ROUNDS, math.floor(MAX_TIMED_S / per_round)))
    if pair_s is not None and math.isfinite(pair_s):
        most = max(1, min(most, math.floor((pair_s - overhead) / per_round)))
    return max(1, min(most, math.ceil(needed)))


def pair_limit_s(budget_s: float, configs: int) -> float:
    """The longest a pair may take for a time budget of `budget_s` to fit LEAST_PAIRS pairs of each of `configs`."""
    return budget_s / (max(1, configs) * LEAST_PAIRS)
