"""Peak memory and speed of fresh trial processes against forked ones, with and without the page mapping.

    python benchmarks/fork_memory.py [--rounds 4] [--workloads lm@small,vision@small]
                                     [--configs fp32,bf16-compile] [--threads 1]

A paired check with `--fork-trials` forks each side's trials from a server that imported torch once
(`perfgate.measure.trialserver`). A fork copies the server's heap into the child but not the page-table
entries of its mapped files, so a forked child used to fault torch's library pages back in during its
steps and count them as memory growth above setup; since 2026-11-24 the child maps the pages the
server had (`map_pages`) before it runs the trial. Each round runs, per workload and config, one trial
of each launcher in a rotating order: a fresh process, a child of a server that maps the pages
("forked"), and a child of a server that does not (the earlier "forked, unmapped"). It prints the
median peak memory above setup and samples/s of each, with ranges and ratios to fresh processes.
Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from perfgate.measure.lab import RunningTrial, TrialPlace, python_command, trial_environment
from perfgate.measure.trial import TrialSpec
from perfgate.measure.trialserver import TrialServer
from perfgate.references import resolve_references

LAUNCHERS = ("fresh", "forked", "forked, unmapped")
# The server without the mapping: the same loop, `map_pages` made a no-op (what forked children did before).
UNMAPPED = (
    "import sys, perfgate.measure.trialserver as server; "
    "server.map_pages = lambda runs: None; sys.exit(server.serve(sys.stdin, sys.stdout))"
)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" if values else "-"


def ratio(values: list[float], fresh: list[float]) -> str:
    return f"{statistics.median(values) / statistics.median(fresh):.3f}" if values and fresh else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workloads", default="lm@small,vision@small")
    parser.add_argument("--configs", default="fp32,bf16-compile")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    references = resolve_references(args.workloads.split(","))
    configs = args.configs.split(",")
    peaks: dict[tuple[str, str, str], list[float]] = {}
    speeds: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fork-memory-") as folder:
        scratch = Path(folder)
        place = TrialPlace()
        env = trial_environment(args.threads, place)
        servers = {
            "forked": TrialServer(python_command(place), env, None, scratch / "server.log"),
            "forked, unmapped": TrialServer([sys.executable, "-c", UNMAPPED], env, None, scratch / "unmapped.log"),
        }
        try:
            for round_ in range(args.rounds):
                order = LAUNCHERS[round_ % 3 :] + LAUNCHERS[: round_ % 3]
                for reference in references:
                    for config in configs:
                        for launcher in order:
                            spec = TrialSpec(reference.text, reference.target, config, round_, "cpu", args.threads)
                            server = servers.get(launcher)
                            named = TrialPlace(name=launcher.replace(", ", "-"))
                            trial = RunningTrial(spec, scratch, 1800.0, named, server)
                            result = trial.wait().result
                            if not result.ok:
                                print(f"{reference.text} {config} {launcher}: {result.failure}", file=sys.stderr)
                                continue
                            key = (reference.text, config, launcher)
                            assert result.memory is not None
                            peaks.setdefault(key, []).append(result.memory.peak_bytes / 2**20)
                            speeds.setdefault(key, []).append(result.samples_per_sec)
                print(f"round {round_ + 1} of {args.rounds} done", flush=True)
        finally:
            for server in servers.values():
                server.close()
    print()
    print("| workload, config | launcher | peak MiB above setup | / fresh | samples/s | / fresh |")
    print("| --- | --- | --- | ---: | --- | ---: |")
    for reference in references:
        for config in configs:
            fresh = (reference.text, config, "fresh")
            for launcher in LAUNCHERS:
                key = (reference.text, config, launcher)
                peak, speed = peaks.get(key, []), speeds.get(key, [])
                print(
                    f"| {reference.text} {config} | {launcher} | {spread(peak)} | {ratio(peak, peaks.get(fresh, []))} "
                    f"| {spread(speed)} | {ratio(speed, speeds.get(fresh, []))} |"
                )


if __name__ == "__main__":
    main()
