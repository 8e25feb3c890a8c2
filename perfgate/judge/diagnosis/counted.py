"""The step's exact counts (`Counts`: one untimed step on each side), compared for the rules that read them:
a count moved when it changed beyond its tolerance (`count_tolerances`: the project's `[tool.perfgate.counts]`, the
counts gate's default where it only reports the count); operators, kernels and the allocated peak are compared only
between counts on one device type (`DEVICE_DEPENDENT_COUNTS`), and where the base has none (baseline files written
before them) `_counted` is None and no rule reads them. Operators a step that grew while FLOPs per sample did not
(`_added_operators`) are framework overhead where each costs at most call_overhead_us, model compute the FLOP count
leaves out where they cost more. Names no suspect itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from perfgate.formatting import format_bytes
from perfgate.judge.diagnosis.common import _percent, _step_growth
from perfgate.project import CountTolerances, DiagnosisThresholds
from perfgate.records.baselines import ConfigEntry
from perfgate.records.counts import COUNT_NAMES
from perfgate.records.diagnoses import Movement
from perfgate.records.results import TrialResult
from perfgate.records.shapes import DEVICE_DEPENDENT_COUNTS, Counts

# The step's exact counts (`Counts`, counted on both sides): a count moved when it changed by more than the counts
# gate's default tolerance for it (`project.CountTolerances`): FLOPs per sample 2%, operators and kernels a step 5%,
# the allocated peak 5%; parameters, graphs, graph breaks and recompiles at any change.
COUNT_TOLERANCES = {
    name: float(value)
    for name, value in vars(CountTolerances()).items()
    if isinstance(value, float) and name not in ("graph_breaks", "recompiles")
}


def count_tolerances(counts: CountTolerances) -> dict[str, float]:
    """The share each relative count may move by before the diagnosis calls it moved: the project's tolerance
    (`ProjectConfig.counts`), else (a count it only reports) the counts gate's default, `COUNT_TOLERANCES`."""
    tolerances = {}
    for name, default in COUNT_TOLERANCES.items():
        value = getattr(counts, name)
        tolerances[name] = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    return tolerances


@dataclass(frozen=True)
class _Counted:
    """The step's exact counts on both sides: the base's (`ConfigEntry.counts`) and this run's (one ok trial's:
    every trial counts the same step)."""

    base: Counts
    head: Counts
    tolerances: Mapping[str, float] = field(default_factory=lambda: dict(COUNT_TOLERANCES))

    @property
    def same_device(self) -> bool:
        return self.base.device == self.head.device

    def pair(self, name: str) -> tuple[float, float] | None:
        """A count on both sides; None where a side did not count it, or where it is the device's
        (`DEVICE_DEPENDENT_COUNTS`) and the sides counted on different device types (the allocated peak: or by
        different measures)."""
        if name in DEVICE_DEPENDENT_COUNTS and not self.same_device:
            return None
        if name == "allocated_peak_bytes" and self.base.allocated_kind != self.head.allocated_kind:
            return None
        before, now = getattr(self.base, name), getattr(self.head, name)
        return None if before is None or now is None else (float(before), float(now))

    def growth(self, name: str) -> float | None:
        """The count's relative growth, where it grew beyond its tolerance (`tolerances`); else None."""
        pair = self.pair(name)
        if pair is None or pair[1] <= pair[0] * (1 + self.tolerances.get(name, 0.0)):
            return None
        return pair[1] / pair[0] - 1 if pair[0] > 0 else math.inf

    def moved(self, name: str) -> bool:
        """The count changed, either way, beyond its tolerance."""
        pair = self.pair(name)
        return pair is not None and abs(pair[1] - pair[0]) > self.tolerances.get(name, 0.0) * pair[0]

    @property
    def same_work(self) -> bool:
        """Every count that both sides counted is unchanged (within its tolerance), FLOPs or operators among them."""
        compared = [name for name in COUNT_NAMES if self.pair(name) is not None]
        work = {"flops_per_sample", "operators_per_step"} & set(compared)
        return bool(work) and not any(self.moved(name) for name in compared)

    def figure(self, name: str) -> str:
        """`FLOPs per sample 2.14e8 -> 2.96e8`; empty where the count is not compared."""
        pair = self.pair(name)
        if pair is None:
            return ""
        return f"{COUNT_NAMES[name].phrase} {_count_text(name, pair[0])} -> {_count_text(name, pair[1])}"

    def figures(self) -> list[str]:
        """Each compared count's figure (trainable parameters only where they are not all the parameters)."""
        trainable_all = all(c.trainable_parameters == c.parameters for c in (self.base, self.head))
        names = [n for n in COUNT_NAMES if not (n == "trainable_parameters" and trainable_all)]
        return [f for f in map(self.figure, names) if f]


def _counted(
    baseline: ConfigEntry | None, ok: Sequence[TrialResult], tolerances: Mapping[str, float] = COUNT_TOLERANCES
) -> _Counted | None:
    """Both sides' counts; None where either side has none (a baseline file written before counts were kept)."""
    head = next((t.counts for t in ok if t.counts is not None), None)
    if baseline is None or baseline.counts is None or head is None:
        return None
    return _Counted(baseline.counts, head, dict(tolerances))


def _count_text(name: str, value: float) -> str:
    """`2.14e8` FLOPs, `28.5 MiB`, `1,234` operators."""
    if name == "allocated_peak_bytes":
        return format_bytes(int(value))
    if name == "flops_per_sample":
        mantissa, _, exponent = f"{value:.3g}".partition("e")
        return f"{mantissa}e{int(exponent)}" if exponent else mantissa
    return f"{int(value):,}"


@dataclass(frozen=True)
class _AddedOperators:
    """Operators a step that grew (beyond their tolerance, on one device type) while FLOPs per sample did not."""

    before: int
    now: int
    flops: str  # `FLOPs per sample unchanged` (or `-20%`, or `not compared` where a side did not count them)
    step_before_s: float
    step_now_s: float
    per_operator_s: float  # step time per added operator: the least growth the trials support (`_step_growth`)
    dispatch_sized: bool  # at most call_overhead_us each: framework overhead, not compute


def _added_operators(
    counted: _Counted | None,
    ok: Sequence[TrialResult],
    baseline: ConfigEntry | None,
    step: Movement,
    th: DiagnosisThresholds,
) -> _AddedOperators | None:
    pair = counted.pair("operators_per_step") if counted is not None else None
    if counted is None or baseline is None or pair is None or counted.growth("operators_per_step") is None:
        return None
    if counted.growth("flops_per_sample") is not None:
        return None  # the model grew: its operators with it (`_model_compute`)
    before, now = int(pair[0]), int(pair[1])
    flops = counted.pair("flops_per_sample")
    if flops is None:
        flops_text = "FLOPs per sample not compared"
    elif counted.moved("flops_per_sample") and flops[0] > 0:
        flops_text = f"FLOPs per sample {_percent(flops[1] / flops[0] - 1)}"
    else:
        flops_text = "FLOPs per sample unchanged"
    step_before, step_now, growth = _step_growth(ok, baseline, step)
    per_operator = max(0.0, growth) / (now - before)
    dispatch_sized = per_operator <= th.call_overhead_us / 1e6
    return _AddedOperators(before, now, flops_text, step_before, step_now, per_operator, dispatch_sized)
