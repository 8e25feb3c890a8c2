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
        step: Your own training step, in place of perfgate's: `step(model, batch, optimizer, state)` does one
            optimizer step as your training does (forward, loss, backward, clipping, the optimizer, the
            scheduler, zeroing the gradients) and returns the loss. `state` is a `StepState` (the scaler of
            the fp16 config, the scheduler, `max_grad_norm`, `accumulation`); a step may leave it out
            (`step(model, batch, optimizer)`). With `accumulation > 1`, `batch` is the list of micro-batches.
            perfgate still seeds, pins the slice, applies the config (autocast around the step, the compile)
            and times the step; the phases come from hooks on the model, backward and the optimizer.
        accumulation: Micro-batches per optimizer step (gradient accumulation); each holds `batch_size`
            samples and samples/s counts every one of them.
        max_grad_norm: Clip the gradients' total norm to this before each optimizer step (perfgate's step;
            yours reads it from `state.max_grad_norm`). None: no clipping.
        scheduler: Factory taking the optimizer and returning a learning-rate scheduler, stepped after each
            optimizer step (perfgate's step; yours gets it as `state.scheduler`).
        compile_options: The compile config's `torch.compile` arguments (`mode`, `dynamic`, `fullgraph`,
            `backend`, `options`), plus `target`: "model" (the default) compiles the model, "step" your `step`.
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
    step: Callable[..., Any] | None = None
    accumulation: int = 1
    max_grad_norm: float | None = None
    scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    compile_options: Mapping[str, Any] = field(default_factory=dict)

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
        for attr, minimum in (("batch_size", 1), ("steps", 1), ("warmup_steps", 0), ("seed", 0), ("accumulation", 1)):
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
        _check_step_options(self, where)
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
    def step_samples(self) -> int:
        """Samples per optimizer step: batch size x micro-batches."""
        return self.batch_size * self.accumulation

    @property
    def slice_samples(self) -> int:
        """How many samples one trial consumes: (warm-up + timed steps) x batch size x micro-batches."""
        return (self.warmup_steps + self.steps) * self.step_samples


@dataclass
class StepState:
    """What a workload's own `step` is handed beside the model, batch and optimizer, for the trial's config.

    Attributes:
        scaler: The fp16 config's `torch.amp.GradScaler` (None in the other configs): scale the loss before
            backward, `scaler.unscale_(optimizer)` before clipping, `scaler.step(optimizer)`, `scaler.update()`.
        scheduler: The workload's scheduler, built from its `scheduler` factory (None without one).
        max_grad_norm: The workload's `max_grad_norm` (None: no clipping).
        accumulation: Micro-batches per optimizer step; with more than one, `batch` is their list.
        autocast: A factory of the config's autocast context (already active around the step).
        index: The step's index in the trial (warm-up steps first).
    """

    scaler: Any = None
    scheduler: Any = None
    max_grad_norm: float | None = None
    accumulation: int = 1
    autocast: Callable[[], Any] | None = None
    index: int = 0


COMPILE_OPTIONS = frozenset({"mode", "dynamic", "fullgraph", "backend", "options", "target"})
COMPILE_TARGETS = ("model", "step")


def _check_step_options(workload: Workload, where: str) -> None:
    """The own-step, clipping, scheduler and compile fields: one-line errors before any trial starts."""
    if workload.step is not None and not callable(workload.step):
        raise WorkloadError(
            f"step must be callable, got {type(workload.step).__name__}",
            where=where,
            hint="pass a function step(model, batch, optimizer, state) that does one optimizer step",
        )
    if workload.step is not None:
        positional = _positional_parameters(workload.step)
        if positional is not None and positional not in (3, 4):
            raise WorkloadError(
                f"step takes {positional} positional argument(s)",
                where=where,
                hint="define it as step(model, batch, optimizer, state) or step(model, batch, optimizer)",
            )
    norm = workload.max_grad_norm
    if norm is not None and (isinstance(norm, bool) or not isinstance(norm, int | float) or not norm > 0):
        raise WorkloadError(
            f"max_grad_norm must be a number > 0 or None, got {norm!r}", where=where, hint="for example 1.0"
        )
    if workload.scheduler is not None and not callable(workload.scheduler):
        raise WorkloadError(
            "scheduler must be a callable taking the optimizer",
            where=where,
            hint="for example scheduler=lambda opt: torch.optim.lr_scheduler.LinearLR(opt, total_iters=100)",
        )
    options = workload.compile_options
    if not isinstance(options, Mapping):
        raise WorkloadError(
            f"compile_options must be a dict of torch.compile arguments, got {type(options).__name__}",
            where=where,
            hint='for example compile_options={"mode": "max-autotune", "dynamic": False}',
        )
    unknown = sorted(set(options) - COMPILE_OPTIONS)
    if unknown:
        raise WorkloadError(
            f"compile_options has unknown key(s) {', '.join(map(repr, unknown))}",
            where=where,
            hint=f"use {', '.join(sorted(COMPILE_OPTIONS))}",
        )
    target = options.get("target", "model")
    if target not in COMPILE_TARGETS:
        raise WorkloadError(f"compile_options target must be 'model' or 'step', got {target!r}", where=where)
    if target == "step" and workload.step is None:
        raise WorkloadError(
            "compile_options target 'step' needs a workload with its own step",
            where=where,
            hint="pass step=your_train_step, or compile the model (target 'model')",
        )


def _positional_parameters(function: Callable[..., Any]) -> int | None:
    """How many positional arguments `function` takes (None: any number, or not introspectable)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty]
    total = [p for p in parameters if p.kind in kinds]
    return 4 if len(total) >= 4 and len(required) <= 4 else len(required)


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
