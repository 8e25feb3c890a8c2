"""A data-parallel test workload for `--nproc 2`, with faults planted on one rank through PERFGATE_TEST_PLANT.

`wide`: two wide linear layers (about 1 M parameters at the default width of 1024, 4 MiB of gradient a step
for the all-reduce) on random features made per sample index, tiny.py's written-out SGD, no DataLoader
workers. The plants:

- `grad`: a second parameter as large as the model joins the loss times zero: the same losses, about
  the same compute, twice the gradient to all-reduce;
- `slowdata1`: rank 1's samples each take 3 ms to load (its data wait grows; rank 0 waits for it);
- `straggler1`: rank 1 is slow as a whole: 3 ms more in loading, in forward and in the optimizer each;
- `crash1`: rank 1's loss raises at its third step; `hang1`: rank 1 sleeps at its third step, for ever;
- `unused`: the model holds a layer, `spare`, that its loss does not use (DDP's default stops on it).

`wrapped` is `wide` with its own `wrap`: DistributedDataParallel with its defaults.
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch
import torch.nn.functional as F
from tiny import PlainSGD  # the workload file's folder is importable, as for `python ranks.py`
from torch import nn

import perfgate

WIDTH = int(os.environ.get("PERFGATE_TEST_WIDTH", "1024"))


def _plant() -> str:
    return os.environ.get("PERFGATE_TEST_PLANT", "")


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _planted_on_this_rank(name: str) -> bool:
    return _plant() == name and _rank() == 1


class Features(torch.utils.data.Dataset):
    """Feature vectors and targets made per sample index: the same content on every rank and in every trial."""

    def __len__(self) -> int:
        return 64 * 16 * perfgate.world_size()

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if _planted_on_this_rank("slowdata1"):
            time.sleep(0.003)
        if _planted_on_this_rank("straggler1"):
            time.sleep(0.003 / 8)  # 3 ms a step of 8 samples
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(WIDTH, generator=generator)
        return x, x[:1].clone()


class Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(WIDTH, WIDTH)
        self.second = nn.Linear(WIDTH, 1)
        # `grad`: as many parameters again, in the loss times zero: the losses stay the same
        self.extra = nn.Parameter(torch.zeros(WIDTH * WIDTH + 2 * WIDTH + 1)) if _plant() == "grad" else None
        self.spare = nn.Linear(WIDTH, 4) if _plant() == "unused" else None  # never called in forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.second(F.relu(self.first(x)))
        if self.extra is not None:
            out = out + 0 * self.extra.sum()
        return out


STEP = {"count": 0}


def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    STEP["count"] += 1
    if STEP["count"] == 3 and _planted_on_this_rank("crash1"):
        raise RuntimeError("planted on rank 1")
    if STEP["count"] == 3 and _planted_on_this_rank("hang1"):
        time.sleep(3600)
    if _planted_on_this_rank("straggler1"):
        time.sleep(0.003)
    return F.mse_loss(model(x), y)


class SGD(PlainSGD):
    """tiny.py's written-out SGD (no torch._dynamo import in the trial), 3 ms slower on a straggling rank."""

    def step(self) -> None:
        if _planted_on_this_rank("straggler1"):
            time.sleep(0.003)
        super().step()


def wide() -> perfgate.Workload:
    return perfgate.Workload(
        name="wide",
        model=Wide,
        dataset=Features,
        loss=loss,
        optimizer=SGD,
        batch_size=8,
        steps=int(os.environ.get("PERFGATE_TEST_STEPS", "30")),
        warmup_steps=2,
        nproc=2,
    )


def _plain_ddp(model: nn.Module) -> nn.Module:
    return nn.parallel.DistributedDataParallel(model)


def wrapped() -> perfgate.Workload:
    return dataclasses.replace(wide(), name="wrapped", wrap=_plain_ddp)
