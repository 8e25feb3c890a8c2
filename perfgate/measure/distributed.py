"""Data-parallel trials (`--nproc N`): one process per rank under PyTorch's own launcher, the model in
`DistributedDataParallel`, and the gradient all-reduce timed by a DDP communication hook.

The runner starts `python -m torch.distributed.run --standalone --nproc-per-node N -m perfgate.measure.trial
SPEC OUT` (torchrun, with its environment rendezvous on this machine). Each rank runs the trial as one process
would (`perfgate.measure.trial`), with three differences this module supplies:

- `join` initialises the process group (gloo on the CPU, NCCL on CUDA with one device per rank) and writes the
  rank's pid next to OUT, so the runner can stop every rank of a trial that hangs;
- the rank reads its share of the pinned slice through a `DistributedSampler` over that slice (`rank_sampler`),
  so each rank's data checksum is its own and reproducible;
- `wrap_model` wraps the model in DDP (or calls the workload's own `wrap`), and `CommTimer` times each
  bucket's all-reduce: the time with an all-reduce in flight per step, and the part of it backward waited
  for after its last bucket was launched (the rest overlapped with backward's compute).

After the steps every rank sends its record to rank 0 (`gather`), which writes one record for the job
(`merge_ranks`): samples/s over the slowest rank's time, the step and phase times of the rank that sets the
pace, and the largest rank's peak memory, with each rank's figures under `distributed`. A rank that fails
writes its own failed record (`rank_failure_path`) and exits non-zero, so torchrun stops the others and
the runner reports the failing rank's error.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from perfgate.records.results import TrialRecord
from perfgate.records.shapes import Distributed, RankResult

if TYPE_CHECKING:
    from perfgate.measure.device import Device

LAUNCHER = "torch.distributed.run"  # torchrun
COLLECTIVE_TIMEOUT_S = 1800  # a rank stuck in a collective; the runner's --timeout normally ends it first


def launcher_arguments(nproc: int) -> list[str]:
    """torchrun's arguments before the trial module: one node, `nproc` ranks, a rendezvous on a free local port,
    no restarts (a failed rank ends the trial)."""
    return ["-m", LAUNCHER, "--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0", "--monitor-interval=0.2"]


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


def wrap_model(model: Any, workload: Any, device: Device) -> Any:
    """The model as the ranks train it: the workload's `wrap(model)` where it has one, else DDP with its defaults
    (one device per rank on CUDA)."""
    if getattr(workload, "wrap", None) is not None:
        return workload.wrap(model)
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        index = device.torch_device.index
        return DistributedDataParallel(model, device_ids=[index], output_device=index)
    return DistributedDataParallel(model)


class CommTimer:
    """Times each gradient bucket's all-reduce through a DDP communication hook that does what DDP does without
    one (as `default_hooks.allreduce_hook`: divide by the world size, all-reduce), bracketed by two device
    clock marks.

    Per step: `begin_step` where backward starts, `end_step(backward_s)` once backward has returned (the device
    synchronised). The marks are the device's (`Device.mark`): the host clock on the CPU, CUDA events on CUDA,
    read only after the step synchronised."""

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
        """(time with an all-reduce in flight, the part after the last bucket's launch, buckets, bytes) of this
        step."""
        begin = self._begin
        intervals = []
        nbytes = sum(entry[2] for entry in self._buckets)
        for start, end, _ in self._buckets:
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


def merge_ranks(records: Sequence[TrialRecord], ranks: Sequence[RankResult], backend: str, wrapper: str) -> TrialRecord:
    """One record for the job from every rank's (rank order): samples/s is all ranks' samples over the slowest
    rank's time; the step and phase times are those of the rank that sets the pace (the most time outside
    backward's wait for the all-reduce: the others wait for it); memory is the largest rank's; losses, calls,
    the sampler and the probe are rank 0's; the data checksum covers every rank's share of the slice."""
    results = [record.result for record in records]
    first = results[0]
    slowest = max(results, key=lambda r: sum(r.step_s))
    # The rank that sets the pace: the most time outside backward's wait for the all-reduce (the others wait for it).
    pace = max(range(len(results)), key=lambda i: sum(results[i].step_s) - sum(ranks[i].comm_exposed_s or [0.0]))
    samples = sum(r.samples_per_sec * sum(r.step_s) for r in results)
    largest = max(results, key=lambda r: 0 if r.memory is None else r.memory.peak_bytes)
    checksum = hashlib.sha256("".join(str(r.data_checksum) for r in results).encode()).hexdigest()
    warnings = list(dict.fromkeys(w for r in results for w in r.warnings))
    merged = replace(
        first,
        samples_per_sec=samples / sum(slowest.step_s),
        step_s=list(results[pace].step_s),
        phases_s={phase: list(values) for phase, values in results[pace].phases_s.items()},
        memory=largest.memory,
        memory_step_bytes=largest.memory_step_bytes,
        data_checksum=f"sha256:{checksum}",
        timed_elapsed_s=max((r.timed_elapsed_s or 0.0) for r in results),
        warnings=warnings,
        distributed=Distributed(nproc=len(results), backend=backend, wrapper=wrapper, ranks=list(ranks)),
    )
    return replace(records[0], result=merged)
