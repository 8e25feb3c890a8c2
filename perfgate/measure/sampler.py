"""System metrics sampled during a trial's timed steps: CPU per core and of the trial, GPU utilisation, and the
CPU time the trial's child processes (its DataLoader workers) used.

A daemon thread takes a sample every `interval_s` with psutil (CPU per core and the trial process's
CPU) and, on CUDA with nvidia-ml-py installed, NVML (GPU utilisation). The workers' CPU seconds are read
once at `start` and once at `stop` (see `children_cpu_s`).
It sleeps between samples and reads a few counters per sample; `benchmarks/sampler.py` measures its
cost on a training loop (docs/performance.md).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from perfgate.records.shapes import SystemSummary, UsageSpread

DEFAULT_INTERVAL_S = 0.05


@dataclass
class Samples:
    cpu_percent_per_core: list[list[float]] = field(default_factory=list)  # per sample, per core, 0-100
    process_cpu_percent: list[float] = field(default_factory=list)  # the trial process; 100 = one core
    gpu_util_percent: list[float] = field(default_factory=list)
    loader_cpu_s: float | None = None  # CPU seconds of the trial's child processes between start and stop

    def summary(self) -> SystemSummary:
        """Means and 95th percentiles, as the results file keeps them."""
        from perfgate.records.summary import percentile

        def stats(values: list[float]) -> UsageSpread | None:
            if not values:
                return None
            return UsageSpread(mean=sum(values) / len(values), p95=percentile(values, 95))

        busiest = [max(cores) for cores in self.cpu_percent_per_core if cores]
        overall = [sum(cores) / len(cores) for cores in self.cpu_percent_per_core if cores]
        return SystemSummary(
            samples=len(self.cpu_percent_per_core),
            cpu_percent=stats(overall),
            busiest_core_percent=stats(busiest),
            process_cpu_percent=stats(self.process_cpu_percent),
            gpu_util_percent=stats(self.gpu_util_percent),
            loader_cpu_s=self.loader_cpu_s,
        )


class SystemSampler:
    """Start before the timed steps and stop after them: `with SystemSampler(cuda_index) as sampler:`, or
    `start()` and `stop()` where the timed region does not fit a `with` block."""

    def __init__(self, cuda_index: int | None = None, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.samples = Samples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perfgate-sampler", daemon=True)
        self._cuda_index = cuda_index
        self._children_started: float | None = None

    def __enter__(self) -> SystemSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> SystemSampler:
        import psutil

        self._process = psutil.Process()
        self._process.cpu_percent(None)  # the first reading only starts the interval
        psutil.cpu_percent(None, percpu=True)
        self._nvml = _nvml_handle(self._cuda_index)
        self._children_started = children_cpu_s(self._process)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (safe to call when sampling never started, and more than once)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            if self._children_started is not None and (now := children_cpu_s(self._process)) is not None:
                self.samples.loader_cpu_s = max(0.0, now - self._children_started)

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(self.interval_s):
            self.samples.cpu_percent_per_core.append(psutil.cpu_percent(None, percpu=True))
            self.samples.process_cpu_percent.append(self._process.cpu_percent(None))
            if self._nvml is not None:
                import pynvml

                self.samples.gpu_util_percent.append(float(pynvml.nvmlDeviceGetUtilizationRates(self._nvml).gpu))


def children_cpu_s(process: Any) -> float | None:
    """CPU seconds (user and system) used so far by this process's children, the DataLoader workers: those
    still running (psutil) and those already exited and waited for (`os.times`: a worker that exits between
    two readings is counted there, so the difference of two readings is exact). None where it cannot be read.
    """
    import psutil

    try:
        finished = os.times()
        total = finished.children_user + finished.children_system
        for child in process.children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:  # exited since the listing: os.times counts it once it is waited for
                continue
            total += times.user + times.system
    except (psutil.Error, OSError):
        return None
    return total


def _nvml_handle(index: int | None) -> Any:
    if index is None:
        return None
    try:
        import pynvml  # nvidia-ml-py, optional

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no NVML: no GPU utilisation, the rest still works
        return None
