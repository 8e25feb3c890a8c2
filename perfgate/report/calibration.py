"""`perfgate calibrate`'s report: the calibration table and what it means for a gate on this runner."""

from __future__ import annotations

import datetime
import math

from perfgate.naming import CLI, FrontEnd
from perfgate.records.calibration import RATE_CONFIDENCE, Calibration, SlowPairRate
from perfgate.records.comparisons import SLOW_RATE


def format_calibration(calibration: Calibration, front_end: FrontEnd = CLI) -> str:
    """The calibration table and what it means for a gate on this runner (`front_end`: how the advice spells
    the options)."""
    option = front_end.option
    header = ["workload", "config", "pair noise", "s/pair", "pairs in budget", "detects", "planted", "pairs", "ratio"]
    rows = [header]
    for c in calibration.configs:
        rows.append(
            [
                c.workload,
                c.config,
                "-" if math.isnan(c.noise) else f"{100 * c.noise:.1f}%",
                "-" if math.isnan(c.pair_s) else f"{c.pair_s:.1f}",
                str(c.budget_pairs),
                _slowdown_text(c.detectable_slowdown),
                c.planted_status,
                str(c.planted_pairs),
                "-" if math.isnan(c.planted_ratio) else f"{c.planted_ratio:.3f}x",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["calibration: this runner, the working tree against itself"]
    for index, row in enumerate(rows):
        lines.append(
            "  "
            + "  ".join(
                cell.rjust(w) if i > 1 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if index == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    lines.append(
        f"  pair noise: s.d. of the per-pair log ratio, A/A; detects: the smallest slowdown a paired check calls a "
        f"regression with 80% probability in the pairs the budget allows (threshold {calibration.threshold_text}); "
        f"planted: the verdict on head made {100 * calibration.slowdown:g}% slower"
    )
    lines.append(f"  settings: {calibration.settings_text}")
    lines.extend("  " + line for line in slow_pair_lines(calibration.slow_pairs, calibration.measured_on))
    caught = [c for c in calibration.configs if c.planted_status == "regression"]
    worst = max(
        (c.detectable_slowdown for c in calibration.configs if math.isfinite(c.detectable_slowdown)), default=math.nan
    )
    if len(caught) == len(calibration.configs) and math.isfinite(worst):
        lines.append(
            f"This runner resolves slowdowns of {_slowdown_text(worst)} or more in every config within the budget, and "
            f"caught the planted {100 * calibration.slowdown:g}% everywhere. Next: perfgate check {option('against')} "
            "main"
        )
    else:
        missed = [f"{c.workload} {c.config}" for c in calibration.configs if c.planted_status != "regression"]
        lines.append(
            f"The planted {100 * calibration.slowdown:g}% slowdown was not called a regression in: "
            f"{', '.join(missed)}. "
            f"Give the check more time ({option('time-budget')}, {option('max-trials')}), use fewer threads per trial "
            f"({option('threads')} 1), or a quieter runner."
        )
    return "\n".join(lines) + "\n"


def slow_pair_lines(found: SlowPairRate, measured_on: datetime.date) -> list[str]:
    """What the A/A pairs say of r0, and the `[tool.perfgate]` keys that keep it for every later check: `one-sided
    slow pairs: 0 of 24 pair-sides (at most 12% at 95%); the count test will assume at most 5%`."""
    assumed = f"the count test will assume at most {_rate_text(found.rate)}"
    default = f"perfgate's default of {_rate_text(SLOW_RATE)}"
    if not found.sides:
        return [f"one-sided slow pairs: no A/A pair was measured; {assumed} ({default})"]
    seen = (
        f"one-sided slow pairs: {found.slow} of {found.sides} pair-sides "
        f"(at most {_rate_text(found.bound)} at {100 * RATE_CONFIDENCE:g}%); {assumed}"
    )
    if found.rate < SLOW_RATE:
        seen += f", below {default}: these pairs show this runner stalls less often"
    elif found.rate > SLOW_RATE:
        seen += f": this runner stalls one side of a pair more often than {default}"
    keys = f'slow_pair_rate = "{_rate_text(found.rate)}" and slow_pair_rate_date = {measured_on.isoformat()}'
    return [seen, f"to keep it for every check on this runner, add to [tool.perfgate] (pyproject.toml): {keys}"]


def _rate_text(rate: float) -> str:
    """`5%`, `2.5%`: a rate as the count test's line shows it."""
    return f"{100 * rate:.3g}%"


def _slowdown_text(fraction: float) -> str:
    """`7.5%`; beyond 100% (a step more than twice as long) the figure says only that it is hopeless."""
    if math.isnan(fraction):
        return "-"
    return ">100%" if fraction > 1 else f"{100 * fraction:.1f}%"
