"""What the lab's table reads beside its figures, as shapes: each config's use of the hardware (achieved FLOP/s and,
where the GPU's peak is known, model FLOPs utilisation) and the reading of the lab's speedups
(`judge.utilisation` and `judge.reading` compute them; every report reads them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

PEAK_SETTING = "peak_tflops"  # the `[tool.perfgate]` key whose figures replace the table's


@dataclass(frozen=True)
class GpuPeak:
    """One GPU model's dense peak, TFLOP/s: bf16 on its tensor cores (None: it has no bf16 tensor cores) and fp32
    on its CUDA cores, without tensor cores."""

    model: str  # as the reports name it: "H100 SXM"
    pattern: str  # searched for in the device name, lower case (`gpu_peak`)
    bf16_tflops: float | None
    fp32_tflops: float

    def tflops(self, dtype: str) -> float | None:
        """The peak for `dtype` (one of `PEAK_DTYPES`), None where the GPU has none."""
        return self.bf16_tflops if dtype == "bf16" else self.fp32_tflops


def is_mig(device_name: str) -> bool:
    return re.search(r"\bmig\b", device_name.lower()) is not None


@dataclass(frozen=True)
class Utilisation:
    """One config's use of the hardware: its counted FLOPs at its measured speed and, where the peak is known, the
    share of it."""

    config: str
    dtype: str  # which peak applies: "bf16" or "fp32"
    flops_per_sample: float  # counted over one step (forward, backward, optimizer), per sample
    achieved_flops_per_s: float  # flops_per_sample x the median samples/s over trials (the lab table's figure)
    peak_flops_per_s: float | None  # the devices' dense peak for `dtype` (one GPU's x ranks); None: not known
    peak_from: str | None  # whose peak: the table's GPU model ("H100 SXM") or PEAK_SETTING

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation: achieved over peak FLOP/s; None without a peak."""
        if self.peak_flops_per_s is None or self.peak_flops_per_s <= 0:
            return None
        return self.achieved_flops_per_s / self.peak_flops_per_s


@dataclass(frozen=True)
class WorkloadUtilisation:
    """Each counted config's `Utilisation` on one workload's device."""

    device: str  # "cpu" or "cuda", where the FLOPs were counted and the steps timed
    gpu_name: str | None  # the CUDA device as torch or NVML named it; None on the CPU, or where no record has it
    gpu: GpuPeak | None  # the table's row for it
    ranks: int  # the devices a data-parallel trial ran on (1: one process)
    configs: dict[str, Utilisation]  # only the configs whose FLOPs were counted, in the lab's order

    @property
    def line(self) -> str | None:
        """The lab reading's line: the MFU of each config where the peak is known, its FLOP/s otherwise."""
        if not self.configs:
            return None
        items, owner = [], None
        for use in self.configs.values():
            achieved = format_flops(use.achieved_flops_per_s)
            mfu = use.mfu
            if mfu is None or use.peak_flops_per_s is None:
                missing = "" if self.gpu is None or use.dtype != "bf16" else f" (the {self.gpu.model} has no bf16 peak)"
                items.append(f"{use.config}: {achieved}{missing}")
                continue
            whose = self._whose(use)
            peak = f"{use.peak_flops_per_s / 1e12:g} TFLOP/s"  # as the datasheet or the setting gives it
            items.append(
                f"{use.config}: {format_share(mfu)}{f' of {whose}' if whose != owner else ''} ({achieved} of {peak})"
            )
            owner = whose
        if owner is None:
            head = "Achieved FLOP/s (counted FLOPs per sample x samples/s)"
            tail = f"; {self._no_peak()}" if self.device == "cuda" and self.gpu is None else ""
            return f"{head}: {'; '.join(items)}{tail}."
        line = f"Model FLOPs utilisation (counted FLOPs x samples/s over the dense peak): {'; '.join(items)}."
        over = [u.config for u in self.configs.values() if u.dtype == "fp32" and (u.mfu or 0.0) > 1.0]
        if over:
            line += (
                f" {', '.join(over)} is above the fp32 peak: TF32 tensor cores did part of the work (cuDNN's "
                "convolutions use them by default, and a workload may allow them for matmuls); for its share of "
                f"them, set {PEAK_SETTING} = {{fp32 = ...}} in [tool.perfgate] to the GPU's dense TF32 figure."
            )
        return line

    def _whose(self, use: Utilisation) -> str:
        if use.peak_from == PEAK_SETTING:
            return f"the {PEAK_SETTING} in [tool.perfgate]" + (f" x {self.ranks} ranks" if self.ranks > 1 else "")
        model = use.peak_from or "GPU"
        return f"{self.ranks} {model}s' peak" if self.ranks > 1 else f"the {model}'s peak"

    def _no_peak(self) -> str:
        if self.gpu_name is None:
            return f"no record names the GPU: {PEAK_SETTING} in [tool.perfgate] gives its peak"
        if is_mig(self.gpu_name):
            return f"no peak for a MIG slice ({self.gpu_name}): {PEAK_SETTING} in [tool.perfgate] gives it"
        return f"perfgate knows no peak for the {self.gpu_name}: {PEAK_SETTING} in [tool.perfgate] gives it"


def format_flops(flops_per_s: float) -> str:
    """FLOP/s with an SI prefix and three significant digits: `12.3 GFLOP/s`, `376 TFLOP/s`."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(flops_per_s) >= factor:
            return f"{_three_digits(flops_per_s / factor)} {prefix}FLOP/s"
    return f"{_three_digits(flops_per_s)} FLOP/s"


def _three_digits(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def format_share(mfu: float) -> str:
    """A utilisation as a percentage: `38%`, `0.4%` below 1%, `<0.1%` below that."""
    if mfu >= 0.01:
        return f"{mfu:.0%}"
    return f"{mfu:.1%}" if mfu >= 0.001 else "<0.1%"


@dataclass(frozen=True)
class LabReading:
    """The two speedups (None where a config is missing) and what they suggest, one line each."""

    bf16_speedup: float | None
    compile_speedup: float | None
    lines: tuple[str, ...]
