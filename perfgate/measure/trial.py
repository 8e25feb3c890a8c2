"""One trial: set up the workload in this process, run warm-up and timed steps, and report.

The runner starts `python -m perfgate.measure.trial SPEC OUT` once per trial, so peak memory, allocator state
and compiled graphs never leak from one trial into the next. The trial writes one JSON record to OUT, a
`records.results.TrialRecord`: the `TrialResult` (status `ok`, or `failed` with the reason) and, for a
failed trial, a `failure_kind` the runner acts on (`workload`: the user's code is at fault, stop the run;
`config`: this config cannot run here, for example torch.compile failed). The runner reads it strictly:
a field it does not know, or one missing, is an error rather than silently dropped.

A trial runs in this order, each step in its own function: load the workload (`_load`), time the
machine probe, build the data, model and optimizer (`_set_up`), run the warm-up and timed steps in one
loop (`_train`), collect what is read after the steps (`_after_steps`: final loss, peak memory, torch
calls, compile counters), checksum the data slice in a pass of its own, time the probe again, and
assemble the record (`_record`).

A data-parallel trial (`nproc` > 1) is this module run by torchrun once per rank: each rank joins the process
group, reads its share of the slice, trains the model in DistributedDataParallel with its all-reduce timed,
and rank 0 writes the job's record from every rank's (`perfgate.measure.distributed`).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate._bytes import tensor_bytes
from perfgate._files import write_atomic
from perfgate.measure import distributed
from perfgate.measure.counting import CompileCounts, count_step
from perfgate.measure.profiling import StepProfiler
from perfgate.measure.sampler import SystemSampler, loader_worker_pids
from perfgate.measure.step import NOT_TOLD_APART, NoClock, TrainingStep, TrialFailure, check_loss
from perfgate.measure.turns import TurnTaker
from perfgate.records.results import FailureKind, TrialRecord, TrialResult
from perfgate.records.shapes import AutocastCheck, Counts, PeakMemory, Profile, RankResult, UnusedParameters
from perfgate.workload import StepState

if TYPE_CHECKING:
    from perfgate.measure.device import Device, HostStepClock, StepTimes
    from perfgate.measure.distributed import CommTimer, Rank
    from perfgate.variants import Config
    from perfgate.workload import Workload

FIRST_LOSSES = 3


@dataclass(frozen=True)
class TrialSpec:
    """What the runner asks one trial process to do."""

    reference_text: str
    reference_target: str
    config: str
    trial: int
    device: str
    threads: int | None  # None: torch's own default, as the user's training gets it
    profile: str | None = None  # a trace path: profile the timed steps (their times are then not used)
    planted_slowdown: float = 0.0  # `perfgate calibrate`: every step sleeps this fraction of its own time
    turns: str | None = (
        None  # an interleaved pair: take turns at the steps with the other side (`perfgate.measure.turns`)
    )
    nproc: int = 1  # ranks of a data-parallel trial, each a process torchrun started (`perfgate.measure.distributed`)
    rounds: int = 1  # the timed steps run this many times over the pinned slice (`perfgate.measure.rounds`)
    probe: bool = True  # time the machine probe before and after (stored baselines use it; paired checks do not)
    counts_only: bool = False  # `--counts-only`: the warm-up steps, then the exact counts; no step is timed


def run_trial(spec: TrialSpec, out_path: str = "") -> TrialRecord | None:
    """Run one trial in this process and return its record (never raises for workload faults); None on a
    data-parallel trial's ranks other than 0, whose figures rank 0's record carries."""
    started = time.perf_counter()
    try:
        record = _run(spec, out_path)
        if record is None:
            return None
    except TrialFailure as failure:
        cause = failure.__cause__
        record = TrialRecord.failed(
            spec.config,
            spec.trial,
            failure.message,
            failure.kind,
            traceback=None if cause is None else "".join(traceback.format_exception(cause)),
        )
    except Exception as exc:  # perfgate's own errors while loading, or a bug here: report, don't crash
        from perfgate.errors import PerfgateError

        kind: FailureKind = "workload" if isinstance(exc, PerfgateError) else "internal"
        message = exc.one_line() if isinstance(exc, PerfgateError) else f"{type(exc).__name__}: {exc}"
        record = TrialRecord.failed(
            spec.config, spec.trial, message, kind, traceback="".join(traceback.format_exception(exc))
        )
    return replace(record, result=replace(record.result, process_s=time.perf_counter() - started))


@dataclass(frozen=True)
class _Setup:
    """What the steps run on, built before the clock starts; it lives until the trial's record is made."""

    config: Config
    device: Device
    workload: Workload
    dataset: Any
    loader: Any  # kept alive to the end, as persistent DataLoader workers expect
    model: Any  # the torch.nn.Module
    step_model: Any  # the model, or torch.compile's wrapper of it: what the steps call
    optimizer: Any
    autocast: Any  # a factory of autocast contexts (a null context without autocast)
    autocast_check: AutocastCheck | None  # the probe matmul's dtype under autocast
    setup_s: float
    rank: Rank | None = None  # a data-parallel trial's rank
    comm: CommTimer | None = None  # times the gradient all-reduce (a DDP model)
    warnings: tuple[str, ...] = ()  # noticed while setting up
    unused: UnusedParameters | None = None  # a data-parallel model's parameters the loss does not use
    training: TrainingStep | None = None  # the step the trial runs (`perfgate.measure.step`)


@dataclass(frozen=True)
class _StepTools:
    """What the warm-up and timed steps are measured with, made before the first step."""

    clock: HostStepClock  # the device's step clock (`Device.step_clock`)
    sampler: SystemSampler
    profiler: StepProfiler | None  # with `spec.profile`, on a data-parallel trial's rank 0 only
    hooks: _OutputDtypeCounter | None  # counts the first step's layer outputs in autocast's dtype


@dataclass(frozen=True)
class _Loop:
    """What the step loop leaves for the reads after it."""

    losses: list[Any]  # the first steps' losses, detached, not yet read from the device
    memory_step_bytes: list[int]
    graphs_before_timing: int
    compile_counts: CompileCounts | None
    autocast_check: AutocastCheck | None
    loss: Any  # the last step's
    comm_marks: list[Any]  # per timed step, the all-reduce's marks (`CommTimer.take_step`)


@dataclass(frozen=True)
class _Steps:
    """What the warm-up and timed steps measured, and what they leave for the reads after them."""

    times: StepTimes  # the step clock's: phases, step times, warm-up, wall time (with turns, the other side's too)
    first_losses: list[float]
    memory_step_bytes: list[int]  # after each timed step: a steady rise means something is kept
    graphs_before_timing: int
    compile_counts: CompileCounts | None  # the compile config's graphs, breaks and recompiles after warm-up
    autocast_check: AutocastCheck | None  # the setup's check, with the first step's layer outputs counted
    loss: Any  # the last step's loss and (device) batch
    batch: Any
    sampler: SystemSampler
    profiler: StepProfiler | None
    # per timed step: all-reduce in flight, exposed, buckets, bytes
    comm_steps: list[tuple[float, float, int, int]] | None = None


@dataclass(frozen=True)
class CompileStats:
    """torch.compile's graph count and graph breaks in this process (dynamo's counters)."""

    graphs: int
    graph_breaks: int

    def to_record(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class _AfterSteps:
    """What is read once the timed steps are over, before the data slice is checksummed."""

    final_loss: float
    memory: PeakMemory  # `Device.peak_memory()`, with the DataLoader workers' memory the sampler read
    calls: tuple[int, int] | None  # torch calls and host syncs of one eager step
    compile_stats: CompileStats | None
    recompiled: int  # graphs torch.compile compiled during the timed steps
    counts: Counts | None  # the step's exact counts (`perfgate.measure.counting`)
    counting_failure: str | None  # why the counts are missing, where counting failed


def _run(spec: TrialSpec, out_path: str = "") -> TrialRecord | None:
    config, device, workload, rank = _load(spec, out_path)

    from perfgate.measure.probe import probe_steps_per_sec

    # The machine probe serves stored baselines; a paired check's pairs need none. Its two sides start together,
    # and two probes at once on shared cores, each with torch's own threads, took 17 s instead of 0.3 s here.
    probe_rates = [probe_steps_per_sec(device)] if spec.probe else []  # before setup: no DataLoader worker yet
    identity = workload_identity(workload, spec.nproc)
    # An interleaved pair takes turns from the setup on: two setups at once on shared cores, each with torch's
    # own threads, took 18 s instead of 3 s (the vision workload here); one side's setup, warm-up, steps and
    # checksum pass never run beside the other side's.
    turns = TurnTaker(spec.turns) if spec.turns and not spec.counts_only else None
    if turns is not None:
        turns.begin()
    # Counting on the CPU needs dynamo's graphs, not inductor's code: the eager backend finds the same breaks and
    # recompiles without compiling kernels (kernels and the allocated peak are counted on CUDA only).
    backend = "eager" if spec.counts_only and device.type == "cpu" else "inductor"
    setup, batches = _set_up(workload, config, device, rank, spec.rounds, backend)
    if spec.counts_only:
        return _counts_only(spec, setup, batches, identity)
    steps = _train(spec, setup, batches, turns)
    after = _after_steps(setup, steps, places=spec.trial == 0)
    del batches
    # Checksumming is its own pass over a fresh, identically seeded loader: nothing but the
    # training step runs between the timed pass's clock reads.
    data_checksum = _checksum_slice(workload, setup.dataset, device.type, rank)
    if turns is not None:
        turns.finish()  # wait until the other side is done too
    if spec.probe:
        probe_rates.append(probe_steps_per_sec(device))  # after every worker of both passes has exited
    record = _record(spec, setup, steps, after, identity, data_checksum, probe_rates)
    if rank is None:
        return record
    gathered = distributed.gather(record, distributed.rank_result(record, rank, steps.comm_steps), rank)
    if gathered is None:
        return None
    records = [TrialRecord.from_dict(r, source=f"rank {i}'s record") for i, (r, _) in enumerate(gathered)]
    ranks = [RankResult.from_dict(ranked) for _, ranked in gathered]
    wrapper = type(getattr(setup.step_model, "_orig_mod", setup.step_model)).__name__  # under torch.compile too
    return distributed.merge_ranks(records, ranks, rank.backend, wrapper, setup.unused)


def _load(spec: TrialSpec, out_path: str = "") -> tuple[Config, Device, Workload, Rank | None]:
    """Set the thread count, join a data-parallel job, pick the device and load the workload the spec names."""
    import torch

    from perfgate.measure.device import select_device
    from perfgate.references import Reference
    from perfgate.variants import CONFIGS

    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    config = CONFIGS[spec.config]
    rank = distributed.join(spec.nproc, spec.device, out_path) if spec.nproc > 1 else None
    device = select_device(spec.device)
    workload = Reference(spec.reference_text, spec.reference_target).load()
    declared = getattr(workload, "threads", None)  # what the user's training sets; --threads overrides it
    if spec.threads is None and declared is not None:
        torch.set_num_threads(declared)
    if config.compile and workload.warmup_steps < 1:
        raise TrialFailure("workload", "bf16-compile needs warmup_steps >= 1 so compilation stays out of step times")
    return config, device, workload, rank


def _set_up(
    workload: Workload,
    config: Config,
    device: Device,
    rank: Rank | None = None,
    rounds: int = 1,
    backend: str = "inductor",
) -> tuple[_Setup, Iterator[Any]]:
    """Seed, build the dataset, DataLoader, model and optimizer, compile and check autocast: the setup
    that `setup_s` times. Returns the setup and the iterator over the batches (its workers running)."""
    setup_started = time.perf_counter()
    _seed_everything(workload.seed)
    dataset = _call_user("dataset()", workload.dataset)
    loader = _make_loader(workload, dataset, device.type, rank, rounds)
    _seed_everything(workload.seed)
    model = _built_model(workload, device)
    parallel = _Parallel(model) if rank is None else _data_parallel(workload, config, dataset, model, device, rank)
    optimizer = _built_optimizer(workload, parallel.trained)
    autocast = _autocast_factory(device.type, config.autocast_dtype)
    autocast_check = _check_autocast(device, autocast, config.autocast_dtype) if config.autocast_dtype else None
    training = _training_step(workload, config, device.type, parallel, optimizer, autocast, backend)
    batches = iter(loader)
    device.mark_setup_done()
    setup_s = time.perf_counter() - setup_started
    setup = _Setup(
        config,
        device,
        workload,
        dataset,
        loader,
        model,
        training.model,
        optimizer,
        training.autocast,
        autocast_check,
        setup_s,
        rank,
        parallel.comm,
        parallel.warnings,
        parallel.unused,
        training,
    )
    return setup, batches


def _built_model(workload: Workload, device: Device) -> Any:
    """The workload's model, on the device, in training mode."""
    import torch

    model = _call_user("model()", workload.model)
    if not isinstance(model, torch.nn.Module):
        raise TrialFailure("workload", f"model() returned {type(model).__name__}, not a torch.nn.Module")
    return model.to(device.torch_device).train()


@dataclass(frozen=True)
class _Parallel:
    """The model the optimizer trains: the model itself, or a data-parallel trial's wrapper of it, with its
    all-reduce timer, what was noticed while wrapping, and the parameters the loss leaves unused."""

    trained: Any
    comm: distributed.CommTimer | None = None
    warnings: tuple[str, ...] = ()
    unused: UnusedParameters | None = None


def _data_parallel(
    workload: Workload, config: Config, dataset: Any, model: Any, device: Device, rank: Rank
) -> _Parallel:
    """A data-parallel trial's model wrapped (`distributed.wrap_model`, or the workload's `wrap`), the unused
    parameters found first, and its gradient all-reduce timed where it can be."""
    names, autograd_nodes = _find_unused_parameters(workload, config, dataset, model, device, rank)
    names = distributed.agree_on_unused(names, model)
    wrap = distributed.wrap_model
    trained = _call_user("wrap(model)", wrap, model, workload, device, find_unused=bool(names))
    unused = distributed.unused_record(names, autograd_nodes, trained)
    comm = distributed.CommTimer(device)
    not_timed = comm.attach(trained)
    if not_timed is not None:
        return _Parallel(trained, None, (not_timed,), unused)
    return _Parallel(trained, comm, (), unused)


def _built_optimizer(workload: Workload, trained: Any) -> Any:
    """The workload's optimizer over the trained model's parameters (AdamW at 1e-4 where it names none)."""
    import torch

    if workload.optimizer is None:
        return torch.optim.AdamW(trained.parameters(), lr=1e-4)
    return _call_user("optimizer(params)", workload.optimizer, trained.parameters())


def _training_step(
    workload: Workload,
    config: Config,
    device_type: str,
    parallel: _Parallel,
    optimizer: Any,
    autocast: Callable[[], Any],
    backend: str,
) -> TrainingStep:
    """The step the trial runs: the model (or the workload's own step) compiled as the config and the workload's
    compile options say, under the config's `autocast`, with its scheduler and, for fp16, a GradScaler."""
    import torch

    options = {k: v for k, v in workload.compile_options.items() if k != "target"}
    if backend == "eager" or "backend" not in options:  # counting on the CPU compiles nothing (see `_run`)
        options["backend"] = backend
    compile_step = config.compile and workload.compile_options.get("target", "model") == "step"
    trained = parallel.trained
    # torch.compile returns a callable wrapper, typed as a function but used as the module.
    step_model: Any = torch.compile(trained, **options) if config.compile and not compile_step else trained
    scheduler = None
    if workload.scheduler is not None:
        scheduler = _call_user("scheduler(optimizer)", workload.scheduler, optimizer)
    scaler = torch.amp.GradScaler(device_type) if config.scaled else None
    own_step = workload.step
    if own_step is not None and compile_step:
        own_step = torch.compile(own_step, **options)
    state = StepState(scaler, scheduler, workload.max_grad_norm, workload.accumulation, autocast)
    return TrainingStep(
        workload,
        step_model,
        trained,
        optimizer,
        autocast,
        scaler=scaler,
        scheduler=scheduler,
        own_step=own_step,
        hooked=not compile_step,
        comm=parallel.comm,
        state=state,
    )


def _find_unused_parameters(
    workload: Workload, config: Config, dataset: Any, model: Any, device: Device, rank: Rank
) -> tuple[list[str], int]:
    """The parameters of the unwrapped model that one forward and backward on this rank's first batch leaves
    without a gradient, and the step's autograd nodes (`distributed.unused_parameters`). Untimed, before the
    model is wrapped: the batch comes from a worker-less loader of its own over the same slice (the trial's
    loader, its workers and its generator untouched), and the RNG states are put back as they were."""
    import torch

    autocast = _autocast_factory(device.type, config.autocast_dtype)

    def step_loss() -> Any:
        with autocast():
            loss = workload.loss(model, batch)
        check_loss(loss, 0, "loss(model, batch)")
        return loss

    with _rng_kept(device):
        try:
            batch = device.move(_first_batch(workload, dataset, rank), non_blocking=False)
            return distributed.unused_parameters(model, step_loss)
        except TrialFailure:
            raise
        except Exception as exc:
            where = "in the check for parameters the loss does not use, before the steps"
            if isinstance(exc, torch.OutOfMemoryError):
                raise TrialFailure("config", f"out of device memory {where}: {_first_line(exc)}") from exc
            message = f"{type(exc).__name__} {where}: {_first_line(exc)}"
            raise TrialFailure("workload", message) from exc


def _first_batch(workload: Workload, dataset: Any, rank: Rank | None = None) -> Any:
    """The pinned slice's first batch (this rank's), from a worker-less loader of its own: the trial's loader, its
    workers and its generator untouched."""
    import torch

    indices: Any = _slice_indices(workload, len(dataset), 1 if rank is None else rank.world)
    if rank is not None:
        indices = distributed.rank_sampler(indices, rank)
    collate = {k: v for k, v in workload.loader.items() if k == "collate_fn"}
    first = torch.utils.data.DataLoader(dataset, batch_size=workload.batch_size, sampler=indices, **collate)
    return next(iter(first))


def _train(spec: TrialSpec, setup: _Setup, batches: Iterator[Any], turns: TurnTaker | None = None) -> _Steps:
    """The warm-up steps, then the timed steps, in one loop: each step's five phases marked on the device's
    step clock (`Device.step_clock`), the system sampled and (with `spec.profile`) profiled over the timed steps
    only; in an interleaved pair, the turn handed over between steps (`turns`).

    In order: the clock, sampler and profiler made (`_step_tools`), the steps run (`_step_loop`), the first losses
    read from the device once the last step is over, and what the steps measured assembled (`_steps_measured`)."""
    training = setup.training
    assert training is not None
    tools = _step_tools(spec, setup, batches)
    try:
        loop = _step_loop(spec, setup, batches, tools, turns)
        first_losses = [_finite_loss(value, step) for step, value in enumerate(loop.losses)]
    except TrialFailure:
        raise
    except Exception as exc:
        raise _step_failure(setup, exc, training.current) from exc
    finally:
        tools.sampler.stop()  # whatever ended the steps; stopping twice is harmless
    return _steps_measured(setup, tools, loop, first_losses)


def _step_tools(spec: TrialSpec, setup: _Setup, batches: Iterator[Any]) -> _StepTools:
    """Make what the steps are measured with: the step clock, the system sampler, the profiler, the autocast counter."""
    import torch

    config, device, workload = setup.config, setup.device, setup.workload
    autocast_check = setup.autocast_check
    clock = device.step_clock(spec.planted_slowdown, workload.warmup_steps)
    hooks = _OutputDtypeCounter(setup.model, autocast_check) if autocast_check and not config.compile else None
    cuda_index = torch.cuda.current_device() if device.type == "cuda" else None
    sampler = SystemSampler(cuda_index, loader_worker_pids=loader_worker_pids(batches))  # the workers' memory too
    # A data-parallel trial's rank 0 profiles; the others would write the same trace.
    profiled = setup.rank is None or setup.rank.rank == 0
    profiler = StepProfiler(Path(spec.profile), device.type, workload.steps) if spec.profile and profiled else None
    return _StepTools(clock, sampler, profiler, hooks)


def _step_loop(
    spec: TrialSpec, setup: _Setup, batches: Iterator[Any], tools: _StepTools, turns: TurnTaker | None
) -> _Loop:
    """Run the warm-up and timed steps in one loop, then stop the clock, the sampler and the profiler."""
    config, device, workload = setup.config, setup.device, setup.workload
    training = setup.training
    assert training is not None
    clock, sampler, profiler, hooks = tools.clock, tools.sampler, tools.profiler, tools.hooks
    autocast_check = setup.autocast_check
    non_blocking = device.type == "cuda" and bool(workload.loader.get("pin_memory", False))
    losses: list[Any] = []  # the first steps' losses, detached: read once the steps are over
    memory_step_bytes: list[int] = []
    total_steps = workload.warmup_steps + workload.steps * spec.rounds
    graphs_before_timing = 0
    compile_counts = None
    loss = None
    comm = setup.comm
    comm_marks: list[Any] = []  # per timed step, the all-reduce's marks (`CommTimer.take_step`)

    def fetch() -> Any:
        """The next (micro-)batch on the device, its wait and its copy marked."""
        training.current = "the DataLoader"
        batch = next(batches)
        clock.mark("data_wait")
        training.current = "moving the batch to the device"
        batch = device.move(batch, non_blocking=non_blocking)
        clock.mark("h2d")
        return batch

    # One loop body for both, with every per-step value in a local: the clock's marks see the same work
    # in warm-up and timed steps, and the previous step's batch and loss are let go where they were. Nothing in
    # the timed steps waits for the device: on CUDA the clock synchronises only at their two edges, and what is
    # read from the device (the first losses, the all-reduce's marks) is read after the last one.
    for step in range(total_steps):
        timed = step >= workload.warmup_steps
        if step == workload.warmup_steps:
            gc.collect()
            device.reset_peak_memory()
            graphs_before_timing = _compiled_graph_count() if config.compile else 0
            compile_counts = CompileCounts.now() if config.compile else None
            sampler.start()
            if profiler is not None:
                profiler.start()
            clock.start_timing()  # CUDA: the one synchronisation before the timed steps
        clock.begin_step()
        loss = training.run(fetch, clock, step)  # its phases marked (`perfgate.measure.step`)
        if comm is not None and timed:
            comm_marks.append(comm.take_step())
        if spec.planted_slowdown:  # a known slowdown, for calibration: the step takes (1 + f) times as long
            clock.slow_down()
            clock.mark("optimizer")
        if hooks is not None:
            autocast_check = hooks.finish()
            hooks = None
        if step < FIRST_LOSSES:
            losses.append(loss.detach())
        if timed:
            memory_step_bytes.append(device.memory_now())
            if profiler is not None:
                profiler.step()
        clock.end_step()  # the bookkeeping above is timed apart from the step
        if turns is not None:
            turns.step_done()
    clock.stop_timing()  # CUDA: the one synchronisation after the timed steps
    sampler.stop()
    if profiler is not None:
        profiler.stop()
    return _Loop(losses, memory_step_bytes, graphs_before_timing, compile_counts, autocast_check, loss, comm_marks)


def _steps_measured(setup: _Setup, tools: _StepTools, loop: _Loop, first_losses: list[float]) -> _Steps:
    """Assemble what the steps measured: the clock's times, each timed step's all-reduce figures, what the loop kept."""
    training = setup.training
    assert training is not None
    times = tools.clock.times()
    comm = setup.comm
    comm_steps = None
    if comm is not None:
        backward_s = times.phases["backward"]
        comm_steps = [comm.step_figures(marks, s) for marks, s in zip(loop.comm_marks, backward_s, strict=True)]
    return _Steps(
        times=times,
        first_losses=first_losses,
        memory_step_bytes=loop.memory_step_bytes,
        graphs_before_timing=loop.graphs_before_timing,
        compile_counts=loop.compile_counts,
        autocast_check=loop.autocast_check,
        loss=loop.loss,
        batch=training.last_batch,
        sampler=tools.sampler,
        profiler=tools.profiler,
        comm_steps=comm_steps,
    )


def _step_failure(setup: _Setup, exc: Exception, current: str) -> TrialFailure:
    """What a training step's exception means for the trial: the config cannot run here (out of device memory,
    torch.compile failed) or the workload is at fault (`current` names the part of the step that raised)."""
    import torch

    if isinstance(exc, StopIteration):
        return TrialFailure("workload", "the DataLoader ran out of batches before the slice ended")
    if isinstance(exc, torch.OutOfMemoryError):  # this config does not fit; the others may
        return TrialFailure("config", f"out of device memory in {current}: {_first_line(exc)}")
    if setup.rank is not None and (unused := _unused_parameters_failure(setup, exc)) is not None:
        return TrialFailure("workload", unused)  # before compile's: dynamo may wrap DDP's error
    if setup.config.compile and _is_compile_error(exc):
        return TrialFailure("config", f"torch.compile failed: {_first_line(exc)}")
    return TrialFailure("workload", f"{current} raised {type(exc).__name__}: {_first_line(exc)}")


def _warm_up(setup: _Setup, batches: Iterator[Any]) -> CompileCounts | None:
    """`--counts-only`: the warm-up steps alone (one at least: the count is never of a first step), untimed, as the
    trial's loop runs them; then torch.compile's graphs, breaks and recompiles, as a timed trial reads them."""
    workload, device, training = setup.workload, setup.device, setup.training
    assert training is not None

    def fetch() -> Any:
        training.current = "the DataLoader"
        batch = next(batches)
        training.current = "moving the batch to the device"
        return device.move(batch, non_blocking=False)

    try:
        for step in range(max(workload.warmup_steps, 1)):
            loss = training.run(fetch, NoClock(), step)
        _finite_loss(loss, step)
    except TrialFailure:
        raise
    except Exception as exc:
        raise _step_failure(setup, exc, training.current) from exc
    return CompileCounts.now() if setup.config.compile else None


def _counts_only(spec: TrialSpec, setup: _Setup, batches: Iterator[Any], identity: dict[str, Any]) -> TrialRecord:
    """A counting trial's record: the exact counts after the warm-up steps, the slice's checksum; nothing timed."""
    import torch

    counts, failure = _count(setup, _warm_up(setup, batches))
    if counts is None:
        raise TrialFailure("workload", failure or "the exact counts could not be made")
    workload = setup.workload
    result = TrialResult(
        config=spec.config,
        trial=spec.trial,
        status="ok",
        setup_s=setup.setup_s,
        data_checksum=_checksum_slice(workload, setup.dataset, setup.device.type, setup.rank),
        counts=counts,
        autocast=setup.autocast_check,
        threads=torch.get_num_threads(),
        warnings=list(setup.warnings),
        workload={**identity, **_slice_identity(workload, len(setup.dataset), spec.nproc)},
    )
    return TrialRecord(result)


def _unused_parameters_failure(setup: _Setup, exc: BaseException) -> str | None:
    """DDP's error on parameters that got no gradient, as one line naming them (`distributed.unreduced_failure`)."""
    names = [] if setup.unused is None else setup.unused.names
    own_wrap = setup.workload.wrap is not None
    return distributed.unreduced_failure(exc, setup.model, names, own_wrap)


def _after_steps(setup: _Setup, steps: _Steps, *, places: bool) -> _AfterSteps:
    """The final loss and peak memory, then the framework overhead, counted after the timed steps: torch
    calls in one more step on the last batch (eager configs; a counting mode would make torch.compile
    recompile), graphs and breaks (`places`: and where the breaks are, `_count`)."""
    config, workload = setup.config, setup.workload
    final_loss = _finite_loss(steps.loss, workload.warmup_steps + workload.steps - 1)
    samples = steps.sampler.samples
    memory = setup.device.peak_memory(samples.loader_workers_bytes, samples.loader_workers)
    calls = None if config.compile else _count_torch_calls(setup.training, steps.batch, setup.rank)
    compile_stats = _compile_stats() if config.compile else None
    recompiled = _compiled_graph_count() - steps.graphs_before_timing if config.compile else 0
    counts, counting_failure = _count(setup, steps.compile_counts, places=places)  # last: it may reset dynamo
    return _AfterSteps(final_loss, memory, calls, compile_stats, recompiled, counts, counting_failure)


def _count(
    setup: _Setup, compile_counts: CompileCounts | None, *, places: bool = True
) -> tuple[Counts | None, str | None]:
    """The step's exact counts (`perfgate.measure.counting.count_step`) on the pinned slice's first batch, seeded
    and with the random states put back; for the compile config with graph breaks and `places`, where they happen
    (this resets dynamo, so it comes after everything read from it). A count that cannot be made is a warning, not
    a failure.

    Finding the places traces the model's forward again (`CompileCounts.with_places`): on a 2-layer GPT-2 under
    bf16-compile, about 4 s of a 14 s trial. The places are the code's, the same in every trial of one side, and
    the judge reads them from a side's first ok trial (`judge.counts.side_counts`), so a timed trial finds them in
    its side's first trial only (`TrialSpec.trial` 0); the others record the count without them (where that first
    trial failed, the side's breaks are counted and judged, not placed)."""
    workload, device, config, training = setup.workload, setup.device, setup.config, setup.training
    assert training is not None
    eager_model = getattr(setup.step_model, "_orig_mod", setup.step_model)  # under torch.compile: what it wraps

    def step_on(model: Any, own_step: Any) -> Any:
        """One step as the trial runs it, every micro-batch of it `batch`."""
        counted = replace(training, model=model, own_step=own_step, hooked=own_step is workload.step, comm=None)

        def step(batch: Any) -> None:
            counted.run(lambda: batch, NoClock(), 0)

        return step

    no_sync = getattr(eager_model, "no_sync", None) if setup.rank is not None else None
    try:
        batch = device.move(_first_batch(workload, setup.dataset, setup.rank), non_blocking=False)
        with _rng_kept(device), no_sync() if no_sync is not None else contextlib.nullcontext():
            _seed_everything(workload.seed)
            eager_step = step_on(eager_model, workload.step) if config.compile else None
            counts = count_step(
                step_on(setup.step_model, training.own_step),
                eager_step,
                setup.model,
                setup.optimizer,
                batch,
                workload.step_samples,
                device.type,
                compile_counts,
            )
            if places and compile_counts is not None and compile_counts.graph_breaks:
                forward = _captured_forward(setup, batch)
                if forward is not None:
                    counts = replace(counts, break_places=compile_counts.with_places(forward).break_places)
    except Exception as exc:  # noqa: BLE001  (the user's code in an extra step: any failure leaves the counts out)
        return None, f"the exact counts could not be made: {type(exc).__name__}: {_first_line(exc)}"
    return counts, None


def _captured_forward(setup: _Setup, batch: Any) -> Any:
    """The model's forward as the loss calls it, on this batch: its arguments caught by a hook in one eager forward
    (no gradients), returned as a call under the config's autocast; None where the loss never calls the model."""
    import torch

    caught: list[tuple[Any, Any]] = []

    def hook(module: Any, args: Any, kwargs: Any) -> None:
        if not caught:
            caught.append((args, kwargs))

    handle = setup.model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad(), setup.autocast():
            setup.workload.loss(setup.model, batch)
    finally:
        handle.remove()
    if not caught:
        return None
    args, kwargs = caught[0]

    def forward() -> Any:
        with setup.autocast():
            return setup.model(*args, **kwargs)

    return forward


def _record(
    spec: TrialSpec,
    setup: _Setup,
    steps: _Steps,
    after: _AfterSteps,
    identity: dict[str, Any],
    data_checksum: str,
    probe_rates: list[float],
) -> TrialRecord:
    """The trial's record from what it measured: step times summed from their phases, samples/sec (over the
    step clock's `samples_s`: the step times' sum on the host clock, the wall time between the two
    synchronisations with CUDA events), the compile time (the first warm-up step above a median step) and
    warnings."""
    import torch

    config, workload, times = setup.config, setup.workload, steps.times
    step_s = times.step_s
    timed_samples = len(step_s) * workload.step_samples  # steps x rounds, every micro-batch's samples
    compile_s = None
    if config.compile and times.warmup_step_s:
        compile_s = max(0.0, times.warmup_step_s[0] - sorted(step_s)[len(step_s) // 2])
    warnings = list(setup.warnings)
    training = setup.training
    if training is not None and training.own_step is not None and not training.backward_seen:
        warnings.append(NOT_TOLD_APART)
    if after.recompiled > 0:
        warnings.append(f"torch.compile compiled {after.recompiled} new graph(s) during timed steps")
    if after.counting_failure is not None:
        warnings.append(after.counting_failure)
    result = TrialResult(
        config=spec.config,
        trial=spec.trial,
        status="ok",
        samples_per_sec=timed_samples / times.samples_s,
        step_s=step_s,
        phases_s=times.phases,
        warmup_step_s=times.warmup_step_s,
        timed_elapsed_s=times.timed_elapsed_s,
        bookkeeping_s=times.bookkeeping_s,
        setup_s=setup.setup_s,
        compile_s=compile_s,
        first_losses=steps.first_losses,
        final_loss=after.final_loss,
        data_checksum=data_checksum,
        memory=after.memory,
        memory_step_bytes=steps.memory_step_bytes,
        system=steps.sampler.samples.summary(),
        torch_calls_per_step=None if after.calls is None else after.calls[0],
        host_syncs_per_step=None if after.calls is None else after.calls[1],
        compile_stats=None if after.compile_stats is None else after.compile_stats.to_record(),
        counts=after.counts,
        autocast=steps.autocast_check,
        probe_steps_per_sec=probe_rates,
        threads=torch.get_num_threads(),
        rounds=spec.rounds,
        warnings=warnings,
        workload={**identity, **_slice_identity(workload, len(setup.dataset), spec.nproc)},
        clocking=times.clocking,
        data_wait_host_s=times.data_wait_host_s,
    )
    profile = None
    if steps.profiler is not None:
        profile = Profile(trace=spec.profile, top_operators=steps.profiler.top_operators)
    return TrialRecord(result, profile=profile)


def workload_identity(workload: Any, nproc: int = 1) -> dict[str, Any]:
    """The settings that decide whether two runs of a workload can be compared, and its loader options
    (`nproc`, the ranks of a data-parallel trial, only where there are several)."""
    identity = {
        "name": workload.name,
        "batch_size": workload.batch_size,
        "steps": workload.steps,
        "warmup_steps": workload.warmup_steps,
        "seed": workload.seed,
        "loader": {k: v for k, v in workload.loader.items() if isinstance(v, bool | int | float | str)},
    }
    accumulation = getattr(workload, "accumulation", 1)
    if accumulation != 1:
        identity["accumulation"] = accumulation
    return identity if nproc == 1 else {**identity, "nproc": nproc}


def _slice_indices(workload: Any, length: int, nproc: int = 1) -> list[int]:
    """The pinned data slice: which samples, in which order, fixed by the seed and the dataset's length (every
    rank's samples for a data-parallel trial: `nproc` times one process's)."""
    import torch

    generator = torch.Generator().manual_seed(workload.seed)
    indices: list[int] = torch.randperm(length, generator=generator)[: workload.slice_samples * nproc].tolist()
    return indices


def _slice_digest(workload: Any, length: int, nproc: int = 1) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(_slice_indices(workload, length, nproc)).encode()).hexdigest()


def _slice_identity(workload: Any, length: int, nproc: int = 1) -> dict[str, Any]:
    """Which samples the pinned slice holds, and the length of the dataset it was drawn from: the slice changes
    with the length, and a pull request that adds samples changes the data, not the amount of work."""
    return {"slice_indices": _slice_digest(workload, length, nproc), "dataset_length": length}


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed)


@contextlib.contextmanager
def _rng_kept(device: Device) -> Iterator[None]:
    """Put Python's, NumPy's, torch's and (on CUDA) the device's random states back as they were on leaving."""
    import torch

    python_state = random.getstate()
    numpy_state = None
    with contextlib.suppress(ImportError):
        import numpy

        numpy_state = numpy.random.get_state()
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else [], device_type="cuda"):
        try:
            yield
        finally:
            random.setstate(python_state)
            if numpy_state is not None:
                import numpy

                numpy.random.set_state(numpy_state)


def _call_user(what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except Exception as exc:
        raise TrialFailure("workload", f"{what} raised {type(exc).__name__}: {_first_line(exc)}") from exc


def _make_loader(workload: Any, dataset: Any, device_type: str, rank: Rank | None = None, rounds: int = 1) -> Any:
    """The DataLoader over the pinned slice: its warm-up batches once, then its timed batches `rounds` times."""
    import torch

    try:
        length = len(dataset)
    except TypeError as exc:
        raise TrialFailure(
            "workload",
            f"dataset() returned {type(dataset).__name__}, which has no len(); "
            "return a map-style torch Dataset (with __len__ and __getitem__)",
        ) from exc
    if not hasattr(dataset, "__getitem__"):
        raise TrialFailure("workload", f"dataset() returned {type(dataset).__name__}, which has no __getitem__")
    world = 1 if rank is None else rank.world
    needed = workload.slice_samples * world
    if length < needed:
        ranks = "" if world == 1 else f" x {world} ranks"
        accumulation = "" if workload.accumulation == 1 else f" x accumulation {workload.accumulation}"
        raise TrialFailure(
            "workload",
            f"dataset has {length} samples but the slice needs {needed} "
            f"((warmup_steps {workload.warmup_steps} + steps {workload.steps}) x batch_size {workload.batch_size}"
            f"{accumulation}{ranks}); make the dataset larger or lower steps/batch_size",
        )
    indices: Any = _slice_indices(workload, length, world)
    if rank is not None:
        indices = distributed.rank_sampler(indices, rank)
    elif rounds > 1:  # one iterator for every round: no worker starts again inside the timed steps
        warmup = workload.warmup_steps * workload.step_samples
        indices = indices[:warmup] + indices[warmup:] * rounds
    options = dict(workload.loader)
    if device_type != "cuda":
        options.pop("pin_memory", None)  # pinning needs an accelerator; torch warns without one
    try:
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=workload.batch_size,
            sampler=indices,
            drop_last=True,
            generator=torch.Generator().manual_seed(workload.seed),
            **options,
        )
    except (TypeError, ValueError) as exc:
        raise TrialFailure("workload", f"invalid loader options: {_first_line(exc)}") from exc


def _autocast_factory(device_type: str, dtype_name: str | None) -> Any:
    import torch

    if dtype_name is None:
        return contextlib.nullcontext
    dtype = getattr(torch, dtype_name)
    return lambda: torch.autocast(device_type, dtype=dtype)


def _check_autocast(device: Any, autocast: Any, dtype_name: str) -> AutocastCheck:
    """A matmul inside the autocast context must come out in the config's dtype, or autocast is not on."""
    import torch

    with autocast():
        probe = torch.nn.functional.linear(
            torch.ones(4, 4, device=device.torch_device), torch.ones(4, 4, device=device.torch_device)
        )
    if probe.dtype != getattr(torch, dtype_name):
        raise TrialFailure(
            "config", f"autocast to {dtype_name} is not active on {device.type} (matmul gave {probe.dtype})"
        )
    return AutocastCheck(active=True, probe_dtype=str(probe.dtype).removeprefix("torch."))


class _OutputDtypeCounter:
    """Counts, for one step, how many leaf modules produced outputs in autocast's dtype (bfloat16; float16 in fp16),
    kept as the record's `bf16_layer_outputs`."""

    def __init__(self, model: Any, check: AutocastCheck) -> None:
        import torch

        self.check = check
        self.dtype = getattr(torch, check.probe_dtype)
        self.bf16 = 0
        self.total = 0
        self.handles = [
            module.register_forward_hook(self._hook)
            for module in model.modules()
            if not list(module.children()) and isinstance(module, torch.nn.Linear | torch.nn.modules.conv._ConvNd)
        ]

    def _hook(self, module: Any, inputs: Any, output: Any) -> None:
        import torch

        if isinstance(output, torch.Tensor):
            self.total += 1
            self.bf16 += int(output.dtype == self.dtype)

    def finish(self) -> AutocastCheck:
        """The setup's autocast check with the step's layer outputs counted."""
        for handle in self.handles:
            handle.remove()
        if self.total and not self.bf16:
            raise TrialFailure(
                "config", f"autocast was on but no Linear or Conv layer produced {self.check.probe_dtype} output"
            )
        return replace(self.check, bf16_layer_outputs=self.bf16, checked_layer_outputs=self.total)


def _finite_loss(loss: Any, step: int) -> float:
    value = float(loss.detach().float().item())
    if not math.isfinite(value):
        # A config failure, not a workload error: bf16 may overflow where fp32 does not.
        raise TrialFailure("config", f"loss is {value} at step {step}; the workload must train with a finite loss")
    return value


def _checksum_slice(workload: Any, dataset: Any, device_type: str, rank: Rank | None = None) -> str:
    """SHA-256 over every batch of the pinned slice (this rank's share), exactly as the training loop received them."""
    hasher = hashlib.sha256()
    try:
        for batch in _make_loader(workload, dataset, device_type, rank):
            _hash_batch(hasher, batch)
    except Exception as exc:
        raise TrialFailure("workload", f"the DataLoader raised {type(exc).__name__}: {_first_line(exc)}") from exc
    return "sha256:" + hasher.hexdigest()


def _hash_batch(hasher: Any, batch: Any) -> None:
    import torch

    if isinstance(batch, torch.Tensor):
        hasher.update(f"{batch.dtype}{tuple(batch.shape)}".encode())
        if batch.numel():
            hasher.update(tensor_bytes(batch))
    elif isinstance(batch, dict):
        for key in sorted(batch, key=str):
            hasher.update(str(key).encode())
            _hash_batch(hasher, batch[key])
    elif isinstance(batch, list | tuple):
        for item in batch:
            _hash_batch(hasher, item)
    else:
        hasher.update(repr(batch).encode())


# Tensor methods that copy a value to the host: on an accelerator each waits for all queued work.
HOST_SYNCS = frozenset({"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__"})


def _count_torch_calls(training: TrainingStep | None, batch: Any, rank: Rank | None = None) -> tuple[int, int] | None:
    """How many torch functions and tensor methods one training step calls from Python, and how many
    host syncs (`.item()`, `.cpu()`, `float(t)`, ...) the step makes outside the optimizer. The optimizer's are
    left out: optimizers read their step counts, kept on the host, once per parameter. A data-parallel
    step counts without its gradient all-reduce (`no_sync`): a rank must not start a collective that
    another rank, whose count failed, would never join. Every micro-batch of the step is `batch`."""
    import torch.optim.optimizer as optim
    from torch.overrides import TorchFunctionMode

    if training is None or batch is None:
        return None

    class Counter(TorchFunctionMode):
        calls = 0
        syncs = 0
        in_optimizer = False

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            Counter.calls += 1
            Counter.syncs += not Counter.in_optimizer and getattr(func, "__name__", "") in HOST_SYNCS
            return func(*args, **(kwargs or {}))

    def optimizer_starts(*_: Any) -> None:
        Counter.in_optimizer = True

    def optimizer_ends(*_: Any) -> None:
        Counter.in_optimizer = False

    no_sync = getattr(training.model, "no_sync", None) if rank is not None else None
    handles = [
        optim.register_optimizer_step_pre_hook(optimizer_starts),
        optim.register_optimizer_step_post_hook(optimizer_ends),
    ]
    try:
        with Counter(), no_sync() if no_sync is not None else contextlib.nullcontext():
            replace(training, comm=None).run(lambda: batch, NoClock(), 0)  # the all-reduce's timer left alone
    except Exception:  # counting is a diagnosis aid: a workload that cannot run it simply has no count
        return None
    finally:
        for handle in handles:
            handle.remove()
    return Counter.calls, Counter.syncs


def _compile_stats() -> CompileStats | None:
    """torch.compile's graph count and graph breaks in this process (dynamo's counters; internal API)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    return CompileStats(
        graphs=int(counters["stats"].get("unique_graphs", 0)),
        graph_breaks=int(sum(counters["graph_break"].values())),
    )


def _compiled_graph_count() -> int:
    stats = _compile_stats()
    return 0 if stats is None else stats.graphs


def _is_compile_error(exc: BaseException) -> bool:
    for error in _exception_chain(exc):
        module = type(error).__module__
        if module.startswith(("torch._dynamo", "torch._inductor")):
            return True
    return False


def _exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the trial subprocess: `python -m perfgate.measure.trial SPEC.json OUT.json`."""
    spec_path, out_path = argv if argv is not None else sys.argv[1:3]
    spec = TrialSpec(**json.loads(Path(spec_path).read_text(encoding="utf-8")))
    record = run_trial(spec, out_path)
    rank = distributed.environment_rank() if spec.nproc > 1 else None
    if rank is not None and record is not None and not record.result.ok:
        # This rank's error, for the runner; a non-zero exit makes torchrun stop the other ranks.
        _write_atomic(distributed.rank_failure_path(out_path, rank.rank), record)
        return 1
    if record is not None:
        _write_atomic(Path(out_path), record)
    if rank is not None:
        distributed.finish(0)  # the other ranks wait for this record, then every rank leaves
    return 0


def _write_atomic(path: Path, record: TrialRecord) -> None:
    write_atomic(path, json.dumps(record.to_dict()))


if __name__ == "__main__":
    sys.exit(main())  # under the watch (`perfgate.measure.watch`), the exit skips the interpreter's teardown
