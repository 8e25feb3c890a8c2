"""A built-in workload with a planted slowdown, to measure whether `perfgate check` catches it.

`benchmarks/planted.py:lm` (and `:vision`) returns the built-in small workload unchanged: same name,
model, data and losses, so its baseline is the built-in's and a check compares like with like. When
the environment variable `PERFGATE_PLANTED_SLOWDOWN` is a fraction above zero (e.g. `0.10`), every
training step (warm-up and timed) sleeps that fraction of the workload's typical step time inside
`loss(model, batch)`, after the loss is computed, so the loss value stays bit-identical.

The typical step time is not measured here (timing the first loss calls would be unreliable); it comes
from `PERFGATE_PLANTED_STEP_S`, which `benchmarks/power.py real` sets from the baseline's median step
time: either one number of seconds for every config, or `config=seconds` pairs separated by commas
(`fp32=0.031,bf16=0.045`), in which case the config is recognised from the loss call (a compiled
model is `bf16-compile`, autocast on is `bf16`, otherwise `fp32`). `time.sleep` is used rather than
busy work so the delay does not compete for the CPU cores the step itself uses.

Each trial runs in a fresh process that inherits the environment, so setting the variables around
`perfgate check` is enough:

    PERFGATE_PLANTED_SLOWDOWN=0.10 PERFGATE_PLANTED_STEP_S=0.031 \\
        python -m perfgate check benchmarks/planted.py:lm --configs fp32
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from perfgate import builtin
from perfgate.workload import Workload

SLOWDOWN_VARIABLE = "PERFGATE_PLANTED_SLOWDOWN"
STEP_VARIABLE = "PERFGATE_PLANTED_STEP_S"


def lm() -> Workload:
    """The built-in `lm` workload (small), with the planted slowdown when it is switched on."""
    return planted(builtin.load("lm", "small"))


def vision() -> Workload:
    """The built-in `vision` workload (small), with the planted slowdown when it is switched on."""
    return planted(builtin.load("vision", "small"))


def planted(workload: Workload) -> Workload:
    """`workload` unchanged when no slowdown is asked for, else with a sleep in every loss call."""
    fraction = _slowdown_fraction()
    if fraction <= 0:
        return workload
    step_times = _step_times()
    original_loss = workload.loss
    delay_s: dict[str, float] = {}  # per process: a trial runs one config, decided at the first call

    def loss(model: Any, batch: Any) -> Any:
        value = original_loss(model, batch)
        if "s" not in delay_s:
            delay_s["s"] = fraction * _typical_step_s(step_times, model)
        time.sleep(delay_s["s"])
        return value

    return dataclasses.replace(workload, loss=loss)


def _slowdown_fraction() -> float:
    text = os.environ.get(SLOWDOWN_VARIABLE, "").strip()
    if not text:
        return 0.0
    try:
        fraction = float(text)
    except ValueError:
        raise ValueError(f"{SLOWDOWN_VARIABLE}={text!r} is not a number (give a fraction such as 0.10)") from None
    if not 0 <= fraction < 10:
        raise ValueError(f"{SLOWDOWN_VARIABLE}={text!r} is out of range (give a fraction such as 0.10)")
    return fraction


def _step_times() -> dict[str, float]:
    """`PERFGATE_PLANTED_STEP_S` as {config: seconds}; a plain number is stored under `*`."""
    text = os.environ.get(STEP_VARIABLE, "").strip()
    if not text:
        raise ValueError(
            f"{SLOWDOWN_VARIABLE} is set but {STEP_VARIABLE} is not: give the typical step time in seconds "
            "(benchmarks/power.py sets it from the baseline's median step time)"
        )
    try:
        if "=" not in text:
            times = {"*": float(text)}
        else:
            pairs = (item.split("=", 1) for item in text.split(",") if item.strip())
            times = {name.strip(): float(value) for name, value in pairs}
    except ValueError:
        raise ValueError(f"{STEP_VARIABLE}={text!r}: expected seconds, or config=seconds pairs") from None
    if not times or not all(0 < value < 3600 for value in times.values()):
        raise ValueError(f"{STEP_VARIABLE}={text!r}: step times must be positive seconds")
    return times


def _typical_step_s(step_times: dict[str, float], model: Any) -> float:
    if "*" in step_times:
        return step_times["*"]
    config = _config_of(model)
    if config not in step_times:
        raise ValueError(f"{STEP_VARIABLE} gives no step time for config {config} (has {', '.join(step_times)})")
    return step_times[config]


def _config_of(model: Any) -> str:
    """The lab config a loss call runs under, recognised from the model it is handed."""
    import torch

    if hasattr(model, "_orig_mod"):  # torch.compile's wrapper module
        return "bf16-compile"
    device = next(iter(model.parameters())).device.type
    return "bf16" if torch.is_autocast_enabled(device) else "fp32"
