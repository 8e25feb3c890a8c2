"""The history dashboard: one static HTML page, a chart per workload, config and machine.

Each series gets two charts, samples/s and peak memory over its runs (oldest on the left): every trial
a point, each run's median joined by a line, each change point a dashed line labelled with its change,
and creep named under the charts. Hovering a point shows its commit, time, value and verdict (SVG
`<title>`: no script). The page is one self-contained file: inline SVG and CSS, no script, no font or
library fetched, so it opens from a file and serves as is from GitHub Pages.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape

from perfgate.formatting import format_bytes, format_signed_pct
from perfgate.records.series import ChangePoint, Run, Series

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 78, 16, 14, 34  # the plot's margins inside the chart, for the axis labels

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1f2328; background: #fff; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin: 28px 0 4px; } p.meta { color: #59636e; margin: 0 0 8px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
svg { border: 1px solid #d1d9e0; border-radius: 6px; background: #fff; }
.axis { stroke: #9198a1; stroke-width: 1; } .grid { stroke: #eff2f5; stroke-width: 1; }
.label { font-size: 11px; fill: #59636e; } .title { font-size: 12px; fill: #1f2328; font-weight: 600; }
.trial { fill: #0969da; fill-opacity: 0.55; } .trial.regression { fill: #cf222e; fill-opacity: 0.8; }
.level { fill: none; stroke: #0969da; stroke-width: 1.5; }
.change { stroke: #bc4c00; stroke-width: 1.5; stroke-dasharray: 4 3; } .change-label { font-size: 11px; fill: #bc4c00; }
p.creep { color: #bc4c00; }
"""


def render_dashboard(series: Sequence[Series], *, skipped: Sequence[str] = (), now: datetime | None = None) -> str:
    """The dashboard page for these series (`judge.trends.series_of`); `skipped`: history files left out."""
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>perfgate history</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>perfgate history</h1>",
        f'<p class="meta">{len(series)} series, generated {escape(stamp)} by perfgate history --html</p>',
    ]
    if not series:
        parts.append("<p>No recorded runs yet: record one with <code>perfgate check --record</code>.</p>")
    for s in series:
        parts.append(_section(s))
    if skipped:
        parts.append("<h2>Files left out</h2><ul>")
        parts.extend(f"<li>{escape(line)}</li>" for line in skipped)
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _section(s: Series) -> str:
    runs = len(s.runs)
    head = (
        f'<section class="series" data-workload="{escape(s.workload)}" data-config="{escape(s.config)}">'
        f"<h2>{escape(s.workload)} {escape(s.config)}</h2>"
        f'<p class="meta">{escape(s.machine)}; {runs} run{"s" * (runs != 1)}</p><div class="charts">'
    )
    speed = _chart(
        "samples/s",
        s.runs,
        [r.samples_per_sec for r in s.runs],
        s.change_points,
        lambda v: f"{v:,.1f}",
    )
    memory = _chart(
        "peak memory",
        s.runs,
        [[float(b) for b in r.peak_bytes] for r in s.runs],
        s.memory_change_points,
        lambda v: format_bytes(int(v)),
    )
    tail = "</div>"
    if s.creep is not None:
        c = s.creep
        tail += (
            f'<p class="creep">creep: samples/s {format_signed_pct(c.change)} from run {c.start + 1} to run '
            f"{c.end + 1} (p={c.p_value:.2g}), though no single step was a change point</p>"
        )
    return head + speed + memory + tail + "</section>"


def _chart(
    name: str,
    runs: Sequence[Run],
    values: Sequence[Sequence[float]],
    points: Sequence[ChangePoint],
    show: Callable[[float], str],
) -> str:
    """One SVG chart: the trials as points, the runs' medians as a line, the change points as dashed lines."""
    every = [v for trials in values for v in trials if v > 0]
    low, high = (min(every), max(every)) if every else (0.0, 1.0)
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    low, high = low - pad, high + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: float) -> float:
        return LEFT + plot_w * ((index + 0.5) / max(len(runs), 1))

    def y(value: float) -> float:
        return TOP + plot_h * (1 - (value - low) / (high - low))

    out = [
        f'<svg class="chart" data-metric="{escape(name)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(name)} over {len(runs)} runs">',
        f'<text class="title" x="{LEFT}" y="{TOP - 2}">{escape(name)}</text>',
    ]
    for tick in range(5):  # horizontal grid and value labels
        value = low + (high - low) * tick / 4
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}"/>')
        out.append(
            f'<text class="label" x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{escape(show(value))}</text>'
        )
    out.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}"/>')
    out.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}"/>')
    step = max(1, -(-len(runs) // 6))  # six commit labels at most under the axis: each is 7 characters
    for index in range(0, len(runs), step):
        label = (runs[index].commit or "-")[:7]
        out.append(
            f'<text class="label" x="{x(index):.1f}" y="{HEIGHT - 12}" text-anchor="middle">{escape(label)}</text>'
        )
    levels = [(index, statistics.median(v)) for index, v in enumerate(values) if v]
    if len(levels) > 1:
        line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in levels)
        out.append(f'<polyline class="level" points="{line}"/>')
    for p in points:
        at = x(p.index - 0.5)
        out.append(f'<line class="change" x1="{at:.1f}" x2="{at:.1f}" y1="{TOP}" y2="{TOP + plot_h}"/>')
        text = f"{format_signed_pct(p.change)} (p={p.p_value:.2g})"
        out.append(f'<text class="change-label" x="{at + 4:.1f}" y="{TOP + 12}">{escape(text)}</text>')
    for index, (run, trials) in enumerate(zip(runs, values, strict=True)):
        kind = "trial regression" if run.verdict == "regression" else "trial"
        for value in trials:
            hover = (
                f"{(run.commit or 'no commit')[:12]} at {run.recorded_at[:19]}: {show(value)} "
                f"({run.verdict or 'no verdict'})"
            )
            out.append(
                f'<circle class="{kind}" cx="{x(index):.1f}" cy="{y(value):.1f}" r="3.2">'
                f"<title>{escape(hover)}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)
