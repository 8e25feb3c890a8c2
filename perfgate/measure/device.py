"""The one place that knows CPU from CUDA: clocks, synchronisation, transfers and peak memory.

Everything device-specific the trial needs goes through `Device`, so the CUDA path stays small and
testable wherever CUDA is available. The training steps are timed by the step clock a device hands
out (`Device.step_clock`): the host clock at every phase boundary on the CPU; on CUDA, events on the
current stream, with one synchronisation before the timed steps and one after them, and nothing in
between (the host queues work ahead of the device, as in the loop the user runs).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import resource
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import torch

from perfgate.errors import UsageError
from perfgate.records.shapes import DeviceInfo, PeakMemory
from perfgate.records.summary import PHASES

_PROC_STATUS = "/proc/self/status"
_PROC_CLEAR_REFS = "/proc/self/clear_refs"


class Device:
    """Clock, transfers and peak memory for one torch device type."""

    type: str = "cpu"

    def __init__(self) -> None:
        self.torch_device = torch.device(self.type)
        self._setup_bytes = 0
        self._setup_rss_bytes = 0  # the training process's resident memory after setup
        self._setup_heap: int | None = None
        self._peak_reset = False

    def synchronize(self) -> None:
        """Wait until queued device work is done (a no-op on the CPU)."""

    def now(self) -> float:
        """Synchronise, then read a monotonic clock in seconds."""
        self.synchronize()
        return time.perf_counter()

    def mark(self) -> Any:
        """A point in time on this device's work, without synchronising (for `seconds_between` once it has)."""
        return time.perf_counter()

    def seconds_between(self, start: Any, end: Any) -> float:
        """Seconds from one `mark` to another; on CUDA only after the device synchronised past both."""
        return float(end - start)

    def step_clock(self, planted_slowdown: float = 0.0, warmup_steps: int = 1) -> HostStepClock:
        """The clock that times a trial's training steps and their phases (`HostStepClock`), with the planted
        slowdown of `perfgate calibrate` (a fraction of a step) where asked."""
        return HostStepClock(planted_slowdown)

    def move(self, batch: Any, *, non_blocking: bool) -> Any:
        """Move every tensor in a (nested) batch to this device."""
        if isinstance(batch, torch.Tensor):
            return batch.to(self.torch_device, non_blocking=non_blocking)
        if isinstance(batch, Mapping):
            return type(batch)({k: self.move(v, non_blocking=non_blocking) for k, v in batch.items()})  # type: ignore[call-arg]
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*(self.move(v, non_blocking=non_blocking) for v in batch))
        if isinstance(batch, list | tuple):
            return type(batch)(self.move(v, non_blocking=non_blocking) for v in batch)
        return batch

    def mark_setup_done(self) -> None:
        """Record the memory level after model, optimizer and data are set up."""
        self._setup_bytes = self._setup_rss_bytes = _current_rss_bytes()
        self._setup_heap = _heap_in_use_bytes()

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window."""
        self._peak_reset = _reset_peak_rss()

    def memory_now(self) -> int:
        """Memory in use now, in bytes, above the level after setup.

        CPU: the bytes malloc has handed out and not taken back, where glibc can say (mallinfo2); resident
        memory elsewhere. Resident memory also moves when malloc gives pages back or reuses them: a
        kept loss's 49 KiB of graph nodes per step once hid behind a 14 MiB drop.
        """
        heap = self._host_heap_above_setup()
        return heap if heap is not None else max(0, _current_rss_bytes() - self._setup_bytes)

    def _host_heap_above_setup(self) -> int | None:
        heap = _heap_in_use_bytes()
        return None if heap is None or self._setup_heap is None else max(0, heap - self._setup_heap)

    def peak_memory(self, loader_workers_bytes: int | None = None, loader_workers: int | None = None) -> PeakMemory:
        """Peak memory in the window since `reset_peak_memory`, with the DataLoader workers' peak unique memory
        (`sampler.workers_unique_bytes`; None: not measured).

        CPU: the job's host memory, the training process's peak resident memory above its level after setup
        plus the workers' (their peaks need not coincide, so the sum can exceed the job's peak, never fall
        short of it); the training process alone where the workers' memory was not measured.
        """
        process = self._process_peak_bytes()
        kind = "cpu-rss-above-setup" if loader_workers_bytes is None else "cpu-job-above-setup"
        return PeakMemory(
            kind=kind if self._peak_reset else f"{kind}-lifetime-peak",
            peak_bytes=process + (loader_workers_bytes or 0),
            reserved_bytes=None,
            setup_bytes=self._setup_bytes,
            process_bytes=process,
            loader_workers_bytes=loader_workers_bytes,
            loader_workers=loader_workers,
        )

    def _process_peak_bytes(self) -> int:
        """The training process's peak resident memory (VmHWM) above its level after setup."""
        return max(0, _peak_rss_bytes() - self._setup_rss_bytes)

    def describe(self) -> DeviceInfo:
        """Name, count and driver of the device, for the environment fingerprint."""
        return DeviceInfo(type="cpu", name=cpu_model(), count=1, driver=None)


class CudaDevice(Device):
    """CUDA: `now` synchronises before it reads the clock (for timing outside the training steps); `mark` and
    the step clock (`CudaStepClock`) record events instead."""

    type = "cuda"

    def __init__(self) -> None:
        super().__init__()
        self.torch_device = torch.device("cuda", torch.cuda.current_device())  # a rank's own device

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # on the current stream: after the work queued so far
        return event

    def seconds_between(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1000.0

    def step_clock(self, planted_slowdown: float = 0.0, warmup_steps: int = 1) -> HostStepClock:
        if planted_slowdown and warmup_steps < 1:
            raise UsageError(
                "a planted slowdown on CUDA is sized from the warm-up steps, and this workload has none",
                hint="give the workload warmup_steps >= 1",
            )
        return CudaStepClock(planted_slowdown)

    def mark_setup_done(self) -> None:
        self._setup_bytes = torch.cuda.memory_allocated()
        self._setup_rss_bytes = _current_rss_bytes()
        self._setup_heap = _heap_in_use_bytes()

    def reset_peak_memory(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self._peak_reset = _reset_peak_rss()  # the host parts, recorded beside the device's peak

    def memory_now(self) -> int:
        # Device tensors plus the host heap: a kept loss keeps its autograd graph's nodes on the host.
        return int(torch.cuda.memory_allocated()) + (self._host_heap_above_setup() or 0)

    def peak_memory(self, loader_workers_bytes: int | None = None, loader_workers: int | None = None) -> PeakMemory:
        """The device's peak allocated memory, the figure judged; the job's host memory by part beside it (the
        training process's part only where its peak could be reset: a lifetime peak would hold setup's)."""
        torch.cuda.synchronize()
        return PeakMemory(
            kind="cuda-max-allocated",
            peak_bytes=int(torch.cuda.max_memory_allocated()),
            reserved_bytes=int(torch.cuda.max_memory_reserved()),
            setup_bytes=self._setup_bytes,
            process_bytes=self._process_peak_bytes() if self._peak_reset else None,
            loader_workers_bytes=loader_workers_bytes,
            loader_workers=loader_workers,
        )

    def describe(self) -> DeviceInfo:
        return DeviceInfo(
            type="cuda",
            name=torch.cuda.get_device_name(0),
            count=torch.cuda.device_count(),
            driver=_nvidia_driver_version(),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
        )


@dataclass(frozen=True)
class StepTimes:
    """What a step clock measured, read once the timed steps are over."""

    clocking: str  # how: "host-clock" (the CPU) or "cuda-events"
    phases: dict[str, list[float]]  # per phase, one duration per timed step
    step_s: list[float]  # per timed step, the sum of its phases
    warmup_step_s: list[float]
    timed_elapsed_s: float  # the host's wall time over the timed steps (with turns, the other side's too)
    samples_s: float  # the seconds samples/sec divides the timed samples by
    bookkeeping_s: float  # the host's time between one step's end and the next one's start
    data_wait_host_s: list[float] | None = None  # per timed step, the host's wait for the batch (where phases are not)


class HostStepClock:
    """Times training steps on the host clock, read at every phase boundary: the CPU's clock, where the work
    is done when the host has done it.

    A step is `begin_step`, then one `mark` after each phase (`PHASES`: data wait, host-to-device copy,
    forward, backward, optimizer), then `end_step` once perfgate's own bookkeeping after the step is done. A mark
    may name its phase (`mark("forward")`): the time since the previous mark is added to it, so a step whose
    phases come round more than once (micro-batches, a workload's own step) sums each phase's stretches; an
    unnamed mark ends the phase after the one before it. A phase no mark names is zero for that step.
    `start_timing` and `stop_timing` bracket the timed steps; the steps before them are the warm-up.
    samples/sec divides by the sum of the timed steps' times.
    """

    clocking = "host-clock"

    def __init__(self, planted_slowdown: float = 0.0) -> None:
        self.planted_slowdown = planted_slowdown
        self._timing = False
        self._marks: list[float] = []
        self._named: list[str] = []  # the phase each mark of this step ends
        self._phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
        self._warmup_step_s: list[float] = []
        self._bookkeeping_s = 0.0
        self._timed_started = 0.0
        self._timed_elapsed_s = 0.0

    def start_timing(self) -> None:
        """The timed steps start with the next step."""
        self._timing = True
        self._timed_started = time.perf_counter()

    def begin_step(self) -> None:
        self._marks = [time.perf_counter()]
        self._named = []

    def mark(self, phase: str | None = None) -> None:
        """The end of a stretch of `phase` (None: of the phase after the previous mark's)."""
        self._marks.append(time.perf_counter())
        self._named.append(_next_phase(self._named, phase))

    def slow_down(self) -> None:
        """The planted slowdown (`perfgate calibrate`): the step so far takes (1 + f) times as long."""
        time.sleep(self.planted_slowdown * (time.perf_counter() - self._marks[0]))

    def end_step(self) -> None:
        """The step's bookkeeping is done: its time is counted apart from the step's."""
        marks = self._marks
        self._bookkeeping_s += time.perf_counter() - marks[-1]
        if self._timing:
            step = _phase_sums(self._named, [end - start for start, end in pairwise(marks)])
            for phase in PHASES:
                self._phases[phase].append(step[phase])
        else:
            self._warmup_step_s.append(marks[-1] - marks[0])

    def stop_timing(self) -> None:
        """The timed steps are over."""
        self._timed_elapsed_s = time.perf_counter() - self._timed_started

    def times(self) -> StepTimes:
        """What the steps measured (after `stop_timing`)."""
        step_s = [sum(values) for values in zip(*(self._phases[p] for p in PHASES), strict=True)]
        return StepTimes(
            clocking=self.clocking,
            phases=self._phases,
            step_s=step_s,
            warmup_step_s=self._warmup_step_s,
            timed_elapsed_s=self._timed_elapsed_s,
            samples_s=sum(step_s),
            bookkeeping_s=self._bookkeeping_s,
        )


# Cycles of the calibration sleep that sizes the planted slowdown on CUDA: a few milliseconds at GPU clocks.
_CALIBRATION_CYCLES = 10_000_000


class CudaStepClock(HostStepClock):
    """Times training steps with CUDA events recorded on the current stream, never synchronising inside them.

    The device synchronises twice: at `start_timing` (the warm-up's work done, the timed region's host clock
    starts) and at `stop_timing` (the last timed step done); samples/sec is the timed samples over the host's
    wall time between the two, as a bare training loop measures it. The events are read after the second.

    Phases are on the device's timeline, so a step's phases sum to its time there: a step runs from the previous
    step's end event (the first timed step: an event recorded as timing starts) to its own end event; its data
    wait is the stretch from that start to the event recorded once the host has the batch, which is the time the
    device sat idle waiting for the input (zero while the host is queuing ahead), and each later phase runs from
    one boundary event to the next. The host's own wait in `next(batches)` is kept apart (`data_wait_host_s`).
    """

    clocking = "cuda-events"

    def __init__(self, planted_slowdown: float = 0.0) -> None:
        super().__init__(planted_slowdown)
        self._host: list[float] = []
        self._events: list[Any] = []
        self._start: Any = None
        self._previous_end: Any = None
        self._warmup_steps: list[tuple[Any, Any]] = []
        self._timed_steps: list[tuple[Any, list[Any], list[str]]] = []
        self._data_wait_host_s: list[float] = []
        self._calibration: tuple[Any, Any] | None = None
        self.sleep_s = 0.0  # the planted slowdown per timed step: f x the warm-up's median step
        self.sleep_cycles = 0  # the same on the device, in cycles of `torch.cuda._sleep`

    @staticmethod
    def _event() -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # on the current stream: after the work queued so far
        return event

    def start_timing(self) -> None:
        if self.planted_slowdown:
            before = self._event()
            torch.cuda._sleep(_CALIBRATION_CYCLES)
            self._calibration = (before, self._event())
        torch.cuda.synchronize()  # the one synchronisation before the timed steps
        self._warmup_step_s = [_event_seconds(start, end) for start, end in self._warmup_steps]
        if self.planted_slowdown:
            self.sleep_s, self.sleep_cycles = self._planted_sleep()
        self._timing = True
        self._timed_started = time.perf_counter()
        self._previous_end = self._event()  # where the first timed step starts on the device

    def _planted_sleep(self) -> tuple[float, int]:
        """f x the warm-up's median step (the first left out where there are more: it compiles and allocates), in
        seconds and in cycles of `torch.cuda._sleep`, timed once here against events (`step_clock` refuses a
        planted slowdown without warm-up)."""
        assert self._calibration is not None and self._warmup_step_s
        cycles_per_s = _CALIBRATION_CYCLES / _event_seconds(*self._calibration)
        sleep_s = self.planted_slowdown * statistics.median(self._warmup_step_s[1:] or self._warmup_step_s)
        return sleep_s, int(sleep_s * cycles_per_s)

    def begin_step(self) -> None:
        self._host = [time.perf_counter()]
        self._events = []
        self._named = []
        self._start = self._previous_end if self._previous_end is not None else self._event()

    def mark(self, phase: str | None = None) -> None:
        self._host.append(time.perf_counter())
        self._events.append(self._event())
        self._named.append(_next_phase(self._named, phase))

    def slow_down(self) -> None:
        # Both sides sleep f x step, neither waits for the other: host and device run a step's work queued one
        # behind the other, a step takes about max(host, device), and max(host + fT, device + fT) = (1 + f)T
        # whichever of them sets the pace. Warm-up steps, run before the sleep is sized, are left as they are.
        if self.sleep_cycles:
            torch.cuda._sleep(self.sleep_cycles)
        if self.sleep_s:
            time.sleep(self.sleep_s)

    def end_step(self) -> None:
        self._bookkeeping_s += time.perf_counter() - self._host[-1]
        end = self._events[-1]
        if self._timing:
            self._timed_steps.append((self._start, self._events, self._named))
            host = _phase_sums(self._named, [end - start for start, end in pairwise(self._host)])
            self._data_wait_host_s.append(host["data_wait"])
        else:
            self._warmup_steps.append((self._start, end))
        self._previous_end = end

    def stop_timing(self) -> None:
        torch.cuda.synchronize()  # the one synchronisation after the timed steps
        self._timed_elapsed_s = time.perf_counter() - self._timed_started

    def times(self) -> StepTimes:
        phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
        for start, events, named in self._timed_steps:
            step = _phase_sums(named, [_event_seconds(begin, end) for begin, end in pairwise([start, *events])])
            for phase in PHASES:
                phases[phase].append(step[phase])
        step_s = [sum(values) for values in zip(*(phases[p] for p in PHASES), strict=True)]
        return StepTimes(
            clocking=self.clocking,
            phases=phases,
            step_s=step_s,
            warmup_step_s=self._warmup_step_s,
            timed_elapsed_s=self._timed_elapsed_s,
            samples_s=self._timed_elapsed_s,
            bookkeeping_s=self._bookkeeping_s,
            data_wait_host_s=self._data_wait_host_s,
        )


def _next_phase(named: list[str], phase: str | None) -> str:
    """The phase a mark ends: the one it names, else the one after the previous mark's (the first: data wait)."""
    if phase is not None:
        return phase
    return PHASES[min(PHASES.index(named[-1]) + 1, len(PHASES) - 1)] if named else PHASES[0]


def _phase_sums(named: list[str], durations: list[float]) -> dict[str, float]:
    """One step's seconds per phase: each stretch added to the phase its mark ended."""
    sums = dict.fromkeys(PHASES, 0.0)
    for phase, seconds in zip(named, durations, strict=True):
        sums[phase] += seconds
    return sums


def _event_seconds(start: Any, end: Any) -> float:
    return float(start.elapsed_time(end)) / 1000.0


def select_device(name: str = "auto") -> Device:
    """`auto` picks CUDA when available, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return Device()
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                "--device cuda was asked for but torch sees no CUDA device",
                hint="use --device cpu, or install a CUDA build of torch on a GPU machine",
            )
        return CudaDevice()
    raise UsageError(f"unknown device {name!r}", where="--device", hint="use auto, cpu or cuda")


def cpu_model() -> str:
    """The CPU model name, from /proc/cpuinfo where available."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _status_kib(field: str) -> int | None:
    try:
        with open(_PROC_STATUS, encoding="utf-8") as handle:
            match = re.search(rf"^{field}:\s+(\d+) kB", handle.read(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def _current_rss_bytes() -> int:
    rss = _status_kib("VmRSS")
    if rss is not None:
        return rss
    return _lifetime_peak_rss_bytes()


_MALLINFO2_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2: ten size_t fields
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]  # noqa: RUF012 - ctypes reads it


def _load_mallinfo2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = libc.mallinfo2  # glibc >= 2.33; musl and older glibc have none
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return function


_MALLINFO2 = _load_mallinfo2()


def _heap_in_use_bytes() -> int | None:
    """Bytes allocated through malloc and not yet freed (arena chunks plus mmapped blocks), or None."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


def _reset_peak_rss() -> bool:
    # Writing 5 to clear_refs resets the peak RSS (VmHWM) on Linux >= 4.0 (proc(5)).
    try:
        with open(_PROC_CLEAR_REFS, "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def _peak_rss_bytes() -> int:
    peak = _status_kib("VmHWM")
    return peak if peak is not None else _lifetime_peak_rss_bytes()


def _lifetime_peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _nvidia_driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py, optional
    except ImportError:
        return os.environ.get("NVIDIA_DRIVER_VERSION")
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing or unusable: the driver is optional metadata
        return None
    return version.decode() if isinstance(version, bytes) else str(version)
