"""The device abstraction on the CPU everywhere, and on CUDA wherever CUDA is available."""

from __future__ import annotations

import time

import pytest
import torch

from perfgate.errors import UsageError
from perfgate.measure.device import CudaDevice, Device, _heap_in_use_bytes, select_device
from tests.helpers.cuda import needs_cuda


def test_cpu_peak_memory_counts_what_was_allocated_after_setup():
    device = Device()
    device.mark_setup_done()
    device.reset_peak_memory()
    block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
    peak = device.peak_memory()
    del block
    assert peak.kind == "cpu-rss-above-setup"
    assert peak.peak_bytes >= 60 * 1024 * 1024


def test_cpu_peak_window_starts_again_after_reset():
    device = Device()
    device.mark_setup_done()
    block = torch.ones(64 * 1024 * 1024 // 4)
    del block
    device.reset_peak_memory()
    assert device.peak_memory().peak_bytes < 32 * 1024 * 1024


@pytest.mark.skipif(_heap_in_use_bytes() is None, reason="needs glibc's mallinfo2")
def test_cpu_memory_in_use_counts_what_is_kept_and_not_what_was_freed():
    device = Device()
    device.mark_setup_done()
    kept, readings = [], []
    for _ in range(10):
        kept.append(torch.ones(48 * 1024 // 4))  # 48 KiB kept per step, as a leaked autograd graph might
        scratch = torch.ones(8 << 20)  # 32 MiB freed each step: resident memory may keep it, malloc does not
        del scratch
        readings.append(device.memory_now())
    growth = [b - a for a, b in zip(readings, readings[1:], strict=False)]
    assert all(40 * 1024 <= g <= 56 * 1024 for g in growth), growth
    kept.clear()
    assert device.memory_now() < readings[0]


def test_move_keeps_the_batch_structure():
    device = Device()
    batch = {"x": torch.ones(2), "pair": (torch.zeros(1), [torch.ones(1)]), "label": 3}
    moved = device.move(batch, non_blocking=False)
    assert set(moved) == {"x", "pair", "label"}
    assert isinstance(moved["pair"], tuple) and isinstance(moved["pair"][1], list)
    assert moved["label"] == 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_asking_for_cuda_without_it_says_what_to_do():
    with pytest.raises(UsageError, match="torch sees no CUDA device"):
        select_device("cuda")


def test_auto_picks_cuda_only_when_available():
    assert select_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@needs_cuda
def test_cuda_peak_memory_is_max_allocated_and_reserved():
    device = CudaDevice()
    device.mark_setup_done()
    device.reset_peak_memory()
    block = torch.ones(64 * 1024 * 1024 // 4, device="cuda")
    peak = device.peak_memory()
    del block
    assert peak.kind == "cuda-max-allocated"
    assert peak.peak_bytes >= 64 * 1024 * 1024
    assert peak.reserved_bytes is not None and peak.reserved_bytes >= peak.peak_bytes


@needs_cuda
def test_cuda_clock_waits_for_queued_work():
    device = CudaDevice()
    a = torch.randn(4096, 4096, device="cuda")
    start = device.now()
    for _ in range(20):
        a = a @ a / 64
    elapsed = device.now() - start
    assert elapsed > 0.001  # 20 large matmuls cannot finish in a millisecond; without sync we'd read ~0
    assert device.describe().count >= 1


@needs_cuda
def test_cuda_memory_in_use_counts_device_tensors_and_the_host_heap():
    device = CudaDevice()
    device.mark_setup_done()
    before = device.memory_now()
    on_device = torch.ones(1 << 20, device="cuda")  # 4 MiB
    on_host = [torch.ones(48 * 1024 // 4) for _ in range(10)]  # 480 KiB, as a kept graph's nodes are
    grown = device.memory_now() - before
    assert grown >= (4 << 20) + (400 << 10) if _heap_in_use_bytes() is not None else grown >= 4 << 20
    del on_device, on_host


@needs_cuda
def test_pinned_batches_move_to_cuda():
    moved = CudaDevice().move((torch.ones(2).pin_memory(),), non_blocking=True)
    assert moved[0].device.type == "cuda"


def test_cpu_marks_time_the_work_between_them():
    device = Device()
    start = device.mark()
    time.sleep(0.02)
    assert 0.02 <= device.seconds_between(start, device.mark()) < 1.0


@needs_cuda
def test_cuda_marks_time_queued_work_once_the_device_synchronised():
    """The all-reduce timer's marks on CUDA are events on the stream: they time the device's work, not the
    host's enqueueing, and are read after a synchronise (`Device.now`)."""
    device = CudaDevice()
    a = torch.randn(4096, 4096, device=device.torch_device)
    start = device.mark()
    for _ in range(20):
        a = a @ a / 64
    end = device.mark()
    device.now()  # synchronise, as a trial's step does before the timer reads its marks
    assert device.seconds_between(start, end) > 0.001  # 20 large matmuls take longer than a millisecond
    assert device.torch_device.index == torch.cuda.current_device()
