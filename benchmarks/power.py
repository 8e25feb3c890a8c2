"""How often perfgate's gate raises false alarms and how often it catches real slowdowns.

Two modes:

`simulate` draws per-trial samples/sec as 1000 x factor x exp(noise x Z), Z standard normal, at noise
levels 1%, 2%, 5% and 10% (the standard deviation of log throughput), for an A/A pair (no change) and
for 5% and 10% slowdowns (each step takes that much longer: candidate throughput = baseline / 1.05 or
/ 1.10). Per noise level and scenario it estimates, over `--reps` repetitions:

- perfgate at its defaults, exactly as `perfgate check` decides: a baseline of 5 trials (`perfgate
  update`), 3 candidate trials, then one more at a time while the verdict is inconclusive, up to 8,
  each look tested by `perfgate.judge.stats.compare_throughput` with the check's number of looks (alpha 0.01
  and the no-change interval's 2.5% error split evenly over them): verdict rates and the mean number
  of candidate trials;
- pytest-benchmark's `--benchmark-compare-fail=median:5%`: one stored run against one new run (a run
  modelled as one trial), fail when the new time exceeds the stored time by more than 5%;
- asv's comparison rule: median time ratio above the factor 1.1 and a two-sided exact Mann-Whitney U
  test significant at 0.05, given perfgate's first look's trial counts (5 baseline, 3 candidate).

`real` runs the actual CLI on this machine: `perfgate update` of the planted workload
(`benchmarks/planted.py`) once, then alternating A/A checks and checks with a planted 10% slowdown
(`PERFGATE_PLANTED_SLOWDOWN=0.10`), and counts the verdicts. Everything happens in a temporary folder
(or `--out DIR`), never in the repository.

    python benchmarks/power.py simulate [--reps 2000] [--seed 20240601]
    python benchmarks/power.py real [--checks 20] [--workload lm] [--configs fp32] [--trials 3] \\
        [--max-trials 6] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from perfgate.judge.stats import compare_throughput, looks, smallest_mann_whitney_p
from perfgate.project import DEFAULT_THRESHOLD, DEFAULT_TRIALS
from perfgate.records.baselines import DEFAULT_UPDATE_TRIALS
from perfgate.records.comparisons import DEFAULT_ALPHA, Verdict
from perfgate.records.verdicts import DEFAULT_MAX_TRIALS

REPO = Path(__file__).resolve().parent.parent

NOISE_LEVELS = (0.01, 0.02, 0.05, 0.10)
SCENARIOS = (("A/A", 0.0), ("5% slower", 0.05), ("10% slower", 0.10))
BASE_THROUGHPUT = 1000.0
LAB_COMPARISONS = 6  # the default lab: 2 workloads x 3 configs
PYTEST_BENCHMARK_LIMIT = 0.05  # --benchmark-compare-fail=median:5%
ASV_FACTOR = 1.1  # asv continuous / compare default --factor
ASV_ALPHA = 0.05  # as briefed; asv's own is_different() defaults to p_threshold=0.002 (see the notes printed)
NOISY_BASELINE = 0.20  # real: warn when a baseline's trials differ by more than this (max/min - 1)


# --------------------------------------------------------------------------------------------------
# simulate


@dataclass
class CellResult:
    """One noise level and scenario: counts of each rule's outcomes over the repetitions."""

    reps: int = 0
    perfgate: Counter[Verdict] = field(default_factory=Counter)
    perfgate_trials: int = 0  # candidate trials used, summed over repetitions
    perfgate_first_look_regressions: int = 0
    pytest_benchmark_fails: int = 0
    asv_regressions: int = 0

    def rate(self, count: int) -> float:
        return count / self.reps


def perfgate_sequential(
    baseline: Sequence[float],
    candidate_pool: Sequence[float],
    *,
    trials: int,
    max_trials: int,
    threshold: float,
    alpha: float,
) -> tuple[Verdict, int, Verdict]:
    """`perfgate check`'s throughput decision: add a trial while inconclusive, test at each look.

    Returns the final verdict, the candidate trials used, and the verdict at the first look.
    """
    checks = looks(trials, max(trials, max_trials))
    used = trials
    first: Verdict | None = None
    while True:
        verdict = compare_throughput(
            baseline, candidate_pool[:used], threshold=threshold, alpha=alpha, looks=checks
        ).verdict
        first = first or verdict
        if verdict != Verdict.INCONCLUSIVE or used >= max_trials:
            return verdict, used, first
        used += 1


def pytest_benchmark_fails(baseline_sps: float, candidate_sps: float, limit: float = PYTEST_BENCHMARK_LIMIT) -> bool:
    """`--benchmark-compare-fail=median:5%`: the new time is more than 5% above the stored one."""
    return 1.0 / candidate_sps > (1.0 / baseline_sps) * (1.0 + limit)


def asv_regression(
    baseline_sps: Sequence[float], candidate_sps: Sequence[float], factor: float = ASV_FACTOR, alpha: float = ASV_ALPHA
) -> bool:
    """asv's "got worse": time ratio of medians above `factor` and the samples significantly different."""
    base_times = [1.0 / v for v in baseline_sps]
    cand_times = [1.0 / v for v in candidate_sps]
    if not statistics.median(cand_times) > statistics.median(base_times) * factor:
        return False
    p = scipy_stats.mannwhitneyu(base_times, cand_times, method="exact", alternative="two-sided").pvalue
    return bool(p < alpha)


def simulate_cell(
    noise: float, slowdown: float, reps: int, rng: np.random.Generator, *, trials: int, max_trials: int
) -> CellResult:
    result = CellResult()
    factor = 1.0 / (1.0 + slowdown)
    for _ in range(reps):
        baseline = (BASE_THROUGHPUT * np.exp(noise * rng.standard_normal(DEFAULT_UPDATE_TRIALS))).tolist()
        pool = (BASE_THROUGHPUT * factor * np.exp(noise * rng.standard_normal(max_trials))).tolist()
        verdict, used, first = perfgate_sequential(
            baseline, pool, trials=trials, max_trials=max_trials, threshold=DEFAULT_THRESHOLD, alpha=DEFAULT_ALPHA
        )
        result.reps += 1
        result.perfgate[verdict] += 1
        result.perfgate_trials += used
        result.perfgate_first_look_regressions += first == Verdict.REGRESSION
        # The other rules see the same draws: one run each (pytest-benchmark), the first look's trials (asv).
        result.pytest_benchmark_fails += pytest_benchmark_fails(baseline[0], pool[0])
        result.asv_regressions += asv_regression(baseline, pool[:trials])
    return result


def _pct(fraction: float, digits: int = 1) -> str:
    return f"{100 * fraction:.{digits}f}%"


def _upper_95(count: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound of a rate seen `count` times in `n`."""
    return 1.0 if count >= n else float(scipy_stats.beta.ppf(0.95, count + 1, n - count))


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def command_simulate(args: argparse.Namespace) -> int:
    started = time.monotonic()
    trials, max_trials = DEFAULT_TRIALS, DEFAULT_MAX_TRIALS
    n_looks = looks(trials, max_trials)
    cells: dict[tuple[float, str], CellResult] = {}
    for noise_index, noise in enumerate(NOISE_LEVELS):
        for scenario_index, (scenario, slowdown) in enumerate(SCENARIOS):
            # One stream per cell: each cell reproduces on its own, whatever else runs.
            rng = np.random.default_rng([args.seed, noise_index, scenario_index])
            cells[(noise, scenario)] = simulate_cell(
                noise, slowdown, args.reps, rng, trials=trials, max_trials=max_trials
            )
            print(f"[power] simulated noise {_pct(noise, 0)}, {scenario}", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started

    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    out = [
        "# perfgate power simulation",
        "",
        f"- date: {now}",
        f"- repetitions per cell: {args.reps}, seed {args.seed} (numpy default_rng([seed, noise, scenario]))",
        f"- trials: samples/sec = {BASE_THROUGHPUT:g} x factor x exp(noise x Z), Z ~ N(0, 1); noise = sd of log "
        f"throughput; an X% slowdown: factor = 1/(1+X)",
        f"- perfgate: baseline {DEFAULT_UPDATE_TRIALS} trials, candidate {trials} trials adding one at a time "
        f"while inconclusive up to {max_trials}; threshold {DEFAULT_THRESHOLD:g}, alpha {DEFAULT_ALPHA:g} "
        f"and the no-change interval's 2.5% split over {n_looks} looks = {DEFAULT_ALPHA / n_looks:.4g} and "
        f"{0.025 / n_looks:.4g} per look; trials more than 2x off their side's median left out "
        "(perfgate.judge.stats.compare_throughput; throughput only, no memory verdict)",
        f"- pytest-benchmark: one run a side, fail if time_new > time_old x {1 + PYTEST_BENCHMARK_LIMIT:g}",
        f"- asv: {DEFAULT_UPDATE_TRIALS} baseline vs {trials} candidate trials; median time ratio > {ASV_FACTOR:g} "
        f"and exact two-sided Mann-Whitney U p < {ASV_ALPHA:g} (scipy)",
        f"- Monte Carlo standard error of a rate p: sqrt(p(1-p)/{args.reps}) "
        f"(about {_pct(math.sqrt(0.01 * 0.99 / args.reps), 2)} at 1%, {_pct(math.sqrt(0.25 / args.reps), 1)} at 50%)",
        "",
        "## perfgate (default settings, power-aware sequential check)",
        "",
    ]
    rows = []
    for noise in NOISE_LEVELS:
        aa, s5, s10 = (cells[(noise, name)] for name, _ in SCENARIOS)
        rows.append(
            [
                _pct(noise, 0),
                f"{_pct(aa.rate(aa.perfgate[Verdict.REGRESSION]), 2)} ({aa.perfgate[Verdict.REGRESSION]})",
                _pct(s5.rate(s5.perfgate[Verdict.REGRESSION])),
                _pct(s10.rate(s10.perfgate[Verdict.REGRESSION])),
                " / ".join(_pct(c.rate(c.perfgate[Verdict.INCONCLUSIVE])) for c in (aa, s5, s10)),
                " / ".join(_pct(c.rate(c.perfgate[Verdict.NO_CHANGE])) for c in (aa, s5, s10)),
                " / ".join(_pct(c.rate(c.perfgate[Verdict.IMPROVEMENT])) for c in (aa, s5, s10)),
                " / ".join(f"{c.perfgate_trials / c.reps:.2f}" for c in (aa, s5, s10)),
                " / ".join(_pct(c.rate(c.perfgate_first_look_regressions)) for c in (aa, s5, s10)),
            ]
        )
    out.append(
        _markdown(
            [
                "noise",
                "A/A false alarm (count)",
                "detects 5% slower",
                "detects 10% slower",
                "inconclusive A/A / 5% / 10%",
                "no change A/A / 5% / 10%",
                "improvement A/A / 5% / 10%",
                "mean cand. trials A/A / 5% / 10%",
                "regression at 1st look A/A / 5% / 10%",
            ],
            rows,
        )
    )
    out += [
        "",
        f"Family false-alarm rate of one check of the default lab ({LAB_COMPARISONS} comparisons, "
        "independent): 1-(1-p)^6",
        "",
    ]
    rows = []
    for noise in NOISE_LEVELS:
        aa = cells[(noise, "A/A")]
        count = aa.perfgate[Verdict.REGRESSION]
        p, upper = aa.rate(count), _upper_95(count, aa.reps)
        rows.append(
            [
                _pct(noise, 0),
                _pct(p, 2),
                _pct(1 - (1 - p) ** LAB_COMPARISONS, 2),
                _pct(upper, 2),
                _pct(1 - (1 - upper) ** LAB_COMPARISONS, 2),
            ]
        )
    out.append(
        _markdown(
            ["noise", "per comparison p", "per check (6)", "p, 95% upper bound", "per check, 95% upper bound"], rows
        )
    )
    out += [
        "",
        f"(Bonferroni bound by construction: p <= alpha = {DEFAULT_ALPHA:g}, so per check <= "
        f"{_pct(1 - (1 - DEFAULT_ALPHA) ** LAB_COMPARISONS, 2)}.)",
        "",
        "## pytest-benchmark `--benchmark-compare-fail=median:5%` (one run a side)",
        "",
    ]
    rows = []
    for noise in NOISE_LEVELS:
        aa, s5, s10 = (cells[(noise, name)] for name, _ in SCENARIOS)
        rows.append(
            [
                _pct(noise, 0),
                _pct(aa.rate(aa.pytest_benchmark_fails)),
                _pct(s5.rate(s5.pytest_benchmark_fails)),
                _pct(s10.rate(s10.pytest_benchmark_fails)),
                _pct(1 - (1 - aa.rate(aa.pytest_benchmark_fails)) ** LAB_COMPARISONS),
            ]
        )
    out.append(
        _markdown(["noise", "A/A false alarm", "detects 5% slower", "detects 10% slower", "per check of 6 (A/A)"], rows)
    )
    out += [
        "",
        f"## asv (factor {ASV_FACTOR:g} and Mann-Whitney U p < {ASV_ALPHA:g}, "
        f"{DEFAULT_UPDATE_TRIALS} vs {trials} trials)",
        "",
    ]
    rows = []
    for noise in NOISE_LEVELS:
        aa, s5, s10 = (cells[(noise, name)] for name, _ in SCENARIOS)
        rows.append(
            [
                _pct(noise, 0),
                _pct(aa.rate(aa.asv_regressions)),
                _pct(s5.rate(s5.asv_regressions)),
                _pct(s10.rate(s10.asv_regressions)),
            ]
        )
    out.append(_markdown(["noise", "A/A false alarm", "detects 5% slower", "detects 10% slower"], rows))
    p53, p33 = smallest_mann_whitney_p(5, 3), smallest_mann_whitney_p(3, 3)
    out += [
        "",
        "Smallest p an exact Mann-Whitney U test can reach (perfgate.judge.stats.smallest_mann_whitney_p, one-sided; "
        "two-sided is twice that):",
        f"- 5 vs 3: {p53:.4f} (two-sided {2 * p53:.4f})",
        f"- 3 vs 3: {p33:.4f} (two-sided {2 * p33:.4f}): a two-sided test at 0.05 can never reject",
        "- asv's own `is_different` uses p_threshold=0.002 and runs the test only when 1/C(n+m, min(n, m)) is "
        f"below it; at 5 vs 3 that is {p53:.4f}, so real asv falls back to checking whether the two 99% "
        "confidence intervals of the medians overlap (not simulated here).",
        "- the 5% slowdown equals perfgate's and pytest-benchmark's 5% threshold, and the 10% slowdown equals "
        "asv's factor 1.1: a rule that needs the estimate beyond the threshold catches such an effect at most "
        "about half the time.",
        "",
        f"run time: {elapsed:.1f} s",
    ]
    print("\n".join(out), flush=True)
    return 0


# --------------------------------------------------------------------------------------------------
# real


@dataclass
class CheckRecord:
    index: int
    kind: str  # "A/A" or "slow"
    exit_code: int
    summary: str  # the "perfgate check:" line
    verdicts: dict[str, str]  # config -> verdict label, lower case
    ratios: dict[str, float]
    trials: dict[str, int]  # config -> candidate trials used
    wall_s: float


_ROW_SPLIT = re.compile(r"\s{2,}")


def parse_check_output(stdout: str) -> tuple[str, dict[str, str], dict[str, float], dict[str, int]]:
    """The `perfgate check:` line, and per config the verdict, ratio and candidate trials of the gate table."""
    summary = next((line for line in reversed(stdout.splitlines()) if line.startswith("perfgate check:")), "")
    verdicts: dict[str, str] = {}
    ratios: dict[str, float] = {}
    trials: dict[str, int] = {}
    in_table = False
    header: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("gate: "):
            in_table = False
            continue
        cells = _ROW_SPLIT.split(line.strip())
        if cells[:2] == ["config", "baseline s/s"]:
            in_table, header = True, cells
            continue
        if not in_table:
            continue
        if not line.startswith("  ") or line.strip().startswith(("samples/s:", "!", "+")):
            in_table = False
            continue
        if set(line.strip()) <= {"-", " "}:
            continue
        if len(cells) == len(header):
            row = dict(zip(header, cells, strict=True))
            config = row["config"]
            verdicts[config] = row["verdict"].lower()
            if row["ratio"] != "-":
                ratios[config] = float(row["ratio"].rstrip("x"))
            if "+" in row["trials"]:
                trials[config] = int(row["trials"].split("+")[1])
    return summary, verdicts, ratios, trials


def _cli(arguments: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfgate", *arguments], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@dataclass(frozen=True)
class BaselineInfo:
    """What the real run needs from the baseline it wrote: per config, step times and trial throughputs."""

    workload: str
    step_p50_s: dict[str, float]  # median over trials of each trial's median step time
    mean_step_s: dict[str, float]  # median over trials of batch / samples_per_sec (the mean step)
    samples_per_sec: dict[str, list[float]]

    def spread(self, config: str) -> float:
        values = self.samples_per_sec[config]
        return max(values) / min(values) - 1.0


def read_baseline(baseline_dir: Path) -> BaselineInfo:
    """The single workload's single machine entry of the baseline folder `perfgate update` wrote."""
    import yaml

    files = sorted(baseline_dir.glob("*.yaml"))
    if len(files) != 1:
        raise SystemExit(f"expected one baseline file in {baseline_dir}, found {len(files)}")
    document: dict[str, Any] = yaml.safe_load(files[0].read_text(encoding="utf-8"))
    machines = document["machines"]
    if len(machines) != 1:
        raise SystemExit(f"expected one machine in {files[0]}, found {len(machines)}")
    (entry,) = machines.values()
    batch_size = entry["settings"]["batch_size"]
    info = BaselineInfo(str(document["workload"]), {}, {}, {})
    for config, data in entry["configs"].items():
        info.step_p50_s[config] = statistics.median(t["step_p50_s"] for t in data["trials"])
        info.mean_step_s[config] = statistics.median(batch_size / t["samples_per_sec"] for t in data["trials"])
        info.samples_per_sec[config] = [float(t["samples_per_sec"]) for t in data["trials"]]
    return info


def command_real(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        return _real(args, args.out.resolve(), started)
    with tempfile.TemporaryDirectory(prefix="perfgate-power-") as tmp:
        return _real(args, Path(tmp), started)


def _real(args: argparse.Namespace, work: Path, started: float) -> int:
    reference = f"{REPO / 'benchmarks' / 'planted.py'}:{args.workload}"
    baselines = work / "baselines"
    env = dict(os.environ)
    env.pop("PERFGATE_PLANTED_SLOWDOWN", None)
    env.pop("PERFGATE_PLANTED_STEP_S", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)

    def progress(message: str) -> None:
        print(f"[power {time.monotonic() - started:6.0f} s] {message}", file=sys.stderr, flush=True)

    progress(f"perfgate update {reference} --configs {args.configs} (in {work})")
    update = _cli(
        [
            "update",
            reference,
            "--configs",
            args.configs,
            "--baseline-dir",
            str(baselines),
            "--quiet",
            "--allow-dirty",
        ],
        work,
        env,
    )
    (work / "update.txt").write_text(update.stdout + update.stderr, encoding="utf-8")
    if update.returncode != 0:
        print(update.stdout + update.stderr, file=sys.stderr)
        raise SystemExit(f"perfgate update failed with exit code {update.returncode}")
    baseline = read_baseline(baselines)
    step_env = ",".join(f"{config}={seconds:.6g}" for config, seconds in baseline.step_p50_s.items())
    progress(f"baseline written for {baseline.workload}; median step {step_env}")
    for config, values in baseline.samples_per_sec.items():
        progress(f"baseline {config} samples/s per trial: {', '.join(f'{v:.1f}' for v in values)}")
        if baseline.spread(config) > NOISY_BASELINE:
            progress(
                f"warning: the {config} baseline's trials differ by {_pct(baseline.spread(config), 0)} "
                "(max/min - 1): every check is judged against it; consider rerunning on a quieter machine"
            )

    records: list[CheckRecord] = []
    for index in range(2 * args.checks):
        kind = "A/A" if index % 2 == 0 else "slow"
        check_env = dict(env)
        if kind == "slow":
            check_env.update(PERFGATE_PLANTED_SLOWDOWN=f"{args.slowdown:g}", PERFGATE_PLANTED_STEP_S=step_env)
        check_started = time.monotonic()
        check = _cli(
            [
                "check",
                reference,
                "--configs",
                args.configs,
                "--trials",
                str(args.trials),
                "--max-trials",
                str(args.max_trials),
                "--baseline-dir",
                str(baselines),
                "--quiet",
                "--json",
                str(work / f"check-{index + 1}.json"),
            ],
            work,
            check_env,
        )
        wall = time.monotonic() - check_started
        (work / f"check-{index + 1}.txt").write_text(check.stdout + check.stderr, encoding="utf-8")
        summary, verdicts, ratios, trials = parse_check_output(check.stdout)
        record = CheckRecord(index + 1, kind, check.returncode, summary, verdicts, ratios, trials, wall)
        records.append(record)
        shown = ", ".join(
            f"{c} {v} {ratios.get(c, math.nan):.3f}x {trials.get(c, 0)} trials" for c, v in verdicts.items()
        )
        progress(f"check {index + 1}/{2 * args.checks} ({kind}): exit {check.returncode}, {shown or summary}")
        if not verdicts:
            progress(f"  could not parse a verdict; output in {work / f'check-{index + 1}.txt'}")
            if check.stderr.strip():
                progress("  " + check.stderr.strip().splitlines()[-1])

    print(_real_report(args, reference, baseline, records, time.monotonic() - started))
    if args.out is not None:
        (work / "summary.json").write_text(
            json.dumps([record.__dict__ for record in records], indent=2) + "\n", encoding="utf-8"
        )
    return 0


def _real_report(
    args: argparse.Namespace,
    reference: str,
    baseline: BaselineInfo,
    records: list[CheckRecord],
    elapsed: float,
) -> str:
    step_p50, mean_step = baseline.step_p50_s, baseline.mean_step_s
    expected = {c: mean_step[c] / (mean_step[c] + args.slowdown * step_p50[c]) for c in step_p50}
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    out = [
        "# perfgate on this machine: A/A checks and a planted slowdown",
        "",
        f"- date: {now}; workload {baseline.workload} ({reference}); configs {args.configs}",
        f"- baseline: perfgate update, {DEFAULT_UPDATE_TRIALS} trials; samples/s per trial: "
        + "; ".join(
            f"{c} {', '.join(f'{v:.1f}' for v in values)} (max/min {_pct(baseline.spread(c), 0)})"
            for c, values in baseline.samples_per_sec.items()
        ),
        f"- checks: --trials {args.trials} --max-trials {args.max_trials}; {args.checks} A/A and {args.checks} "
        "slow checks, alternating",
        f"- planted: sleep {args.slowdown:g} x the baseline's median step time in every step ("
        + ", ".join(f"{c} {1000 * s:.2f} ms" for c, s in step_p50.items())
        + "); expected slow/baseline ratio "
        + ", ".join(f"{c} {r:.3f}" for c, r in expected.items())
        + f" (1/{1 + args.slowdown:g} = {1 / (1 + args.slowdown):.3f} if every step took the median time; "
        "samples/s uses the total step time)",
        "",
        _markdown(
            ["#", "kind", "exit", "config", "verdict", "ratio", "cand. trials", "wall s"],
            [
                [
                    str(r.index),
                    r.kind,
                    str(r.exit_code),
                    config,
                    verdict,
                    f"{r.ratios[config]:.3f}" if config in r.ratios else "-",
                    str(r.trials.get(config, "-")),
                    f"{r.wall_s:.0f}",
                ]
                for r in records
                for config, verdict in (r.verdicts or {"-": "unparsed"}).items()
            ],
        ),
        "",
    ]
    labels = ("regression", "inconclusive", "no change", "improvement")
    rows = []
    for kind in ("A/A", "slow"):
        verdicts = Counter(v for r in records if r.kind == kind for v in r.verdicts.values())
        other = sum(count for label, count in verdicts.items() if label not in labels)
        ratios = [x for r in records if r.kind == kind for x in r.ratios.values()]
        used = [x for r in records if r.kind == kind for x in r.trials.values()]
        walls = [r.wall_s for r in records if r.kind == kind]
        rows.append(
            [
                kind,
                str(sum(verdicts.values())),
                *(str(verdicts[label]) for label in labels),
                str(other),
                f"{statistics.median(ratios):.3f}" if ratios else "-",
                f"{statistics.fmean(used):.2f}" if used else "-",
                f"{statistics.median(walls):.0f}" if walls else "-",
            ]
        )
    out.append(
        _markdown(
            [
                "kind",
                "verdicts",
                "regression",
                "inconclusive",
                "no change",
                "improvement",
                "other",
                "median ratio",
                "mean cand. trials",
                "median wall s",
            ],
            rows,
        )
    )
    out += [
        "",
        "A/A: a regression is a false alarm. slow: a regression is a catch; no change is a miss the gate "
        "should never produce.",
        f"run time: {elapsed:.0f} s",
    ]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    simulate = commands.add_parser("simulate", help="Monte Carlo false-alarm and detection rates of three rules")
    simulate.add_argument("--reps", type=int, default=2000, help="repetitions per noise level and scenario")
    simulate.add_argument("--seed", type=int, default=20240601)
    simulate.set_defaults(func=command_simulate)
    real = commands.add_parser("real", help="A/A and planted-slowdown checks with the real CLI on this machine")
    real.add_argument("--checks", type=int, default=20, help="A/A checks, and as many slow checks")
    real.add_argument("--workload", choices=("lm", "vision"), default="lm")
    real.add_argument("--configs", default="fp32")
    real.add_argument("--trials", type=int, default=3)
    real.add_argument("--max-trials", type=int, default=6)
    real.add_argument("--slowdown", type=float, default=0.10, help="planted slowdown as a fraction (default 0.10)")
    real.add_argument("--out", type=Path, default=None, help="keep baselines, check outputs and JSON here")
    real.set_defaults(func=command_real)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "reps", 1) < 1 or getattr(args, "checks", 1) < 1:
        raise SystemExit("--reps and --checks must be at least 1")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
