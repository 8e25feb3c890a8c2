"""The GPU's own state over a trial's timed steps, read with NVML (nvidia-ml-py, optional): its name, SM and
memory clocks, power, temperature and the clocks-event reasons, the bitmask NVML sets when the GPU runs
below its top clocks (power cap, thermal, ...).

The system sampler (`sampler.py`) takes one `GpuReading` per sample; `gpu_facts` turns the readings into the
trial's `GpuFacts`, and `decode_clocks_event_reasons` names a bitmask. Both are pure functions of NVML's raw
values, so they are tested without a GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.records.shapes import CLOCK_DROP, SLOWING_REASONS, GpuFacts

# NVML's clocks-event reason bits (nvml.h, `nvmlClocksEventReason*`; `nvmlClocksThrottleReason*` before
# driver 535: the same bits), https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html
CLOCKS_EVENT_BITS = {
    0x1: "idle",
    0x2: "applications clocks setting",
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
    0x100: "display clock setting",
}


@dataclass(frozen=True)
class GpuReading:
    """One NVML reading of the GPU, as NVML gives it (clocks in MHz, power in W); None where NVML could not
    read it (a GPU or driver without that counter)."""

    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    reasons_mask: int | None = None  # the clocks-event reasons bitmask


def decode_clocks_event_reasons(mask: int) -> tuple[str, ...]:
    """The names of the reasons set in NVML's bitmask, in bit order (`0x24` -> power cap, thermal (software));
    a bit NVML documents after this list is named by its value (`bit 0x200`)."""
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(CLOCKS_EVENT_BITS.get(bit, f"bit 0x{bit:x}"))
        bit <<= 1
    return tuple(names)


def gpu_facts(
    name: str | None,
    readings: Sequence[GpuReading],
    power_limit_w: float | None = None,
    sm_clock_limit_mhz: float | None = None,
) -> GpuFacts | None:
    """A trial's GPU facts from its readings over the timed steps: clocks' mean and minimum (and the SM clock's
    maximum), power's mean and maximum, the hottest temperature, in how many readings each clocks-event reason
    was set, and in how many the GPU was slowed: a slowing reason set and the SM clock CLOCK_DROP or more below
    the card's top (`sm_clock_limit_mhz`, else the highest reading; a reading without a clock counts on its reason
    alone). None without a GPU name (no NVML)."""
    if name is None:
        return None

    def values(attribute: str) -> list[float]:
        return [v for r in readings if (v := getattr(r, attribute)) is not None]

    def mean(found: list[float]) -> float | None:
        return sum(found) / len(found) if found else None

    sm, memory, power, temperature = (
        values(a) for a in ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c")
    )
    top = sm_clock_limit_mhz or max(sm, default=None)
    reasons: Counter[str] = Counter()
    slowed = 0
    for reading in readings:
        if reading.reasons_mask is None:
            continue
        seen = decode_clocks_event_reasons(reading.reasons_mask)
        reasons.update(seen)
        clock = reading.sm_clock_mhz
        below = clock is None or top is None or clock < (1 - CLOCK_DROP) * top
        slowed += below and any(reason in SLOWING_REASONS for reason in seen)
    return GpuFacts(
        name=name,
        samples=len(readings),
        sm_clock_mean_mhz=mean(sm),
        sm_clock_min_mhz=min(sm, default=None),
        sm_clock_max_mhz=max(sm, default=None),
        memory_clock_mean_mhz=mean(memory),
        memory_clock_min_mhz=min(memory, default=None),
        power_mean_w=mean(power),
        power_max_w=max(power, default=None),
        power_limit_w=power_limit_w,
        temperature_max_c=max(temperature, default=None),
        reasons=dict(sorted(reasons.items())),
        slowed_samples=slowed,
        sm_clock_limit_mhz=sm_clock_limit_mhz,
    )


def gpu_identity(handle: Any) -> tuple[str | None, float | None, float | None]:
    """The GPU's name, enforced power limit (W) and top SM clock (MHz), read once before the timed steps; None
    where NVML cannot."""
    import pynvml

    name = _read(lambda: pynvml.nvmlDeviceGetName(handle))
    limit_mw = _read(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    top = _read(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    if isinstance(name, bytes):  # nvidia-ml-py before 11.515 returned bytes
        name = name.decode(errors="replace")
    limit = None if limit_mw is None else limit_mw / 1000
    return (None if name is None else str(name)), limit, (float(top) if top else None)


def read_gpu(handle: Any) -> GpuReading:
    """One reading of the GPU's clocks, power, temperature and clocks-event reasons."""
    import pynvml

    # Renamed in nvidia-ml-py 12.535 (clocks "events", not "throttling"); the older name still reads the same bits.
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    power_mw = _read(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
    return GpuReading(
        sm_clock_mhz=_read(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        memory_clock_mhz=_read(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        power_w=None if power_mw is None else power_mw / 1000,
        temperature_c=_read(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        reasons_mask=None if reasons is None else _read(lambda: int(reasons(handle))),
    )


def _read(call: Any) -> Any:
    """NVML's answer, or None where this GPU or driver does not support the reading."""
    import pynvml

    try:
        return call()
    except pynvml.NVMLError:
        return None


def nvml_handle(index: int) -> Any:
    """NVML's handle of the CUDA device torch numbers `index`: found by its UUID, since CUDA_VISIBLE_DEVICES
    renumbers torch's devices but not NVML's; by the index where torch gives no UUID NVML knows (a MIG slice)."""
    import pynvml
    import torch

    try:
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
    except (RuntimeError, AssertionError, pynvml.NVMLError):
        pass
    return pynvml.nvmlDeviceGetHandleByIndex(index)
