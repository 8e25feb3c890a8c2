"""A `perfgate.Workload` from a Hugging Face `transformers.Trainer`: its model, data, optimizer and training step.

The adapter reads what the Trainer already knows and runs one optimizer step as the installed Trainer's own loop
(`Trainer._inner_training_loop` / `_run_epoch`) runs it, calling the Trainer's own methods where they let
perfgate's config apply: `get_batch_samples` (the label count behind `num_items_in_batch`), `training_step`
(`compute_loss` and its division by the micro-batches, backward through the Trainer's accelerator), the
Trainer's clipping and gradient norm, then the optimizer, the scheduler and `model.zero_grad()`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import sys
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from perfgate.errors import WorkloadError
from perfgate.workload import StepState, Workload

# The optimizers and schedulers this adapter built, told apart from those the user handed the Trainer
# (`Trainer(optimizers=(optimizer, scheduler))`), which are used as they are.
_BUILT: weakref.WeakSet[Any] = weakref.WeakSet()
# The models prepared as `Trainer.train()` prepares them (activation checkpointing, NEFTune's hook): once each.
_PREPARED: weakref.WeakSet[Any] = weakref.WeakSet()


def from_trainer(
    trainer: Any,
    *,
    name: str | None = None,
    steps: int = 20,
    warmup_steps: int = 3,
    seed: int | None = None,
    threads: int | None = None,
) -> Workload:
    """The Workload that trains as `trainer.train()` does, one optimizer step at a time.

    Build the Trainer in a module-level function without arguments and return this from it: a trial process
    rebuilds the workload by calling that function again.

        def workload():
            trainer = Trainer(model=model, args=TrainingArguments(...), train_dataset=data)
            return perfgate.from_trainer(trainer, name="my-model")

    Read from the Trainer:
        - model: `trainer.model`, prepared as `train()` prepares it (re-initialised from `model_init` after
          perfgate seeds, liger kernels, activation checkpointing, NEFTune's embedding noise).
        - dataset: `trainer.train_dataset` with the columns its forward does not take removed, as
          `get_train_dataloader` does: a `datasets.Dataset` loses them here, any other dataset keeps them and
          the collator drops them (`RemoveColumnsCollator`). It must have a length: perfgate pins a slice of it.
        - loader: the collator the Trainer's DataLoader uses, and `dataloader_num_workers`, `_pin_memory`,
          `_persistent_workers`, `_prefetch_factor`, `_multiprocessing_context`, `_in_order` and its worker seeding.
          The sampling is perfgate's: a pinned slice in a fixed order, not the Trainer's sampler.
        - batch_size: `per_device_train_batch_size`; accumulation: `gradient_accumulation_steps`;
          max_grad_norm: `max_grad_norm` (0 or None: no clipping).
        - optimizer: `trainer.create_optimizer()` (or the optimizer passed to the Trainer); scheduler:
          `trainer.create_scheduler(num_training_steps)` with `args.max_steps` when set, else
          `warmup_steps + steps` (or the scheduler passed to the Trainer).
        - seed: `args.seed`; name: the model's class name.

    Precision and compilation are perfgate's configs': the Trainer's `bf16`, `fp16` and `torch_compile` act
    through accelerate's `prepare` (an autocast wrapped around the model's forward, accelerate's GradScaler, its
    torch.compile), which the adapter never calls. So fp32 trains in float32 whatever `bf16=True` says; bf16
    runs the step under perfgate's bfloat16 autocast; fp16 under its float16 autocast with perfgate's
    GradScaler, which the Trainer's own backward (`accelerator.backward`) scales the loss with; bf16-compile
    compiles the model perfgate passes to the step.

    Not reproduced: the Trainer's callbacks (the progress bar, logging and saving, your own), its evaluation,
    DeepSpeed, FSDP and DataParallel over several GPUs.

    Args:
        trainer: A `transformers.Trainer` (or subclass) with a `train_dataset`.
        name: The workload's name (letters, digits, `-`, `_`, `.`); default: the model's class name.
        steps: Timed optimizer steps per trial.
        warmup_steps: Untimed optimizer steps before them.
        seed: Seeds the model initialisation and picks the data slice; default `args.seed`.
        threads: The torch threads your training runs with (None: torch's default).

    Raises:
        WorkloadError: not a Trainer, no `train_dataset`, a dataset without a length, a Trainer set up for
            DeepSpeed, FSDP or several GPUs in one process; or transformers is not installed.
    """
    try:
        import transformers
    except ImportError as exc:
        raise WorkloadError(
            "from_trainer needs transformers, which is not installed",
            where="from_trainer",
            hint="pip install transformers accelerate",
        ) from exc
    if not isinstance(trainer, transformers.Trainer):
        raise WorkloadError(
            f"from_trainer takes a transformers.Trainer, got {type(trainer).__name__}",
            where=f"workload {name!r}" if name else "from_trainer",
            hint="pass the Trainer you train with: from_trainer(Trainer(model=..., args=..., train_dataset=...))",
        )
    workload_name = name if name is not None else _default_name(trainer.model)
    where = f"workload {workload_name!r}"
    args = trainer.args
    _check_single_process(trainer, where)
    dataset, collate_fn = _train_data(trainer, where)
    training_steps = args.max_steps if args.max_steps and args.max_steps > 0 else warmup_steps + steps
    given_optimizer = trainer.optimizer if trainer.optimizer not in _BUILT else None
    given_scheduler = trainer.lr_scheduler if trainer.lr_scheduler not in _BUILT else None
    count_items = _item_counter(trainer)

    def model() -> Any:
        return _model_as_train_prepares(trainer)

    def optimizer(parameters: Iterable[Any]) -> Any:
        return _trainer_optimizer(trainer, given_optimizer, parameters, where)

    def scheduler(optimizer: Any) -> Any:
        if given_scheduler is not None:
            return given_scheduler
        trainer.lr_scheduler = None  # create_scheduler builds one only where none is held
        built = trainer.create_scheduler(num_training_steps=training_steps, optimizer=optimizer)
        _BUILT.add(built)
        return built

    def loss(model: Any, batch: Any) -> Any:
        return trainer.compute_loss(model, trainer._prepare_inputs(batch))

    def step(model: Any, batch: Any, optimizer: Any, state: StepState) -> Any:
        return _optimizer_step(trainer, model, batch, optimizer, state, count_items)

    max_grad_norm = args.max_grad_norm
    return Workload(
        name=workload_name,
        model=model,
        dataset=lambda: dataset,
        loss=loss,
        batch_size=args.per_device_train_batch_size,
        optimizer=optimizer,
        loader=_loader_options(args, collate_fn),
        steps=steps,
        warmup_steps=warmup_steps,
        seed=args.seed if seed is None else seed,
        threads=threads,
        step=step,
        accumulation=args.gradient_accumulation_steps,
        max_grad_norm=max_grad_norm if max_grad_norm is not None and max_grad_norm > 0 else None,
        scheduler=scheduler,
    )


def _default_name(model: Any) -> str:
    """The model's class name, with anything a workload name may not hold replaced by '-'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", type(model).__name__) or "trainer"


def _check_single_process(trainer: Any, where: str) -> None:
    """The setups whose training step is not the Trainer's single-device step: one-line errors up front."""
    for flag, what in (("is_deepspeed_enabled", "DeepSpeed"), ("is_fsdp_enabled", "FSDP")):
        if getattr(trainer, flag, False):
            raise WorkloadError(
                f"the Trainer is set up for {what}, which from_trainer does not reproduce",
                where=where,
                hint="measure the Trainer without it (perfgate's --nproc runs DistributedDataParallel ranks)",
            )
    gpus = getattr(trainer.args, "n_gpu", 1)
    if gpus > 1:  # the Trainer would wrap the model in DataParallel and split num_items_in_batch between the GPUs
        raise WorkloadError(
            f"the Trainer sees {gpus} GPUs in one process and would train with DataParallel",
            where=where,
            hint="make one GPU visible (CUDA_VISIBLE_DEVICES=0), or use --nproc for one rank per GPU",
        )


def _train_data(trainer: Any, where: str) -> tuple[Any, Callable[..., Any]]:
    """The train dataset and collator as `Trainer._get_dataloader` uses them for training."""
    dataset = trainer.train_dataset
    if dataset is None:
        raise WorkloadError(
            "the Trainer has no train_dataset", where=where, hint="pass train_dataset= to the Trainer you measure"
        )
    try:
        len(dataset)
    except TypeError:
        raise WorkloadError(
            f"the Trainer's train_dataset ({type(dataset).__name__}) has no length, and perfgate pins a slice of "
            "a map-style dataset",
            where=where,
            hint="pass a Dataset with __len__ and __getitem__ (a datasets.Dataset, not an IterableDataset)",
        ) from None
    datasets = sys.modules.get("datasets")  # a datasets.Dataset comes with its library imported
    if datasets is not None and isinstance(dataset, datasets.Dataset):
        return trainer._remove_unused_columns(dataset, description="Training"), trainer.data_collator
    return dataset, trainer._get_collator_with_removed_columns(trainer.data_collator, description="Training")


def _loader_options(args: Any, collate_fn: Callable[..., Any]) -> dict[str, Any]:
    """The DataLoader arguments `Trainer._get_dataloader` passes, but for those perfgate owns (the batch size,
    the sampler, drop_last); the ones left at the DataLoader's defaults are left out."""
    options: dict[str, Any] = {
        "collate_fn": collate_fn,
        "num_workers": args.dataloader_num_workers,
        "pin_memory": args.dataloader_pin_memory,
        "persistent_workers": args.dataloader_persistent_workers,
    }
    for key, attribute, default in (
        ("multiprocessing_context", "dataloader_multiprocessing_context", None),
        ("prefetch_factor", "dataloader_prefetch_factor", None),
        ("in_order", "dataloader_in_order", True),
    ):
        value = getattr(args, attribute, default)
        if value != default:
            options[key] = value
    if args.dataloader_num_workers > 0:
        from transformers.trainer_utils import seed_worker

        accepts = inspect.signature(seed_worker).parameters
        seeding: Callable[..., Any] = seed_worker
        if "num_workers" in accepts and "rank" in accepts:
            seeding = functools.partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index)
        options["worker_init_fn"] = seeding
    return options


def _model_as_train_prepares(trainer: Any) -> Any:
    """`trainer.model` as `Trainer.train()` prepares it before its loop, once per model: re-initialised from
    `model_init` (perfgate has seeded), liger kernels, activation checkpointing, NEFTune's hook. Device placement
    and dtype are perfgate's."""
    args = trainer.args
    if trainer.model_init is not None and trainer.model not in _PREPARED:
        trainer.model = trainer.call_model_init()
        trainer.model_wrapped = trainer.model
    model = trainer.model
    if model in _PREPARED:
        return model
    _PREPARED.add(model)
    if getattr(args, "use_liger_kernel", False):
        from transformers.trainer import apply_liger_kernel  # type: ignore[attr-defined]

        apply_liger_kernel(model, getattr(args, "liger_kernel_config", None))
    if getattr(args, "activation_checkpointing", False) and hasattr(model, "activation_checkpointing_enable"):
        options = dict(args.activation_checkpointing_kwargs or {})
        every_n_layers = options.pop("every_n_layers", 1)
        offload = options.pop("offload", False)
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs=options or None, every_n_layers=every_n_layers, offload=offload
        )
    elif getattr(args, "gradient_checkpointing", False) and hasattr(model, "gradient_checkpointing_enable"):
        # transformers before `activation_checkpointing` (v4): the same switch under its old name
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)
    if getattr(trainer, "neftune_noise_alpha", None) is not None:
        from transformers.trainer import activate_neftune  # type: ignore[attr-defined]

        trainer.neftune_hook_handle = activate_neftune(model, trainer.neftune_noise_alpha, trainer.accelerator)
    return model


def _trainer_optimizer(trainer: Any, given: Any, parameters: Iterable[Any], where: str) -> Any:
    """The Trainer's optimizer for a trial: the one handed to the Trainer, else a fresh `create_optimizer()`
    (its weight-decay groups and `args.optim`), which must hold the parameters perfgate trains."""
    if given is not None:
        optimizer = given
    else:
        trainer.optimizer = None  # create_optimizer builds one only where none is held
        optimizer = trainer.create_optimizer()
        _BUILT.add(optimizer)
    trained = {id(p) for p in parameters}
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if not held <= trained:
        raise WorkloadError(
            "the Trainer's optimizer holds parameters that are not the model's perfgate trains",
            where=where,
            hint="give the Trainer the model it trains (trainer.model), not a copy",
        )
    return optimizer


_ItemCounter = Callable[[list[Any]], tuple[list[Any], Any]]


def _item_counter(trainer: Any) -> _ItemCounter | None:
    """`get_batch_samples` as the loop calls it on one step's micro-batches, returning them and
    `num_items_in_batch`; None for a Trainer whose `training_step` takes no `num_items_in_batch` (before 4.46)."""
    if "num_items_in_batch" not in inspect.signature(trainer.training_step).parameters:
        return None
    takes_device = "device" in inspect.signature(trainer.get_batch_samples).parameters  # since 4.49

    def count(micro_batches: list[Any]) -> tuple[list[Any], Any]:
        device = (trainer.args.device,) if takes_device else ()
        samples, items = trainer.get_batch_samples(iter(micro_batches), len(micro_batches), *device)
        return list(samples), items

    return count


def _optimizer_step(
    trainer: Any, model: Any, batch: Any, optimizer: Any, state: StepState, count_items: _ItemCounter | None
) -> Any:
    """One optimizer step of the Trainer's loop (`Trainer._run_epoch` of the installed transformers), on the model
    perfgate passes (torch.compile's wrapper in the compile config). Returns the step's training loss as the
    Trainer logs it: the sum of `training_step`'s losses, each already divided for the accumulation."""
    import torch

    args = trainer.args
    micro_batches = list(batch) if state.accumulation > 1 else [batch]
    num_items_in_batch = None
    if count_items is not None:  # the label tokens of the whole step, counted as the loop counts them
        micro_batches, num_items_in_batch = count_items(micro_batches)
    trainer.current_gradient_accumulation_steps = len(micro_batches)
    accelerator = trainer.accelerator
    sync_each_batch = getattr(accelerator.gradient_state, "plugin_kwargs", {}).get("sync_each_batch", False)
    # training_step backpropagates with `accelerator.backward`, which scales the loss with the accelerator's
    # GradScaler (the Trainer's fp16): for the step, that is the config's (perfgate's fp16) or none.
    trainers_scaler = accelerator.scaler
    accelerator.scaler = state.scaler
    total, last_loss = None, None
    try:
        for index, inputs in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            # the loop defers DDP's all-reduce to the last micro-batch (a no-op in one process)
            sync = contextlib.nullcontext() if last or sync_each_batch else accelerator.no_sync(model=model)
            with sync:
                if count_items is not None:
                    last_loss = trainer.training_step(model, inputs, num_items_in_batch)
                else:
                    last_loss = trainer.training_step(model, inputs)
            # The loop's check of every micro-batch's loss (a host synchronisation on CUDA, as the Trainer has):
            # a non-finite one is left out of the logged loss.
            if not (args.logging_nan_inf_filter and (torch.isnan(last_loss) or torch.isinf(last_loss))):
                total = last_loss if total is None else total + last_loss
            trainer.current_flos += float(trainer.floating_point_ops(inputs))
            if hasattr(trainer, "_track_num_input_tokens"):
                trainer._track_num_input_tokens(inputs)
    finally:
        accelerator.scaler = trainers_scaler
    if state.scaler is not None:  # the Trainer's clipping and norm unscale first (accelerator.unscale_gradients)
        state.scaler.unscale_(optimizer)
    grad_norm = None
    if state.max_grad_norm is not None:
        if hasattr(trainer, "_clip_grad_norm") and state.max_grad_norm == args.max_grad_norm:
            grad_norm = trainer._clip_grad_norm(model)
        else:
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), state.max_grad_norm)
    if hasattr(trainer, "_get_grad_norm"):  # the loop computes the norm it logs even where it does not clip
        trainer._get_grad_norm(model, grad_norm=grad_norm)
    skipped = False
    if state.scaler is not None:
        # accelerate's optimizer wrapper: a step the scaler skips (an overflow) also leaves the scheduler alone
        stepped: list[bool] = []
        handle = optimizer.register_step_post_hook(lambda *_: stepped.append(True))
        try:
            state.scaler.step(optimizer)
            state.scaler.update()
        finally:
            handle.remove()
        skipped = not stepped
    else:
        optimizer.step()
    if state.scheduler is not None and not skipped and not _steps_on_metrics(state.scheduler):
        state.scheduler.step()
    model.zero_grad()
    return total if total is not None else last_loss


def _steps_on_metrics(scheduler: Any) -> bool:
    """The schedulers the Trainer's loop steps only after an evaluation (ReduceLROnPlateau, GreedyLR)."""
    import torch

    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) or type(scheduler).__name__ == "GreedyLR"
