"""What perfgate's timing of the gradient all-reduce costs a data-parallel step, against an untimed DDP loop.

    python benchmarks/ddp_overhead.py [--nproc 2] [--rounds 8] [--steps 200] [--width 1024] [--builtin lm]

Runs jobs of itself under torchrun (gloo on the CPU, NCCL with one GPU per rank): every rank builds the model
in DistributedDataParallel, in one of three variants: `untimed` keeps DDP's own all-reduce (C++), `hook` does
the same reduction through a Python communication hook without any clock, `timed` gets perfgate's timed hook
(`perfgate.measure.distributed.CommTimer`, with its begin/end bookkeeping each step, as a trial does). Each
job is one variant (several DDP models in one process measured each other's position, not the hook); the
three take turns in a shuffled order each round, `--rounds` rounds, so the machine's drift lands on all
three. Printed: each variant's median step, and per variant the median of the per-round ratios to
`untimed`, a bootstrap 95% interval, and the difference a step. The target is under 1% of step time.

The model: two wide linear layers (`--width`, 4 MiB of gradient at 1024) on random batches, or a built-in
workload's model and batches (`--builtin lm` or `vision`).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def model_and_batches(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import torch
    import torch.nn.functional as F

    if args.builtin:
        from perfgate.builtin import load

        workload = load(args.builtin, "small")
        dataset = workload.dataset()
        loader = torch.utils.data.DataLoader(dataset, batch_size=workload.batch_size, shuffle=False, drop_last=True)
        batches = [batch for _, batch in zip(range(8), loader, strict=False)]
        return workload.model, batches, workload.loss

    def wide() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 1)
        )

    batches = [(torch.randn(8, args.width), torch.randn(8, 1)) for _ in range(8)]
    return wide, batches, lambda model, batch: F.mse_loss(model(batch[0]), batch[1])


def worker(args: argparse.Namespace) -> None:
    """One job of one variant: warm-up, then `--steps` steps; rank 0 prints the median step in seconds."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from perfgate.measure.device import select_device
    from perfgate.measure.distributed import CommTimer, finish

    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    torch.set_num_threads(1)
    device = select_device(device_type)
    build, batches, loss_of = model_and_batches(args)
    batches = [device.move(b, non_blocking=False) for b in batches]
    torch.manual_seed(0)
    ids = [device.torch_device.index] if device_type == "cuda" else None
    model = DistributedDataParallel(build().to(device.torch_device), device_ids=ids)
    world = dist.get_world_size()

    def untimed_hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses postponed annotations
        buffer = bucket.buffer()
        buffer.div_(world)
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])

    timer = CommTimer(device) if args.variant == "timed" else None
    if timer is not None:
        assert timer.attach(model) is None
    elif args.variant == "hook":
        model.register_comm_hook(None, untimed_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    times = []
    for i in range(args.warmup + args.steps):
        batch = batches[i % len(batches)]
        t0 = device.now()
        loss = loss_of(model, batch)
        t1 = device.now()
        if timer is not None:
            timer.begin_step()
        loss.backward()
        t2 = device.now()
        if timer is not None:
            timer.end_step(t2 - t1)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(device.now() - t0)
    if dist.get_rank() == 0:
        print(f"MEDIAN {statistics.median(times[args.warmup :])!r}", flush=True)
    finish(0)  # as a trial ends: no process-group teardown after a Python hook's callbacks


VARIANTS = ("untimed", "hook", "timed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8, help="jobs of each variant, in a rotating order")
    parser.add_argument("--steps", type=int, default=200, help="timed steps a job")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--builtin", default=None, help="a built-in workload's model and batches (lm, vision)")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        worker(args)
        return
    started = time.perf_counter()
    rng = random.Random(0)
    medians: dict[str, list[float]] = {name: [] for name in VARIANTS}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for _ in range(args.rounds):
        order = list(VARIANTS)
        rng.shuffle(order)
        for name in order:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}"]
            command += [__file__, *sys.argv[1:], "--variant", name]
            job = subprocess.run(command, env=env, capture_output=True, text=True)
            if job.returncode != 0:
                sys.exit(f"the {name} job failed:\n{job.stdout[-3000:]}{job.stderr[-3000:]}")
            medians[name].append(float(job.stdout.split("MEDIAN ")[1].split()[0]))
    what = f"builtin {args.builtin}" if args.builtin else f"wide {args.width}"
    print(f"{what}, {args.nproc} ranks, {args.rounds} jobs a variant x {args.steps} steps, CPU: gloo, CUDA: NCCL")
    for name, values in medians.items():
        print(f"  {name:8s} median step {1000 * statistics.median(values):.3f} ms")
    for name in ("hook", "timed"):
        ratios = [v / u for v, u in zip(medians[name], medians["untimed"], strict=True)]
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
        differences = [v - u for v, u in zip(medians[name], medians["untimed"], strict=True)]
        print(
            f"  {name}/untimed: median of per-round ratios {statistics.median(ratios):.4f} "
            f"(95% bootstrap {boot[50]:.4f}-{boot[1949]:.4f}), {1e6 * statistics.median(differences):+.0f} us a step"
        )
    print(f"  ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
