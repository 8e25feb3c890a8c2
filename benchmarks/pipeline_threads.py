"""The thread count a trial runs with decides verdicts about the data pipeline; and one measurement, whatever the mode.

A real image pipeline (PNG decoding with Pillow, 2 DataLoader workers, a transformers ResNet:
`benchmarks/outside_workloads.py:images`) in a throwaway git repository; the pull request drops its
workers (`num_workers=0`). Two commands:

    python benchmarks/pipeline_threads.py verdicts [--repeats 2]
        `perfgate check --against main` of the pull request, at 1 torch thread (`--threads 1`) and at torch's
        own thread count (the default), alternating: the head/base ratio, the verdict and the thread count
        in the data-pipeline finding; and, beside each check, the plain training speed of both pipelines
        (`perfgate run --rounds 1`), to say which one the user's training on this machine is faster with.

    python benchmarks/pipeline_threads.py modes [--repeats 3] [--threads 1]
        The unchanged pipeline measured as a stored baseline would be (`perfgate run`, trials one after the
        other) and as the base side of a paired check (`perfgate check --against HEAD`, pairs taking turns),
        alternating: samples/sec of each trial, per mode. A faithful measurement does not depend on the mode.

Needs `pip install transformers pillow`. Never run it beside another timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = "perf_workloads.py:images"


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def write_workloads(repo: Path, workers: int) -> None:
    text = (HERE / "outside_workloads.py").read_text(encoding="utf-8")
    text += f"\n\ndef images_under_test() -> perfgate.Workload:\n    return _images({workers})\n"
    text = text.replace(
        "def images() -> perfgate.Workload:\n    return _images(2)",
        "def images() -> perfgate.Workload:\n    return images_under_test()",
    )
    (repo / "perf_workloads.py").write_text(text, encoding="utf-8")


def make_repository(repo: Path) -> None:
    repo.mkdir()
    write_workloads(repo, 2)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base: 2 DataLoader workers")


def perfgate(repo: Path, *args: str) -> tuple[int, str, dict]:
    out = repo.parent / "out.json"
    out.unlink(missing_ok=True)
    process = subprocess.run(
        [sys.executable, "-m", "perfgate", *args, "--configs", "fp32", "--json", str(out)],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    if not out.is_file():
        raise SystemExit(
            f"perfgate {' '.join(args)} wrote no results (exit {process.returncode}): {process.stderr[-600:]}"
        )
    return process.returncode, process.stdout, json.loads(out.read_text())


def rates(document: dict, side: str = "head") -> list[float]:
    run = document if side == "head" else document["against"]["base"]
    return [
        t["samples_per_sec"]
        for w in run["workloads"]
        for c in w["configs"].values()
        for t in c["trials"]
        if t["status"] == "ok"
    ]


def threads_of(document: dict) -> list[int]:
    return sorted({t.get("threads") for w in document["workloads"] for c in w["configs"].values() for t in c["trials"]})


def command_verdicts(repo: Path, repeats: int) -> None:
    write_workloads(repo, 0)  # the pull request: no workers
    for _ in range(repeats):
        for name, extra in (("1 thread", ["--threads", "1"]), ("torch's default", [])):
            plain = {}
            for workers in (2, 0):
                write_workloads(repo, workers)
                _, _, document = perfgate(repo, "run", WORKLOAD, "--trials", "2", "--rounds", "1", "--quiet", *extra)
                plain[workers] = statistics.median(rates(document))
            write_workloads(repo, 0)
            code, stdout, document = perfgate(repo, "check", WORKLOAD, "--against", "main", *extra)
            verdict = next((line.strip() for line in stdout.splitlines() if line.strip().startswith("fp32")), "?")
            finding = "\n    ".join(line.strip() for line in stdout.splitlines() if "data pipeline" in line)
            print(
                f"{name} ({','.join(map(str, threads_of(document)))}): plain training 2 workers "
                f"{plain[2]:.0f}/s, 0 workers {plain[0]:.0f}/s ({plain[0] / plain[2]:.3f}x); check exit {code}: "
                f"{verdict}\n    {finding}",
                flush=True,
            )


def command_modes(repo: Path, repeats: int, threads: list[str]) -> None:
    stored: list[float] = []
    paired: list[float] = []
    for index in range(repeats):
        _, _, document = perfgate(repo, "run", WORKLOAD, "--trials", "3", "--rounds", "1", "--quiet", *threads)
        stored += rates(document)
        args = ("check", WORKLOAD, "--against", "HEAD", "--trials", "3", "--max-trials", "3", "--rounds", "1")
        _, _, document = perfgate(repo, *args, "--quiet", *threads)
        paired += rates(document, "base")
        print(
            f"round {index + 1}: stored {' '.join(f'{r:.0f}' for r in stored[-3:])}; paired base "
            f"{' '.join(f'{r:.0f}' for r in paired[-3:])}",
            flush=True,
        )
    for name, values in (("stored (perfgate run)", stored), ("paired base side", paired)):
        spread = statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0
        print(f"{name}: median {statistics.median(values):.0f} samples/s, {len(values)} trials, +-{spread:.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    verdicts = commands.add_parser("verdicts")
    verdicts.add_argument("--repeats", type=int, default=2)
    modes = commands.add_parser("modes")
    modes.add_argument("--repeats", type=int, default=3)
    modes.add_argument("--threads", default="1", help="torch threads per trial, or 'default'")
    args = parser.parse_args()
    if shutil.which("git") is None:
        raise SystemExit("git is needed")
    with tempfile.TemporaryDirectory(prefix="perfgate-pipeline-") as scratch:
        repo = Path(scratch) / "repo"
        make_repository(repo)
        if args.command == "verdicts":
            command_verdicts(repo, args.repeats)
        else:
            command_modes(repo, args.repeats, [] if args.threads == "default" else ["--threads", args.threads])
    return 0


if __name__ == "__main__":
    sys.exit(main())
