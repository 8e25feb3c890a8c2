"""How often perfgate's gate on pytest-benchmark results raises a false alarm, and how often it catches a slowdown.

Real pytest sessions on this machine: `pytest --perfgate-update` sessions (3 by default, so the
baseline holds its own session-to-session spread) record the baselines of three micro-benchmarks,
then A/A sessions (the same code) alternate with sessions where each benchmark
does 10% more work. Every session is judged twice from the same pytest-benchmark JSON: by perfgate (its
verdict in the session's summary, and recomputed from the session's JSON against the last update
session alone, as if there had been one) and by pytest-benchmark's own rule
`--benchmark-compare-fail=median:5%`
(fail when the median time grew by more than 5%), computed here from the two JSON files.

    python benchmarks/microbench.py [--sessions 15]

Prints a Markdown table for docs/performance.md. About 30 s per session on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from perfgate.judge.micro import compare_micro
from perfgate.project import DEFAULT_THRESHOLD
from perfgate.records.comparisons import DEFAULT_ALPHA
from perfgate.records.micro import DEFAULT_RUN_NOISE, MicroBenchmark, MicroStore, parse_pytest_benchmark

TESTS = """
import os

import torch

SCALE = 1.0 + float(os.environ.get("PLANTED_SLOWDOWN", "0"))
IMAGE = torch.rand(3, 224, 224, generator=torch.Generator().manual_seed(0))
A = torch.rand(64, 64, generator=torch.Generator().manual_seed(1))


def python_loop(units):
    total = 0
    for i in range(units):
        total += i * i % 7
    return total


def augment(units):
    image = IMAGE
    for _ in range(units):
        image = torch.flip(image, dims=(2,)) * 0.5 + 0.25
    return image


def small_matmuls(units):
    x = A
    for _ in range(units):
        x = torch.tanh(x @ A)
    return x


def test_python_loop(benchmark):
    benchmark(python_loop, int(20000 * SCALE))


def test_augment(benchmark):
    benchmark(augment, int(20 * SCALE))


def test_small_matmuls(benchmark):
    benchmark(small_matmuls, int(100 * SCALE))
"""
ROW = re.compile(
    r"^\s+(test_\S+::\S+)\s+.*\s(\d+\.\d+)x\s+(no change|inconclusive|REGRESSION|improvement|NO BASELINE)\s*$"
)


def session(folder: Path, mode: str, slowdown: float, json_path: Path) -> tuple[dict[str, str], float]:
    """One pytest session: perfgate's verdict per benchmark and the machine probe's ratio to the baseline's."""
    env = dict(os.environ, PLANTED_SLOWDOWN=str(slowdown))
    command = [sys.executable, "-m", "pytest", f"--perfgate{'-update' if mode == 'update' else ''}", "-q"]
    command += ["-p", "no:cacheprovider", f"--benchmark-json={json_path}", "test_micro.py"]
    process = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    if mode == "update":
        if process.returncode != 0:
            raise SystemExit(f"update failed:\n{process.stdout}\n{process.stderr}")
        return {}, 1.0
    verdicts, machine = {}, 1.0
    for line in process.stdout.splitlines():
        match = ROW.match(line)
        if match:
            verdicts[match.group(1)] = match.group(3).lower()
            machine = float(match.group(2))
    if len(verdicts) != 3:
        raise SystemExit(f"could not read the verdicts:\n{process.stdout}\n{process.stderr}")
    return verdicts, machine


def medians(json_path: Path) -> dict[str, float]:
    document = json.loads(json_path.read_text())
    return {b["fullname"]: b["stats"]["median"] for b in document["benchmarks"]}


def verdicts_offline(baseline: dict[str, MicroBenchmark], json_path: Path, probe: float) -> list[tuple[str, str]]:
    """perfgate's verdict per benchmark for one session's JSON against `baseline`, at default settings."""
    measured = parse_pytest_benchmark(json.loads(json_path.read_text()), probe=probe)
    verdicts = compare_micro(baseline, measured, threshold=DEFAULT_THRESHOLD, alpha=DEFAULT_ALPHA)
    return [(v.name, v.status.value) for v in verdicts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=15, help="A/A sessions, and as many with the slowdown")
    parser.add_argument("--slowdown", type=float, default=0.10)
    parser.add_argument("--updates", type=int, default=3, help="update sessions recorded before the checks")
    args = parser.parse_args()
    started = time.monotonic()
    one = f"1 update session, benchmark_noise {100 * DEFAULT_RUN_NOISE:g}%"
    settings = [f"{args.updates} update sessions", one]
    kinds = ("A/A", "slowdown")
    counts: dict[tuple[str, str], Counter[str]] = {(k, n): Counter() for k in kinds for n in settings}
    by_benchmark: dict[tuple[str, str, str], Counter[str]] = {}  # (kind, benchmark, method) -> verdicts
    compare_fail: Counter[str] = Counter()
    ratios: dict[str, list[float]] = {"A/A": [], "slowdown": []}
    aa_logs: dict[str, tuple[list[float], list[float]]] = {}  # per benchmark: raw and probe-adjusted
    with tempfile.TemporaryDirectory(prefix="perfgate-microbench-") as scratch:
        folder = Path(scratch)
        (folder / "test_micro.py").write_text(TESTS)
        for index in range(args.updates):  # sessions of one commit add up in the baseline
            base_json = folder / f"base{index}.json"
            session(folder, "update", 0.0, base_json)
            print(f"update session {index + 1}: {medians(base_json)}", file=sys.stderr, flush=True)
        base = medians(base_json)  # the last update session, for pytest-benchmark's rule
        fingerprint = next(iter(MicroStore(folder / "baselines").load().values())).fingerprint
        baseline = MicroStore(folder / "baselines").find(fingerprint)
        baselines = {settings[0]: baseline, one: {k: replace(b, sessions=b.sessions[-1:]) for k, b in baseline.items()}}
        base_probe = next(iter(baseline.values())).probe_steps_per_sec or 1.0
        for index in range(2 * args.sessions):
            kind = kinds[index % 2]
            json_path = folder / f"run{index}.json"
            shown, machine = session(folder, "check", 0.0 if kind == "A/A" else args.slowdown, json_path)
            for method in settings:
                verdicts = verdicts_offline(baselines[method], json_path, base_probe * machine)
                counts[(kind, method)].update(v for _, v in verdicts)
                for name, verdict in verdicts:
                    by_benchmark.setdefault((kind, name, method), Counter())[verdict] += 1
            for name, median in medians(json_path).items():
                ratios[kind].append(median / base[name])
                compare_fail[kind] += median / base[name] > 1.05
                if kind == "A/A":
                    raw, adjusted = aa_logs.setdefault(name, ([], []))
                    raw.append(math.log(base[name] / median))
                    adjusted.append(math.log(base[name] / median / machine))
            print(f"session {index + 1} ({kind}, machine {machine:.2f}x): {shown}", file=sys.stderr, flush=True)
    comparisons = 3 * args.sessions
    print(
        f"Sessions: {args.updates} updates, then {args.sessions} A/A and {args.sessions} with "
        f"{100 * args.slowdown:g}% more work, "
    )
    print(f"alternating; 3 benchmarks each ({comparisons} comparisons per kind); {time.monotonic() - started:.0f} s.\n")
    print("| sessions | rule | regression (fails) | inconclusive | no change | improvement |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in kinds:
        for method in settings:
            c = counts[(kind, method)]
            cells = [f"{c[v]}/{comparisons}" for v in ("regression", "inconclusive", "no change", "improvement")]
            print(f"| {kind} | perfgate, {method} | {' | '.join(cells)} |")
        print(f"| {kind} | pytest-benchmark median:5% | {compare_fail[kind]}/{comparisons} | - | - | - |")
    print("\nPer benchmark:\n")
    print("| sessions | benchmark | baseline | regression | inconclusive | no change | improvement |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (kind, name, method), c in by_benchmark.items():
        cells = [str(c[v]) for v in ("regression", "inconclusive", "no change", "improvement")]
        print(f"| {kind} | {name.split('::')[-1]} | {method} | {' | '.join(cells)} |")
    print("\nRun-to-run noise, A/A: standard deviation over sessions of log(current/baseline speed); the baseline")
    print("session is the same in every ratio, so this is one session's own run-to-run noise:\n")
    print("| benchmark | raw | divided by the machine probe |")
    print("| --- | --- | --- |")
    for name, (raw, adjusted) in aa_logs.items():
        noise_pair = [statistics.stdev(v) for v in (raw, adjusted)]
        print(f"| {name.split('::')[-1]} | {100 * noise_pair[0]:.1f}% | {100 * noise_pair[1]:.1f}% |")
    for kind, values in ratios.items():
        values.sort()
        print(
            f"\n{kind}: median-time ratio to the baseline, min {values[0]:.3f}, median {values[len(values) // 2]:.3f}, "
            f"max {values[-1]:.3f}"
        )


if __name__ == "__main__":
    main()
