"""A small workload whose own loop never waits for a CUDA device: pinned batches copied without blocking, and an
optimizer written out with no read of a device value, so every synchronisation in its timed steps is perfgate's."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import perfgate

WIDTH = 512
BATCH, STEPS, WARMUP = 256, 30, 3


class Rows(torch.utils.data.Dataset):
    """Regression pairs generated per index."""

    def __len__(self) -> int:
        return (WARMUP + STEPS) * BATCH  # the pinned slice, once

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(WIDTH, generator=generator)
        return x, x[:1].clone()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, 1)
    )


def loss(net: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(net(x).float(), y)


class PlainSGD:
    """In-place updates on the device; nothing is read back to the host."""

    def __init__(self, params: object) -> None:
        self.params = list(params)  # type: ignore[call-overload]

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-0.01)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def pinned() -> perfgate.Workload:
    return perfgate.Workload(
        name="pinned",
        model=model,
        dataset=Rows,
        loss=loss,
        optimizer=PlainSGD,
        batch_size=BATCH,
        loader={"num_workers": 0, "pin_memory": True},
        steps=STEPS,
        warmup_steps=WARMUP,
    )
