"""The one place that knows CPU from CUDA: clocks, synchronisation, transfers and peak memory.

Everything device-specific the trial needs goes through `Device`, so the CUDA path stays small and
testable wherever CUDA is available.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import time
from collections.abc import Mapping
from typing import Any

import torch

from perfgate.errors import UsageError

_PROC_STATUS = "/proc/self/status"
_PROC_CLEAR_REFS = "/proc/self/clear_refs"


class Device:
    """Clock, transfers and peak memory for one torch device type."""

    type: str = "cpu"

    def __init__(self) -> None:
        self.torch_device = torch.device(self.type)

    def synchronize(self) -> None:
        """Wait until queued device work is done (a no-op on the CPU)."""

    def now(self) -> float:
        """Synchronise, then read a monotonic clock in seconds."""
        self.synchronize()
        return time.perf_counter()

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

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window."""
        self._peak_reset = _reset_peak_rss()

    def memory_now(self) -> int:
        """Memory in use now, in bytes (CPU: resident memory above the level after setup)."""
        return max(0, _current_rss_bytes() - self._setup_bytes)

    def peak_memory(self) -> dict[str, Any]:
        """Peak memory in the window since `reset_peak_memory`."""
        peak = _peak_rss_bytes()
        return {
            "kind": "cpu-rss-above-setup" if self._peak_reset else "cpu-rss-above-setup-lifetime-peak",
            "peak_bytes": max(0, peak - self._setup_bytes),
            "reserved_bytes": None,
            "setup_bytes": self._setup_bytes,
        }

    def describe(self) -> dict[str, Any]:
        """Name, count and driver of the device, for the environment fingerprint."""
        return {"type": "cpu", "name": cpu_model(), "count": 1, "driver": None}


class CudaDevice(Device):
    """CUDA: every clock read is preceded by `torch.cuda.synchronize()`."""

    type = "cuda"

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def mark_setup_done(self) -> None:
        self._setup_bytes = torch.cuda.memory_allocated()

    def reset_peak_memory(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def memory_now(self) -> int:
        return int(torch.cuda.memory_allocated())

    def peak_memory(self) -> dict[str, Any]:
        torch.cuda.synchronize()
        return {
            "kind": "cuda-max-allocated",
            "peak_bytes": int(torch.cuda.max_memory_allocated()),
            "reserved_bytes": int(torch.cuda.max_memory_reserved()),
            "setup_bytes": self._setup_bytes,
        }

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
