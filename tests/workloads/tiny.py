"""Tiny workloads for tests: a correct one, and one for each way a workload can be wrong."""

from __future__ import annotations

import os
import signal
import time

import torch
from torch import nn
from torch.nn import functional as F

import perfgate


class Points(torch.utils.data.Dataset):
    """Regression pairs generated per index, so content does not depend on worker count."""

    def __init__(self, length: int = 64) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(8, generator=generator)
        return x, x.sum(dim=0, keepdim=True)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))


def mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x).float(), y)


class PlainSGD:
    """Written out: torch.optim's optimizers import torch._dynamo (1.7 s of every trial process here), and
    the suite runs about 150 trials. A user's workload that names no optimizer gets torch's AdamW."""

    def __init__(self, params: object) -> None:
        self.params = list(params)  # type: ignore[call-overload]

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p -= 0.01 * p.grad

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def _tiny(**overrides: object) -> perfgate.Workload:
    fields: dict[str, object] = dict(
        name="tiny", model=mlp, dataset=Points, loss=mse, optimizer=PlainSGD, batch_size=8, steps=4, warmup_steps=1
    )
    fields.update(overrides)
    return perfgate.Workload(**fields)  # type: ignore[arg-type]


def tiny() -> perfgate.Workload:
    return _tiny()


def tiny_workers() -> perfgate.Workload:
    return _tiny(name="tiny-workers", loader={"num_workers": 2})


def not_a_workload() -> dict[str, str]:
    return {"name": "tiny"}


def model_raises() -> perfgate.Workload:
    def broken() -> nn.Module:
        raise RuntimeError("weights file missing")

    return _tiny(model=broken)


def forward_raises() -> perfgate.Workload:
    def loss(model: nn.Module, batch: object) -> torch.Tensor:
        raise ValueError("shape mismatch in my loss")

    return _tiny(loss=loss)


def nan_loss() -> perfgate.Workload:
    return _tiny(loss=lambda model, batch: mse(model, batch) * float("nan"))


def vector_loss() -> perfgate.Workload:
    return _tiny(loss=lambda model, batch: (model(batch[0]) - batch[1]) ** 2)


def loss_not_tensor() -> perfgate.Workload:
    return _tiny(loss=lambda model, batch: 1.0)


def short_dataset() -> perfgate.Workload:
    return _tiny(dataset=lambda: Points(length=10))


def iterable_dataset() -> perfgate.Workload:
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([])

    return _tiny(dataset=Stream)


def nondeterministic_data() -> perfgate.Workload:
    class Noisy(Points):
        def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
            x, y = super().__getitem__(index)
            # a clock's last digits, scaled to at most 1e-3: the data differ from trial to trial, SGD stays stable
            return x + (time.perf_counter_ns() % 1000) * 1e-6, y

    return _tiny(name="noisy", dataset=Noisy)


def oom_under_autocast() -> perfgate.Workload:
    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled(
            "cuda"
        ):  # as a larger config would on a full GPU
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return mse(model, batch)

    return _tiny(name="oom", loss=loss)


def hangs() -> perfgate.Workload:
    def model() -> nn.Module:
        time.sleep(600)
        return mlp()

    return _tiny(name="hangs", model=model)


def crashes() -> perfgate.Workload:
    def model() -> nn.Module:
        os._exit(3)

    return _tiny(name="crashes", model=model)


def segfaults() -> perfgate.Workload:
    def model() -> nn.Module:
        os.kill(os.getpid(), signal.SIGSEGV)  # as a crashing native extension would
        return mlp()

    return _tiny(name="segfaults", model=model)


def killed() -> perfgate.Workload:
    def model() -> nn.Module:
        os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's out-of-memory killer sends
        return mlp()

    return _tiny(name="killed", model=model)


def tiny_one_thread() -> perfgate.Workload:
    """A workload whose training sets its own thread count (`torch.set_num_threads(1)`)."""
    return _tiny(threads=1)


class _Breaking(nn.Module):
    """The tiny MLP with a graph break between its layers, as a print or a `.item()` in a forward makes one."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(8, 32), nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.relu(self.first(x))
        torch._dynamo.graph_break()  # the break torch.compile finds and the counts name
        return self.second(hidden)


def graph_break() -> perfgate.Workload:
    return _tiny(name="breaks", model=_Breaking)
