"""A/A paired checks of a workload whose trials are short: how often does identical code fail the build?

    python benchmarks/aa_short_trials.py [--checks 30] [--demo] [-- MORE CHECK OPTIONS]

A real git repository (in a temporary folder) with two commits that differ in a comment only; the
workload is the suite's paired-check MLP (batch 64 of generated points, about 1.4 ms a step on one
thread here), so a trial's timed steps last about 30 ms: the whole trial is one turn of a pair.
`perfgate check --against HEAD~1 --configs fp32` runs `--checks` times with default settings except a
one-minute time budget (and whatever follows `--`). For each check: the verdict, exit code, pairs
and the per-pair log ratios head/base. Printed: the verdict counts, false alarms with a 95% upper
bound (Clopper-Pearson), and a one-way analysis of the pair ratios by check, which says whether one
side of a check measures consistently slower than the other (a bias shared by a check's pairs that
the per-check t-test cannot see) or whether checks differ only by their pairs' noise, and whether the head side
measures slower or faster than the base across all checks (a bias of the pairing itself: a one-sample t-test of
the checks' mean log ratios against 0).

`--demo`: the same campaign on `perfgate demo`'s repository instead: its comment-only pull request checked
against main as the demo checks it (the configured classifier, fp32, 2 threads on this machine, an 80 s budget,
at most 8 pairs).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_against import bench, make_repo  # noqa: E402  (the suite's workload and repository helper)

WORKLOAD = "perf/bench.py:bench"
CHECK = [WORKLOAD, "--against", "HEAD~1", "--configs", "fp32", "--time-budget", "60"]
DEMO_CHECK = ["--against", "main", "--configs", "fp32", "--time-budget", "80", "--max-trials", "8"]


def one_check(repo: Path, out: Path, check: list[str], extra: list[str]) -> dict[str, object]:
    started = time.perf_counter()
    command = [sys.executable, "-m", "perfgate", "check", *check, "--json", str(out), *extra]
    process = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=900)
    document = json.loads(out.read_text(encoding="utf-8"))
    base = document["against"]["base"]["workloads"][0]["configs"]["fp32"]["trials"]
    head = document["workloads"][0]["configs"]["fp32"]["trials"]
    logs = [math.log(h["samples_per_sec"] / b["samples_per_sec"]) for b, h in zip(base, head, strict=True)]
    rows = [line for line in process.stdout.splitlines() if line.startswith("  fp32 ") and "x " in line]
    ends = ("regression", "improvement", "no change", "inconclusive")
    verdict = next((e for e in ends if rows and rows[-1].lower().endswith(e)), "none")  # the gate table's row
    return {"code": process.returncode, "verdict": verdict, "logs": logs, "seconds": time.perf_counter() - started}


def upper_bound(failures: int, n: int, confidence: float = 0.95) -> float:
    return 1.0 if failures == n else float(stats.beta.ppf(confidence, failures + 1, n - failures))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=30)
    parser.add_argument("--demo", action="store_true", help="the demo's comment-only pull request against main")
    parser.add_argument("extra", nargs="*", help="more options for perfgate check (after --)")
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="aa-short-"))
    if args.demo:
        from perfgate import demo

        repo, check = top / "repo", DEMO_CHECK
        demo.make_repository(repo)
        subprocess.run(["git", "checkout", "-q", "comment-only"], cwd=repo, check=True)
    else:
        repo, check = (
            make_repo(top / "repo", {"perf/bench.py": bench(comment="one")}, {"perf/bench.py": bench(comment="two")}),
            CHECK,
        )
    print(
        f"date: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}; checks: {args.checks}; demo: {args.demo}; "
        f"extra options: {args.extra}"
    )
    results = []
    for index in range(args.checks):
        result = one_check(repo, top / f"check-{index}.json", check, args.extra)
        results.append(result)
        logs = result["logs"]
        assert isinstance(logs, list)
        mean = 100 * statistics.fmean(logs)
        print(
            f"check {index + 1:2d}: exit {result['code']} {result['verdict']:<13} pairs {len(logs):2d} "
            f"mean log ratio {mean:+6.2f}%  pairs: {' '.join(f'{100 * v:+.1f}' for v in logs)}  "
            f"({result['seconds']:.0f} s)",
            flush=True,
        )
    verdicts = [str(r["verdict"]) for r in results]
    alarms = verdicts.count("regression")
    print("\nverdicts: " + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts))))
    print(f"false alarms: {alarms}/{len(results)} (95% upper bound {100 * upper_bound(alarms, len(results)):.1f}%)")
    groups = [list(r["logs"]) for r in results if len(r["logs"]) >= 2]  # type: ignore[arg-type]
    if len(groups) >= 2:
        f, p = stats.f_oneway(*groups)
        within = statistics.fmean(statistics.variance(g) for g in groups)
        sizes = [len(g) for g in groups]
        n0 = (sum(sizes) - sum(s * s for s in sizes) / sum(sizes)) / (len(sizes) - 1)
        between = statistics.variance([statistics.fmean(g) for g in groups]) - within / n0
        print(
            f"pair log ratios by check: within-check s.d. {100 * math.sqrt(within):.2f}%, "
            f"shared by a check's pairs (s.d. of a check's bias) {100 * math.sqrt(max(0.0, between)):.2f}%; "
            f"one-way F {f:.2f}, p {p:.3g}"
        )
    means = [statistics.fmean(g) for g in groups]
    if len(means) >= 2:
        t = stats.ttest_1samp(means, 0.0)
        print(
            f"head against base over all checks: mean log ratio {100 * statistics.fmean(means):+.2f}% "
            f"(s.d. of a check's mean {100 * statistics.stdev(means):.2f}%; t {t.statistic:.2f}, p {t.pvalue:.3g}); "
            f"checks below 1: {sum(m < 0 for m in means)}/{len(means)}"
        )
    print(f"median minutes per check: {statistics.median(float(r['seconds']) for r in results) / 60:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
