"""The workload contract: what the user hands perfgate to measure."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfgate.errors import WorkloadError
from perfgate.naming import MAX_NAME_CHARS, WORKLOAD_NAME

if TYPE_CHECKING:
    import torch

# perfgate owns these DataLoader arguments: they define the pinned data slice.
RESERVED_LOADER_KEYS = frozenset(
    {"batch_size", "shuffle", "sampler", "batch_sampler", "drop_last", "generator", "dataset"}
)


def world_size() -> int:
    """How many ranks the data-parallel trial this process runs in has (`--nproc`; 1 outside one), from the
    environment torchrun sets. Each rank reads `steps x batch_size` samples of its own: size a dataset with it."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


@dataclass(frozen=True)
class Workload:
    """A training workload: factories for the model, data and optimizer, plus the loss.

    Args:
        name: Identifier used in reports and baselines (letters, digits, `-`, `_`, `.`).
        model: Zero-argument factory for the `torch.nn.Module`; called after seeding, once per trial.
        dataset: Zero-argument factory for a map-style `torch.utils.data.Dataset`.
        loss: `loss(model, batch)` returning a scalar tensor; `batch` is what the DataLoader
            yields, already moved to the device.
        batch_size: Samples per step.
        optimizer: Factory taking the model's parameters; defaults to AdamW(lr=1e-4).
        loader: Extra `torch.utils.data.DataLoader` keyword arguments (num_workers, pin_memory, ...).
        steps: Timed steps per trial.
        warmup_steps: Untimed steps before timing starts (compilation happens here).
        seed: Seeds the model initialisation and picks the data slice.
        nproc: Ranks of a data-parallel trial (torchrun, one process per rank); None: the run's `--nproc`
            (or `[tool.perfgate] nproc`), else one process. `batch_size` is per rank.
        threads: The torch threads your training runs with, where it sets them (`torch.set_num_threads`);
            None: torch's own default. `--threads` overrides it for a run.
        wrap: `wrap(model)` returns the model the ranks train, in place of perfgate's
            `DistributedDataParallel(model)`: FSDP, or DDP with your own settings. Called in a data-parallel
            trial only, with the process group initialised and the model on the rank's device.
    """

    name: str
    model: Callable[[], torch.nn.Module]
    dataset: Callable[[], Any]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    batch_size: int
    optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer] | None = None
    loader: Mapping[str, Any] = field(default_factory=dict)
    steps: int = 20
    warmup_steps: int = 3
    seed: int = 0
    nproc: int | None = None
    threads: int | None = None
    wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None

    def __post_init__(self) -> None:
        where = f"workload {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise WorkloadError("workload name must be a non-empty string", hint="set name='my-model'")
        if len(self.name) > MAX_NAME_CHARS:  # it names files: a long one ends in OSError when they are written
            raise WorkloadError(
                f"workload name {self.name[:40]!r}... is {len(self.name)} characters long",
                hint=f"give it a name of at most {MAX_NAME_CHARS} characters",
            )
        bad_chars = [c for c in self.name if not WORKLOAD_NAME.fullmatch(c)]  # the results schema's own rule
        if bad_chars:
            raise WorkloadError(
                f"workload name {self.name!r} contains {''.join(sorted(set(bad_chars)))!r}",
                hint="use letters, digits, '-', '_' and '.' only",
            )
        for attr in ("model", "dataset", "loss"):
            if not callable(getattr(self, attr)):
                raise WorkloadError(
                    f"{attr} must be callable, got {type(getattr(self, attr)).__name__}",
                    where=where,
                    hint=f"pass a function, for example {attr}=lambda: ...",
                )
        if self.optimizer is not None and not callable(self.optimizer):
            raise WorkloadError(
                "optimizer must be a callable taking the model's parameters",
                where=where,
                hint="for example optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4)",
            )
        for attr, minimum in (("batch_size", 1), ("steps", 1), ("warmup_steps", 0), ("seed", 0)):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise WorkloadError(f"{attr} must be an integer >= {minimum}, got {value!r}", where=where)
        if self.nproc is not None and (
            isinstance(self.nproc, bool) or not isinstance(self.nproc, int) or self.nproc < 1
        ):
            raise WorkloadError(f"nproc must be an integer >= 1 or None, got {self.nproc!r}", where=where)
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise WorkloadError(f"threads must be an integer >= 1 or None, got {self.threads!r}", where=where)
        if self.wrap is not None and not callable(self.wrap):
            raise WorkloadError(
                "wrap must be a callable taking the model and returning the module to train",
                where=where,
                hint="for example wrap=lambda model: DistributedDataParallel(model, bucket_cap_mb=10)",
            )
        if not isinstance(self.loader, Mapping):
            raise WorkloadError(
                f"loader must be a dict of DataLoader arguments, got {type(self.loader).__name__}",
                where=where,
            )
        object.__setattr__(self, "_origin", _building_function(self))
        reserved = sorted(RESERVED_LOADER_KEYS & set(self.loader))
        if reserved:
            raise WorkloadError(
                f"loader sets {', '.join(reserved)}, which perfgate controls to pin the data slice",
                where=where,
                hint="remove it (use batch_size= and seed= on the Workload instead)",
            )

    @property
    def origin(self) -> tuple[str, str] | None:
        """(file, function) of the module-level function, callable without arguments, that built this Workload.

        A trial process rebuilds the workload by calling that function again; None when it was built
        anywhere else (a nested function, a lambda, a method, or a function that needs arguments).
        """
        origin: tuple[str, str] | None = getattr(self, "_origin", None)
        return origin

    @property
    def slice_samples(self) -> int:
        """How many samples one trial consumes: (warm-up + timed steps) x batch size."""
        return (self.warmup_steps + self.steps) * self.batch_size


def _building_function(workload: Workload) -> tuple[str, str] | None:
    """The function that built `workload`: its caller, or the caller's caller when that was a helper."""
    frame = inspect.currentframe()
    # Step out of this module and the dataclass's generated __init__.
    while frame is not None and (frame.f_code.co_filename == __file__ or frame.f_locals.get("self") is workload):
        frame = frame.f_back
    for _ in range(2):  # `def gpt_small(): return _gpt(layers=4)` names gpt_small
        if frame is None:
            return None
        code = frame.f_code
        module_file = frame.f_globals.get("__file__")
        is_module_level = code.co_qualname == code.co_name and frame.f_globals.get(code.co_name) is not None
        if is_module_level and getattr(frame.f_globals[code.co_name], "__code__", None) is code and module_file:
            takes_arguments = code.co_argcount or code.co_kwonlyargcount or code.co_flags & _VARIADIC
            if not takes_arguments:
                return str(module_file), code.co_name
        frame = frame.f_back
    return None


_VARIADIC = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
