"""perfgate's measured samples/sec against a bare hand-written training loop on the same model and data.

Each measurement is a fresh process; perfgate trials and bare loops alternate (and swap order every
round) so machine drift hits both alike. Prints per-round figures and the ratio perfgate / bare.
Target: perfgate's figure is at least 0.98 of the bare loop's.

    python benchmarks/overhead.py [--rounds 10] [--workloads lm,vision] [--config fp32]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfgate.records.results import TrialRecord

REPO = Path(__file__).resolve().parent.parent


def bare_loop(name: str, config: str) -> float:
    """The three-run lab's loop as people write it by hand: no phases, no checksums, one clock."""
    import torch

    from perfgate import builtin

    workload = builtin.load(name, "small")
    torch.manual_seed(workload.seed)
    dataset = workload.dataset()
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=workload.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(workload.seed),
        num_workers=workload.loader.get("num_workers", 0),
    )
    model = workload.model().train()
    if config == "bf16-compile":
        model = torch.compile(model)
    optimizer = workload.optimizer(model.parameters())
    use_autocast = config != "fp32"
    warmup, steps = workload.warmup_steps, workload.steps
    started, samples = 0.0, 0
    for step, batch in enumerate(loader):
        if step >= warmup + steps:
            break
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_autocast):
            loss = workload.loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == warmup - 1:
            started = time.perf_counter()
        elif step >= warmup:
            samples += workload.batch_size
    return samples / (time.perf_counter() - started)


def perfgate_trial(name: str, config: str, threads: int, scratch: Path) -> dict[str, float]:
    from perfgate.measure.lab import run_trial_process
    from perfgate.measure.trial import TrialSpec

    spec = TrialSpec(name, f"builtin:{name}@small", config, 0, "cpu", threads)
    return _figures(run_trial_process(spec, scratch, timeout_s=600))


def _figures(record: TrialRecord) -> dict[str, float]:
    """perfgate's reported samples/s, the wall-clock figure, and the median step, from a trial record."""
    result = record.result
    if not result.ok or result.workload is None or result.timed_elapsed_s is None:
        raise SystemExit(f"perfgate trial failed: {result.failure}")
    timed_samples = result.workload["steps"] * result.workload["batch_size"]
    return {
        "reported": float(result.samples_per_sec),
        "wall": float(timed_samples) / float(result.timed_elapsed_s),
        "step_s": statistics.median(result.step_s),
    }


def instrumentation_cost(name: str, repeats: int = 5000) -> tuple[float, float]:
    """Seconds per step of what perfgate adds around a step, timed alone (no model work, so no noise).

    Returns (inside the step: clock reads, loss check, phase bookkeeping; after the timed pass: the
    batch checksum, per batch).
    """
    import hashlib

    import torch

    from perfgate import builtin
    from perfgate.measure.device import Device
    from perfgate.measure.step import check_loss
    from perfgate.measure.trial import _hash_batch

    workload = builtin.load(name, "small")
    batch = next(iter(torch.utils.data.DataLoader(workload.dataset(), batch_size=workload.batch_size)))
    loss = (torch.ones(1, requires_grad=True) * 2).sum()
    clock = Device().step_clock()  # the trial's step clock: a mark per phase, the step's times kept at its end
    clock.start_timing()
    started = time.perf_counter()
    for _ in range(repeats):
        clock.begin_step()
        clock.mark()
        clock.mark()
        check_loss(loss, 1, "loss(model, batch)")
        clock.mark()
        clock.mark()
        clock.mark()
        clock.end_step()
    inside = (time.perf_counter() - started) / repeats
    assert len(clock.times().step_s) == repeats
    hasher = hashlib.sha256()
    started = time.perf_counter()
    for _ in range(200):
        _hash_batch(hasher, batch)
    return inside, (time.perf_counter() - started) / 200


def bootstrap_median_ci(values: list[float], resamples: int = 10000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median (fixed seed, so reruns print the same)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def perfgate_in_process(name: str, config: str, threads: int) -> dict[str, float]:
    """The same trial code, run in this process: separates the loop's cost from process start-up."""
    from perfgate.measure.trial import TrialSpec, run_trial

    return _figures(run_trial(TrialSpec(name, f"builtin:{name}@small", config, 0, "cpu", threads)))


def bare_process(name: str, config: str, threads: int) -> float:
    from perfgate.measure.lab import trial_environment

    output = subprocess.run(
        [sys.executable, __file__, "--bare", name, config],
        env=trial_environment(threads),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(json.loads(output.strip().splitlines()[-1])["samples_per_sec"])


def measure_pair(
    name: str, args: argparse.Namespace, threads: int, scratch: Path, perfgate_first: bool
) -> tuple[dict[str, float], float]:
    """One round: perfgate's figure and the bare loop's, in the order asked."""
    if args.in_process:
        run_perfgate = partial(perfgate_in_process, name, args.config, threads)
        run_bare = partial(bare_loop, name, args.config)
    else:
        run_perfgate = partial(perfgate_trial, name, args.config, threads, scratch)
        run_bare = partial(bare_process, name, args.config, threads)
    if perfgate_first:
        measured = run_perfgate()
        return measured, run_bare()
    bare = run_bare()
    return run_perfgate(), bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workloads", default="lm,vision")
    parser.add_argument("--config", default="fp32")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run both loops alternately inside this one process instead of a fresh process each",
    )
    parser.add_argument("--bare", nargs=2, metavar=("WORKLOAD", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        import torch

        from perfgate.measure.environment import available_cpus

        torch.set_num_threads(available_cpus())
        print(json.dumps({"samples_per_sec": bare_loop(*args.bare)}))
        return

    sys.path.insert(0, str(REPO))
    from perfgate.measure.environment import available_cpus

    threads = available_cpus()
    if args.in_process:
        import torch

        torch.set_num_threads(threads)
    mode = "in one process" if args.in_process else "a fresh process each"
    print(
        f"overhead benchmark ({mode}): {args.rounds} rounds, config {args.config}, {threads} threads, "
        f"{time.strftime('%Y-%m-%d')}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.workloads.split(","):
            ratios, reported, walls, bares, steps = [], [], [], [], []
            for round_index in range(args.rounds):
                measured, bare = measure_pair(name, args, threads, Path(scratch), round_index % 2 == 0)
                reported.append(measured["reported"])
                walls.append(measured["wall"])
                bares.append(bare)
                steps.append(measured["step_s"])
                ratios.append(measured["reported"] / bare)
                print(
                    f"  {name} round {round_index + 1:2d}: perfgate {measured['reported']:8.1f}  "
                    f"(wall {measured['wall']:8.1f})  bare {bare:8.1f}  ratio {ratios[-1]:.3f}",
                    flush=True,
                )
            median_ratio = statistics.median(reported) / statistics.median(bares)
            wall_ratio = statistics.median(walls) / statistics.median(bares)
            low, high = bootstrap_median_ci(ratios)
            inside, checksum = instrumentation_cost(name)
            step = statistics.median(steps)
            verdict = "met" if median_ratio >= 0.98 else "NOT met"
            print(
                f"{name}: median samples/s perfgate {statistics.median(reported):.1f}, "
                f"bare {statistics.median(bares):.1f}; ratio of medians {median_ratio:.3f} "
                f"(wall-clock incl. bookkeeping {wall_ratio:.3f}); median of paired ratios "
                f"{statistics.median(ratios):.3f}, 95% CI [{low:.3f}, {high:.3f}]; target >= 0.98: {verdict}"
            )
            print(
                f"{name}: instrumentation inside a step {1e6 * inside:.1f} us = {100 * inside / step:.3f}% of "
                f"the median step ({1000 * step:.1f} ms), a noise-free ceiling of {1 - inside / step:.4f} on "
                f"the ratio; the checksum pass after timing costs {1e6 * checksum:.0f} us of hashing per batch"
            )


if __name__ == "__main__":
    main()
