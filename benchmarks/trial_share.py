"""Trials that measure: the share of the runner's time in timed steps, and the paired noise per minute.

An A/A paired check (`perfgate check --against HEAD` in a throwaway git repository, the working tree
unchanged) per workload and setting, the settings alternating, a fixed number of pairs each:

- `before`: the old defaults: 1 torch thread per trial, the slice's timed steps once a trial (`--threads 1
  --rounds 1`);
- `threads`: torch's own thread count, one round (`--rounds 1`);
- `after`: the defaults: torch's own thread count, rounds calibrated from the first pair (perfgate.measure.rounds).

Per workload and setting it prints: pairs, seconds per pair, the share of the check's wall time spent in
timed steps (both sides' timed steps over the whole `perfgate check` command, imports, setup and git
included), each trial process's own share (its timed steps over its wall time less the other side's timed
turns), the s.d. of the per-pair log ratio (and a robust one, 1.4826 x MAD), and the noise after one minute
of pairs (s.d. x sqrt(seconds per pair / 60)): lower is better. Never run it beside another timing.

    python benchmarks/trial_share.py [--pairs 6] [--workloads lm,vision,outside] [--settings before,after]
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

HERE = Path(__file__).resolve().parent
WORKLOADS = {"lm": "lm", "vision": "vision", "outside": "outside_workloads.py:gpt2"}
SETTINGS = {
    "before": ["--threads", "1", "--rounds", "1"],
    "threads": ["--rounds", "1"],
    "after": [],
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_repository(repo: Path) -> None:
    repo.mkdir()
    shutil.copy(HERE / "outside_workloads.py", repo / "outside_workloads.py")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "add", ".")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "base")


def check(repo: Path, workload: str, extra: list[str], pairs: int) -> tuple[dict, float]:
    out = repo.parent / "check.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "perfgate", "check", workload, "--against", "HEAD", "--configs", "fp32"]
    command += ["--trials", str(pairs), "--max-trials", str(pairs), "--time-budget", "3600", "--quiet"]
    command += ["--json", str(out), *extra]
    started = time.monotonic()
    process = subprocess.run(command, cwd=repo, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    elapsed = time.monotonic() - started
    if not out.is_file():
        raise SystemExit(f"check failed without results (exit {process.returncode}): {process.stderr[-800:]}")
    return json.loads(out.read_text()), elapsed


def trials(document: dict, side: str) -> list[dict]:
    run = document if side == "head" else document["against"]["base"]
    return [t for w in run["workloads"] for c in w["configs"].values() for t in c["trials"] if t["status"] == "ok"]


def figures(document: dict, elapsed: float) -> dict[str, object]:
    head, base = trials(document, "head"), trials(document, "base")
    by_trial = {t["trial"]: t for t in base}
    paired = [(h, by_trial[h["trial"]]) for h in head if h["trial"] in by_trial]
    logs = [math.log(h["samples_per_sec"] / b["samples_per_sec"]) for h, b in paired]
    timed = sum(sum(t["step_s"]) for t in head + base)
    interleaved = bool(document["against"].get("interleaved"))
    own = []
    for t, other in ((h, by_trial.get(h["trial"])) for h in head):
        for mine, theirs in ((t, other), (other, t)):
            if mine and mine.get("wall_s"):
                # interleaved: the process waited through the other side's timed turns, not its own overhead
                waited = sum(theirs["step_s"]) if interleaved and theirs else 0.0
                own.append(sum(mine["step_s"]) / max(1e-9, mine["wall_s"] - waited))
    rounds = sorted({t.get("rounds", 1) for t in head + base})
    threads = sorted({t.get("threads") for t in head + base})
    return {"logs": logs, "share": timed / elapsed, "own": own, "rounds": rounds, "threads": threads}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--workloads", default="lm,vision,outside")
    parser.add_argument("--settings", default="before,after")
    args = parser.parse_args()
    names = args.workloads.split(",")
    settings = args.settings.split(",")
    results: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="perfgate-share-") as scratch:
        repo = Path(scratch) / "repo"
        make_repository(repo)
        for name in names:
            for setting in settings:
                document, elapsed = check(repo, WORKLOADS[name], SETTINGS[setting], args.pairs)
                got = figures(document, elapsed)
                got["seconds"] = elapsed
                results[(name, setting)] = got
                ratios = " ".join(f"{math.exp(v):.3f}" for v in got["logs"])
                line = f"{name} {setting}: {elapsed:.0f} s, rounds {got['rounds']}, threads {got['threads']}, "
                line += f"timed {got['share']:.0%} of the check; head/base per pair {ratios}"
                print(line, file=sys.stderr, flush=True)
    print(
        "| workload | setting | threads | rounds | pairs | s per pair | timed share of the check | a trial "
        "process's own share | s.d. per pair | robust s.d. | noise after 1 min of pairs |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (name, setting), got in results.items():
        logs = got["logs"]
        per_pair = got["seconds"] / max(1, len(logs))
        sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
        middle = statistics.median(logs)
        robust = 1.4826 * statistics.median(abs(v - middle) for v in logs)
        own = f"{statistics.median(got['own']):.0%}" if got["own"] else "-"
        print(
            f"| {name} | {setting} | {','.join(map(str, got['threads']))} | {','.join(map(str, got['rounds']))} "
            f"| {len(logs)} | {per_pair:.1f} | {got['share']:.0%} | {own} | {100 * sd:.2f}% | {100 * robust:.2f}% "
            f"| {100 * sd * math.sqrt(per_pair / 60):.2f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
