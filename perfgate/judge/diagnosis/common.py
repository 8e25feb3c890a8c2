"""What the diagnosis rules share, naming no suspect itself: how a per-step figure moved from the baseline's
trials to this run's and the standard error of that move (`_moved`), the least growth of the step the trials
support (`_step_growth`), how a phase's change and a count's growth read (`_per_step`, `_percent`), the phases'
names and the thresholds' defaults (`DEFAULT_THRESHOLDS`, where the project's `[tool.perfgate.diagnosis]` sets none).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import ConfigEntry
from perfgate.records.diagnoses import Movement, PhaseChange
from perfgate.records.results import TrialResult

DEFAULT_THRESHOLDS = DiagnosisThresholds()
PHASE_NAMES = {"data_wait": "data wait", "h2d": "host-to-device copy", "forward": "forward + loss"}


def _moved(before: Sequence[float], now: Sequence[float]) -> Movement:
    """The change of a per-step figure from `before`'s trials to `now`'s, and its standard error: the trials'
    spread on each side pooled (a side of one trial adds no spread), over both sides' trial counts."""
    if not before or not now:
        return Movement(0.0, 0.0, None)
    deviations = [v - statistics.fmean(side) for side in (before, now) if len(side) > 1 for v in side]
    freedom = len(deviations) - sum(1 for side in (before, now) if len(side) > 1)
    noise = None
    if freedom >= 1:
        noise = math.sqrt(sum(d * d for d in deviations) / freedom) * math.sqrt(1 / len(before) + 1 / len(now))
    return Movement(statistics.fmean(before), statistics.fmean(now) - statistics.fmean(before), noise)


def _step_growth(
    trials: Sequence[TrialResult], baseline: ConfigEntry, step: Movement | None
) -> tuple[float, float, float]:
    """The median step before and now, and the least growth the trials support: two standard errors under the
    measured one (a machine that slowed by chance does not make added calls costly); seconds."""
    step_now = statistics.median(s for t in trials for s in t.step_s)
    step_before = statistics.median(t.step_p50_s for t in baseline.trials if t.step_p50_s) if baseline.trials else 0.0
    growth = step_now - step_before
    if step is not None and step.noise_s is not None:
        growth = min(growth, step.change_s - 2 * step.noise_s)
    return step_before, step_now, growth


def _percent(growth: float) -> str:
    """`+38%`; a count that was 0 grew `from 0`."""
    return f"{growth:+.0%}" if math.isfinite(growth) else "from 0"


def _per_step(p: PhaseChange) -> str:
    """`data wait: 0.20 -> 9.80 ms per step`."""
    was = "" if p.baseline_s is None else f"{1000 * p.baseline_s:.2f} -> "
    return f"{PHASE_NAMES.get(p.phase, p.phase)}: {was}{1000 * p.current_s:.2f} ms per step"
