"""The built-in workloads with faults planted through PERFGATE_TEST_PLANT, for the diagnosis tests.

`lm` and `vision` return perfgate's own `lm@small` and `vision@small` on a shorter slice (20 timed
steps, or PERFGATE_TEST_STEPS, to keep the tests quick), changed only by the planted fault: same names,
data and first losses, so a baseline measured without a plant judges them. They train with tiny.py's
written-out SGD (torch.optim's optimizers import torch._dynamo, 1.5 s of every trial process here);
PERFGATE_TEST_OPTIMIZER=builtin keeps the built-ins' own AdamW and SGD, as the lab test does.

- vision `slowaugment`: each sample also gets a costly blur whose result is thrown away (real CPU work
  in the DataLoader workers); vision `workers0`: the same pipeline with num_workers=0;
- lm `layers`: four more transformer blocks, run forward and backward (their output is added times
  zero, so the losses stay those of the unplanted model);
- lm `hostsync`: the loss copied to the host with `.item()` each step, as a logging line does;
- lm `tinyops`: the same loss reached through a thousand extra one-element operations;
- lm `leak`: each step's loss kept, graph and all (the classic sum without `.item()`);
- lm `nan`: the loss multiplied by NaN.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.nn.functional as F
from tiny import PlainSGD  # the workload file's folder is importable, as for `python builtin_plants.py`
from torch import nn

import perfgate
from perfgate.builtin.lm import LM_SIZES, Block, TinyGPT, next_token_loss, transformer_lm
from perfgate.builtin.vision import VISION_SIZES, EncodedImages, image_classifier

LOGGED: list[float] = []
KEPT: list[torch.Tensor] = []
BLUR = torch.full((3, 1, 9, 9), 1 / 81)


def _plant() -> str:
    return os.environ.get("PERFGATE_TEST_PLANT", "")


class SlowAugmentImages(EncodedImages):
    """The same samples, each also blurred at four times its resolution (about 10 ms of CPU work per
    sample, as a careless augmentation costs), with the result thrown away. Heavy enough that waiting
    for data outgrows what the busy workers take from the training step on two shared cores: with 4 blurs
    data wait took 33-35% of the step, with 16 78-84% (and a check 17.5 s against 10 s), so 6."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = super().__getitem__(index)
        blurred = F.interpolate(image.unsqueeze(0), scale_factor=4.0, mode="bilinear")
        for _ in range(6):
            blurred = F.conv2d(blurred, BLUR, padding=4, groups=3)
        return image + 0.0 * blurred.mean(), label


class DeeperGPT(TinyGPT):
    """TinyGPT with more blocks after its own. Built after the original parameters, so those start the
    same; the extra blocks' output is added times zero, so every loss is the original model's."""

    def __init__(self, extra: int) -> None:
        spec = LM_SIZES["small"]
        super().__init__(spec)
        self.extra = nn.ModuleList(Block(spec.d_model, spec.heads) for _ in range(extra))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        y = x
        for block in self.extra:
            y = block(y)
        return self.head(self.ln_f(x + 0.0 * y))


def planted_lm_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    loss = next_token_loss(model, batch)
    plant = _plant()
    if plant == "hostsync":
        LOGGED.append(loss.item())
    elif plant == "tinyops":
        one = batch[0][0, 0]
        for _ in range(1000):
            loss = loss + 0.0 * one
    elif plant == "leak":
        KEPT.append(loss)
    elif plant == "nan":
        loss = loss * float("nan")
    return loss


STEPS = int(os.environ.get("PERFGATE_TEST_STEPS", "20"))  # the lab test runs every config on 2


# The lab test also takes 1 warm-up step (the compiling one) and batches of 4: a bf16 step is slow here.
WARMUP, BATCH = os.environ.get("PERFGATE_TEST_WARMUP"), os.environ.get("PERFGATE_TEST_BATCH")


def _shortened(workload: perfgate.Workload) -> perfgate.Workload:
    workload = dataclasses.replace(workload, steps=STEPS)
    if WARMUP:
        workload = dataclasses.replace(workload, warmup_steps=int(WARMUP))
    if BATCH:
        workload = dataclasses.replace(workload, batch_size=int(BATCH))
    if os.environ.get("PERFGATE_TEST_OPTIMIZER") == "builtin":
        return workload
    return dataclasses.replace(workload, optimizer=PlainSGD)


def lm() -> perfgate.Workload:
    workload = _shortened(transformer_lm("small"))
    if _plant() == "layers":
        workload = dataclasses.replace(workload, model=deeper_gpt)
    return dataclasses.replace(workload, loss=planted_lm_loss)


def deeper_gpt() -> nn.Module:
    return DeeperGPT(extra=4)


def slow_augment_images() -> EncodedImages:
    return SlowAugmentImages(VISION_SIZES["small"])


def vision() -> perfgate.Workload:
    workload = _shortened(image_classifier("small"))
    if _plant() == "slowaugment":
        return dataclasses.replace(workload, dataset=slow_augment_images)
    if _plant() == "workers0":
        return dataclasses.replace(workload, loader={**workload.loader, "num_workers": 0})
    return workload
