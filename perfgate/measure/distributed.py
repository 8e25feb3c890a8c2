"""Data-parallel trials (`--nproc N`): one process per rank under PyTorch's own launcher, the model in
`DistributedDataParallel`, and the gradient all-reduce timed by a DDP communication hook.

The runner starts `python -m torch.distributed.run --standalone --nproc-per-node N -m perfgate.measure.trial
SPEC OUT` (torchrun, with its environment rendezvous on this machine), torchrun and each rank under
`perfgate.measure.watch`, so that they end when perfgate dies. Each rank runs the trial as one process
would (`perfgate.measure.trial`), with three differences this module supplies:

- `join` initialises the process group (gloo on the CPU, NCCL on CUDA with one device per rank) and writes the
  rank's pid next to OUT, so the runner can stop every rank of a trial that hangs;
- the rank reads its share of the pinned slice through a `DistributedSampler` over that slice (`rank_sampler`),
  so each rank's data checksum is its own and reproducible;
- `wrap_model` wraps the model in DDP (or calls the workload's own `wrap`), and `CommTimer` times each
  bucket's all-reduce: the time with an all-reduce in flight per step, and the part of it backward waited
  for after its last bucket was launched (the rest overlapped with backward's compute).

Before wrapping, each rank runs one untimed forward and backward of the unwrapped model on its first batch
(`unused_parameters`, the model's gradients, buffers and the trial's RNG left as they were) and the ranks
agree on the parameters that got no gradient on any of them (`agree_on_unused`). Without a `wrap`, perfgate
then wraps the model in DDP with `find_unused_parameters=True` when there are any: a user whose model holds a
layer its loss does not use must pass that flag to train it at all, so that is the program they run and the
one to time, and its cost (DDP walks the step's autograd graph from the outputs every step) belongs in the
figures; the record says so (`UnusedParameters`). A workload's own `wrap` is what it runs and is not
second-guessed: where its DDP stops on those parameters, `unreduced_failure` turns DDP's error into one line
naming them and saying to pass the flag in `wrap`. One batch cannot see parameters a loss uses on some
batches only; DDP's error then names them by index, and `unreduced_failure` by name.

After the steps every rank sends its record to rank 0 (`gather`), which writes one record for the job
(`merge_ranks`): samples/s over the slowest rank's time, the step and phase times of the rank that sets the
pace, and the largest rank's peak memory, with each rank's figures under `distributed`. A rank that fails
writes its own failed record (`rank_failure_path`) and exits non-zero, so torchrun stops the others and
the runner reports the failing rank's error.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from perfgate.formatting import format_names
from perfgate.measure.watch import watched
from perfgate.records.results import TrialRecord, TrialResult
from perfgate.records.shapes import Distributed, RankResult, UnusedParameters

if TYPE_CHECKING:
    from perfgate.measure.device import Device

LAUNCHER = "torch.distributed.run"  # torchrun
COLLECTIVE_TIMEOUT_S = 1800  # a rank stuck in a collective; the runner's --timeout normally ends it first


def launcher_arguments(nproc: int) -> list[str]:
    """torchrun's arguments before the trial module: one node, `nproc` ranks, a rendezvous on a free local port,
    no restarts (a failed rank ends the trial). torchrun runs under the watch (`perfgate.measure.watch`), as the
    ranks it starts do: it closes the fds it inherited, so they die with it by the kernel's parent-death signal."""
    flags = ["--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0", "--monitor-interval=0.2"]
    return [*watched(LAUNCHER), *flags]


def rank_pid_path(out_path: Path | str, rank: int) -> Path:
    return Path(f"{out_path}.rank{rank}.pid")


def rank_failure_path(out_path: Path | str, rank: int) -> Path:
    return Path(f"{out_path}.rank{rank}.json")


@dataclass(frozen=True)
class Rank:
    """This process's place in a data-parallel trial, from torchrun's environment."""

    rank: int
    world: int
    local_rank: int
    backend: str


def environment_rank() -> Rank | None:
    """The rank torchrun gave this process, or None outside torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2:
        return None
    return Rank(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", os.environ["RANK"])), "")


def join(nproc: int, device_type: str, out_path: Path | str) -> Rank:
    """Join the job torchrun started: check its size, pick this rank's device, initialise the process group."""
    import torch
    import torch.distributed as dist

    rank = environment_rank()
    if rank is None or rank.world != nproc:
        found = 1 if rank is None else rank.world
        raise RuntimeError(f"the trial asked for {nproc} ranks but runs in a job of {found}; start it through torchrun")
    rank_pid_path(out_path, rank.rank).write_text(str(os.getpid()), encoding="ascii")
    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(rank.local_rank)
    dist.init_process_group(backend, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    return replace(rank, backend=backend)


def finish(code: int) -> NoReturn:
    """End a rank once rank 0 has written the job's record: wait for every rank there, then leave at once.

    Tearing the process group down (or letting the interpreter do it at exit) after the timed hook's
    callbacks has aborted a rank now and then here ("terminate called without an active exception"); a rank
    that dies before rank 0 has written its record makes torchrun stop rank 0 too. So no rank ends before the
    record exists, and none runs the teardown."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def rank_sampler(indices: Sequence[int], rank: Rank) -> Any:
    """This rank's share of the pinned slice `indices` (every rank's samples, in order): a `DistributedSampler`
    over the slice, not shuffled, so rank r reads samples r, r + world, r + 2 world, ... of it."""
    from torch.utils.data.distributed import DistributedSampler

    slice_ = list(indices)
    sampler: DistributedSampler[int] = DistributedSampler(
        slice_,  # type: ignore[arg-type]  # a sampler reads only len() of its dataset
        num_replicas=rank.world,
        rank=rank.rank,
        shuffle=False,
        drop_last=True,
    )
    return [slice_[i] for i in sampler]


def wrap_model(model: Any, workload: Any, device: Device, *, find_unused: bool = False) -> Any:
    """The model as the ranks train it: the workload's `wrap(model)` where it has one, else DDP with its defaults
    (one device per rank on CUDA), with `find_unused_parameters=True` where `find_unused` (the model holds
    parameters its loss does not use: `unused_parameters`)."""
    if getattr(workload, "wrap", None) is not None:
        return workload.wrap(model)
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        index = device.torch_device.index
        return DistributedDataParallel(
            model, device_ids=[index], output_device=index, find_unused_parameters=find_unused
        )
    return DistributedDataParallel(model, find_unused_parameters=find_unused)


def unused_parameters(model: Any, step_loss: Callable[[], Any]) -> tuple[list[str], int]:
    """One forward and backward of the unwrapped `model` (`step_loss()` returns the loss of one batch), untimed,
    before the steps: the names of the parameters that require a gradient and got none, and the autograd nodes
    of the step's graph. The model is left as it was: its gradients as before, its buffers (batch norm's
    running statistics) restored; nothing has stepped an optimizer. The caller keeps the RNG's state."""
    import torch

    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    grads = [p.grad for _, p in params]
    buffers = [buffer.detach().clone() for buffer in model.buffers()]
    try:
        for _, p in params:
            p.grad = None
        loss = step_loss()
        nodes = _autograd_nodes(loss)
        loss.backward()
        unused = [name for name, p in params if p.grad is None]
    finally:
        with torch.no_grad():
            for buffer, saved in zip(model.buffers(), buffers, strict=True):
                buffer.copy_(saved)
        for (_, p), grad in zip(params, grads, strict=True):
            p.grad = grad
    return unused, nodes


def _autograd_nodes(loss: Any) -> int:
    """The nodes of `loss`'s autograd graph (each once): about what DDP walks from the outputs every step with
    `find_unused_parameters=True`."""
    seen: dict[int, Any] = {}  # id -> node, kept alive so no id is reused during the walk
    pending = [loss.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        pending.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


def agree_on_unused(names: Sequence[str], model: Any) -> list[str]:
    """The parameters any rank found unused (`unused_parameters`), in the model's order, the same on every rank:
    every rank must wrap its model alike."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(names))
    found = {name for rank_names in gathered for name in rank_names}
    return [name for name, _ in model.named_parameters() if name in found]


def unused_record(names: Sequence[str], autograd_nodes: int, trained: Any) -> UnusedParameters | None:
    """What the trial's record keeps of the unused parameters: their names, the trained DDP model's
    `find_unused_parameters` (None where the model is not DDP) and the graph's size; None where there are none."""
    if not names:
        return None
    setting = getattr(trained, "find_unused_parameters", None)
    return UnusedParameters(list(names), None if setting is None else bool(setting), autograd_nodes)


# DDP's error at the step after one where a parameter got no gradient (without find_unused_parameters=True).
UNREDUCED = "Expected to have finished reduction in the prior iteration"
_UNREDUCED_INDICES = re.compile(r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)")


def unreduced_failure(exc: BaseException, model: Any, unused: Sequence[str], own_wrap: bool) -> str | None:
    """DDP's error on parameters that got no gradient, as one line naming them (those found before the steps, else
    those DDP's message numbers) and saying what to do; None for any other error."""
    text = next((str(error) for error in _exception_chain(exc) if UNREDUCED in str(error)), None)
    if text is None or (unused and not own_wrap):  # perfgate's DDP found them: DDP's error is about something else
        return None
    names = list(unused)
    if not names and (indices := _UNREDUCED_INDICES.search(text)) is not None:
        trainable = [name for name, p in model.named_parameters() if p.requires_grad]
        names = [trainable[int(i)] for i in indices.group(1).split() if int(i) < len(trainable)]
    count = f"{len(names)} parameter{'s' * (len(names) != 1)}"
    listed = f"{count} the loss does not use ({format_names(names)})" if names else "parameters the loss does not use"
    if own_wrap:
        return (
            "the workload's wrap(model) returns a DistributedDataParallel without find_unused_parameters=True, and "
            f"the model holds {listed}, on which DDP stops; pass find_unused_parameters=True to "
            "DistributedDataParallel in wrap, or remove the unused layer"
        )
    return (
        f"the model holds {listed} on some batches: DDP stopped on them though the check before the steps found "
        "every parameter used; give the workload a wrap that passes find_unused_parameters=True to "
        "DistributedDataParallel, or remove the unused layer"
    )


def _exception_chain(exc: BaseException | None) -> list[BaseException]:
    chain: list[BaseException] = []
    while exc is not None and all(exc is not seen for seen in chain):
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


class CommTimer:
    """Times each gradient bucket's all-reduce through a DDP communication hook that does what DDP does without
    one (as `default_hooks.allreduce_hook`: divide by the world size, all-reduce), bracketed by two device
    clock marks.

    Per step: `begin_step` where backward starts, `take_step` once backward has returned, and `step_figures`
    with backward's time once the device has synchronised past the step (a trial: after its last timed step);
    `end_step(backward_s)` does both at once. The marks are the device's (`Device.mark`): the host clock on the
    CPU, CUDA events on CUDA, read only after the device synchronised past them."""

    def __init__(self, device: Device) -> None:
        import torch.distributed as dist

        self.device = device
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self._begin: Any = None
        self._buckets: list[list[Any]] = []

    def attach(self, model: Any) -> str | None:
        """Register the hook on a DDP model; the reason it cannot be timed otherwise."""
        if not hasattr(model, "register_comm_hook"):
            kind = type(model).__name__
            return f"the gradient all-reduce is not timed: the model is a {kind}, not DistributedDataParallel"
        import torch
        import torch.distributed as dist

        # DDP checks a hook's annotations against the real types; this module's are postponed strings.
        _timed_allreduce.__annotations__ = {
            "timer": CommTimer,
            "bucket": dist.GradBucket,  # type: ignore[attr-defined]
            "return": torch.futures.Future[torch.Tensor],
        }
        try:
            model.register_comm_hook(self, _timed_allreduce)
        except RuntimeError as exc:  # the workload's wrap registered a hook of its own
            return f"the gradient all-reduce is not timed: {str(exc).splitlines()[0][:200]}"
        return None

    def begin_step(self) -> None:
        self._buckets = []
        self._begin = self.device.mark()

    def launched(self, nbytes: int) -> list[Any]:
        entry = [self.device.mark(), None, nbytes]
        self._buckets.append(entry)
        return entry

    def end_step(self, backward_s: float) -> tuple[float, float, int, int]:
        """`step_figures` of this step, read now (on CUDA only once the device synchronised past it)."""
        return self.step_figures(self.take_step(), backward_s)

    def take_step(self) -> tuple[Any, list[list[Any]]]:
        """This step's marks, read nothing yet: where backward started and each bucket's launch and completion."""
        return self._begin, self._buckets

    def step_figures(self, step: tuple[Any, list[list[Any]]], backward_s: float) -> tuple[float, float, int, int]:
        """(time with an all-reduce in flight, the part after the last bucket's launch, buckets, bytes) of a step
        `take_step` returned, once the device has synchronised past it."""
        begin, buckets = step
        intervals = []
        nbytes = sum(entry[2] for entry in buckets)
        for start, end, _ in buckets:
            if end is None:  # cannot happen once backward returned: DDP waits for every bucket
                continue
            intervals.append((self.device.seconds_between(begin, start), self.device.seconds_between(begin, end)))
        if not intervals:
            return 0.0, 0.0, 0, 0
        in_flight = _union_length(intervals)
        last_launch = max(start for start, _ in intervals)
        exposed = min(in_flight, max(0.0, max(backward_s, max(end for _, end in intervals)) - last_launch))
        return in_flight, exposed, len(intervals), nbytes


def _timed_allreduce(timer: CommTimer, bucket: Any) -> Any:
    """DDP's own reduction (as `default_hooks.allreduce_hook`: divide by the world size, all-reduce), with one
    callback that marks its completion and hands DDP the reduced bucket."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    entry = timer.launched(buffer.numel() * buffer.element_size())
    buffer.div_(timer.world)

    def done(fut: Any) -> Any:
        entry[1] = timer.device.mark()
        return fut.value()[0]

    return dist.all_reduce(buffer, async_op=True).get_future().then(done)


def _union_length(intervals: Sequence[tuple[float, float]]) -> float:
    total = 0.0
    current_start, current_end = None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None and current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None and current_start is not None:
        total += current_end - current_start
    return total


def rank_result(
    record: TrialRecord,
    rank: Rank,
    comm: Sequence[tuple[float, float, int, int]] | None,
) -> RankResult:
    """What the job's record keeps of one rank."""
    result = record.result
    return RankResult(
        rank=rank.rank,
        samples_per_sec=result.samples_per_sec,
        step_s=list(result.step_s),
        phases_s={phase: list(values) for phase, values in result.phases_s.items()},
        comm_s=None if comm is None else [c[0] for c in comm],
        comm_exposed_s=None if comm is None else [c[1] for c in comm],
        buckets=None if not comm else max(c[2] for c in comm),
        comm_bytes=None if not comm else max(c[3] for c in comm),
        peak_bytes=0 if result.memory is None else result.memory.peak_bytes,
        data_checksum=result.data_checksum,
    )


def gather(record: TrialRecord, ranks: RankResult, rank: Rank) -> list[tuple[dict[str, Any], dict[str, Any]]] | None:
    """Every rank's (record, rank result) on rank 0, in rank order; None on the other ranks."""
    import torch.distributed as dist

    payload = (record.to_dict(), ranks.to_dict())
    gathered: list[Any] = [None] * rank.world if rank.rank == 0 else []
    dist.gather_object(payload, gathered if rank.rank == 0 else None, dst=0)
    return gathered if rank.rank == 0 else None


def merge_ranks(
    records: Sequence[TrialRecord],
    ranks: Sequence[RankResult],
    backend: str,
    wrapper: str,
    unused: UnusedParameters | None = None,
) -> TrialRecord:
    """One record for the job from every rank's (rank order): samples/s is all ranks' samples over the slowest
    rank's time; the step and phase times are those of the rank that sets the pace (the most time outside
    backward's wait for the all-reduce: the others wait for it); memory is the largest rank's; losses, calls,
    the sampler and the probe are rank 0's; the data checksum covers every rank's share of the slice; `unused`,
    the parameters the ranks agreed the loss does not use, is the same on every rank."""
    results = [record.result for record in records]
    first = results[0]
    slowest = max(results, key=_rate_s)
    # The rank that sets the pace: the most time outside backward's wait for the all-reduce (the others wait for it).
    pace = max(range(len(results)), key=lambda i: sum(results[i].step_s) - sum(ranks[i].comm_exposed_s or [0.0]))
    samples = sum(r.samples_per_sec * _rate_s(r) for r in results)
    largest = max(results, key=lambda r: 0 if r.memory is None else r.memory.peak_bytes)
    checksum = hashlib.sha256("".join(str(r.data_checksum) for r in results).encode()).hexdigest()
    warnings = list(dict.fromkeys(w for r in results for w in r.warnings))
    merged = replace(
        first,
        samples_per_sec=samples / _rate_s(slowest),
        step_s=list(results[pace].step_s),
        phases_s={phase: list(values) for phase, values in results[pace].phases_s.items()},
        data_wait_host_s=results[pace].data_wait_host_s,
        memory=largest.memory,
        memory_step_bytes=largest.memory_step_bytes,
        data_checksum=f"sha256:{checksum}",
        timed_elapsed_s=max((r.timed_elapsed_s or 0.0) for r in results),
        warnings=warnings,
        distributed=Distributed(
            nproc=len(results), backend=backend, wrapper=wrapper, ranks=list(ranks), unused_parameters=unused
        ),
    )
    return replace(records[0], result=merged)


def _rate_s(result: TrialResult) -> float:
    """The seconds a rank's samples/sec divides its timed samples by: the sum of its step times on the host
    clock, the wall time between the two synchronisations with CUDA events (`Device.step_clock`)."""
    if result.clocking == "cuda-events" and result.timed_elapsed_s:
        return result.timed_elapsed_s
    return sum(result.step_s)
