"""The lab's reading of its two speedups: fp32 to bf16, and bf16 to bf16 + torch.compile."""

from __future__ import annotations

from collections.abc import Mapping

from perfgate.records.reading import LabReading, WorkloadUtilisation
from perfgate.records.summary import ConfigSummary

# Below these the transition is "small" (the three-run lab's rule of thumb for bf16; compile's
# typical gain on a fused model is smaller, so its bar is lower).
BF16_SMALL = 1.20
COMPILE_SMALL = 1.10
DATA_WAIT_NOTABLE = 0.10


def read_lab(
    summaries: Mapping[str, ConfigSummary | None], utilisation: WorkloadUtilisation | None = None
) -> LabReading:
    """Interpret the speedups between configs that have results; with the configs' `utilisation`, say how much of
    the hardware each used."""
    fp32, bf16, compiled = (summaries.get(name) for name in ("fp32", "bf16", "bf16-compile"))
    lines: list[str] = []
    bf16_speedup = _ratio(bf16, fp32)
    compile_speedup = _ratio(compiled, bf16)
    if bf16_speedup is not None and bf16 is not None and fp32 is not None:
        lines.append(_read_bf16(bf16_speedup, bf16, _noise(bf16, fp32)))
    if compile_speedup is not None and compiled is not None and bf16 is not None:
        lines.append(_read_compile(compile_speedup, _noise(compiled, bf16)))
    if (bf16_speedup or 0.0) >= BF16_SMALL and (compile_speedup or 0.0) >= COMPILE_SMALL:
        lines.append("Both transitions are large: there was room in precision and in fusion; take both.")
    if utilisation is not None and utilisation.line is not None:
        lines.append(utilisation.line)
    return LabReading(bf16_speedup, compile_speedup, tuple(lines))


def _ratio(numerator: ConfigSummary | None, denominator: ConfigSummary | None) -> float | None:
    if numerator is None or denominator is None or denominator.samples_per_sec.median <= 0:
        return None
    return numerator.samples_per_sec.median / denominator.samples_per_sec.median


def _noise(a: ConfigSummary, b: ConfigSummary) -> float:
    """The larger of the two configs' trial spreads, as a fraction."""
    return max(a.samples_per_sec.spread_pct, b.samples_per_sec.spread_pct) / 100


def _head(label: str, speedup: float, noise: float) -> tuple[str, bool]:
    within = abs(speedup - 1) <= noise
    return f"{label}: {speedup:.2f}x{' (within trial noise)' if within else ''}.", within


def _jump(speedup: float) -> str:
    return "A small jump" if speedup >= 1.0 else "No gain"


def _read_bf16(speedup: float, bf16: ConfigSummary, noise: float) -> str:
    data_wait = bf16.phase_share.get("data_wait", 0.0)
    head, within = _head("fp32 -> bf16", speedup, noise)
    if speedup < 1.0 and not within:
        return (
            f"{head} bf16 is slower here: the device lacks fast bf16 kernels (common on CPUs without "
            "AMX or AVX512-BF16) or casts dominate; precision is not where this step's time goes."
        )
    if speedup < BF16_SMALL:
        if data_wait >= DATA_WAIT_NOTABLE:
            return (
                f"{head} {_jump(speedup)}: precision is not the bottleneck; data wait is {data_wait:.0%} of the "
                "bf16 step, so look at the DataLoader first (num_workers, pin_memory, transforms)."
            )
        return (
            f"{head} {_jump(speedup)}: precision is not the bottleneck; the step waits on something else "
            "(framework overhead, small kernels, or memory bandwidth)."
        )
    return f"{head} Lower precision pays off: the step is compute-bound in its matmuls and convolutions."


def _read_compile(speedup: float, noise: float) -> str:
    head, within = _head("bf16 -> bf16 + compile", speedup, noise)
    if speedup < 1.0 and not within:
        return f"{head} Compiled is slower here: check for graph breaks or recompiles before adopting it."
    if speedup < COMPILE_SMALL:
        return (
            f"{head} {_jump(speedup)}: the kernels are already well fused for these shapes, "
            "or the step is bound elsewhere."
        )
    return f"{head} Fusion removes real overhead (many small kernels or launches): compile is worth it."
