"""Where the test workloads are (tests/workloads/), and the references the tests pass to perfgate."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parent.parent.parent  # the repository
WORKLOADS = ROOT / "tests" / "workloads"
TINY_FILE = WORKLOADS / "tiny.py"  # a correct workload, and one function for each way a workload can be wrong
GATED = f"{WORKLOADS / 'gated.py'}:gated"  # the gate's end-to-end workload, faults planted by PERFGATE_TEST_PLANT


# The optimizer of the workloads the tests write out as source, a plain SGD step written by hand:
# torch.optim's optimizers import torch._dynamo, 1-2 s of each trial process. Its module imports torch.
PLAIN_SGD = """\
class PlainSGD:  # by hand: torch.optim's optimizers import torch._dynamo, 1-2 s of each trial process
    def __init__(self, params):
        self.params = list(params)

    @torch.no_grad()
    def step(self):
        for p in self.params:
            p -= 0.01 * p.grad

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None
"""


PACED = """\
import time

import torch
from torch.nn import functional as F

import perfgate

PAUSE_S = {pause!r}  # waiting, not computing: a slowdown the machine's neighbours cannot blur


class Points(torch.utils.data.Dataset):
    def __len__(self):
        return {samples}

    def __getitem__(self, index):
        x = torch.randn(8, generator=torch.Generator().manual_seed(index))
        return x, x.sum(dim=0, keepdim=True)


def loss(model, batch):
    time.sleep(PAUSE_S)
    x, y = batch
    return F.mse_loss(model(x), y)


def paced():
    model = lambda: torch.nn.Linear(8, 1)  # noqa: E731
    return perfgate.Workload(name="paced", model=model, dataset=Points, loss=loss, batch_size=8, steps={steps})
"""


def paced_source(pause_s: float, *, samples: int, steps: int) -> str:
    """A workload file, `paced.py:paced`, whose every step sleeps `pause_s`: a linear model on `samples`
    generated points, batch 8, `steps` timed steps. A commit that changes the pause is a slowdown of a known
    size, which the machine's neighbours cannot blur (the step waits, it does not compute)."""
    return PACED.format(pause=pause_s, samples=samples, steps=steps)
