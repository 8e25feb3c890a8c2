"""The one-line reasons a verdict gives: throughput, memory, and how many pairs an open verdict needs."""

from __future__ import annotations

import math

from perfgate.formatting import format_bytes, format_p_value, format_pct, format_signed_pct
from perfgate.judge.stats import (
    OUTLIER_FACTOR,
    MemoryComparison,
    ThroughputComparison,
    Verdict,
    combined_verdict,
    slowdown_bound,
)


def throughput_reason(
    t: ThroughputComparison,
    adjusted: ThroughputComparison | None,
    machine: ThroughputComparison | None,
    unit: str = "samples/s",
    sample: str = "trial",
) -> str:
    """One line on a throughput comparison, raw and (with the machine probe) adjusted for the machine's speed.

    `unit` names the figure compared, `sample` what each value of it came from (a trial, a session).
    """
    reason = _throughput_verdict_reason(t, unit, sample) + _outlier_note(t, sample)
    if adjusted is None or machine is None:
        return reason
    speed = f"the machine probe ran {machine.ratio:.3f}x as fast as when the baseline was measured"
    if adjusted.verdict == t.verdict:
        if abs(math.log(machine.ratio)) < math.log(1 + t.threshold):
            return reason
        return f"{reason}; {speed}, and adjusted for that the verdict is the same"
    adjusted_text = _throughput_verdict_reason(adjusted, f"{unit} per probe rate", sample)
    final = combined_verdict(t, adjusted)
    return (
        f"{reason}; but {speed}: adjusted for that, {adjusted_text}{_outlier_note(adjusted, sample)}; so {final.value}"
    )


def accepted_reason(
    accepted: str,
    t: ThroughputComparison,
    adjusted: ThroughputComparison | None,
    machine: ThroughputComparison | None,
    without: str,
    sample: str = "trial",
) -> str:
    """One line on a throughput judged against an accepted slowdown (`t`, `adjusted`: against its bound;
    `accepted`: `the 15% accepted in commit abc1234`; `without`: the line against the threshold alone)."""
    verdict = combined_verdict(t, adjusted)
    if verdict in (Verdict.NO_CHANGE, Verdict.IMPROVEMENT):
        return (
            f"accepted: {t.ratio:.3f}x, within {accepted} (the interval stays above samples/s "
            f"{_bound(t.threshold)}); without it, {without}"
        )
    against = throughput_reason(t, adjusted, machine, sample=sample)
    if verdict == Verdict.REGRESSION:
        return f"slower than accepted, beyond {accepted}: {against}"
    return f"not yet shown within {accepted}: {against}"


def _outlier_note(t: ThroughputComparison, sample: str = "trial") -> str:
    if sample == "pair":
        n = t.outliers[0]
        if not n:
            return ""
        return (
            f" (left out {n} pair{'s' if n > 1 else ''} whose ratio is more than {OUTLIER_FACTOR:g}x off the median "
            "pair's: interference from another job, most likely)"
        )
    left_out = [
        f"{n} {side} {sample}{'s' if n > 1 else ''}"
        for n, side in zip(t.outliers, ("baseline", "current"), strict=True)
        if n
    ]
    if not left_out:
        return ""
    return (
        f" (left out {' and '.join(left_out)} more than {OUTLIER_FACTOR:g}x off the median: interference "
        "from another job, most likely)"
    )


def threshold_text(threshold: float, unit: str = "samples/s") -> str:
    """The threshold in its one unit, time per sample, with the samples/s bound it sets for a slowdown:
    `the 25% threshold on time per sample (samples/s -20.0%)`.

    A 25% threshold means 25% more time per sample (`stats.slowdown_bound`), that is samples/s 20% lower;
    saying only "25%" next to "samples/s -20.6%" would read as a contradiction."""
    return f"the {100 * threshold:g}% threshold on {_time_unit(unit)} ({unit} {_bound(threshold)})"


def _bound(threshold: float, slower: bool = True) -> str:
    """The throughput change at the threshold: `-20.0%` for a slowdown, `+25.0%` for a speed-up."""
    return format_signed_pct(slowdown_bound(threshold) - 1.0 if slower else threshold)


def _time_unit(unit: str) -> str:
    """`samples/s` -> `time per sample`, `calls/s` -> `time per call` (the threshold's unit)."""
    per = unit.split("/")[0].strip()
    return f"time per {per[:-1] if per.endswith('s') else per}"


def _throughput_verdict_reason(t: ThroughputComparison, unit: str, sample: str = "trial") -> str:
    change = f"{unit} {format_signed_pct(t.change)} ({t.ratio:.3f}x"
    if math.isnan(t.ci_low):
        change += f", one {sample} a side: no estimate of noise)"
    else:
        p_value = format_p_value(min(t.p_slower, t.p_faster))
        change += f", {100 * t.confidence:.1f}% CI {t.ci_low:.3f}-{t.ci_high:.3f}x, p={p_value})"
    threshold = f"the {100 * t.threshold:g}% threshold on {_time_unit(unit)}"
    if t.verdict == Verdict.REGRESSION:
        return (
            f"{change}: a regression beyond {threshold} ({unit} below {_bound(t.threshold)}; "
            f"p < {format_p_value(t.alpha)})"
        )
    if t.verdict == Verdict.IMPROVEMENT:
        return f"{change}: an improvement beyond {threshold} ({unit} above {_bound(t.threshold, slower=False)})"
    if t.verdict == Verdict.NO_CHANGE:
        return f"{change}: no regression beyond {threshold} (the interval stays above {unit} {_bound(t.threshold)})"
    detectable = (
        "unknown" if math.isnan(t.detectable_slowdown) else f"{format_pct(t.detectable_slowdown)} or more in {unit}"
    )
    sizes = (
        f"{t.n_candidate} pair{'s' if t.n_candidate != 1 else ''}"
        if sample == "pair"
        else f"{t.n_baseline}+{t.n_candidate} {sample}s"
    )
    noise = "unknown" if math.isnan(t.noise) else f"{100 * t.noise:.1f}%"
    return (
        f"{change}: inconclusive, the interval straddles {threshold_text(t.threshold, unit)}; with {noise} "
        f"{sample}-to-{sample} noise and {sizes} it could detect slowdowns of {detectable}"
    )


def memory_reason(m: MemoryComparison, parts: str = "") -> str:
    """One line on a peak-memory comparison that is not "no change"; `parts` names the part of the job that moved
    (`judge.memory.grown_parts`: `loader workers +410 MiB: a worker keeps what it loads`)."""
    if m.verdict == Verdict.NO_CHANGE:
        return ""
    change = format_signed_pct(m.change) if m.change is not None else "from zero"
    text = f"peak memory {format_bytes(m.baseline_bytes)} -> {format_bytes(m.candidate_bytes)} ({change}"
    text += f", tolerance {100 * m.tolerance:g}%"
    p_value = "no estimate of noise" if math.isnan(m.p_value) else f"p={format_p_value(m.p_value)}"
    which = f" ({parts})" if parts else ""
    if m.verdict == Verdict.REGRESSION:
        return f"{text}, {p_value}): a memory regression{which}"
    if m.verdict == Verdict.IMPROVEMENT:
        return f"{text}, {p_value}): less memory{which}"
    return f"{text}, {p_value}): inconclusive, trial-to-trial noise could explain it{which}"


def pairs_needed_note(noise: float, pairs: int, threshold: float, pair_s: float) -> str:
    """`to resolve the 5% threshold it would need about 24 pairs, 9 more minutes at 31 s a pair`.

    Resolving means a slowdown at the threshold would be detectable with 80% power at alpha 0.01:
    (z_0.99 + z_0.8) * noise / sqrt(n) <= log(1 + threshold), in the normal approximation."""
    if not math.isfinite(noise):
        return f"one pair gives no estimate of noise; each pair took {pair_s:.0f} s (raise --time-budget)"
    needed = max(pairs + 1, math.ceil(((2.326 + 0.842) * noise / math.log1p(threshold)) ** 2))
    minutes = (needed - pairs) * pair_s / 60
    return (
        f"to resolve the {100 * threshold:g}% threshold it would need about {needed} pairs, "
        f"{minutes:.0f} more minutes at {pair_s:.0f} s a pair (--time-budget, --max-trials)"
    )
