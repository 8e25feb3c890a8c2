"""What `perfgate calibrate` found (`check.calibrate` measures it, `report.calibration` renders it): each config's
A/A noise and what the budget lets a check detect, the planted slowdown's verdict, and the runner's slow-pair rate."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field

from perfgate.records.comparisons import SLOW_RATE
from perfgate.records.verdicts import GateResult

# How sure the bound on a runner's slow-pair rate is: a calibrated rate below perfgate's default must be shown at
# this confidence (0 slow sides in 74 or more), and a runner shown to stall more often is assumed to stall this much
RATE_CONFIDENCE = 0.95


@dataclass(frozen=True)
class SlowPairRate:
    """The runner's one-sided slow pairs in calibrate's A/A pairs, counted as the count test counts them
    (`stats.slow_cut` of each config's per-pair log ratios; each pair gives each side one chance to run much slower
    than the other), and the rate r0 a paired check's count test is to assume (`runner_slow_rate`)."""

    slow: int  # pair-sides that ran much slower than their pair: head's slow pairs and base's
    sides: int  # 2 x the A/A pairs, over every config
    bound: float  # the rate's RATE_CONFIDENCE upper bound (Clopper-Pearson), up to a whole percent; nan: no pairs
    rate: float  # r0: what the count test will assume

    @property
    def measured(self) -> float:
        """The share of pair-sides that ran much slower (nan: no pairs)."""
        return self.slow / self.sides if self.sides else math.nan


@dataclass(frozen=True)
class ConfigCalibration:
    workload: str
    config: str
    noise: float  # per-pair standard deviation of the log ratio, A/A (nan: too few pairs)
    pair_s: float  # seconds one pair takes
    budget_pairs: int  # pairs the time budget allows
    detectable_slowdown: float  # with budget_pairs pairs, 80% power at the last look (nan: unknown)
    planted_status: str  # the paired check's verdict on the planted slowdown
    planted_pairs: int
    planted_ratio: float


@dataclass(frozen=True)
class Calibration:
    configs: list[ConfigCalibration]
    slowdown: float
    threshold_text: str
    settings_text: str
    aa: GateResult
    planted: GateResult
    slow_pairs: SlowPairRate = SlowPairRate(slow=0, sides=0, bound=math.nan, rate=SLOW_RATE)
    measured_on: datetime.date = field(default_factory=datetime.date.today)
