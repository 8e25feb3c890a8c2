"""Framework overhead: it speaks when a step calls torch_calls_growth times the baseline's torch functions,
each added call costing at most call_overhead_us of step time (many small operations: Python and dispatch overhead,
not compute), or, counted exactly on one device type, more operators a step with FLOPs per sample unchanged (`+120
operators a step`, each costing at most call_overhead_us; costlier ones are model compute the FLOP count leaves out),
on more host syncs a step, on more torch.compile graph breaks (with their places) or recompiles (with the guard that
failed), and on a trial's warning about compiling.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from perfgate.formatting import format_names
from perfgate.judge.diagnosis.common import _step_growth
from perfgate.judge.diagnosis.counted import _AddedOperators, _Counted
from perfgate.project import DiagnosisThresholds
from perfgate.records.baselines import ConfigEntry
from perfgate.records.diagnoses import Finding, Movement
from perfgate.records.results import TrialResult


def _framework(
    trials: Sequence[TrialResult],
    baseline: ConfigEntry | None,
    th: DiagnosisThresholds,
    step: Movement | None = None,
    counted: _Counted | None = None,
    added: _AddedOperators | None = None,
) -> list[Finding]:
    """Framework overhead from the counts of one eager step; `step`: how the step changed, with its noise. With
    exact counts on both sides (`counted`), operators that grew while FLOPs did not (`added`) replace the torch
    calls (the same question, counted by the dispatcher), and the torch calls say nothing where FLOPs grew (the
    added calls came with compute); graph breaks and recompiles come from the counts, with their places."""
    if baseline is None:
        return []
    findings = []
    calls = [t.torch_calls_per_step for t in trials if t.torch_calls_per_step]
    base_calls = [t.torch_calls_per_step for t in baseline.trials if t.torch_calls_per_step]
    step_before, step_now, growth = _step_growth(trials, baseline, step)
    if added is not None and added.dispatch_sized:
        # The torch calls, where they grew too, are this finding's evidence: one finding for one cause.
        grown_calls: tuple[str, ...] = ()
        if calls and base_calls and (now := statistics.median(calls)) > (before := statistics.median(base_calls)):
            grown_calls = (f"a step calls {now:g} torch functions, {now / before:.1f}x the baseline's {before:g}",)
        findings.append(_operators_finding(added, grown_calls))
    elif calls and base_calls and not (counted is not None and counted.growth("flops_per_sample") is not None):
        now, before = statistics.median(calls), statistics.median(base_calls)
        # Step time added per added call: the least growth the trials support, and a step no slower means the
        # calls cost next to nothing.
        per_call = max(0.0, growth) / (now - before) if now > before else math.inf
        if now >= th.torch_calls_growth * before and per_call <= th.call_overhead_us / 1e6:
            findings.append(
                Finding(
                    "framework overhead",
                    f"framework overhead: a step calls {now:g} torch functions, {now / before:.1f}x the baseline's "
                    f"{before:g}",
                    (
                        f"step time {1000 * step_before:.2f} -> {1000 * step_now:.2f} ms: each added call costs "
                        f"{1e6 * per_call:.1f} us, dispatch-sized, not compute",
                        "many small operations spend their time in Python and dispatch, not in compute",
                        "fuse or vectorise them, or try torch.compile (the bf16-compile config)",
                    ),
                )
            )
    syncs = [t.host_syncs_per_step for t in trials if t.host_syncs_per_step is not None]
    base_syncs = [t.host_syncs_per_step for t in baseline.trials if t.host_syncs_per_step is not None]
    now_syncs = statistics.median(syncs) if syncs else None
    before_syncs = statistics.median(base_syncs) if base_syncs else None
    if now_syncs is not None and before_syncs is not None and now_syncs > before_syncs:
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: {now_syncs:g} host sync{'' if now_syncs == 1 else 's'} per step, "
                f"the baseline {before_syncs:g}",
                (
                    ".item(), .cpu(), .tolist() and float(tensor) copy a value to the host; on an accelerator each "
                    "waits for all queued work, so the device idles while Python catches up",
                    "keep values on the device (sum losses as tensors, log every N steps) or copy with "
                    "non_blocking=True",
                ),
            )
        )
    breaks = [(t.compile_stats or {}).get("graph_breaks") for t in trials]
    base_breaks = [t.graph_breaks for t in baseline.trials if t.graph_breaks is not None]
    now_breaks = max((b for b in breaks if b is not None), default=None)
    if counted is not None and any(counted.pair(n) is not None for n in ("graph_breaks", "recompiles")):
        findings.extend(_compile_counts(counted))  # counted, with where each break is: the trials' figure says less
    elif now_breaks is not None and base_breaks and now_breaks > max(base_breaks):
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: torch.compile graph breaks {max(base_breaks)} -> {now_breaks}",
                ("each break returns to Python between compiled graphs; TORCH_LOGS=graph_breaks shows where",),
            )
        )
    findings.extend(
        Finding("framework overhead", f"framework overhead: {w}")
        for t in trials[:1]
        for w in t.warnings
        if "compiled" in w
    )
    return findings


def _operators_finding(added: _AddedOperators, calls: tuple[str, ...] = ()) -> Finding:
    """`framework overhead: +120 operators a step (400 -> 520), FLOPs per sample unchanged`; `calls`: the torch
    calls' figure, where they grew too."""
    return Finding(
        "framework overhead",
        f"framework overhead: +{added.now - added.before:,} operators a step ({added.before:,} -> {added.now:,}), "
        f"{added.flops}",
        (
            *calls,
            f"step time {1000 * added.step_before_s:.2f} -> {1000 * added.step_now_s:.2f} ms: each added operator "
            f"costs {1e6 * added.per_operator_s:.1f} us, dispatch-sized, not compute",
            "many small operations spend their time in Python and dispatch, not in compute",
            "fuse or vectorise them, or try torch.compile (the bf16-compile config)",
        ),
    )


def _compile_counts(counted: _Counted) -> list[Finding]:
    """New torch.compile graph breaks, named by where they happen, and new recompiles, by the guard that failed."""
    findings = []
    breaks = counted.pair("graph_breaks")
    if breaks is not None and breaks[1] > breaks[0]:
        places = [p for p in counted.head.break_places if p not in counted.base.break_places]
        places = places or counted.head.break_places
        where = format_names(list(dict.fromkeys(p.split(": ", 1)[0] for p in places)), shown=3)
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: torch.compile graph breaks {breaks[0]:g} -> {breaks[1]:g}"
                + (f", at {where}" if where else ""),
                (
                    *places,
                    "each break returns to Python between compiled graphs"
                    + ("" if places else "; TORCH_LOGS=graph_breaks shows where"),
                ),
            )
        )
    recompiles = counted.pair("recompiles")
    if recompiles is not None and recompiles[1] > recompiles[0]:
        reasons = [r for r in counted.head.recompile_reasons if r not in counted.base.recompile_reasons]
        reasons = reasons or counted.head.recompile_reasons
        first = f": {reasons[0]}" + (f" and {len(reasons) - 1} more" if len(reasons) > 1 else "") if reasons else ""
        findings.append(
            Finding(
                "framework overhead",
                f"framework overhead: torch.compile recompiles {recompiles[0]:g} -> {recompiles[1]:g}{first}",
                (
                    *reasons,
                    "a guard failed (a changed shape, dtype or Python value), and the function was traced and "
                    "compiled again; mark the dimension dynamic or keep the value fixed"
                    + ("" if reasons else "; TORCH_LOGS=recompiles shows why"),
                ),
            )
        )
    return findings
