"""The one-line reasons a verdict gives: throughput, memory, and how many pairs an open verdict needs."""

from __future__ import annotations

import math

from perfgate.formatting import format_bytes, format_p_value, format_pct, format_signed_pct
from perfgate.judge.stats import slowdown_bound
from perfgate.records.comparisons import (
    MIN_DECIDING,
    SLOW_FACTOR,
    MemoryComparison,
    SlowPairCount,
    ThroughputComparison,
    Verdict,
    combined_verdict,
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
    reason = _throughput_verdict_reason(t, unit, sample)
    count = t.count
    minority = 0 < 2 * count.head_slow <= count.pairs if count is not None else False  # most: a steady change
    if count is not None and not t.by_count and (minority or count.stood_down):
        reason += f"; the count of much slower pairs: {count_text(count)}"
    elif count is None:
        reason += _slow_note(t, sample)
    if adjusted is None or machine is None:
        return reason
    speed = f"the machine probe ran {machine.ratio:.3f}x as fast as when the baseline was measured"
    if adjusted.verdict == t.verdict:
        if abs(math.log(machine.ratio)) < math.log(1 + t.threshold):
            return reason
        return f"{reason}; {speed}, and adjusted for that the verdict is the same"
    adjusted_text = _throughput_verdict_reason(adjusted, f"{unit} per probe rate", sample)
    final = combined_verdict(t, adjusted)
    return f"{reason}; but {speed}: adjusted for that, {adjusted_text}{_slow_note(adjusted, sample)}; so {final.value}"


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


def _slow_note(t: ThroughputComparison, sample: str = "trial") -> str:
    """Trials on one side that ran SLOW_FACTOR or more slower than their pair (or the other side's median):
    counted, never left out. On the candidate's side a cluster of them is an intermittent slowdown."""
    base, head = t.slow
    # A side slow in most pairs is a steady change, which the ratio says: only a minority is news.
    base, head = (base if 2 * base <= t.n_baseline else 0), (head if 2 * head <= t.n_candidate else 0)
    if not base and not head:
        return ""
    if sample == "pair":
        parts = [
            f"{n} of {t.n_candidate} {side} trials ran {SLOW_FACTOR:g}x or more slower than their pair"
            for side, n in (("head", head), ("base", base))
            if n
        ]
    else:
        parts = [
            f"{n} of {total} {side} {sample}s ran {SLOW_FACTOR:g}x or more slower than the other side's median"
            for side, n, total in (("current", head, t.n_candidate), ("baseline", base, t.n_baseline))
            if n
        ]
    intermittent = head >= 2 and t.verdict != Verdict.IMPROVEMENT
    kind = "an intermittent slowdown, counted" if intermittent else "counted, not left out"
    return f" ({'; '.join(parts)}: {kind})"


def count_text(count: SlowPairCount) -> str:
    """The count test in one line: `4 of 14 head trials ran 1.9x slower than their pair (1.31x or more counts);
    base: 0 of 14; the runner's rate on unchanged code: at most 5% (perfgate's default): p=1.2e-05 <= 2.5e-04`."""
    factor = "" if math.isnan(count.head_factor) else f" {count.head_factor:.2g}x"
    source = count.rate_source or "perfgate's default"
    line = (
        f"{count.head_slow} of {count.pairs} head trials ran{factor} slower than their pair ({count.cut:.2f}x or "
        f"more counts); base: {count.base_slow} of {count.pairs}; the runner's rate on unchanged code: at most "
        f"{100 * count.rate:.3g}% ({source})"  # a rate set to "2.5%" shows as set
    )
    if count.stood_down:
        return (
            f"{line}; the count test stood down: the base's own slow pairs are more than that rate allows, so "
            "interference hits this runner more often than the test may assume"
        )
    if count.tested_rate > count.rate:
        line += f", tested against {format_pct(count.tested_rate, 1)}, the bound of the base's own rate"
    relation = "<=" if count.rejects else ">"
    return f"{line}: p={format_p_value(count.p_value)} {relation} {format_p_value(count.alpha)}"


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
    if t.verdict == Verdict.REGRESSION and t.by_count and t.count is not None:
        return (
            f"{change}: a regression beyond {threshold} (the whole interval lies below {unit} "
            f"{_bound(t.threshold)}), intermittent: {count_text(t.count)}"
        )
    if t.verdict == Verdict.REGRESSION:
        return (
            f"{change}: a regression beyond {threshold} (the whole interval lies below {unit} "
            f"{_bound(t.threshold)}; p < {format_p_value(t.alpha)})"
        )
    if t.verdict == Verdict.IMPROVEMENT:
        return (
            f"{change}: an improvement beyond {threshold} (the whole interval lies above {unit} "
            f"{_bound(t.threshold, slower=False)})"
        )
    if t.verdict == Verdict.NO_CHANGE:
        return f"{change}: no regression beyond {threshold} (the interval stays above {unit} {_bound(t.threshold)})"
    sizes = (
        f"{t.n_candidate} pair{'s' if t.n_candidate != 1 else ''}"
        if sample == "pair"
        else f"{t.n_baseline}+{t.n_candidate} {sample}s"
    )
    if t.boundary == 0 and abs(math.log(t.ratio)) > math.log1p(t.threshold):
        return (
            f"{change}: inconclusive, {sizes} cannot call a change beyond {threshold_text(t.threshold, unit)}: "
            f"that needs {MIN_DECIDING} pairs or more (or as many degrees of freedom)"
        )
    straddles = f"{change}: inconclusive, the interval straddles {threshold_text(t.threshold, unit)}"
    if math.isnan(t.noise):  # one pair (or one trial a side): no spread, no interval, nothing it could detect
        return f"{change}: inconclusive, {sizes} cannot decide"
    noise = f"{100 * t.noise:.1f}%"
    if math.isnan(t.detectable_slowdown):
        return f"{straddles}; with {noise} {sample}-to-{sample} noise and {sizes}, what it could detect is unknown"
    detectable = f"{format_pct(t.detectable_slowdown)} or more in {unit}"
    return f"{straddles}; with {noise} {sample}-to-{sample} noise and {sizes} it could detect slowdowns of {detectable}"


def memory_reason(m: MemoryComparison, parts: str = "") -> str:
    """One line on a peak-memory comparison that is not "no change", saying what its interval says: `peak memory
    100.0 MiB -> 112.0 MiB (+12.0%, interval +10.1% to +13.8%, tolerance 5%): a memory regression`. Against a
    stored baseline it names the session-to-session noise assumed; `parts` names the part of the job that moved
    (`judge.memory.grown_parts`: `loader workers +410 MiB: a worker keeps what it loads`)."""
    if m.verdict == Verdict.NO_CHANGE:
        return ""
    sample = "pair" if m.paired else "trial"
    change = format_signed_pct(m.change) if m.change is not None else "from zero"
    text = f"peak memory {format_bytes(m.baseline_bytes)} -> {format_bytes(m.candidate_bytes)} ({change}"
    if m.exact:
        text += f", the same figure in every {sample}"
    elif not math.isnan(m.ci_low):
        text += f", interval {format_signed_pct(m.ci_low - 1)} to {format_signed_pct(m.ci_high - 1)}"
    elif math.isnan(m.p_larger):
        text += ", no estimate of noise"
    bytes_bound = m.floor_bytes > m.tolerance * m.baseline_bytes
    tolerance = f"{format_bytes(m.floor_bytes)}" if bytes_bound else f"{100 * m.tolerance:g}%"
    text += f", tolerance {tolerance}"
    if m.session_noise > 0 and not m.paired:
        text += f", {100 * m.session_noise:g}% session-to-session noise assumed"
    which = f" ({parts})" if parts else ""
    if m.verdict == Verdict.REGRESSION:
        return f"{text}): a memory regression{which}"
    if m.verdict == Verdict.IMPROVEMENT:
        return f"{text}): less memory{which}"
    if math.isnan(m.p_larger):
        return f"{text}): inconclusive{which}"
    if m.paired and not m.exact and m.n_candidate < MIN_DECIDING and abs(m.ratio - 1) > m.tolerance:
        return (
            f"{text}): inconclusive, {m.n_candidate} {sample}{'s' if m.n_candidate != 1 else ''} cannot call a "
            f"memory change: that needs {MIN_DECIDING} or more{which}"
        )
    return f"{text}): inconclusive, the interval straddles the {tolerance} tolerance{which}"


def pairs_to_resolve(noise: float, pairs: int, threshold: float, observed: float | None = None) -> int | None:
    """How many pairs resolving `threshold` takes at this pair-to-pair `noise` (`pairs_needed_note`), never fewer
    than MIN_DECIDING nor than `pairs`; None without an estimate of noise. `observed`: the mean per-pair log ratio
    head/base so far, where an effect far beyond the threshold needs fewer pairs than one near it: the distance
    from the threshold's boundary counts, less two standard errors of that mean (a head 18x slower, pair noise
    1.2 on the log scale, was called 45 pairs from the boundary's half-width and decided at its fourth)."""
    if not math.isfinite(noise):
        return None
    distance = math.log1p(threshold) / 2
    if observed is not None and math.isfinite(observed) and pairs >= 2:
        distance = max(distance, abs(observed + math.log1p(threshold)) - 2 * noise / math.sqrt(pairs))
    return max(pairs, MIN_DECIDING, math.ceil(((0.524 + 0.842) * noise / distance) ** 2))


def budget_note(name: str, fit: int, needed: int, budget_s: float, needed_s: float, option: str, most: int) -> str:
    """`lm-small bf16: 3 pairs fit in the 10-minute budget, 9 are needed: raise --time-budget to 25 minutes or
    check fewer configs`; where more than `most` pairs (the check's most) are needed, no budget decides."""
    fit_text = f"{name}: {fit} pair{'s' if fit != 1 else ''} fit in the {_duration(budget_s)} budget"
    if needed > most:
        return (
            f"{fit_text}, about {needed} are needed, more than the {most} a check runs: the pairs are too noisy for "
            "this threshold here (a quieter runner, fewer configs at once, or a larger threshold)"
        )
    return (
        f"{fit_text}, {needed} are needed: raise {option} to {math.ceil(needed_s / 60)} minutes "
        f"({60 * math.ceil(needed_s / 60)} s) or check fewer configs"
    )


def _duration(seconds: float) -> str:
    """`10-minute`, `90 s`: a budget as a person says it."""
    minutes = seconds / 60
    return f"{minutes:g}-minute" if minutes == int(minutes) else f"{seconds:.0f} s"


def pairs_needed_note(noise: float, pairs: int, threshold: float, pair_s: float) -> str:
    """`to resolve the 5% threshold it would need about 24 pairs, 9 more minutes at 31 s a pair`.

    Resolving means that a change half the threshold away from it (2.5% or 7.5% for a 5% threshold) would put
    the verdict's interval on its side of the threshold with 80% probability at a last look (one-sided level
    BOUNDARY_FINAL): (z_0.7 + z_0.8) * noise / sqrt(n) <= log(1 + threshold) / 2, in the normal approximation."""
    resolving = pairs_to_resolve(noise, pairs + 1, threshold)
    if resolving is None:
        return f"one pair gives no estimate of noise; each pair took {pair_s:.0f} s (raise --time-budget)"
    needed = resolving
    minutes = (needed - pairs) * pair_s / 60
    return (
        f"to resolve the {100 * threshold:g}% threshold it would need about {needed} pairs, "
        f"{minutes:.0f} more minutes at {pair_s:.0f} s a pair (--time-budget, --max-trials)"
    )
