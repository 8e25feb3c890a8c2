"""Paired checks for real: `perfgate check --against` in a real git repository on this machine.

The repository (made in a temporary folder) holds a workload package, `abmodel`, that wraps the
built-in `lm` (small) model. Its commits:

- `base`: the model as is;
- `aa`: a comment changed (an A/A pair of commits);
- `slow10` and `slow7.5`: the model's forward sleeps 10% (7.5%) of the base's median step time,
  and its logits are scaled by 1.0001, so the first-step losses differ too, as they do in a real
  change of the model. The step takes that much longer: throughput falls to 1/1.10 (1/1.075).

Two commands:

    python benchmarks/ab_power.py noise [--pairs 8] [--rounds 1]
        paired A/A noise of the trial settings, side by side: torch threads (1 against all cores),
        base and head at the same time on separate cores (--parallel-pairs) against one after the
        other, CPU affinity, OMP_WAIT_POLICY=PASSIVE, trials forked from a server (--fork-trials)
        against fresh processes, a pair's trials taking turns at the steps
        (--interleaved-pairs); and, from the same trials, the per-trial
        estimator (total time, median step, 20%-trimmed mean step). Prints per setting the per-pair
        standard deviation of the log ratio (and a robust one, 1.4826 x MAD), seconds per
        pair, and the noise left after one minute
        of pairs (s.d. x sqrt(seconds per pair / 60)): lower is better.

    python benchmarks/ab_power.py real [--runs 20] [--scenarios aa,slow10,slow7.5]
        `perfgate check --against base` with default settings, alternating the scenarios, and counts
        the verdicts, exit codes and minutes per check, with the machine probe's rate during each.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = "perf/workloads.py:lm"
PACKAGE = '''"""The model under test: the built-in lm (small), optionally slowed."""
import time

import torch

SLEEP_S = {sleep_s!r}
SCALE = {scale!r}
# {comment}


class Model(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        out = self.inner(*args, **kwargs)
        if SLEEP_S:
            time.sleep(SLEEP_S)
        return out * SCALE if SCALE != 1.0 else out
'''
WORKLOADS = """import dataclasses

from abmodel import Model
from perfgate import builtin


def lm():
    workload = builtin.load("lm", "small")
    return dataclasses.replace(workload, name="ab-lm", model=lambda: Model(workload.model()))
"""


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@e", "GIT_COMMITTER_NAME": "bench"}
    env["GIT_COMMITTER_EMAIL"] = "b@e"
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def write_package(repo: Path, sleep_s: float, scale: float, comment: str) -> None:
    (repo / "abmodel").mkdir(exist_ok=True)
    text = PACKAGE.format(sleep_s=sleep_s, scale=scale, comment=comment)
    (repo / "abmodel" / "__init__.py").write_text(text, encoding="utf-8")


def make_repository(repo: Path, step_s: float) -> dict[str, str]:
    """The repository and its commits: scenario name -> commit."""
    git(repo, "init", "-q", "-b", "main")
    (repo / "perf").mkdir()
    (repo / "perf" / "workloads.py").write_text(WORKLOADS, encoding="utf-8")
    write_package(repo, 0.0, 1.0, "base")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    commits = {"base": git(repo, "rev-parse", "HEAD").strip()}
    for name, sleep_s, scale, comment in (
        ("aa", 0.0, 1.0, "a comment changed"),
        ("slow10", 0.10 * step_s, 1.0001, "slower by 10%"),
        ("slow7.5", 0.075 * step_s, 1.0001, "slower by 7.5%"),
    ):
        git(repo, "checkout", "-q", commits["base"])
        write_package(repo, sleep_s, scale, comment)
        git(repo, "commit", "-qam", name)
        commits[name] = git(repo, "rev-parse", "HEAD").strip()
    return commits


def base_step_s(repo: Path, threads: list[str]) -> float:
    """The base model's median step time, from a short lab run with the checks' thread count."""
    out = repo / "step.json"
    subprocess.run(
        [sys.executable, "-m", "perfgate", "run", WORKLOAD, "--configs", "fp32", "--trials", "2", "--quiet"]
        + ["--json", str(out), *threads],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    document = json.loads(out.read_text())
    steps = [s for t in document["workloads"][0]["configs"]["fp32"]["trials"] for s in t["step_s"]]
    out.unlink()
    return statistics.median(steps)


def check(repo: Path, commit: str, base: str, extra: list[str], env: dict[str, str], prefix: list[str]) -> dict:
    git(repo, "checkout", "-q", commit)
    out = repo.parent / "check.json"
    started = time.monotonic()
    process = subprocess.run(
        [*prefix, sys.executable, "-m", "perfgate", "check", WORKLOAD, "--configs", "fp32", "--against", base]
        + ["--quiet", "--json", str(out), *extra],
        cwd=repo,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    if not out.is_file():
        raise SystemExit(f"check failed without results (exit {process.returncode}): {process.stderr[-800:]}")
    document = json.loads(out.read_text())
    out.unlink()
    verdict = "?"
    for line in process.stdout.splitlines():
        parts = line.split()
        if len(parts) > 8 and parts[0] == "fp32" and "x" in parts[3]:
            verdict = "no change" if line.endswith("no change") else parts[-1].lower()
    return {"exit": process.returncode, "seconds": elapsed, "document": document, "verdict": verdict}


def pair_estimates(document: dict) -> dict[str, list[float]]:
    """Per-pair log ratios head/base under three per-trial estimators."""
    head = document["workloads"][0]["configs"]["fp32"]["trials"]
    base = document["against"]["base"]["workloads"][0]["configs"]["fp32"]["trials"]
    by_trial = {t["trial"]: t for t in base if t["status"] == "ok"}
    estimates: dict[str, list[float]] = {"total time": [], "median step": [], "trimmed mean step": []}
    for h in head:
        b = by_trial.get(h["trial"])
        if h["status"] != "ok" or b is None:
            continue
        estimates["total time"].append(math.log(h["samples_per_sec"] / b["samples_per_sec"]))
        estimates["median step"].append(math.log(statistics.median(b["step_s"]) / statistics.median(h["step_s"])))
        estimates["trimmed mean step"].append(math.log(_trimmed(b["step_s"]) / _trimmed(h["step_s"])))
    return estimates


def _trimmed(values: list[float], cut: float = 0.2) -> float:
    ordered = sorted(values)
    k = int(len(ordered) * cut)
    return statistics.fmean(ordered[k : len(ordered) - k])


def probe_rate(document: dict) -> float:
    rates = [
        r
        for w in document["workloads"]
        for c in w["configs"].values()
        for t in c["trials"]
        for r in t.get("probe_steps_per_sec") or []
    ]
    return statistics.median(rates) if rates else math.nan


def pair_ratio(document: dict) -> float:
    """Head over base samples/sec, the geometric mean over the check's pairs (matched by trial index)."""
    base = {
        (w["name"], name, t["trial"]): t["samples_per_sec"]
        for w in (document.get("against") or {}).get("base", {}).get("workloads", [])
        for name, c in w["configs"].items()
        for t in c["trials"]
        if t.get("status") == "ok"
    }
    logs = [
        math.log(t["samples_per_sec"] / base[(w["name"], name, t["trial"])])
        for w in document["workloads"]
        for name, c in w["configs"].items()
        for t in c["trials"]
        if t.get("status") == "ok" and (w["name"], name, t["trial"]) in base
    ]
    return math.exp(statistics.fmean(logs)) if logs else math.nan


SETTINGS = {
    "2 threads, in turn": ([], {}, []),
    "1 thread, in turn": (["--threads", "1"], {}, []),
    "1 thread, in turn, forked": (["--threads", "1", "--fork-trials"], {}, []),
    "1 thread, interleaved": (["--threads", "1", "--interleaved-pairs"], {}, []),
    "1 thread, interleaved, forked": (["--threads", "1", "--interleaved-pairs", "--fork-trials"], {}, []),
    "1 thread, at once on separate cores": (["--threads", "1", "--parallel-pairs"], {}, []),
    "1 thread, in turn, pinned to core 0": (["--threads", "1"], {}, ["taskset", "-c", "0"]),
    "2 threads, in turn, OMP_WAIT_POLICY=PASSIVE": ([], {"OMP_WAIT_POLICY": "PASSIVE"}, []),
}


def command_noise(args: argparse.Namespace, repo: Path, commits: dict[str, str]) -> None:
    results: dict[str, dict[str, list[float]]] = {name: {} for name in SETTINGS}
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for round_index in range(args.rounds):
        for name, (extra, env, prefix) in SETTINGS.items():
            if args.only and name not in args.only.split(";") or prefix and not shutil.which(prefix[0]):
                continue
            pairs = ["--trials", str(args.pairs), "--max-trials", str(args.pairs)]
            outcome = check(repo, commits["aa"], commits["base"], [*extra, *pairs], env, prefix)
            for estimator, values in pair_estimates(outcome["document"]).items():
                results[name].setdefault(estimator, []).extend(values)
            seconds[name].append(outcome["seconds"] / args.pairs)
            ratios = [f"{math.exp(v):.3f}" for v in pair_estimates(outcome["document"])["total time"]]
            print(f"  head/base per pair: {' '.join(ratios)}", file=sys.stderr, flush=True)
            print(f"round {round_index + 1} {name}: {outcome['seconds']:.0f} s", file=sys.stderr, flush=True)
    print(
        "| setting | estimator | pairs | s.d. of log ratio per pair | robust s.d. | s per pair "
        "| noise after 1 min of pairs |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, by_estimator in results.items():
        if not seconds[name]:
            continue
        per_pair = statistics.fmean(seconds[name])
        for estimator, values in by_estimator.items():
            sd = statistics.stdev(values) if len(values) > 1 else math.nan
            middle = statistics.median(values)
            robust = 1.4826 * statistics.median(abs(v - middle) for v in values)
            print(
                f"| {name} | {estimator} | {len(values)} | {100 * sd:.2f}% | {100 * robust:.2f}% | {per_pair:.1f} | "
                f"{100 * sd * math.sqrt(per_pair / 60):.2f}% |"
            )


def command_real(args: argparse.Namespace, repo: Path, commits: dict[str, str]) -> None:
    scenarios = args.scenarios.split(",")
    rows: dict[str, list[dict]] = {s: [] for s in scenarios}
    for run in range(args.runs):
        for scenario in scenarios:
            outcome = check(repo, commits[scenario], commits["base"], list(args.extra), {}, [])
            outcome["probe"] = probe_rate(outcome["document"])
            outcome["ratio"] = pair_ratio(outcome["document"])
            outcome["load"] = os.getloadavg()[0]
            del outcome["document"]
            rows[scenario].append(outcome)
            print(
                f"run {run + 1} {scenario}: exit {outcome['exit']} {outcome['verdict']} in {outcome['seconds']:.0f} s, "
                f"head/base {outcome['ratio']:.3f}, probe {outcome['probe']:.0f} steps/s, load {outcome['load']:.2f}",
                file=sys.stderr,
                flush=True,
            )
    print(
        "| scenario | checks | regression (exit 1) | no change | inconclusive | other | minutes per check "
        "(median, max) | head/base (geometric mean of checks) | probe steps/s (min-max) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for scenario, outcomes in rows.items():
        verdicts = [o["verdict"] for o in outcomes]
        minutes = [o["seconds"] / 60 for o in outcomes]
        probes = [o["probe"] for o in outcomes]
        print(
            f"| {scenario} | {len(outcomes)} | {sum(o['exit'] == 1 for o in outcomes)} | "
            f"{verdicts.count('no change')} | {verdicts.count('inconclusive')} | "
            f"{sum(v not in ('regression', 'no change', 'inconclusive') for v in verdicts)} | "
            f"{statistics.median(minutes):.1f}, {max(minutes):.1f} | "
            f"{math.exp(statistics.fmean(math.log(o['ratio']) for o in outcomes)):.3f} | "
            f"{min(probes):.0f}-{max(probes):.0f} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    noise = commands.add_parser("noise")
    noise.add_argument("--pairs", type=int, default=8)
    noise.add_argument("--rounds", type=int, default=1)
    noise.add_argument("--only", default="", help="only the settings of these names, separated by ';'")
    real = commands.add_parser("real")
    real.add_argument("--runs", type=int, default=20)
    real.add_argument("--scenarios", default="aa,slow10,slow7.5")
    real.add_argument("extra", nargs="*", help="more options for perfgate check (after --)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfgate-ab-"))
    try:
        repo = work / "repo"
        repo.mkdir()
        (repo / "perf").mkdir()
        (repo / "perf" / "workloads.py").write_text(WORKLOADS, encoding="utf-8")
        write_package(repo, 0.0, 1.0, "probe")
        extra = list(getattr(args, "extra", []))
        if "--threads" in extra:
            threads = extra[extra.index("--threads") : extra.index("--threads") + 2]
        else:  # the paired check's own default, so the planted sleep is the intended share of its step
            from perfgate.measure.device import select_device
            from perfgate.measure.environment import default_threads

            threads = ["--threads", str(default_threads(select_device("auto").type, paired=True))]
        step_s = base_step_s(repo, threads)
        shutil.rmtree(repo)
        repo.mkdir()
        commits = make_repository(repo, step_s)
        print(f"base median step {1000 * step_s:.1f} ms; {time.strftime('%Y-%m-%d %H:%M')}", file=sys.stderr)
        if args.command == "noise":
            command_noise(args, repo, commits)
        else:
            command_real(args, repo, commits)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
