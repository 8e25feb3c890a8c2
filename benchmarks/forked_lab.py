"""A lab of fresh trial processes against one of forked trials (`--fork-trials`): the command's time, and what
each measures.

    python benchmarks/forked_lab.py [--rounds 2] [--workloads lm@small,vision@small] [--configs fp32]
                                    [--trials 3] [--threads 1] [--lightning]

`--lightning` runs a small LightningModule instead (`perfgate.from_lightning`, needs `pip install lightning`):
importing Lightning takes seconds, which a fresh trial pays every time and a fork server once a session, since
it imports each workload's module before its first trial.

Each round runs `perfgate run` once each way, in alternating order, nothing else measuring: the wall time of
the whole command (what a user waits for), and per workload and config the median samples/s and peak memory
above setup over its trials. A forked trial skips importing torch; its samples/s and resident memory are not a
fresh process's (docs/performance.md, `fork_memory.py`), which is why `update --fork-trials` files its baselines
apart. Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = {"fresh": [], "forked": ["--fork-trials"]}
LIGHTNING = """
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

import perfgate


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(1024, 64, generator=generator), torch.randn(1024, 1, generator=generator))
        return DataLoader(data, batch_size=32)


def workload():
    return perfgate.from_lightning(Regressor, name="lightning-mlp", steps=16, warmup_steps=2)
"""


def run_once(mode: str, args: argparse.Namespace, folder: Path) -> tuple[float, dict[str, tuple[float, float]]]:
    """One `perfgate run`: its wall seconds, and (samples/s, peak MiB) medians by `workload config`."""
    out = folder / f"{mode}.json"
    command = [sys.executable, "-m", "perfgate", "run", *args.workloads.split(","), "--configs", args.configs]
    command += ["--trials", str(args.trials), "--threads", str(args.threads), "--quiet", "--json", str(out)]
    started = time.perf_counter()
    done = subprocess.run([*command, *MODES[mode]], cwd=folder, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{mode}: perfgate run exited {done.returncode}: {done.stderr.strip()[-500:]}")
    document = json.loads(out.read_text())
    figures = {}
    for workload in document["workloads"]:
        for config, result in workload["configs"].items():
            trials = [t for t in result["trials"] if t["status"] == "ok"]
            sps = statistics.median(t["samples_per_sec"] for t in trials)
            mib = statistics.median(t["memory"]["peak_bytes"] for t in trials) / 2**20
            figures[f"{workload['name']} {config}"] = (sps, mib)
    return seconds, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="lm@small,vision@small")
    parser.add_argument("--configs", default="fp32")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lightning", action="store_true", help="a small LightningModule instead of --workloads")
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    figures: dict[str, dict[str, list[tuple[float, float]]]] = {mode: {} for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="forked-lab-") as scratch:
        if args.lightning:
            (Path(scratch) / "lightning_mlp.py").write_text(LIGHTNING)
            args.workloads = str(Path(scratch) / "lightning_mlp.py") + ":workload"
        for round_ in range(args.rounds):
            order = list(MODES) if round_ % 2 == 0 else list(reversed(MODES))
            for mode in order:
                took, measured = run_once(mode, args, Path(scratch))
                seconds[mode].append(took)
                for key, value in measured.items():
                    figures[mode].setdefault(key, []).append(value)
                print(f"round {round_ + 1} {mode}: {took:.1f} s", flush=True)
    print("\n| mode | `perfgate run` wall s (median, range) |")
    print("| --- | --- |")
    for mode, values in seconds.items():
        print(f"| {mode} | {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f}) |")
    print("\n| workload, config | mode | samples/s (median of rounds) | / fresh | peak MiB above setup | / fresh |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for key in figures["fresh"]:
        base_sps = statistics.median(v[0] for v in figures["fresh"][key])
        base_mib = statistics.median(v[1] for v in figures["fresh"][key])
        for mode in MODES:
            sps = statistics.median(v[0] for v in figures[mode][key])
            mib = statistics.median(v[1] for v in figures[mode][key])
            print(f"| {key} | {mode} | {sps:.1f} | {sps / base_sps:.3f} | {mib:.1f} | {mib / base_mib:.3f} |")


if __name__ == "__main__":
    main()
