"""The profiling pass: `torch.profiler` over a trial's timed steps, in a trial of its own.

Profiling slows every operation, so it never runs in a trial whose times count: `--profile` adds one
trial per workload and config whose step times are thrown away. It writes a Chrome/Perfetto trace and
keeps the operators with the most self time per step, which `update` stores with the baseline and a
later regression compares against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfgate.records.shapes import OperatorRow

TOP_OPERATORS = 20
_WAIT, _WARMUP = 1, 1


class StepProfiler:
    """`torch.profiler` on a schedule over the timed steps: skip one, warm up one, record the rest."""

    def __init__(self, trace_path: Path, device_type: str, steps: int) -> None:
        import torch.profiler as tp

        activities = [tp.ProfilerActivity.CPU]
        if device_type == "cuda":
            activities.append(tp.ProfilerActivity.CUDA)
        self.active_steps = max(1, steps - _WAIT - _WARMUP)
        self.trace_path = trace_path
        self.device_type = device_type
        self._profiler = tp.profile(
            activities=activities,
            schedule=tp.schedule(
                wait=min(_WAIT, steps - 1), warmup=0 if steps < 3 else _WARMUP, active=self.active_steps, repeat=1
            ),
            on_trace_ready=self._ready,
            **keep_events(tp.profile),
        )
        self.top_operators: list[OperatorRow] = []

    def start(self) -> None:
        self._profiler.start()

    def step(self) -> None:
        self._profiler.step()

    def stop(self) -> None:
        self._profiler.stop()

    def _ready(self, profiler: Any) -> None:
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(self.trace_path))
        self.top_operators = top_operators(profiler.key_averages(), self.active_steps)


def top_operators(averages: Any, steps: int, limit: int = TOP_OPERATORS) -> list[OperatorRow]:
    """The operators with the most self time, per step: name, calls, CPU and device self time in seconds."""
    rows = []
    for event in averages:
        if str(event.key).startswith("ProfilerStep"):  # the profiler's own per-step span
            continue
        cpu_us = float(getattr(event, "self_cpu_time_total", 0.0) or 0.0)
        device_us = float(_device_self_us(event))
        rows.append(
            OperatorRow(
                name=str(event.key),
                calls_per_step=event.count / steps,
                self_cpu_s_per_step=cpu_us / 1e6 / steps,
                self_device_s_per_step=device_us / 1e6 / steps,
            )
        )
    rows.sort(key=lambda row: row.self_s, reverse=True)
    return rows[:limit]


def _device_self_us(event: Any) -> float:
    """Self device time: `self_device_time_total` in torch 2.4 and later, `self_cuda_time_total` before."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def keep_events(profile: Any) -> dict[str, Any]:
    """`acc_events=True` where this torch has it: newer torch warns that a profiler's cycle clears the events
    otherwise (with a schedule, and on CUDA without one: torch 2.11 on an H200), a warning the test suite turns into
    an error."""
    import inspect

    try:
        parameters = inspect.signature(profile.__init__).parameters
    except (TypeError, ValueError):
        return {}
    return {"acc_events": True} if "acc_events" in parameters else {}
