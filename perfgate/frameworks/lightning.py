"""A workload from a Lightning `LightningModule`: what its training loop runs, read from the module itself.

`from_lightning(module, datamodule)` reads the model (the module), the data (its training DataLoader's dataset,
batch size and worker options) and the optimizer and scheduler (`configure_optimizers`), and returns a
`perfgate.Workload` whose own `step` does one optimizer step of Lightning's automatic optimization: per
micro-batch `training_step`, the loss divided by the accumulation, zeroing the gradients before the first backward,
backward (scaled in the fp16 config), then the unscale, `configure_gradient_clipping`, the optimizer and the
step-interval schedulers, with the module's hooks around them in Lightning's order (the `_Run.step` docstring lists
them). The sequence follows `lightning.pytorch.loops.optimization.automatic` (the closure), `...training_epoch_loop`
(hooks, schedulers) and `...plugins.precision` (`Precision`, `MixedPrecision`: scaling, unscaling, clipping).

The module is attached to a minimal real `lightning.Trainer` (no logger, checkpointing, progress bar or summary;
the accumulation and clipping given here), in the fitting state, so `self.log`, `self.trainer`, `self.global_step`
and the default `configure_gradient_clipping` run Lightning's own code: `self.log` records into Lightning's result
collection and the logger connector gathers the logged metrics after each batch, as in `Trainer.fit` (a metric
logged with `prog_bar=True` is read back to the host there, as Lightning does). Lightning is imported only when
the adapter is called.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from perfgate.errors import WorkloadError
from perfgate.workload import StepState, Workload

if TYPE_CHECKING:
    import torch

# The Trainer the module is attached to is told to train this many steps: `self.trainer.estimated_stepping_batches`
# (what a OneCycleLR's total_steps is often set to) reads it, and perfgate's steps never reach it.
ESTIMATED_STEPS = 1_000_000

# DataLoader arguments perfgate's loader takes from the module's, with the value that means "not set".
_LOADER_DEFAULTS: dict[str, Any] = {
    "num_workers": 0,
    "pin_memory": False,
    "persistent_workers": False,
    "prefetch_factor": None,
    "worker_init_fn": None,
    "timeout": 0,
    "multiprocessing_context": None,
    "pin_memory_device": "",
    "in_order": True,
}

_CLIP_ALGORITHMS = ("norm", "value")


def from_lightning(
    module: Any,
    datamodule: Any = None,
    *,
    train_dataloader: Any = None,
    trainer: Any = None,
    name: str | None = None,
    steps: int = 20,
    warmup_steps: int = 3,
    seed: int = 0,
    accumulate_grad_batches: int = 1,
    gradient_clip_val: float | None = None,
    gradient_clip_algorithm: str = "norm",
    threads: int | None = None,
) -> Workload:
    """A `perfgate.Workload` that trains a `LightningModule` as `lightning.Trainer.fit` does, one optimizer step a step.

    Call it from the module-level function perfgate runs (`def workload(): return from_lightning(MyModule())`):
    each trial process calls that function again.

    Args:
        module: The `lightning.LightningModule` (automatic optimization, one optimizer), or a function without
            arguments that builds it (its class, a lambda): then it is built here after seeding torch, `random` and
            numpy with `seed`, so every trial starts from the same weights, as perfgate's own `model()` does
            (build a module yourself after `L.seed_everything(seed)` for the same). It is the model perfgate
            trains; `prepare_data`, `setup("fit")` and `configure_model` are called on it here, as `fit` would.
        datamodule: A `lightning.LightningDataModule` whose `train_dataloader()` gives the data (after its
            `prepare_data()` and `setup("fit")`). Without one, `train_dataloader` or the module's own
            `train_dataloader()`.
        train_dataloader: A `torch.utils.data.DataLoader` to read the data from, as `fit(train_dataloaders=...)`.
            Its dataset (map-style, with a length), batch size and worker options (`num_workers`, `collate_fn`,
            `pin_memory`, `persistent_workers`, `prefetch_factor`, ...) become the workload's; its sampler does not:
            perfgate draws its own pinned slice.
        trainer: A `lightning.Trainer` to read `accumulate_grad_batches`, `gradient_clip_val` and
            `gradient_clip_algorithm` from, in place of the three arguments below.
        name: The workload's name (default: the module's class name).
        steps, warmup_steps, seed, threads: As for `perfgate.Workload`.
        accumulate_grad_batches: `Trainer(accumulate_grad_batches=...)`: micro-batches per optimizer step.
        gradient_clip_val: `Trainer(gradient_clip_val=...)`: clip the gradients before each optimizer step
            (None or 0: no clipping).
        gradient_clip_algorithm: `Trainer(gradient_clip_algorithm=...)`: "norm" or "value".

    Raises:
        perfgate.WorkloadError: In one line, when the module cannot be measured this way: not a LightningModule, no
            training_step, manual optimization, several optimizers, no train DataLoader, an iterable-style dataset.
    """
    module = _the_module(module, name, seed)
    name = name if name is not None else type(module).__name__
    where = f"workload {name!r}"
    if trainer is not None:
        accumulate_grad_batches, gradient_clip_val, clip_algorithm = _trainer_settings(
            trainer, where, (accumulate_grad_batches, gradient_clip_val, gradient_clip_algorithm)
        )
    else:
        clip_algorithm = _clip_algorithm(accumulate_grad_batches, gradient_clip_val, gradient_clip_algorithm, where)
    run = _Run(module, datamodule, name, accumulate_grad_batches, gradient_clip_val, clip_algorithm)
    run.prepare(train_dataloader)
    # Built here, in the body of the function the user's workload function calls: perfgate finds that function
    # (the one each trial process calls again) by walking up from Workload.__init__.
    return Workload(
        name=name,
        model=run.model,
        dataset=run.dataset,
        loss=run.loss,
        batch_size=run.batch_size,
        optimizer=run.optimizer,
        loader=run.loader,
        steps=steps,
        warmup_steps=warmup_steps,
        seed=seed,
        threads=threads,
        step=run.step,
        accumulation=accumulate_grad_batches,
        scheduler=run.scheduler if run.has_scheduler else None,
    )


def _the_module(module: Any, name: str | None, seed: int) -> Any:
    """The LightningModule given, or built by the factory given after seeding as perfgate seeds a model's build."""
    import lightning.pytorch as pl
    import torch

    built = module
    if not isinstance(module, torch.nn.Module) and callable(module):
        _seed(seed)
        built = module()
    if not isinstance(built, pl.LightningModule):
        got = type(built).__name__ + (
            f" (from {getattr(module, '__name__', 'the factory')}())" if built is not module else ""
        )
        raise WorkloadError(
            f"from_lightning needs a LightningModule, got {got}",
            where=f"workload {name!r}" if name else None,
            hint="pass your lightning.LightningModule (import lightning as L; class M(L.LightningModule)) or its class",
        )
    return built


def _seed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed)


def _trainer_settings(trainer: Any, where: str, given: tuple[int, float | None, str]) -> tuple[int, Any, str | None]:
    """`accumulate_grad_batches`, `gradient_clip_val` and `gradient_clip_algorithm` as a Trainer holds them."""
    import lightning.pytorch as pl

    if not isinstance(trainer, pl.Trainer):
        raise WorkloadError(
            f"trainer must be a lightning.Trainer, got {type(trainer).__name__}",
            where=where,
            hint="pass the Trainer your training uses, or leave trainer out",
        )
    if given != (1, None, "norm"):
        raise WorkloadError(
            "from_lightning got a trainer and accumulate_grad_batches/gradient_clip_val/gradient_clip_algorithm",
            where=where,
            hint="pass either trainer= (its settings are read) or those arguments, not both",
        )
    algorithm = trainer.gradient_clip_algorithm
    return trainer.accumulate_grad_batches, trainer.gradient_clip_val, None if algorithm is None else algorithm.value


def _clip_algorithm(accumulation: Any, value: Any, algorithm: Any, where: str) -> str | None:
    """The settings checked; the clipping algorithm the module's Trainer is given: None (Lightning's default,
    "norm") unless clipping is asked for."""
    if isinstance(accumulation, bool) or not isinstance(accumulation, int) or accumulation < 1:
        raise WorkloadError(
            f"accumulate_grad_batches must be an integer >= 1, got {accumulation!r}", where=where, hint="for example 4"
        )
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
        raise WorkloadError(
            f"gradient_clip_val must be a number >= 0 or None, got {value!r}", where=where, hint="for example 1.0"
        )
    if not isinstance(algorithm, str) or algorithm.lower() not in _CLIP_ALGORITHMS:
        raise WorkloadError(
            f"gradient_clip_algorithm must be 'norm' or 'value', got {algorithm!r}",
            where=where,
            hint="use 'norm' (Lightning's default) or 'value'",
        )
    # Trainer(gradient_clip_algorithm=None) is what a Trainer left at its defaults holds; a module's own
    # `clip_gradients(..., gradient_clip_algorithm=...)` may only differ from it then.
    return algorithm.lower() if value is not None or algorithm.lower() != "norm" else None


class _Run:
    """What `from_lightning` read from the module, and the workload's functions that train it as Lightning does."""

    def __init__(
        self,
        module: Any,
        datamodule: Any,
        name: str,
        accumulation: Any,
        clip_val: Any,
        clip_algorithm: str | None,
    ) -> None:
        self.module = module
        self.datamodule = datamodule
        self.name = name
        self.where = f"workload {name!r}"
        self.accumulation = accumulation
        self.clip_val = clip_val
        self.clip_algorithm = clip_algorithm
        self.batch_size = 0
        self.loader: dict[str, Any] = {}
        self.has_scheduler = False
        self._dataset: Any = None
        self._takes_batch_idx = True
        self._batch_hooks: dict[str, Any] = {}  # hook name -> the module or datamodule that overrides it
        self._trainers: weakref.WeakKeyDictionary[Any, tuple[str, Any]] = weakref.WeakKeyDictionary()
        self._compiled: weakref.WeakKeyDictionary[Any, Callable[..., Any]] = weakref.WeakKeyDictionary()
        self._configured: dict[int, tuple[Any, list[Any]]] = {}  # id(optimizer) -> (optimizer, scheduler configs)
        self._started = False

    # --- Reading the module ---------------------------------------------------------------------------------------

    def prepare(self, train_dataloader: Any) -> None:
        """Check the module, run the hooks `fit` runs before training, and read the data and the optimizers."""
        import lightning.pytorch as pl
        from lightning.pytorch.utilities.model_helpers import is_overridden
        from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

        module = self.module
        if not module.automatic_optimization:
            raise WorkloadError(
                "manual optimization (automatic_optimization = False) is not supported yet",
                where=self.where,
                hint="use automatic optimization, or write a perfgate.Workload with step= calling your training_step",
            )
        if not is_overridden("training_step", module):
            raise WorkloadError(
                f"{type(module).__name__} defines no training_step",
                where=self.where,
                hint="define training_step(self, batch, batch_idx) returning the loss",
            )
        if is_param_in_hook_signature(module.training_step, "dataloader_iter", explicit=True):
            raise WorkloadError(
                "a training_step that takes dataloader_iter is not supported",
                where=self.where,
                hint="take (batch, batch_idx), or write a perfgate.Workload with your own step",
            )
        self._takes_batch_idx = is_param_in_hook_signature(module.training_step, "batch_idx", min_args=2)
        if isinstance(train_dataloader, pl.LightningDataModule):  # fit(model, train_dataloaders=dm) takes one too
            train_dataloader, self.datamodule = None, train_dataloader
        datamodule = self.datamodule
        if datamodule is not None and not isinstance(datamodule, pl.LightningDataModule):
            raise WorkloadError(
                f"datamodule must be a LightningDataModule, got {type(datamodule).__name__}",
                where=self.where,
                hint="pass your lightning.LightningDataModule, or the DataLoader as train_dataloader=",
            )
        if datamodule is not None and train_dataloader is not None:
            raise WorkloadError(
                "from_lightning got both a datamodule and a train_dataloader",
                where=self.where,
                hint="pass one of them, as Trainer.fit takes one",
            )
        self._attach(module, _cpu())
        # Trainer.fit's order: prepare_data (datamodule, module), setup("fit") (datamodule, module), configure_model.
        if datamodule is not None:
            datamodule.prepare_data()
        module.prepare_data()
        if datamodule is not None:
            datamodule.setup("fit")
        _call_hook(module, "setup", "fit")
        _call_hook(module, "configure_model")
        self._read_data(train_dataloader)
        for hook in ("on_before_batch_transfer", "on_after_batch_transfer"):
            # Lightning's _DataHookSelector: the datamodule's hook where it overrides it, else the module's.
            owner = datamodule if datamodule is not None and is_overridden(hook, datamodule) else module
            if is_overridden(hook, owner):
                self._batch_hooks[hook] = owner
        _, schedules = self._configure(module)  # the errors at build time; each trial configures its own
        self.has_scheduler = bool(schedules)

    def _read_data(self, train_dataloader: Any) -> None:
        import torch
        from lightning.pytorch.utilities.model_helpers import is_overridden

        if train_dataloader is None:
            if self.datamodule is not None:
                if not is_overridden("train_dataloader", self.datamodule):
                    raise WorkloadError(
                        f"{type(self.datamodule).__name__} defines no train_dataloader",
                        where=self.where,
                        hint="define train_dataloader() on the datamodule returning a DataLoader",
                    )
                train_dataloader = self.datamodule.train_dataloader()
            elif is_overridden("train_dataloader", self.module):
                train_dataloader = _call_hook(self.module, "train_dataloader")
            else:
                raise WorkloadError(
                    "no train DataLoader: no datamodule, no train_dataloader= and the module defines no "
                    "train_dataloader()",
                    where=self.where,
                    hint="pass datamodule=..., or train_dataloader=DataLoader(...), or define train_dataloader()",
                )
        if not isinstance(train_dataloader, torch.utils.data.DataLoader):
            raise WorkloadError(
                f"the train dataloader is a {type(train_dataloader).__name__}, not one torch DataLoader",
                where=self.where,
                hint="return a single torch.utils.data.DataLoader from train_dataloader()",
            )
        dataset = train_dataloader.dataset
        if isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__"):
            raise WorkloadError(
                f"the train DataLoader's dataset ({type(dataset).__name__}) is iterable-style, with no length",
                where=self.where,
                hint="perfgate pins a slice of a map-style dataset (__len__ and __getitem__): use one for the check",
            )
        if train_dataloader.batch_size is None:
            raise WorkloadError(
                "the train DataLoader has no batch_size (a batch_sampler, or batch_size=None)",
                where=self.where,
                hint="give the DataLoader batch_size=... for the check",
            )
        self._dataset = dataset
        self.batch_size = train_dataloader.batch_size
        loader = {
            key: getattr(train_dataloader, key)
            for key, unset in _LOADER_DEFAULTS.items()
            if hasattr(train_dataloader, key) and getattr(train_dataloader, key) != unset
        }
        if loader.get("prefetch_factor") == 2:  # the DataLoader's own default with workers (None without)
            del loader["prefetch_factor"]
        if train_dataloader.collate_fn is not torch.utils.data.default_collate:
            loader["collate_fn"] = train_dataloader.collate_fn
        self.loader = loader

    def _configure(self, module: Any) -> tuple[Any, list[Any]]:
        """`configure_optimizers()` parsed as Lightning parses it: the one optimizer and its scheduler configs."""
        from lightning.fabric.utilities.exceptions import MisconfigurationException
        from lightning.pytorch.core.optimizer import (
            _configure_optimizers,
            _configure_schedulers_automatic_opt,
            _validate_optimizers_attached,
            _validate_scheduler_api,
        )

        returned = _call_hook(module, "configure_optimizers")
        if returned is None:
            raise WorkloadError(
                "configure_optimizers returned None: no optimizer to measure",
                where=self.where,
                hint="return the optimizer (and optionally its lr_scheduler) from configure_optimizers",
            )
        try:
            optimizers, schedulers, monitor = _configure_optimizers(returned)
            configs = _configure_schedulers_automatic_opt(schedulers, monitor)
            _validate_optimizers_attached(optimizers, configs)
            _validate_scheduler_api(configs, module)
        except (MisconfigurationException, TypeError) as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WorkloadError(
                f"configure_optimizers: {first_line}",
                where=self.where,
                hint="return what Lightning accepts",
            ) from exc
        if len(optimizers) != 1:
            raise WorkloadError(
                f"configure_optimizers returned {len(optimizers)} optimizers; several are not supported yet",
                where=self.where,
                hint="return one optimizer for the check, or write a perfgate.Workload with your own step",
            )
        return optimizers[0], configs

    # --- The workload's functions ---------------------------------------------------------------------------------

    def model(self) -> Any:
        """The module itself (each trial process builds it anew, in the user's workload function)."""
        return self.module

    def dataset(self) -> Any:
        """The train DataLoader's dataset."""
        return self._dataset

    def optimizer(self, parameters: Any) -> Any:
        """The optimizer the module's `configure_optimizers()` returns, called on the module where perfgate put it.

        `parameters` (the model's, from perfgate) are not used: the module chooses its own, as under `fit`. The
        first call also runs the hooks `fit` runs once before the first batch: on_fit_start, on_train_start,
        on_train_epoch_start."""
        module = self.module
        self._attach(module, _device_of(module))  # configure_optimizers runs with the model on its device, as in fit
        optimizer, configs = self._configure(module)
        self._configured[id(optimizer)] = (optimizer, configs)
        if not self._started:
            self._started = True
            for hook in ("on_fit_start", "on_train_start", "on_train_epoch_start"):
                _call_hook(module, hook)
        return optimizer

    def scheduler(self, optimizer: Any) -> Any:
        """The (first) scheduler `configure_optimizers()` returned with `optimizer`."""
        configured = self._configured.get(id(optimizer))
        if configured is None or configured[0] is not optimizer:
            raise WorkloadError(
                "scheduler(optimizer) got an optimizer the workload's optimizer() did not build",
                where=self.where,
                hint="call the workload's optimizer(params) first and pass what it returns",
            )
        schedules = configured[1]
        return schedules[0].scheduler if schedules else None

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        """One batch's `training_step` loss, through `model` as the step calls it (no backward)."""
        module, call, _ = self._route(model)
        trainer = self._attach(module, _device_of(module))
        batch = self._transfer_hooks(batch)
        trainer._logger_connector.on_batch_start(batch)
        output = call(batch, 0)
        trainer._logger_connector.on_batch_end()
        loss, _ = self._loss_of(output)
        return loss

    def step(self, model: Any, batch: Any, optimizer: Any, state: StepState | None = None) -> torch.Tensor:
        """One optimizer step of Lightning's automatic optimization; returns the micro-batches' mean loss.

        Per micro-batch (`batch` is their list with accumulation), in Lightning's order: on_before_batch_transfer
        and on_after_batch_transfer where overridden (the batch is already on the device: perfgate moved it),
        on_train_batch_start, `training_step` (through `model`: see `_route`), the loss divided by the accumulation,
        on_before_zero_grad and optimizer_zero_grad before the first micro-batch's backward, on_before_backward,
        `backward` (the loss scaled in the fp16 config), on_after_backward; after the last one, inside the
        `optimizer_step` hook's `optimizer.step(closure)`: the scaler's unscale (fp16), on_before_optimizer_step,
        configure_gradient_clipping, the optimizer (through the scaler in fp16); then the schedulers whose
        interval is "step" (every `frequency` batches, via lr_scheduler_step), on_train_batch_end and the logged
        metrics' gathering. Earlier micro-batches run under the model's `no_sync()` where it has one (DDP).
        Schedulers with interval "epoch" are not stepped: no epoch ends within a trial's steps.
        """
        state = state if state is not None else StepState(accumulation=self.accumulation)
        micro_batches = self._micro_batches(batch)
        module, call, wrapper = self._route(model)
        trainer = self._attach(module, _device_of(module))
        loop = trainer.fit_loop.epoch_loop
        schedules = self._schedules(optimizer)
        outside = _autocast_off(_device_of(module).type)
        losses: list[Any] = []
        for micro, micro_batch in enumerate(micro_batches):
            batch_idx = state.index * self.accumulation + micro
            last = micro == len(micro_batches) - 1
            with outside():
                micro_batch = self._transfer_hooks(micro_batch)
                trainer._logger_connector.on_batch_start(micro_batch)
                loop.batch_progress.increment_ready()
                _call_hook(module, "on_train_batch_start", micro_batch, batch_idx)
                loop.batch_progress.increment_started()
            closure = _Closure(self, call, module, optimizer, state.scaler, outside, micro_batch, batch_idx, micro == 0)
            if not last:
                no_sync = getattr(wrapper, "no_sync", None)  # Lightning's _block_parallel_sync_behavior
                with no_sync() if no_sync is not None else contextlib.nullcontext():
                    closure()
            else:
                progress = loop.automatic_optimization.optim_progress.optimizer.step
                progress.increment_ready()
                stepping = _StepThroughPrecision(module, optimizer, state.scaler, outside)
                _call_hook(module, "optimizer_step", trainer.current_epoch, batch_idx, stepping, closure)
                progress.increment_completed()
            if closure.loss is None:
                raise RuntimeError(
                    f"optimizer_step did not call the optimizer closure ({self.where}); "
                    "call optimizer.step(closure=optimizer_closure), as Lightning's default does"
                )
            losses.append(closure.loss)
            with outside():
                loop.batch_progress.increment_processed()
                if last:
                    self._step_schedulers(module, schedules, batch_idx, plateau=False)
                _call_hook(module, "on_train_batch_end", dict(closure.output), micro_batch, batch_idx)
                trainer._logger_connector.on_batch_end()
                loop.batch_progress.increment_completed()
                if last:
                    self._step_schedulers(module, schedules, batch_idx, plateau=True)
                    loop._batches_that_stepped += 1
        if len(losses) == 1:
            return losses[0]
        import torch

        return torch.stack(losses).mean()

    # --- The pieces of the step -----------------------------------------------------------------------------------

    def _micro_batches(self, batch: Any) -> list[Any]:
        if self.accumulation == 1:
            return [batch]
        if not isinstance(batch, list) or len(batch) != self.accumulation:
            raise ValueError(
                f"with accumulate_grad_batches={self.accumulation} the step takes a list of {self.accumulation} "
                f"micro-batches ({self.where})"
            )
        return list(batch)

    def _route(self, model: Any) -> tuple[Any, Callable[[Any, int], Any], Any]:
        """The LightningModule inside `model`, a call of its `training_step` through `model`, and the wrapper.

        As Lightning's own compile support (`lightning.pytorch.utilities.compile.from_compiled`) runs a module given
        as `torch.compile(module)`: `training_step` compiled with the wrapper's dynamo context (its backend and
        options), not only `forward`; a wrapper that holds the module as `.module` (DistributedDataParallel) is
        called with its forward redirected to `training_step`, as Lightning's strategies do
        (`lightning.pytorch.strategies.strategy._ForwardRedirection`), so its hooks around forward run."""
        import lightning.pytorch as pl
        from torch._dynamo import OptimizedModule

        dynamo_ctx = None
        inner = model
        if isinstance(inner, OptimizedModule):
            dynamo_ctx, inner = inner.dynamo_ctx, inner._orig_mod
        if isinstance(inner, pl.LightningModule):
            module, wrapper = inner, None
        elif isinstance(getattr(inner, "module", None), pl.LightningModule):
            module, wrapper = inner.module, inner
        else:
            raise TypeError(
                f"the step got a {type(model).__name__}, neither the LightningModule nor a wrapper of it ({self.where})"
            )
        training_step: Callable[..., Any] = module.training_step
        if dynamo_ctx is not None:
            compiled = self._compiled.get(model)
            if compiled is None:
                compiled = self._compiled[model] = dynamo_ctx(module.training_step)
            training_step = compiled
        takes_batch_idx = self._takes_batch_idx

        def call(batch: Any, batch_idx: int) -> Any:
            arguments = (batch, batch_idx) if takes_batch_idx else (batch,)
            previous = module._current_fx_name
            module._current_fx_name = "training_step"  # what self.log checks, as the strategy hook sets it
            try:
                if wrapper is None:
                    return training_step(*arguments)
                return _through_forward(wrapper, module, training_step, arguments)
            finally:
                module._current_fx_name = previous

        return module, call, wrapper

    def _transfer_hooks(self, batch: Any) -> Any:
        for hook in ("on_before_batch_transfer", "on_after_batch_transfer"):
            owner = self._batch_hooks.get(hook)
            if owner is not None:
                batch = _call_hook(owner, hook, batch, 0)
        return batch

    def _loss_of(self, output: Any) -> tuple[Any, dict[str, Any]]:
        """The loss in what `training_step` returned (a tensor, or a dict's "loss"), and the dict's other keys."""
        import torch

        if isinstance(output, Mapping):
            if output.get("loss") is None:
                raise RuntimeError(
                    f"training_step returned a dict without a 'loss' ({self.where}); put the loss under 'loss'"
                )
            return output["loss"], {k: v for k, v in output.items() if k != "loss"}
        if isinstance(output, torch.Tensor):
            return output, {}
        got = "None" if output is None else f"a {type(output).__name__}"
        # Lightning skips the step on None; a step that trains nothing has no speed to gate.
        raise RuntimeError(
            f"training_step returned {got} ({self.where}); return the loss (a tensor, or a dict with 'loss')"
        )

    def _schedules(self, optimizer: Any) -> list[Any]:
        configured = self._configured.get(id(optimizer))
        return configured[1] if configured is not None and configured[0] is optimizer else []

    def _step_schedulers(self, module: Any, schedules: list[Any], batch_idx: int, *, plateau: bool) -> None:
        """Lightning's `_update_learning_rates("step", ...)`: every `frequency` batches, through lr_scheduler_step;
        ReduceLROnPlateau ones after the batch's metrics are gathered, with the monitored one."""
        for config in schedules:
            if config.reduce_on_plateau != plateau or config.interval != "step" or (batch_idx + 1) % config.frequency:
                continue
            metric = None
            if plateau:
                metric = module.trainer.callback_metrics.get(config.monitor)
                if metric is None:
                    if config.strict:
                        raise RuntimeError(
                            f"ReduceLROnPlateau monitors {config.monitor!r}, which training_step does not log "
                            f"({self.where}); self.log it, or set strict=False"
                        )
                    continue
            _call_hook(module, "lr_scheduler_step", config.scheduler, metric)

    def _attach(self, module: Any, device: torch.device) -> Any:
        """The Trainer `module` is attached to for this device: built on the first call, again when it moved."""
        attached = self._trainers.get(module)
        if attached is not None and attached[0] == str(device) and module._trainer is attached[1]:
            return attached[1]
        trainer = _new_trainer(device, self.accumulation, self.clip_val, self.clip_algorithm)
        trainer.strategy.connect(module)
        module.trainer = trainer
        if self.datamodule is not None:  # as Trainer.fit attaches one (`_DataConnector.attach_datamodule`)
            trainer.datamodule, self.datamodule.trainer = self.datamodule, trainer
        self._trainers[module] = (str(device), trainer)
        return trainer


class _Closure:
    """Lightning's `Closure` for one micro-batch (`loops.optimization.automatic`): training_step, the loss divided by
    the accumulation, zero_grad before the first micro-batch's backward, and backward between its hooks."""

    def __init__(
        self,
        run: _Run,
        call: Callable[[Any, int], Any],
        module: Any,
        optimizer: Any,
        scaler: Any,
        outside: Callable[[], Any],
        batch: Any,
        batch_idx: int,
        first: bool,
    ) -> None:
        self._run, self._call, self._module, self._optimizer, self._scaler = run, call, module, optimizer, scaler
        self._outside, self._batch, self._batch_idx, self._first = outside, batch, batch_idx, first
        self.loss: Any = None  # the micro-batch's loss as training_step returned it, detached
        self.output: dict[str, Any] = {}  # what on_train_batch_end gets: the divided loss and the dict's other keys

    def __call__(self) -> Any:
        output = self._call(self._batch, self._batch_idx)
        module, optimizer = self._module, self._optimizer
        with self._outside():
            loss, extra = self._run._loss_of(output)
            self.loss = loss.detach()
            normalized = loss / self._run.accumulation  # ClosureResult: divided always, by 1 too
            self.output = {"loss": normalized.detach().clone(), **extra}
            if self._first:
                _call_hook(module, "on_before_zero_grad", optimizer)
                _call_hook(module, "optimizer_zero_grad", module.trainer.current_epoch, self._batch_idx, optimizer)
            scaled = self._scaler.scale(normalized) if self._scaler is not None else normalized  # MixedPrecision
            _call_hook(module, "on_before_backward", scaled)
            _call_hook(module, "backward", scaled)
            _call_hook(module, "on_after_backward")
        return self.output["loss"]


class _StepThroughPrecision:
    """The optimizer as the `optimizer_step` hook gets it: `step(closure)` as Lightning's `LightningOptimizer.step`
    and precision plugin run it (`Precision._wrap_closure`, `MixedPrecision.optimizer_step`): the closure (training
    step and backward), the unscale (fp16), on_before_optimizer_step, configure_gradient_clipping, the update.

    The closure runs before the optimizer's own `step` is called, not inside it (`optimizer.step(closure=...)`):
    the same work in the same order, and the optimizer's step hooks see only the update."""

    def __init__(self, module: Any, optimizer: Any, scaler: Any, outside: Callable[[], Any]) -> None:
        self._module, self._optimizer, self._scaler, self._outside = module, optimizer, scaler, outside

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        result = closure() if closure is not None else None
        optimizer, scaler, module = self._optimizer, self._scaler, self._module
        with self._outside():
            if scaler is not None and not getattr(optimizer, "_step_supports_amp_scaling", False):
                scaler.unscale_(optimizer)  # Lightning unscales in fp16 whether it clips or not
            _call_hook(module, "on_before_optimizer_step", optimizer)
            trainer = module.trainer
            _call_hook(
                module,
                "configure_gradient_clipping",
                optimizer,
                gradient_clip_val=trainer.gradient_clip_val,
                gradient_clip_algorithm=trainer.gradient_clip_algorithm,
            )
            if scaler is not None:
                scaler.step(optimizer, **kwargs)
                scaler.update()
            else:
                optimizer.step(**kwargs)
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:  # param_groups, state, defaults: the optimizer's
        return getattr(self._optimizer, name)


def _call_hook(owner: Any, hook: str, *args: Any, **kwargs: Any) -> Any:
    """Call a module's (or datamodule's) hook as Lightning's `trainer.call` does: with `_current_fx_name` set, which
    `self.log` checks."""
    previous = getattr(owner, "_current_fx_name", None)
    has_fx = hasattr(owner, "_current_fx_name")
    if has_fx:
        owner._current_fx_name = hook
    try:
        return getattr(owner, hook)(*args, **kwargs)
    finally:
        if has_fx:
            owner._current_fx_name = previous


def _through_forward(wrapper: Any, module: Any, training_step: Callable[..., Any], arguments: tuple[Any, ...]) -> Any:
    """Call `training_step` through `wrapper(...)`: the module's forward patched to it for that one call."""
    own = module.__dict__.get("forward")

    def restore() -> None:
        if own is None:
            module.__dict__.pop("forward", None)
        else:
            module.__dict__["forward"] = own

    def forward(*args: Any, **kwargs: Any) -> Any:
        restore()  # before the step: it may call the real forward
        return training_step(*args, **kwargs)

    module.__dict__["forward"] = forward
    try:
        return wrapper(*arguments)
    finally:
        restore()


def _autocast_off(device_type: str) -> Callable[[], Any]:
    """A context that turns the config's autocast off where Lightning's loop runs without it: everything but
    `training_step` (perfgate calls the whole step inside autocast; Lightning's precision plugin wraps the step
    alone)."""
    import torch

    def outside() -> Any:
        if torch.is_autocast_enabled(device_type):
            return torch.autocast(device_type, enabled=False)
        return contextlib.nullcontext()

    return outside


def _device_of(module: Any) -> torch.device:
    import torch

    device = module.device  # LightningModule keeps it up to date through .to()
    return device if isinstance(device, torch.device) else torch.device(device)


def _cpu() -> torch.device:
    import torch

    return torch.device("cpu")


def _new_trainer(device: torch.device, accumulation: int, clip_val: Any, clip_algorithm: str | None) -> Any:
    """A real `lightning.Trainer` for one device, in the state `fit` is in while training, that writes nothing."""
    import lightning.pytorch as pl
    from lightning.fabric.plugins.environments.lightning import LightningEnvironment
    from lightning.pytorch.trainer.states import TrainerFn

    devices: list[int] | int
    if device.type == "cuda":
        accelerator, devices = "gpu", [device.index or 0]
    elif device.type == "mps":
        accelerator, devices = "mps", [0]
    else:
        accelerator, devices = "cpu", 1
    with _quiet():
        trainer = pl.Trainer(
            accelerator=accelerator,
            devices=devices,
            # One process's Trainer, whatever launched it: a data-parallel trial's ranks are perfgate's (torchrun).
            plugins=[LightningEnvironment()],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            max_epochs=-1,
            max_steps=ESTIMATED_STEPS,
            accumulate_grad_batches=accumulation,
            gradient_clip_val=clip_val,
            gradient_clip_algorithm=clip_algorithm,
        )
    trainer.state.fn = TrainerFn.FITTING
    trainer.training = True  # the stage `self.log` records under
    return trainer


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The Trainer's construction without its notes (devices available, logger tips) and device-choice warnings:
    they are about the adapter's Trainer, not the user's code."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
