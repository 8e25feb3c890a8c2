"""What the system sampler costs a training loop: the same steps with and without it, interleaved.

    python benchmarks/sampler.py [--rounds 12] [--steps 300]

Each round times `--steps` steps of the machine probe's MLP (forward, backward, SGD) once with the
sampler running (a sample every 50 ms) and once without, in alternating order; it prints the median
ratio of the two times and the cost of one sample measured on its own. Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psutil

from perfgate.measure.device import Device
from perfgate.measure.probe import probe_steps_per_sec
from perfgate.measure.sampler import DEFAULT_INTERVAL_S, SystemSampler


def timed(steps: int, sampled: bool) -> float:
    device = Device()
    if not sampled:
        return steps / probe_steps_per_sec(device, steps)
    with SystemSampler():
        return steps / probe_steps_per_sec(device, steps)


def one_sample_s(repeats: int = 2000) -> float:
    process = psutil.Process()
    started = time.perf_counter()
    for _ in range(repeats):
        psutil.cpu_percent(None, percpu=True)
        process.cpu_percent(None)
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    ratios = []
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        seconds = {sampled: timed(args.steps, sampled) for sampled in order}
        ratios.append(seconds[True] / seconds[False])
    sample_s = one_sample_s()
    print(f"{args.rounds} rounds of {args.steps} steps, with and without the sampler, alternating:")
    print(f"- time with / without: median {statistics.median(ratios):.4f}, range {min(ratios):.4f}-{max(ratios):.4f}")
    print(
        f"- one sample (CPU per core and of the process): {1e6 * sample_s:.0f} us, every "
        f"{1000 * DEFAULT_INTERVAL_S:g} ms: {100 * sample_s / DEFAULT_INTERVAL_S:.2f}% of one core"
    )


if __name__ == "__main__":
    main()
