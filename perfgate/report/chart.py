"""A picture of the gate: per workload and config, current samples/sec as a share of the baseline's.

One row per config: the ratio of geometric means with its interval as a horizontal bar, the
baseline at 1.0, the regression threshold as a dashed line, coloured by verdict and labelled with both
samples/sec figures. matplotlib is an optional extra (`pip install perfgate[chart]`), imported here only.
"""

from __future__ import annotations

import math
from pathlib import Path

from perfgate.errors import EXIT_MEANINGS, UsageError
from perfgate.outcome import Status
from perfgate.records.judgement import Judgement

COLOURS = {
    Status.REGRESSION: "#c62828",
    Status.ACCEPTED: "#ef6c00",
    Status.FAILED: "#c62828",
    Status.IMPROVEMENT: "#2e7d32",
    Status.NO_CHANGE: "#1565c0",
    Status.INCONCLUSIVE: "#ef6c00",
}


def write_chart(judgement: Judgement, path: Path) -> None:
    """Save the chart of a judged check as a PNG at `path`; UsageError when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: CI runners have none
        from matplotlib import pyplot
    except ImportError:
        raise UsageError(
            "the chart needs matplotlib, which is not installed", hint="pip install 'perfgate[chart]'"
        ) from None
    result = judgement.result
    rows = [v for v in result.verdicts if v.throughput is not None]
    height = 1.2 + 0.5 * max(1, len(rows))
    figure, axes = pyplot.subplots(figsize=(9, height), dpi=110)
    try:
        for index, verdict in enumerate(reversed(rows)):
            t = verdict.throughput
            assert t is not None
            colour = COLOURS.get(verdict.status, "#616161")
            if not math.isnan(t.ci_low):
                axes.plot([t.ci_low, t.ci_high], [index, index], color=colour, linewidth=6, alpha=0.35)
            axes.plot([t.ratio], [index], marker="o", color=colour, markersize=8)
            axes.annotate(
                f"{t.baseline_median:,.1f} -> {t.candidate_median:,.1f} samples/s, {verdict.status.value}",
                (t.ratio, index),
                xytext=(0, 9),
                textcoords="offset points",
                ha="center",
                fontsize=8,
                color=colour,
            )
        thresholds = sorted({v.thresholds.throughput for v in rows})
        for threshold in thresholds:
            axes.axvline(judgement.bound(threshold), color="#c62828", linestyle="--", linewidth=1)
        axes.axvline(1.0, color="#424242", linewidth=1)
        axes.set_yticks(range(len(rows)), [f"{v.workload} {v.config}" for v in reversed(rows)])
        axes.set_ylim(-0.7, len(rows) - 0.3)
        axes.set_xlabel("current / baseline samples/s (dot: ratio of geometric means; bar: its interval)")
        threshold_text = (
            ", ".join(f"{judgement.bound(t):.3f}x: {100 * t:g}% more time per sample" for t in thresholds) or "-"
        )
        outcome = EXIT_MEANINGS.get(result.exit_code, "error")
        axes.set_title(f"perfgate: {outcome}; dashed line: the regression threshold ({threshold_text})")
        axes.grid(axis="x", alpha=0.3)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)
