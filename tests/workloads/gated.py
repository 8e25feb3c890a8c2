"""A workload for the gate's end-to-end tests, with faults planted through PERFGATE_TEST_PLANT.

The trial processes inherit the environment, so `perfgate check` run with PERFGATE_TEST_PLANT=slow
measures the same workload (same name, data and losses) doing clearly more work per step.
"""

from __future__ import annotations

import os

import torch
from tiny import PlainSGD, Points, mlp, mse  # the workload file's folder is importable, as for `python gated.py`
from torch import nn

import perfgate

_HELD: list[torch.Tensor] = []
_WORK = torch.randn(128, 128, generator=torch.Generator().manual_seed(0)) / 16


class ShiftedPoints(Points):
    """The same regression pairs, shifted: a changed data slice."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super().__getitem__(index)
        return x + 1, y


def planted_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    loss = mse(model, batch)
    plant = os.environ.get("PERFGATE_TEST_PLANT", "")
    if plant == "slow":  # real extra work each step; the loss value stays the same (0 * finite)
        waste = _WORK
        for _ in range(40):
            waste = torch.tanh(waste @ _WORK)
        loss = loss + 0.0 * waste.sum()
    elif plant == "memory" and not _HELD:  # 64 MiB kept alive from the first step on
        _HELD.append(torch.ones(16 << 20))
    return loss


def gated() -> perfgate.Workload:
    plant = os.environ.get("PERFGATE_TEST_PLANT")
    data = ShiftedPoints if plant == "data" else Points
    return perfgate.Workload(
        name="gated",
        model=mlp,
        dataset=lambda: data(96),
        loss=planted_loss,
        optimizer=PlainSGD,
        batch_size=8,
        steps=8,
        warmup_steps=1,
    )
