"""System metrics sampled during a trial's timed steps: CPU per core and of the trial, GPU utilisation, and the
CPU time the trial's child processes (its DataLoader workers) used.

A daemon thread takes a sample every `interval_s` with psutil (CPU per core and the trial process's
CPU) and, on CUDA with nvidia-ml-py installed, NVML (GPU utilisation, and the GPU's clocks, power,
temperature and clocks-event reasons: `gpu.py`). The workers' CPU seconds are read
once at `start` and once at `stop` (see `children_cpu_s`). Given the DataLoader workers' process ids, it
reads their unique memory at `start`, every `LOADER_MEMORY_INTERVAL_S` or less often (what the readings
cost stays under `LOADER_MEMORY_SHARE` of one core) and at `stop`, and keeps the peak of the sum over the
live workers (see `workers_unique_bytes`).
It sleeps between samples and reads a few counters per sample; `benchmarks/sampler.py` measures its
cost on a training loop (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfgate.measure.gpu import GpuReading, gpu_facts, gpu_identity, nvml_handle, read_gpu
from perfgate.records.shapes import SystemSummary, UsageSpread

DEFAULT_INTERVAL_S = 0.05
# Reading a process's unique memory makes the kernel walk its memory map (/proc/PID/smaps_rollup): for two
# workers of a torch process, 15 ms of CPU a reading with 20 MiB between them, 22 ms with 150 MiB (a shared
# 2-core machine), against 0.06 ms for a CPU sample. So the workers' memory is read at most 5 times a second,
# and less often where a reading takes longer, so that the readings take at most 5% of one core (outside
# the GIL: the time goes to the read system call); a cache that only grows is caught by the reading at stop.
LOADER_MEMORY_INTERVAL_S = 0.2
LOADER_MEMORY_SHARE = 0.05


@dataclass
class Samples:
    cpu_percent_per_core: list[list[float]] = field(default_factory=list)  # per sample, per core, 0-100
    process_cpu_percent: list[float] = field(default_factory=list)  # the trial process; 100 = one core
    gpu_util_percent: list[float] = field(default_factory=list)
    loader_cpu_s: float | None = None  # CPU seconds of the trial's child processes between start and stop
    gpu_name: str | None = None  # NVML's, read at start; None without CUDA and NVML
    gpu_power_limit_w: float | None = None
    gpu_sm_clock_limit_mhz: float | None = None  # the card's top SM clock (NVML's maximum)
    gpu_readings: list[GpuReading] = field(default_factory=list)  # clocks, power, temperature, clocks-event reasons
    # the peak over the samples of the DataLoader workers' unique memory summed over the live workers, and the
    # most workers seen live; None where not measured (no worker ids given, or their memory could not be read)
    loader_workers_bytes: int | None = None
    loader_workers: int | None = None

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
            gpu=gpu_facts(self.gpu_name, self.gpu_readings, self.gpu_power_limit_w, self.gpu_sm_clock_limit_mhz),
        )


class SystemSampler:
    """Start before the timed steps and stop after them: `with SystemSampler(cuda_index) as sampler:`, or
    `start()` and `stop()` where the timed region does not fit a `with` block."""

    def __init__(
        self,
        cuda_index: int | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        loader_worker_pids: Sequence[int] | None = None,
        memory_interval_s: float = LOADER_MEMORY_INTERVAL_S,
    ) -> None:
        self.interval_s = interval_s
        self.memory_interval_s = memory_interval_s
        self._worker_pids = loader_worker_pids  # None: the workers' memory is not measured
        self._workers: list[Any] = []
        self._workers_unreadable = False
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
        if self._nvml is not None:
            samples = self.samples
            samples.gpu_name, samples.gpu_power_limit_w, samples.gpu_sm_clock_limit_mhz = gpu_identity(self._nvml)
        self._children_started = children_cpu_s(self._process)
        if self._worker_pids is not None:
            self._workers = _processes(self._worker_pids)
            self._read_workers()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (safe to call when sampling never started, and more than once)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            if self._children_started is not None and (now := children_cpu_s(self._process)) is not None:
                self.samples.loader_cpu_s = max(0.0, now - self._children_started)
            if self._worker_pids is not None:
                self._read_workers()
                if self._workers_unreadable:
                    self.samples.loader_workers_bytes = self.samples.loader_workers = None

    def _read_workers(self) -> None:
        """One reading of the workers' memory, kept where the sum is the largest so far."""
        reading = workers_unique_bytes(self._workers)
        if reading is None:
            self._workers_unreadable = True
            return
        total, live = reading
        self.samples.loader_workers_bytes = max(self.samples.loader_workers_bytes or 0, total)
        self.samples.loader_workers = max(self.samples.loader_workers or 0, live)

    def _run(self) -> None:
        import psutil

        memory_due = time.monotonic() + self.memory_interval_s
        while not self._stop.wait(self.interval_s):
            if self._worker_pids is not None and (now := time.monotonic()) >= memory_due:
                self._read_workers()
                memory_due = now + max(self.memory_interval_s, (time.monotonic() - now) / LOADER_MEMORY_SHARE)
            self.samples.cpu_percent_per_core.append(psutil.cpu_percent(None, percpu=True))
            self.samples.process_cpu_percent.append(self._process.cpu_percent(None))
            if self._nvml is not None:
                import pynvml

                self.samples.gpu_util_percent.append(float(pynvml.nvmlDeviceGetUtilizationRates(self._nvml).gpu))
                self.samples.gpu_readings.append(read_gpu(self._nvml))


def loader_worker_pids(batches: Any) -> list[int] | None:
    """The process ids of a DataLoader iterator's workers: [] for a single-process loader, None where torch
    does not say. torch keeps them in the iterator's private `_workers` (torch/utils/data/dataloader.py,
    `_MultiProcessingDataLoaderIter`); the trial's other children (torch.compile's compile workers, a
    forkserver) are no loader workers, so the process's children would not do."""
    if getattr(batches, "_num_workers", None) == 0:
        return []
    workers = getattr(batches, "_workers", None)
    if not isinstance(workers, list):
        return None
    pids = [getattr(worker, "pid", None) for worker in workers]
    return [pid for pid in pids if isinstance(pid, int)]


def workers_unique_bytes(workers: Sequence[Any]) -> tuple[int, int] | None:
    """The unique memory (USS) of the workers (psutil processes) still alive, summed, and how many were alive;
    None where a live worker's memory cannot be read.

    USS rather than PSS or RSS: a worker forked from the training process shares its pages, copy-on-write,
    and the training process's resident memory counts them already. RSS would count them again in every
    worker, and PSS would still charge each worker its share of them; USS is what a worker adds on top of
    the training process: the pages only it maps (what it loaded, kept or copied), so the sum over the
    workers plus the training process counts every page once.
    """
    import psutil

    total = live = 0
    for worker in workers:
        try:
            total += int(worker.memory_full_info().uss)
        except psutil.NoSuchProcess:  # exited (or a zombie): a worker's memory counts while it lives
            continue
        except psutil.Error:
            return None
        live += 1
    return total, live


def _processes(pids: Sequence[int]) -> list[Any]:
    import psutil

    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            processes.append(psutil.Process(pid))
    return processes


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
        return nvml_handle(index)  # the GPU torch calls `index`, whatever CUDA_VISIBLE_DEVICES says
    except Exception:  # no NVML: no GPU utilisation, the rest still works
        return None
