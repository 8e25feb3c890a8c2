"""Whether the memory-growth rule sees a kept loss, measured with malloc's count and with resident memory.

    python benchmarks/memory_growth.py [--rounds 6] [--steps 50]

Each round is a fresh process that trains the built-in `lm@small` workload (fp32, one thread) for its
warm-up plus `--steps` steps, once clean and once keeping every step's loss (the classic sum without
`.item()`, which keeps each step's autograd graph), in alternating order. After each timed step it
reads both measures of memory in use: the bytes malloc has handed out (glibc's mallinfo2, what trials
record on Linux) and the resident set size (what they recorded before, and still do where mallinfo2
is missing). It prints, per measure and plant, the least-squares growth per step, its correlation
with the step number, and in how many rounds the rule (perfgate.project.DiagnosisThresholds) fires.
Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import torch

from perfgate import builtin
from perfgate.judge.diagnosis import DEFAULT_THRESHOLDS
from perfgate.judge.diagnosis.memory import _growth
from perfgate.measure.device import _current_rss_bytes, _heap_in_use_bytes

MEASURES = ("heap", "rss")


def one_round(leak: bool, steps: int) -> dict[str, list[int]]:
    """Train in this process; memory in use after each timed step, by both measures."""
    torch.set_num_threads(1)
    workload = builtin.load("lm", "small")
    torch.manual_seed(workload.seed)
    model = workload.model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(workload.dataset(), batch_size=workload.batch_size, **workload.loader)
    batches = iter(loader)
    kept = []
    series: dict[str, list[int]] = {measure: [] for measure in MEASURES}
    for step in range(workload.warmup_steps + steps):
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        loss = workload.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if leak:
            kept.append(loss)
        if step >= workload.warmup_steps:
            series["heap"].append(_heap_in_use_bytes() or 0)
            series["rss"].append(_current_rss_bytes())
    return series


def fires(values: list[int]) -> tuple[float, float, bool]:
    per_step, fit = _growth(values)
    hit = per_step >= DEFAULT_THRESHOLDS.memory_growth_kib * 1024 and fit >= DEFAULT_THRESHOLDS.memory_growth_fit
    return per_step, fit, hit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--one", choices=("clean", "leak"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_round(args.one == "leak", args.steps)))
        return
    if _heap_in_use_bytes() is None:
        sys.exit("this platform has no mallinfo2 (glibc 2.33 or newer): only resident memory can be read")
    found: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    for round_ in range(args.rounds):
        order = ("clean", "leak") if round_ % 2 == 0 else ("leak", "clean")
        for plant in order:
            command = [sys.executable, __file__, "--one", plant, "--steps", str(args.steps)]
            series = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
            for measure in MEASURES:
                found.setdefault((measure, plant), []).append(fires(series[measure]))
    print(f"{args.rounds} rounds of {args.steps} timed steps; rule: >= {DEFAULT_THRESHOLDS.memory_growth_kib:g} KiB")
    print(f"per step and correlation >= {DEFAULT_THRESHOLDS.memory_growth_fit:g}")
    print("measure  plant  growth per step (median, range)       correlation (median, range)  fires")
    for (measure, plant), rows in found.items():
        growth = [row[0] / 1024 for row in rows]
        fit = [row[1] for row in rows]
        print(
            f"{measure:7}  {plant:5}  {statistics.median(growth):8.1f} KiB ({min(growth):.1f} to {max(growth):.1f})"
            f"{'':8}{statistics.median(fit):5.2f} ({min(fit):.2f} to {max(fit):.2f})"
            f"{'':8}{sum(row[2] for row in rows)}/{len(rows)}"
        )


if __name__ == "__main__":
    main()
