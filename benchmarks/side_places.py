"""Does a side's place bias a paired check? The same code measured from different folders, pair by pair.

    python benchmarks/side_places.py [--pairs 15] [--rounds 3] [--workload vision]

A real repository with two commits of the same workload (a comment differs), then three paired sessions of
perfgate's own pairing (interleaved turns, fresh trial processes), taking turns pair by pair so that drift hits
all three alike:

- `check`: the base in a git worktree, head the repository itself (what `perfgate check --against` measures);
- `swapped`: the base the repository itself, head in a worktree;
- `worktrees`: both sides in worktrees.

If head is slower in `check` because of where it runs, `swapped` shows the base slower; if both sides in
worktrees agree, the repository's folder is what differs. Prints each arrangement's geometric mean ratio
(head/base samples/s) with a 95% interval. Nothing else may run beside it (its figures are timings).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfgate.measure.lab import RunSettings  # noqa: E402
from perfgate.measure.paired import Checkout, PairedSession, open_repository, worktree  # noqa: E402
from perfgate.references import parse_reference  # noqa: E402
from tests.helpers.git import commit, new_repository  # noqa: E402

SOURCE = """# {comment}
from perfgate.builtin.{module} import {function}


def bench():
    return {function}("small")
"""
WORKLOADS = {"vision": ("vision", "image_classifier"), "lm": ("lm", "transformer_lm")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15, help="pairs of each arrangement")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds a trial (fixed, both sides alike)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="vision")
    args = parser.parse_args()
    module, function = WORKLOADS[args.workload]
    print(
        f"side_places: {args.pairs} pairs an arrangement, {args.rounds} rounds, {args.workload}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        repo = new_repository(Path(scratch) / "repo")
        source = {"module": module, "function": function}
        base_commit = commit(repo, {"perf/bench.py": SOURCE.format(comment="base", **source)}, "base")
        commit(repo, {"perf/bench.py": SOURCE.format(comment="unchanged code", **source)}, "head")
        os.chdir(repo)
        handle = open_repository(repo)
        first = stack.enter_context(worktree(handle, base_commit, "HEAD~1", "base"))
        second = stack.enter_context(worktree(handle, base_commit, "HEAD~1", "head"))
        here = Checkout("head", repo.resolve(), None)
        trees = (Checkout("base", first, base_commit), Checkout("head", second, base_commit))
        arrangements = {
            "check": (trees[0], here),
            "swapped": (here, trees[1]),
            "worktrees": trees,
        }
        reference = parse_reference("perf/bench.py:bench", base_dir=repo)
        settings = RunSettings(configs=("fp32",), rounds=args.rounds)
        sessions = {
            name: stack.enter_context(PairedSession([reference], settings, base, head, name, repo_root=repo))
            for name, (base, head) in arrangements.items()
        }
        ratios: dict[str, list[float]] = {name: [] for name in sessions}
        key = (sessions["check"].names[0], "fp32")
        for pair in range(args.pairs):
            for name, session in sessions.items():
                session.run_more([key])
                base, head = (session.sides[side].trials[key][-1] for side in ("base", "head"))
                if base.ok and head.ok:
                    ratios[name].append(head.samples_per_sec / base.samples_per_sec)
                    print(f"  pair {pair + 1:2d} {name:<9} head/base {ratios[name][-1]:.3f}", flush=True)
                else:
                    print(f"  pair {pair + 1:2d} {name:<9} failed: {base.failure or head.failure}", flush=True)
        for name, values in ratios.items():
            logs = [math.log(v) for v in values]
            mean = statistics.fmean(logs)
            half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("nan")
            slower = sum(1 for v in values if v < 1)
            print(
                f"{name:<9} {len(values)} pairs: head/base {math.exp(mean):.3f} "
                f"({math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}), head slower in {slower}, "
                f"pair noise {statistics.stdev(logs):.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
