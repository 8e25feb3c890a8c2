"""The same work, and the packages. Same work (the runtime or the machine): a slower step with every
count unchanged does the same work; unless the data pipeline (whose finding then carries the counts), framework
overhead, memory growth or a rank explains it, the finding says what is left: the data pipeline, the runtime or the
machine. Dependencies (a paired check whose sides ran on other package versions, `Against.environments`): a config
that regressed, or whose open verdict leans slower, names the packages that changed; with every count of the step
unchanged (the same work: the training code did not change what it computes) they lead, the counts and the phases
that grew their evidence; counts that moved with them are their evidence too. Where both sides ran in the head's
packages while the base declares others, a standing caveat says the dependency change went unmeasured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from perfgate.judge.diagnosis.common import _per_step
from perfgate.judge.diagnosis.counted import _Counted
from perfgate.project import DiagnosisThresholds
from perfgate.records.counts import COUNT_NAMES
from perfgate.records.diagnoses import SAME_WORK, Finding, PhaseChange
from perfgate.records.results import Environments

DEPENDENCIES = "dependencies"  # the suspect of a paired check whose sides ran on other package versions
SAME_WORK_PACKAGES = "dependencies: the same work on other packages"  # how a dependencies finding that leads begins
ONLY_PACKAGES = "dependencies: only the declared packages changed"  # leads too: the code is the base's


def _same_work(
    findings: list[Finding],
    counted: _Counted | None,
    slower: bool,
    phases: Sequence[PhaseChange],
    th: DiagnosisThresholds,
    machine_ratio: float | None,
) -> list[Finding]:
    """A slower step whose every count is unchanged does the same work: the model did not slow it. Where the data
    pipeline explains the change, its finding gets the counts as evidence; where nothing else does (no framework
    overhead counted, no memory growth, no rank's rule that explains most of it), a finding says what is left:
    the data pipeline, the runtime or the machine."""
    if counted is None or not slower or not counted.same_work:
        return findings
    figures = "every count of the step is unchanged: " + ", ".join(counted.figures())
    data = next((f for f in findings if f.suspect == "data pipeline" and not f.standing), None)
    if data is not None:
        return [replace(f, evidence=(*f.evidence, figures)) if f is data else f for f in findings]
    if any(
        not f.standing
        and (
            f.suspect == "framework overhead"
            or f.line.startswith("memory growth")
            or (f.explains is not None and f.explains >= th.explains)
        )
        for f in findings
    ):
        return findings
    evidence = [figures]
    if not counted.same_device:
        evidence.append(
            f"operators, kernels and the allocated peak are not compared: the baseline counted on "
            f"{counted.base.device}, this run on {counted.head.device}"
        )
    evidence.extend(_per_step(p) for p in sorted(phases, key=lambda p: p.change_s, reverse=True) if p.change_s > 0)
    if machine_ratio is not None:
        evidence.append(f"the machine probe ran {machine_ratio:.2f}x as fast as when the baseline was measured")
    line = (
        f"{SAME_WORK}: the step is slower with every count unchanged, so the model does the same work; look at the "
        "data pipeline, the runtime (torch and library versions, threads, backend settings) or the machine"
    )
    return [*findings, Finding(SAME_WORK, line, tuple(evidence))]


def _dependencies(
    findings: list[Finding],
    environments: Environments | None,
    counted: _Counted | None,
    suspected: bool,
    phases: Sequence[PhaseChange],
    environment_option: str,
) -> list[Finding]:
    """A paired check whose sides ran on other package versions: where the config regressed (or leans slower,
    `suspected`), the packages that changed are a suspect. With every count of the step unchanged the code does the
    same work (the diagnosis knows no diff of the code: the counts are its cue), so the packages lead, and the
    same-work finding's counts and phases become their evidence; counts that moved are evidence that the new
    versions changed what runs, and where head changes no file but the declarations (`code_changed` False) the
    packages lead with them. Both sides in the head's packages while the base declares others: a standing
    caveat, since the check did not measure the dependency change. Nothing without the record (`environments`)."""
    if environments is None:
        return findings
    if environments.kind == "shared" and environments.declared:
        caveat = Finding(
            DEPENDENCIES,
            f"{DEPENDENCIES}: the base ran in the head's packages: a dependency change is not measured "
            f"({environment_option} per-side measures it)",
            (f"the base declares {', '.join(environments.declared)}, not installed for it",),
            standing=True,
        )
        findings = [*findings, caveat]
    changed = environments.changed_text()
    if not suspected or not changed:
        return findings
    where = (
        "the base ran in an environment built from its own declarations"
        if environments.kind == "per-side"
        else "as each side imported them"
    )
    evidence = [f"dependency change: {changed} ({where})"]
    if counted is not None and counted.same_work:
        findings = [f for f in findings if f.suspect != SAME_WORK]  # the packages are what is left: said here
        evidence.append("every count of the step is unchanged: " + ", ".join(counted.figures()))
        growth = sum(p.change_s for p in phases)  # where it shows: the phases that carry a tenth of it or more
        grown = [p for p in phases if p.baseline_s is not None and p.change_s > 0.1 * growth > 0]
        evidence.extend(_per_step(p) for p in sorted(grown, key=lambda p: p.change_s, reverse=True))
        line = (
            f"{SAME_WORK_PACKAGES} ({changed}): every count of the step is unchanged, so the change comes with the "
            "new versions; look at what they changed, or pin the base's versions to confirm"
        )
    else:
        moved = [counted.figure(name) for name in COUNT_NAMES if counted.moved(name)] if counted is not None else []
        if moved and environments.code_changed is False:
            evidence.append("counts changed with the packages: " + ", ".join(moved))
            line = (
                f"{ONLY_PACKAGES} ({changed}), no other file: the new versions changed what runs (the step's counts "
                "moved with them); look at what they changed, or pin the base's versions to confirm"
            )
        elif moved:
            evidence.append("counts changed with the packages: " + ", ".join(moved))
            line = (
                f"{DEPENDENCIES}: the packages changed ({changed}), and the step's counts with them: the new versions "
                "may have changed what runs, or the code did"
            )
        else:
            line = (
                f"{DEPENDENCIES}: the packages changed ({changed}); the step's counts were not compared on both "
                "sides, so whether the code does the same work is not known"
            )
    return [*findings, Finding(DEPENDENCIES, line, tuple(evidence))]
