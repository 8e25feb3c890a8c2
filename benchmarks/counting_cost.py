"""What the exact counts cost, and how fast `--counts-only` decides a pull request (issue 31).

    python benchmarks/counting_cost.py [--workloads lm@small,vision@small] [--threads 1] [--device cpu]

For each workload and config, in fresh processes: one timed trial (its `counts.counting_s`, the extra untimed
step made after its timed steps, against its whole process time) and two counting trials (`--counts-only`:
setup, warm-up, the counted step; their wall time), whose counts must be identical, as the timed trial's must.
Then `perfgate check --counts-only --against HEAD~1` on a real git repository whose head changes one comment of
a workload file that returns the built-ins, timed end to end (the target: under a minute on a 2-core CPU), and
the same with one more transformer block in lm-small (which must fail, by its FLOPs). Run nothing else beside it.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfgate.measure.lab import TrialPlace, run_trial_process  # noqa: E402
from perfgate.measure.trial import TrialSpec  # noqa: E402
from perfgate.references import resolve_references  # noqa: E402
from perfgate.variants import CONFIG_NAMES  # noqa: E402
from tests.helpers.git import commit, new_repository  # noqa: E402

BUILT_INS = """# {comment}
import dataclasses

from perfgate.builtin.lm import transformer_lm
from perfgate.builtin.vision import image_classifier


def lm():
    workload = transformer_lm("small")
    if {deeper}:  # one more transformer block
        make = workload.model

        def model():
            from perfgate.builtin.lm import LM_SIZES, Block

            net = make()
            size = LM_SIZES["small"]
            net.blocks.append(Block(size.d_model, size.heads))
            return net

        workload = dataclasses.replace(workload, model=model)
    return workload


def vision():
    return image_classifier("small")
"""


def same(a, b) -> bool:
    return {**a.to_dict(), "counting_s": 0} == {**b.to_dict(), "counting_s": 0}


def trial(reference, config: str, device: str, threads: int | None, scratch: Path, counts_only: bool):
    spec = TrialSpec(reference.text, reference.target, config, 0, device, threads, probe=False, counts_only=counts_only)
    started = time.perf_counter()
    record = run_trial_process(spec, scratch, 900.0, TrialPlace(name="head"))
    wall = time.perf_counter() - started
    if not record.result.ok or record.result.counts is None:
        raise SystemExit(f"{reference.text} {config}: {record.result.failure or record.result.warnings}")
    return record.result, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="lm@small,vision@small")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"counting_cost: {args.workloads}, {args.threads} thread(s), {args.device}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")  # fmt: skip
    print(f"{'workload':<14}{'config':<14}{'counting s':>11}{'trial s':>9}{'share':>7}{'counts-only s':>15}  same")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        for text in args.workloads.split(","):
            (reference,) = resolve_references([text])
            for config in CONFIG_NAMES:
                timed, timed_wall = trial(reference, config, args.device, args.threads, scratch, False)
                first, wall = trial(reference, config, args.device, args.threads, scratch, True)
                second, _ = trial(reference, config, args.device, args.threads, scratch, True)
                assert timed.counts is not None and first.counts is not None and second.counts is not None
                identical = same(first.counts, second.counts) and same(first.counts, timed.counts)
                cost = timed.counts.counting_s
                print(
                    f"{text:<14}{config:<14}{cost:>11.2f}{timed_wall:>9.1f}{cost / timed_wall:>7.1%}{wall:>15.1f}  "
                    f"{'yes' if identical else 'NO: ' + str(first.counts) + ' / ' + str(timed.counts)}",
                    flush=True,
                )
        for deeper in (False, True):
            repo = new_repository(scratch / f"repo-{deeper}")
            commit(repo, {"bench.py": BUILT_INS.format(comment="base", deeper=False)}, "base")
            commit(repo, {"bench.py": BUILT_INS.format(comment="head", deeper=deeper)}, "head")
            command = [sys.executable, "-m", "perfgate", "check", "bench.py:lm", "bench.py:vision", "--counts-only"]
            command += ["--against", "HEAD~1", "--threads", str(args.threads), "--device", args.device]
            started = time.perf_counter()
            process = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=900, check=False)
            seconds = time.perf_counter() - started
            verdict = process.stdout.strip().splitlines()[-1] if process.stdout.strip() else process.stderr[-300:]
            change = "one more lm block" if deeper else "a comment"
            print(
                f"check --counts-only, head changes {change}: exit {process.returncode} in {seconds:.0f} s: {verdict}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
