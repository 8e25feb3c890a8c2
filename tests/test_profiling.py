"""The profiling pass's pieces: a real torch.profiler run summarised, and operators compared."""

from __future__ import annotations

import json

import pytest
import torch

from perfgate.judge.diagnosis import grown_operators
from perfgate.measure.profiling import StepProfiler
from perfgate.records.shapes import OperatorRow


@pytest.mark.e2e  # a real torch.profiler run: about 2 s
def test_a_profiled_loop_writes_a_chrome_trace_and_its_top_operators_per_step(tmp_path):
    trace = tmp_path / "t" / "w-fp32.trace.json"
    profiler = StepProfiler(trace, "cpu", steps=6)
    a = torch.randn(64, 64)
    profiler.start()
    for _ in range(6):
        torch.tanh(a @ a).sum()
        profiler.step()
    profiler.stop()
    assert "traceEvents" in json.loads(trace.read_text())
    names = {row.name for row in profiler.top_operators}
    assert "aten::mm" in names and not any(name.startswith("ProfilerStep") for name in names)
    mm = next(row for row in profiler.top_operators if row.name == "aten::mm")
    assert mm.calls_per_step == 1.0 and mm.self_cpu_s_per_step > 0


def test_grown_operators_are_those_whose_self_time_grew_most():
    before = [OperatorRow("aten::mm", calls_per_step=1.0, self_cpu_s_per_step=0.001, self_device_s_per_step=0.0)]
    after = [
        OperatorRow("aten::mm", calls_per_step=1.0, self_cpu_s_per_step=0.002, self_device_s_per_step=0.0),
        OperatorRow("aten::tanh", calls_per_step=1.0, self_cpu_s_per_step=0.004, self_device_s_per_step=0.0),
        OperatorRow("aten::add", calls_per_step=1.0, self_cpu_s_per_step=0.0001, self_device_s_per_step=0.0),
    ]
    assert [name for name, _, _ in grown_operators(before, after)] == ["aten::tanh", "aten::mm", "aten::add"]
    assert grown_operators(after, before) == []
