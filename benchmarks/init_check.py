"""A new user's first paired checks: `perfgate init`, then `perfgate check --against HEAD` with every default.

    python benchmarks/init_check.py [--repeats 1] [--slower-only]

In a real git repository in a temporary folder: `perfgate init`, the files committed, then per repeat

1. `perfgate check --against HEAD` on the unchanged working tree (A/A): every config must end decided
   ("no change", exit 0) or with the line that says which budget would decide it (inconclusive, exit 0);
2. the same after the stand-in's loss is made 10% slower: the check must fail (exit 1).

The slower stand-in spins (a busy loop, on the host, outside the compiled model) for a tenth of its step's
typical time (the median interval between its last calls, less the spin: the one interval a turn that spans
the other side's turn does not count), so every config's step takes about 10% longer whatever its speed. A
first version spun a tenth of the last interval, that one included, and measured 0.78-0.80x. Each
check runs the whole default lab (fp32, bf16, bf16-compile), the default budget, fresh trial processes.
Printed per check: exit code, seconds, each config's verdict, pairs, ratio, noise, and the budget lines.
Run nothing else beside it: the checks are timing measurements.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.git import git, new_repository  # noqa: E402

SLOWER = """

import statistics as _statistics
import time as _time

_last = {"called": None, "spun": 0.0, "intervals": []}
_compute_loss = compute_loss


def compute_loss(model, batch):
    # 10% slower: spin for a tenth of the step's typical time, the median of the last 9 intervals between calls
    # (less the spin): a median, because a pair's trials take turns (about 0.5 s each) and the interval that
    # spans the other side's turn is no step of this one
    now = _time.perf_counter()
    spin = 0.0
    if _last["called"] is not None:
        _last["intervals"] = (_last["intervals"] + [now - _last["called"] - _last["spun"]])[-9:]
        spin = 0.1 * _statistics.median(_last["intervals"])
        while _time.perf_counter() < now + spin:
            pass
    _last["called"], _last["spun"] = now, spin
    return _compute_loss(model, batch)
"""


def perfgate(repo: Path, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfgate", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def check(repo: Path, out: Path) -> dict[str, object]:
    started = time.perf_counter()
    process = perfgate(repo, "check", "--against", "HEAD", "--json", str(out))
    seconds = time.perf_counter() - started
    configs = []
    if out.exists():
        document = json.loads(perfgate(repo, "report", str(out), "--format", "json").stdout)
        for workload in document.get("workloads", []):
            for config in workload.get("configs", []):
                throughput = config.get("throughput") or {}
                ratio, noise = throughput.get("ratio") or float("nan"), throughput.get("noise") or float("nan")
                configs.append(
                    f"{config.get('config')}: {config.get('status')} pairs {(throughput.get('trials') or [0, 0])[1]} "
                    f"ratio {ratio:.3f} noise {noise:.3f}"
                )
    budget = [line.strip() for line in (process.stdout + process.stderr).splitlines() if "budget" in line]
    return {
        "code": process.returncode,
        "seconds": seconds,
        "configs": configs,
        "budget": budget,
        "tail": process.stdout[-1500:] + process.stderr[-800:],
    }


def show(label: str, found: dict[str, object]) -> None:
    print(f"  {label}: exit {found['code']}, {found['seconds']:.0f} s", flush=True)
    for line in found["configs"]:  # type: ignore[attr-defined]
        print(f"    {line}", flush=True)
    for line in found["budget"]:  # type: ignore[attr-defined]
        print(f"    | {line}", flush=True)
    if not found["configs"]:
        print(f"    no results file; output:\n{found['tail']}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="A/A and 10%%-slower checks to run (each)")
    parser.add_argument("--slower-only", action="store_true", help="only the 10%%-slower checks")
    args = parser.parse_args()
    print(f"init_check: {args.repeats} repeat(s), {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC", flush=True)
    outcomes = {"aa": [], "slower": []}
    with tempfile.TemporaryDirectory() as scratch:
        repo = new_repository(Path(scratch) / "newproject")
        made = perfgate(repo, "init")
        if made.returncode != 0:
            raise SystemExit(f"perfgate init failed:\n{made.stdout}\n{made.stderr}")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "Check pull requests with perfgate")
        workloads = repo / "perf" / "workloads.py"
        original = workloads.read_text()
        for index in range(args.repeats):
            if not args.slower_only:
                workloads.write_text(original)
                found = check(repo, Path(scratch) / f"aa-{index}.json")
                show(f"A/A {index + 1}", found)
                outcomes["aa"].append(found["code"])
            workloads.write_text(original + SLOWER)
            found = check(repo, Path(scratch) / f"slower-{index}.json")
            show(f"10% slower {index + 1}", found)
            outcomes["slower"].append(found["code"])
    print(
        f"A/A exits: {outcomes['aa']} (0: decided or a budget line); 10% slower exits: {outcomes['slower']} (1: fails)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
