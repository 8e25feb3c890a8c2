"""The one place that knows CPU from CUDA: clocks, synchronisation, transfers and peak memory.

Everything device-specific the trial needs goes through `Device`, so the CUDA path stays small and
testable wherever CUDA is available.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import resource
import sys
import time
from collections.abc import Mapping
from typing import Any

import torch

from perfgate.errors import UsageError
from perfgate.records.shapes import PeakMemory

_PROC_STATUS = "/proc/self/status"
_PROC_CLEAR_REFS = "/proc/self/clear_refs"


class Device:
    """Clock, transfers and peak memory for one torch device type."""

    type: str = "cpu"

    def __init__(self) -> None:
        self.torch_device = torch.device(self.type)
        self._setup_bytes = 0
        self._setup_heap: int | None = None

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
        self._setup_bytes = _current_rss_bytes()
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

    def peak_memory(self) -> PeakMemory:
        """Peak memory in the window since `reset_peak_memory`."""
        peak = _peak_rss_bytes()
        return PeakMemory(
            kind="cpu-rss-above-setup" if self._peak_reset else "cpu-rss-above-setup-lifetime-peak",
            peak_bytes=max(0, peak - self._setup_bytes),
            reserved_bytes=None,
            setup_bytes=self._setup_bytes,
        )

    def describe(self) -> dict[str, Any]:
        """Name, count and driver of the device, for the environment fingerprint."""
        return {"type": "cpu", "name": cpu_model(), "count": 1, "driver": None}


class CudaDevice(Device):
    """CUDA: every clock read is preceded by `torch.cuda.synchronize()`."""

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

    def mark_setup_done(self) -> None:
        self._setup_bytes = torch.cuda.memory_allocated()
        self._setup_heap = _heap_in_use_bytes()

    def reset_peak_memory(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def memory_now(self) -> int:
        # Device tensors plus the host heap: a kept loss keeps its autograd graph's nodes on the host.
        return int(torch.cuda.memory_allocated()) + (self._host_heap_above_setup() or 0)

    def peak_memory(self) -> PeakMemory:
        torch.cuda.synchronize()
        return PeakMemory(
            kind="cuda-max-allocated",
            peak_bytes=int(torch.cuda.max_memory_allocated()),
            reserved_bytes=int(torch.cuda.max_memory_reserved()),
            setup_bytes=self._setup_bytes,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "type": "cuda",
            "name": torch.cuda.get_device_name(0),
            "count": torch.cuda.device_count(),
            "driver": _nvidia_driver_version(),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        }


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
