"""What one training step does, counted exactly: FLOPs, operators, kernels, graphs, parameters, allocated bytes.

Counts need no statistics: with the seed, the shapes and the data slice fixed, two runs of the same code on the
same machine give the same numbers. The trial counts after its timed steps are over (or, for `--counts-only`,
after its warm-up steps alone), on the first batch of the pinned slice, so nothing here touches a step whose
time is judged:

- parameters: the model's, counted once (shared tensors once);
- FLOPs per sample: `torch.utils.flop_counter.FlopCounterMode` over one step (forward, backward and the
  optimizer), divided by the batch size; the compile config counts its eager model (the same arithmetic);
- operators per step: ATen operators dispatched in one eager step (a `TorchDispatchMode`);
- kernels per step, on CUDA: the device's kernels in one step (torch.profiler), compiled configs too;
- allocated peak: on CUDA the allocator's peak of allocated bytes over one step; on the CPU the peak of live
  tensor storage over one eager step, counted operator by operator from the model's, the optimizer's and the
  batch's tensors up (what the step allocates, not what the process holds);
- for the compile config, torch.compile's graphs, graph breaks (with where each happens) and recompiles (with
  the guard that failed) at the end of the warm-up steps.

What can differ between a CPU and a GPU run of the same model: the operators (backends decompose differently,
fused attention on one, its parts on the other), the kernels and the allocated peak
(`records.shapes.DEVICE_DEPENDENT_COUNTS`).
Parameters, FLOPs, graphs, breaks and recompiles are the model's and the code's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from perfgate.records.shapes import Counts

BREAK_PLACES = 10  # graph breaks and recompiles named in a record, at most


def count_step(
    step: Callable[[Any], Any],
    eager_step: Callable[[Any], Any] | None,
    model: Any,
    optimizer: Any,
    batch: Any,
    batch_size: int,
    device_type: str,
    compiled: CompileCounts | None,
) -> Counts:
    """Count one training step on `batch`. `step(batch)` runs the step as the trial's loop does (forward under
    autocast, backward, optimizer step, gradients zeroed) on the model the steps call; `eager_step` runs it on
    the model torch.compile wrapped (None where the config is eager: `step` is eager). `compiled`: the compile
    config's graphs, breaks and recompiles, read at the end of its warm-up steps."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    started = time.perf_counter()
    parameters = _parameters(model)
    eager = eager_step if eager_step is not None else step
    operators = _OperatorCounter(track_storage=device_type != "cuda" and eager_step is None)
    if operators.track_storage:
        operators.start_with(_tensors(model, optimizer, batch))
    with _no_dynamo_import(type(operators), _flop_mode_class()), FlopCounterMode(display=False) as flops, operators:
        eager(batch)
    allocated: int | None = None
    kind: str | None = None
    if device_type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step(batch)
        torch.cuda.synchronize()
        allocated, kind = int(torch.cuda.max_memory_allocated()), "cuda-max-allocated"
    elif operators.track_storage:
        allocated, kind = operators.peak_bytes, "cpu-live-storage"
    return Counts(
        device=device_type,
        parameters=parameters[0],
        trainable_parameters=parameters[1],
        flops_per_sample=flops.get_total_flops() / batch_size,
        operators_per_step=None if eager_step is not None else operators.operators,
        kernels_per_step=_kernels(step, batch) if device_type == "cuda" else None,
        allocated_peak_bytes=allocated,
        allocated_kind=kind,
        graphs=None if compiled is None else compiled.graphs,
        graph_breaks=None if compiled is None else compiled.graph_breaks,
        recompiles=None if compiled is None else compiled.recompiles,
        break_places=[] if compiled is None else compiled.break_places,
        recompile_reasons=[] if compiled is None else compiled.recompile_reasons,
        counting_s=time.perf_counter() - started,
    )


@contextlib.contextmanager
def _no_dynamo_import(*modes: type | None) -> Iterator[None]:
    """The counting modes, in a process that has not imported torch._dynamo, without importing it.

    torch wraps each dispatch mode's `__torch_dispatch__` (`torch._disable_dynamo`) so that torch.compile never
    traces it, and the wrapper imports torch._dynamo at its first call: about a second, which a trial whose
    workload neither compiles nor builds a torch optimizer would spend on counting alone. Where nothing has
    imported torch._dynamo nothing can be compiling, so for the pass each handler stands as its own disabled
    form (the wrapper's cache, `__dynamo_disable`), removed afterwards. A torch whose modes are wrapped otherwise
    is left as it is (and imports torch._dynamo as before)."""
    import sys

    marked = []
    if "torch._dynamo" not in sys.modules:
        for mode in modes:
            raw = getattr(vars(mode).get("__torch_dispatch__") if mode else None, "__wrapped__", None)
            if raw is not None and "__dynamo_disable" not in vars(raw):
                vars(raw)["__dynamo_disable"] = raw
                marked.append(raw)
    try:
        yield
    finally:
        for raw in marked:
            vars(raw).pop("__dynamo_disable", None)


def _flop_mode_class() -> type | None:
    """The dispatch mode inside torch's FlopCounterMode (a private class: None where a torch has none)."""
    from torch.utils import flop_counter

    mode = getattr(flop_counter, "_FlopCounterMode", None)
    return mode if isinstance(mode, type) else None


def _parameters(model: Any) -> tuple[int, int]:
    """The model's parameters and the trainable ones among them, each tensor once."""
    seen: set[int] = set()
    total = trainable = 0
    for parameter in model.parameters():
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        total += parameter.numel()
        trainable += parameter.numel() if parameter.requires_grad else 0
    return total, trainable


def _tensors(*roots: Any) -> Iterator[Any]:
    """Every tensor a step starts from: the model's parameters and buffers, the optimizer's state, the batch."""
    import torch

    model, optimizer, batch = roots
    yield from model.parameters()
    yield from model.buffers()
    for state in getattr(optimizer, "state", {}).values():
        yield from (v for v in state.values() if isinstance(v, torch.Tensor))
    yield from (t for t in torch.utils._pytree.tree_leaves(batch) if isinstance(t, torch.Tensor))


def _storage_of(tensor: Any) -> Any:
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested or meta tensors own no plain storage
        return None


def _make_counter_class() -> type:
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class OperatorCounter(TorchDispatchMode):
        """Counts the ATen operators dispatched inside it and (with `track_storage`) the bytes of tensor storage
        alive after each: every storage seen, held by a weak reference, dropped once freed."""

        def __init__(self, track_storage: bool) -> None:
            super().__init__()
            self.track_storage = track_storage
            self.operators = 0
            self.live: dict[int, tuple[Any, int]] = {}  # data pointer -> (weak reference, bytes)
            self.live_bytes = 0
            self.peak_bytes = 0

        def start_with(self, tensors: Iterator[Any]) -> None:
            for tensor in tensors:
                self._add(tensor)
            self.peak_bytes = self.live_bytes

        def _add(self, tensor: Any) -> None:
            storage = _storage_of(tensor)
            if storage is None or storage.device.type == "meta":
                return
            size = int(storage.nbytes())
            pointer = int(storage.data_ptr())
            if size == 0 or pointer in self.live:
                return
            self.live[pointer] = (StorageWeakRef(storage), size)
            self.live_bytes += size

        def _sweep(self) -> None:
            freed = [pointer for pointer, (ref, _) in self.live.items() if ref.expired()]
            for pointer in freed:
                self.live_bytes -= self.live.pop(pointer)[1]

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            self.operators += 1
            if self.track_storage:
                self._sweep()  # a freed storage's address may come back for this operator's output
                for leaf in tree_leaves(out):
                    if hasattr(leaf, "untyped_storage"):
                        self._add(leaf)
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            return out

    return OperatorCounter


_COUNTER_CLASS: type | None = None


def _OperatorCounter(track_storage: bool) -> Any:  # noqa: N802  (a class built on first use: torch loads late)
    global _COUNTER_CLASS
    if _COUNTER_CLASS is None:
        _COUNTER_CLASS = _make_counter_class()
    return _COUNTER_CLASS(track_storage)


def _kernels(step: Callable[[Any], Any], batch: Any) -> int | None:
    """CUDA kernels one step launches (memory copies and sets left out), from torch.profiler's device events."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from perfgate.measure.profiling import keep_events

    try:
        with profile(activities=[ProfilerActivity.CUDA], **keep_events(profile)) as prof:
            step(batch)
            torch.cuda.synchronize()
    except RuntimeError:  # no CUPTI here: the count is left out, not guessed
        return None
    cuda = torch.autograd.DeviceType.CUDA  # type: ignore[attr-defined]
    names = [e.name for e in prof.events() if e.device_type == cuda]
    return sum(1 for name in names if not name.startswith(("Memcpy", "Memset")))


class CompileCounts:
    """torch.compile's graphs, graph breaks and recompiles in this process so far (dynamo's counters and guard
    failures; internal API, read defensively), with where each break happens (`with_places`)."""

    def __init__(self, graphs: int, graph_breaks: int, recompiles: int, recompile_reasons: list[str]) -> None:
        self.graphs = graphs
        self.graph_breaks = graph_breaks
        self.recompiles = recompiles
        self.recompile_reasons = recompile_reasons
        self.break_places: list[str] = []

    @classmethod
    def now(cls) -> CompileCounts | None:
        try:
            from torch._dynamo.utils import counters, guard_failures
        except ImportError:
            return None
        reasons = [
            f"{_code_place(code)}: {_first_line(str(reason).split('  #')[0])}"  # the guard, not dynamo's comments
            for code, failures in guard_failures.items()
            for reason in failures
        ]
        return cls(
            graphs=int(counters["stats"].get("unique_graphs", 0)),
            graph_breaks=int(sum(counters["graph_break"].values())),
            recompiles=len(reasons),
            recompile_reasons=reasons[:BREAK_PLACES],
        )

    def with_places(self, run: Callable[[], Any]) -> CompileCounts:
        """Where the graph breaks are: `torch._dynamo.explain` over one forward (`run`), each break's innermost
        frame of the user's code. Only where there are breaks (explain traces the model again and resets dynamo:
        it runs after every count that dynamo's state gives)."""
        if not self.graph_breaks:
            return self
        import torch

        with contextlib.suppress(Exception):  # the places are a help; the count stands without them
            explained = torch._dynamo.explain(run)()
            places = []
            for reason in explained.break_reasons:
                stack = list(getattr(reason, "user_stack", []) or [])
                frame = stack[-1] if stack else None
                where = f"{_short(frame.filename)}:{frame.lineno} in {frame.name}" if frame else "unknown place"
                places.append(f"{where}: {_first_line(str(getattr(reason, 'reason', '')))}")
            self.break_places = list(dict.fromkeys(places))[:BREAK_PLACES]  # a frame traced twice, named once
        return self


def _code_place(code: Any) -> str:
    filename = getattr(code, "co_filename", "?")
    return f"{_short(filename)}:{getattr(code, 'co_firstlineno', '?')} in {getattr(code, 'co_name', '?')}"


def _short(filename: str) -> str:
    """A file's name as the user knows it: the last two parts of its path."""
    parts = filename.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:200]
