"""How often perfgate's gate on pytest-benchmark results raises a false alarm, and how often it catches a slowdown.

Real pytest sessions on this machine: one `pytest --perfgate-update` session records the baselines of
three micro-benchmarks, then A/A sessions (the same code) alternate with sessions where each benchmark
does 10% more work. Every session is judged twice from the same pytest-benchmark JSON: by perfgate (its
verdict in the session's summary) and by pytest-benchmark's own rule `--benchmark-compare-fail=median:5%`
(fail when the median time grew by more than 5%), computed here from the two JSON files.

    python benchmarks/microbench.py [--sessions 20]

Prints a Markdown table for docs/performance.md. About 10 s per session on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TESTS = '''
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
'''
ROW = re.compile(r"^\s+(test_\S+::\S+)\s+.*\s(no change|inconclusive|REGRESSION|improvement|NO BASELINE)\s*$")


def session(folder: Path, mode: str, slowdown: float, json_path: Path) -> dict[str, str]:
    """One pytest session; perfgate's verdict per benchmark (empty under --perfgate-update)."""
    env = dict(os.environ, PLANTED_SLOWDOWN=str(slowdown))
    command = [sys.executable, "-m", "pytest", f"--perfgate{'-update' if mode == 'update' else ''}", "-q"]
    command += ["-p", "no:cacheprovider", f"--benchmark-json={json_path}", "test_micro.py"]
    process = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    if mode == "update":
        if process.returncode != 0:
            raise SystemExit(f"update failed:\n{process.stdout}\n{process.stderr}")
        return {}
    verdicts = {}
    for line in process.stdout.splitlines():
        match = ROW.match(line)
        if match:
            verdicts[match.group(1)] = match.group(2).lower()
    if len(verdicts) != 3:
        raise SystemExit(f"could not read the verdicts:\n{process.stdout}\n{process.stderr}")
    return verdicts


def medians(json_path: Path) -> dict[str, float]:
    document = json.loads(json_path.read_text())
    return {b["fullname"]: b["stats"]["median"] for b in document["benchmarks"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20, help="A/A sessions, and as many with the slowdown")
    parser.add_argument("--slowdown", type=float, default=0.10)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="perfgate-microbench-") as scratch:
        folder = Path(scratch)
        (folder / "test_micro.py").write_text(TESTS)
        base_json = folder / "base.json"
        session(folder, "update", 0.0, base_json)
        base = medians(base_json)
        perfgate: dict[str, Counter[str]] = {"A/A": Counter(), "slowdown": Counter()}
        compare_fail: Counter[str] = Counter()
        ratios: dict[str, list[float]] = {"A/A": [], "slowdown": []}
        for index in range(2 * args.sessions):
            kind = "A/A" if index % 2 == 0 else "slowdown"
            json_path = folder / f"run{index}.json"
            verdicts = session(folder, "check", 0.0 if kind == "A/A" else args.slowdown, json_path)
            perfgate[kind].update(verdicts.values())
            for name, median in medians(json_path).items():
                ratios[kind].append(median / base[name])
                compare_fail[kind] += median / base[name] > 1.05
            print(f"session {index + 1} ({kind}): {verdicts}", file=sys.stderr, flush=True)
    comparisons = 3 * args.sessions
    print(f"Sessions: 1 update, then {args.sessions} A/A and {args.sessions} with {100 * args.slowdown:g}% more work, ")
    print(f"alternating; 3 benchmarks each ({comparisons} comparisons per kind); {time.monotonic() - started:.0f} s.\n")
    print("| sessions | rule | regression (fails) | inconclusive | no change | improvement |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in ("A/A", "slowdown"):
        counts = perfgate[kind]
        cells = [f"{counts[v]}/{comparisons}" for v in ("regression", "inconclusive", "no change", "improvement")]
        print(f"| {kind} | perfgate | {' | '.join(cells)} |")
        print(f"| {kind} | pytest-benchmark median:5% | {compare_fail[kind]}/{comparisons} | - | - | - |")
    for kind, values in ratios.items():
        values.sort()
        print(
            f"\n{kind}: median-time ratio to the baseline, min {values[0]:.3f}, median {values[len(values) // 2]:.3f}, "
            f"max {values[-1]:.3f}"
        )


if __name__ == "__main__":
    main()
