"""The machine probe: a fixed piece of training work timed inside every trial, to see the machine drift.

A stored baseline was measured minutes or months before the check that reads it. On a shared runner
the machine itself can be 15% slower now than then (a neighbour's job, thermal limits), and every
config of every workload would look like a regression. The probe is perfgate's own code, the same in
every trial and untouched by the user's change: timed right before the workload is set up and again
after its DataLoader workers are gone, it measures how fast this machine runs fixed torch work at
that moment. The gate compares samples/sec divided by the probe's rate, so drift of the machine
cancels and a change in the workload does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfgate.measure.device import Device

PROBE_STEPS = 150
_WARMUP_STEPS = 3


def probe_steps_per_sec(device: Device, steps: int = PROBE_STEPS) -> float:
    """Training steps per second of a fixed two-layer MLP (forward, backward, SGD) on this device.

    Uses its own generator, so the workload's seeded random state is untouched.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    where = device.torch_device
    w1 = (torch.randn(256, 512, generator=generator) / 16).to(where).requires_grad_()
    w2 = (torch.randn(512, 256, generator=generator) / 16).to(where).requires_grad_()
    x = torch.randn(64, 256, generator=generator).to(where)
    started = 0.0
    for step in range(_WARMUP_STEPS + steps):
        if step == _WARMUP_STEPS:
            started = device.now()
        loss = (torch.relu(x @ w1) @ w2).square().mean()
        loss.backward()
        with torch.no_grad():
            for weight in (w1, w2):
                assert weight.grad is not None
                weight -= 1e-3 * weight.grad
                weight.grad = None
    return steps / (device.now() - started)
