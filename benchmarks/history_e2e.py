"""History and bisect end to end: twelve commits, one of them 10% slower, recorded, charted and bisected.

A git repository in a temporary folder holds a paced workload (each step waits PAUSE_S, then trains a
tiny model: a slowdown the machine's neighbours cannot blur). Twelve commits; the eighth makes the pause
10% longer. At each commit `perfgate check --record` gates the commit against a baseline stored at the
first one and appends the run to the history. Then:

- `perfgate history` should show one change point, at the eighth commit;
- the same twelve commits with no change (an A/A series) should show none;
- `perfgate bisect FIRST LAST` should name the eighth commit.

Prints each step's outcome and a summary; exits 1 if any of the three does not hold.

    python benchmarks/history_e2e.py [--trials 3] [--slower-at 8] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.workloads import paced_source  # noqa: E402  (the workload the bisect test uses, larger)

PAUSE_S = 0.020


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})


def perfgate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(cwd, sys.executable, "-m", "perfgate", *args)


def series(folder: Path, commits: int, slower_at: int | None, trials: str) -> tuple[list[str], str]:
    """A repository of `commits` commits (the `slower_at`-th pausing 10% longer from then on), each checked
    with --record; (the commits, `perfgate history`'s output)."""
    repo = folder / "repo"
    repo.mkdir(parents=True)
    run(repo, "git", "init", "-q", "-b", "main")
    shas = []
    common = ("--configs", "fp32", "--threads", "1", "--trials", trials, "--quiet")
    baselines = folder / "baselines"
    for number in range(1, commits + 1):
        pause = PAUSE_S * (1.1 if slower_at is not None and number >= slower_at else 1.0)
        (repo / "paced.py").write_text(paced_source(pause, samples=256, steps=8))
        (repo / "notes.txt").write_text(f"commit {number}\n")
        run(repo, "git", "add", ".")
        run(repo, "git", "-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-q", "-m", f"{number}")
        shas.append(run(repo, "git", "rev-parse", "HEAD").stdout.strip())
        if number == 1:
            update = perfgate(repo, "update", "paced.py:paced", *common, "--baseline-dir", str(baselines))
            if update.returncode != 0:
                raise SystemExit(f"update failed: {update.stdout[-1500:]}{update.stderr[-1500:]}")
        started = time.monotonic()
        where = ("--baseline-dir", str(baselines), "--record", "--history-dir", str(folder / "history"))
        check = perfgate(repo, "check", "paced.py:paced", *common, "--max-trials", trials, *where)
        verdict = re.search(r"paced fp32: (\w[\w ]*?)[:,(]", check.stdout + check.stderr)
        print(
            f"  commit {number:2d} {shas[-1][:10]}: exit {check.returncode} "
            f"({verdict.group(1) if verdict else 'see the report'}) in {time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    history = perfgate(repo, "history", "--history-dir", str(folder / "history"), "--limit", str(commits))
    return shas, history.stdout + history.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", default="3")
    parser.add_argument("--slower-at", type=int, default=8)
    parser.add_argument("--commits", type=int, default=12)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="perfgate-history-e2e-"))
    ok = True
    try:
        print(f"planted: commit {args.slower_at} of {args.commits} pauses 10% longer", file=sys.stderr)
        shas, history = series(folder / "planted", args.commits, args.slower_at, args.trials)
        print(history)
        points = re.findall(r"change point: samples/s .* at (\w+) ", history)
        found = [shas.index(next(s for s in shas if s.startswith(p))) + 1 for p in points]
        print(f"planted series: change points at commits {found} (want [{args.slower_at}])")
        ok &= found == [args.slower_at]
        print("A/A: no change", file=sys.stderr)
        _, flat = series(folder / "flat", args.commits, None, args.trials)
        print(flat)
        flat_points = re.findall(r"change point: samples/s", flat)
        print(f"A/A series: {len(flat_points)} change point(s) (want 0)")
        ok &= not flat_points
        started = time.monotonic()
        common = ("--configs", "fp32", "--threads", "1", "--trials", args.trials, "--max-trials", args.trials)
        bisected = perfgate(folder / "planted" / "repo", "bisect", shas[0], shas[-1], "paced.py:paced", *common)
        print(bisected.stdout + bisected.stderr[-2000:])
        named = re.search(r"first bad commit: (\w+)", bisected.stdout)
        print(
            f"bisect: {named.group(1)[:10] if named else 'no commit'} named in {time.monotonic() - started:.0f} s "
            f"(want commit {args.slower_at}, {shas[args.slower_at - 1][:10]})"
        )
        ok &= named is not None and named.group(1) == shas[args.slower_at - 1]
    finally:
        if args.keep:
            print(f"kept: {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print("all three hold" if ok else "NOT ALL HOLD")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
