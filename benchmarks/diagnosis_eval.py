"""Does the diagnosis name the right suspect on models we did not write? Planted faults, end to end.

Two model families from a maintained model library (Hugging Face transformers), built from their
configs with random weights (nothing is downloaded): a GPT-2 language model and a ResNet image
classifier, each with its own Dataset and DataLoader workers (generated from a fixed seed). For each
family, `perfgate update` stores a baseline of the unplanted workload, then `perfgate check --diagnose`
runs once per planted fault (default check settings otherwise: 3 trials, more while undecided):

| plant | what changes | the right suspect |
| --- | --- | --- |
| clean | nothing | none |
| slow-loading | each sample waits in `__getitem__` (a slow read): 30 ms (GPT-2), 6 ms (ResNet) | data pipeline |
| heavy-augment | each sample gets a costly augmentation (real CPU work in the workers) | data pipeline |
| fewer-workers | `num_workers` 2 -> 0 | data pipeline, or none if no slower (two busy cores) |
| extra-layers | twice the layers (the losses change) | model compute |
| wider-layer | twice the hidden width (the losses change) | model compute |
| host-syncs | the loss copied to the host with `.item()` every step | framework overhead |
| tiny-ops | the same loss through 500 extra one-element operations | framework overhead |
| kept-loss | each step's loss kept, graph and all | memory |
| nan | the loss times NaN | numerics |

The slow read is about twice what two workers can hide behind a step of each model, as in a slow Dataset
that makes the step 2x slower. Prints each check (exit code, status, samples/s verdict, primary suspect,
early evidence), a confusion matrix (planted cause against primary suspect) and the two rates the target
is about: plants called a regression whose primary suspect is right, and clean runs that name no suspect.
Each check's results file and report stay in the folder it names.

    pip install transformers   # the model library; torch stays the CPU build
    python benchmarks/diagnosis_eval.py [--families gpt2,resnet] [--plants ...] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

WORKLOADS = '''"""GPT-2 and ResNet from transformers' configs, random weights; faults planted by PERFGATE_EVAL_PLANT."""
import os
import time

import torch
import torch.nn.functional as F

import perfgate

PLANT = os.environ.get("PERFGATE_EVAL_PLANT", "")
KEPT = []
LOGGED = []


def planted_loss(loss, batch_tensor):
    if PLANT == "host-syncs":
        LOGGED.append(loss.item())
    elif PLANT == "tiny-ops":
        one = batch_tensor.flatten()[0].float()
        for _ in range(500):
            loss = loss + 0.0 * one
    elif PLANT == "kept-loss":
        KEPT.append(loss)
    elif PLANT == "nan":
        loss = loss * float("nan")
    return loss


def slow_sample(seconds):
    if PLANT == "slow-loading":
        time.sleep(seconds)


def workers():
    return 0 if PLANT == "fewer-workers" else 2


# -- GPT-2 --------------------------------------------------------------------------------------------

VOCAB, SEQ = 1024, 64


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, VOCAB, (1024, SEQ + 8), generator=generator)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        slow_sample(0.030)
        row = self.tokens[index]
        start = int(row[0]) % 8  # a random window, as a packing loader takes
        ids = row[start : start + SEQ].clone()
        if PLANT == "heavy-augment":  # span corruption written token by token in Python
            generator = torch.Generator().manual_seed(index)
            for position in range(SEQ):
                for _ in range(40):
                    if float(torch.rand(1, generator=generator)) < 0.001:
                        ids[position] = 0
        return ids


def gpt2_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    layers = 4 if PLANT == "extra-layers" else 2
    width = 256 if PLANT == "wider-layer" else 128
    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=4, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def gpt2_loss(model, ids):
    return planted_loss(model(input_ids=ids, labels=ids).loss, ids)


def gpt2():
    return perfgate.Workload(
        name="gpt2-tiny",
        model=gpt2_model,
        dataset=Tokens,
        loss=gpt2_loss,
        batch_size=16,
        loader={"num_workers": workers()},
        steps=20,
        warmup_steps=3,
    )


# -- ResNet -------------------------------------------------------------------------------------------

BLUR = torch.full((3, 1, 9, 9), 1 / 81)


class Images(torch.utils.data.Dataset):
    """Stored 40x40 uint8 images, randomly cropped to 32x32 and flipped per sample (a real pipeline's work)."""

    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (1024, 3, 40, 40), dtype=torch.uint8, generator=generator)
        self.labels = torch.randint(0, 10, (1024,), generator=generator)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        slow_sample(0.006)
        generator = torch.Generator().manual_seed(index)
        top, left = (int(v) for v in torch.randint(0, 9, (2,), generator=generator))
        image = self.images[index, :, top : top + 32, left : left + 32].float() / 255.0
        if index % 2:
            image = image.flip(-1)
        image = (image - 0.5) / 0.25
        if PLANT == "heavy-augment":  # a blur at four times the resolution, its result thrown away
            big = F.interpolate(image.unsqueeze(0), scale_factor=4.0, mode="bilinear")
            for _ in range(12):
                big = F.conv2d(big, BLUR, padding=4, groups=3)
            image = image + 0.0 * big.mean()
        return image, self.labels[index]


def resnet_model():
    from transformers import ResNetConfig, ResNetForImageClassification

    depths = [2, 2, 2, 2] if PLANT == "extra-layers" else [1, 1, 1, 1]
    scale = 2 if PLANT == "wider-layer" else 1
    config = ResNetConfig(
        num_labels=10,
        embedding_size=16 * scale,
        hidden_sizes=[16 * scale, 32 * scale, 64 * scale, 128 * scale],
        depths=depths,
        layer_type="basic",
    )
    return ResNetForImageClassification(config)


def resnet_loss(model, batch):
    images, labels = batch
    return planted_loss(model(pixel_values=images, labels=labels).loss, images)


def resnet():
    return perfgate.Workload(
        name="resnet-tiny",
        model=resnet_model,
        dataset=Images,
        loss=resnet_loss,
        batch_size=32,
        loader={"num_workers": workers()},
        steps=20,
        warmup_steps=3,
    )
'''

PLANTS = {
    "clean": "none",
    "slow-loading": "data pipeline",
    "heavy-augment": "data pipeline",
    "fewer-workers": "data pipeline",
    "extra-layers": "model compute",
    "wider-layer": "model compute",
    "host-syncs": "framework overhead",
    "tiny-ops": "framework overhead",
    "kept-loss": "memory",
    "nan": "numerics",
}
FAMILIES = {"gpt2": "gpt2-tiny", "resnet": "resnet-tiny"}


def perfgate(folder: Path, *args: str, plant: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PERFGATE_EVAL_PLANT": plant, "TRANSFORMERS_VERBOSITY": "error"}
    return subprocess.run(
        [sys.executable, "-m", "perfgate", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=1800
    )


def outcome(folder: Path, results: str, stdout: str, name: str) -> tuple[str, str, float, str, bool]:
    """(the config's status, its samples/s verdict, their ratio, the primary suspect, early evidence): the
    status, verdict and ratio from `perfgate report --format json` of the check's results, the suspect from
    its text report."""
    status, verdict, ratio = "?", "?", math.nan
    report = perfgate(folder, "report", results, "--format", "json")
    if report.returncode == 0:
        (workload,) = json.loads(report.stdout)["workloads"]
        for config in workload["configs"]:
            throughput = config["throughput"] or {}
            status, verdict = config["status"], throughput.get("verdict", "-")
            ratio = throughput.get("ratio") or math.nan
    match = re.search(rf"^  {re.escape(name)} fp32: suspect (.+)$", stdout, re.MULTILINE)
    if match is None:
        return status, verdict, ratio, "none", False
    headline = match.group(1)
    suspect = "none" if headline.startswith("none") else headline.split(" (")[0].split(";")[0]
    return status, verdict, ratio, suspect, "early evidence" in headline


def right(row: dict) -> bool:
    """The planted cause named first; fewer workers that were no slower (exit 0) rightly name none."""
    return row["suspect"] == row["expected"] or (
        row["plant"] == "fewer-workers" and row["exit"] == 0 and row["suspect"] == "none"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default="gpt2,resnet")
    parser.add_argument("--plants", default=",".join(PLANTS))
    parser.add_argument("--threads", default="1")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="perfgate-eval-"))
    (folder / "families.py").write_text(WORKLOADS)
    rows = []
    for family in args.families.split(","):
        reference, name = f"families.py:{family}", FAMILIES[family]
        common = ("--configs", "fp32", "--threads", args.threads)
        started = time.monotonic()
        update = perfgate(folder, "update", reference, *common, "--trials", "3", "--quiet")
        if update.returncode != 0:
            raise SystemExit(f"update of {family} failed: {update.stdout[-1500:]}{update.stderr[-1500:]}")
        print(f"{family}: baseline in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        for plant in args.plants.split(","):
            started = time.monotonic()
            results = f"check-{family}-{plant}.json"  # kept, with the report's text, for a closer look
            check = perfgate(
                folder, "check", reference, *common, "--diagnose", "--quiet", "--json", results, plant=plant
            )
            (folder / f"check-{family}-{plant}.txt").write_text(check.stdout + check.stderr)
            status, verdict, ratio, suspect, early = outcome(folder, results, check.stdout, name)
            row = {
                "family": family,
                "plant": plant,
                "expected": PLANTS[plant],
                "exit": check.returncode,
                "status": status,
                "verdict": verdict,
                "ratio": ratio,
                "suspect": suspect,
                "early": early,
                "seconds": time.monotonic() - started,
            }
            rows.append(row)
            print(
                f"{family} {plant}: exit {check.returncode}, {status}, samples/s {verdict} ({ratio:.3f}x), "
                f"suspect {suspect}"
                f"{' (early evidence)' if early else ''} in {row['seconds']:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            if check.returncode not in (0, 1):
                print(check.stdout[-2000:] + check.stderr[-2000:], file=sys.stderr)
    print(f"each check's results and report: {folder}", file=sys.stderr)
    print("| family | plant | right suspect | exit | status | samples/s | ratio | primary suspect | early | s |")
    print("| --- | --- | --- | ---: | --- | --- | ---: | --- | --- | ---: |")
    for r in rows:
        print(
            f"| {r['family']} | {r['plant']} | {r['expected']} | {r['exit']} | {r['status']} | {r['verdict']} | "
            f"{r['ratio']:.3f} | "
            f"{r['suspect']} | {'yes' if r['early'] else ''} | {r['seconds']:.0f} |"
        )
    suspects = sorted({r["suspect"] for r in rows} | {r["expected"] for r in rows})
    matrix = Counter((r["expected"], r["suspect"]) for r in rows)
    print()
    print("| planted cause \\ primary suspect | " + " | ".join(suspects) + " |")
    print("| --- | " + " | ".join("---:" for _ in suspects) + " |")
    for cause in sorted({r["expected"] for r in rows}):
        print(f"| {cause} | " + " | ".join(str(matrix[(cause, s)] or "") for s in suspects) + " |")
    regressions = [r for r in rows if r["exit"] == 1 and r["plant"] != "clean"]
    named = [r for r in regressions if right(r)]
    clean = [r for r in rows if r["plant"] == "clean"]
    print()
    print(f"plants that failed the build with the right primary suspect: {len(named)} of {len(regressions)}")
    print(
        f"all plants with the right primary suspect: {sum(right(r) for r in rows if r['plant'] != 'clean')} of "
        f"{sum(r['plant'] != 'clean' for r in rows)}"
    )
    print(f"clean runs that name no suspect: {sum(r['suspect'] == 'none' for r in clean)} of {len(clean)}")
    print(f"clean runs that failed the build: {sum(r['exit'] != 0 for r in clean)} of {len(clean)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
