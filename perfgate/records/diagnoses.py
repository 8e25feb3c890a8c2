"""A diagnosis, as shapes: per config the phases' change per step, the findings (each one line with its evidence)
and the suspect they name (`judge.diagnosis` diagnoses; every report reads them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

DATA = frozenset({"data_wait", "h2d"})
COMPUTE = frozenset({"forward", "backward", "optimizer"})
SAME_WORK = "runtime or machine"  # the suspect of a slower step whose every count is unchanged


@dataclass(frozen=True)
class Finding:
    suspect: str  # "data pipeline", "model compute", "tail latency", "memory", "numerics", ...
    line: str
    evidence: tuple[str, ...] = ()
    standing: bool = False  # true of the baseline as well: worth knowing, but it explains no change
    # the share of the slower step it explains, where not by phases alone (the ranks' rules, FLOPs that grew)
    explains: float | None = None


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    baseline_s: float | None  # per step; None without a baseline
    current_s: float
    noise_s: float | None = None  # standard error of the change, from the trials' spread; None: unknown

    @property
    def change_s(self) -> float:
        return self.current_s - (self.baseline_s or 0.0)


@dataclass(frozen=True)
class Movement:
    """How a part of the step (some phases, or all of them) changed against the baseline, per step."""

    before_s: float
    change_s: float
    noise_s: float | None  # standard error of the change from the trials' spread on both sides; None: unknown

    def beyond_noise(self, sigmas: float, session_noise: float = 0.0) -> bool:
        """A change beyond `sigmas` standard errors; with the noise unknown (one trial a side), beyond a
        quarter of the part's time, which run-to-run noise alone does not reach. `session_noise`: the
        relative s.d. by which the baseline's session may differ from this one, added to the trials' spread."""
        if self.noise_s is None:
            return abs(self.change_s) > max(0.25, sigmas * session_noise) * self.before_s
        noise = math.hypot(self.noise_s, session_noise * self.before_s)
        return abs(self.change_s) > sigmas * noise


@dataclass(frozen=True)
class Diagnosis:
    workload: str
    config: str
    phases: tuple[PhaseChange, ...]
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    compile_s: tuple[float | None, float] | None = None  # (baseline, current) one-off compile time
    early: bool = False  # the step is slower beyond its noise while the samples/s verdict is still open
    loader_cpu: Movement | None = None  # the DataLoader workers' CPU seconds per step; None: not measured
    contention_s: float = 0.0  # step time the workers' added CPU took from the training step (`_contention_s`)
    comm_s: float = 0.0  # step time backward's longer wait for the gradient all-reduce added (`_ranks`)

    def to_dict(self) -> dict[str, Any]:
        """The diagnosis as data (`perfgate report --format json`): times in seconds per step."""
        return {
            "workload": self.workload,
            "config": self.config,
            "suspect": self.suspect,
            "suspect_share": self.suspect_share,
            "early_evidence": self.early,
            "loader_cpu_s": None
            if self.loader_cpu is None
            else {
                "baseline": self.loader_cpu.before_s,
                "current": self.loader_cpu.before_s + self.loader_cpu.change_s,
                "noise_s": self.loader_cpu.noise_s,
            },
            "contention_s": self.contention_s,
            "findings": [
                {"suspect": f.suspect, "line": f.line, "evidence": list(f.evidence), "standing": f.standing}
                for f in self.findings
            ],
            "phases": [
                {
                    "phase": p.phase,
                    "baseline_s": p.baseline_s,
                    "current_s": p.current_s,
                    "noise_s": p.noise_s,
                    "share": self.share(p),
                }
                for p in self.phases
            ],
            "compile_s": None
            if self.compile_s is None
            else {"baseline": self.compile_s[0], "current": self.compile_s[1]},
        }

    def share(self, phase: PhaseChange) -> float | None:
        """The share of the step's change that this phase accounts for; None without a baseline or change."""
        if any(p.baseline_s is None for p in self.phases):
            return None
        total = sum(p.change_s for p in self.phases)
        before = sum(p.baseline_s or 0.0 for p in self.phases)
        if before <= 0 or abs(total) < 0.05 * before:  # under 5% of the step: noise, no change to share out
            return None
        return phase.change_s / total

    @property
    def suspect(self) -> str | None:
        """The strongest finding's suspect; standing conditions and operator lists only support one."""
        return next((f.suspect for f in self.findings if f.suspect != "operators" and not f.standing), None)

    @property
    def suspect_share(self) -> float | None:
        """How much of the slower step the suspect explains (its phases' share of the growth); None when it
        is not a phase's suspect (memory, numerics, ...) or the step did not grow."""
        lead = next((f for f in self.findings if f.suspect == self.suspect), None)
        if lead is not None and lead.explains is not None:
            return lead.explains if lead.explains > 0 else None
        names = {
            "data pipeline": DATA,
            "model compute": COMPUTE,
            "framework overhead": COMPUTE,
            SAME_WORK: COMPUTE,
        }.get(self.suspect or "")
        if names is None:
            return None
        share = explained(self.phases, names, self.contention_s + self.comm_s)
        return share if share > 0 else None

    @property
    def headline(self) -> str:
        """`model compute (explains 96% of the slower step)`, marked when it is early evidence."""
        if self.suspect is None:
            return "none (no finding explains a change)" if self.findings else "none (no rule fired)"
        share = self.suspect_share
        text = self.suspect + (f" (explains {share:.0%} of the slower step)" if share is not None else "")
        if self.early:
            text += "; early evidence: the samples/s verdict is still open, the build does not fail on it"
        return text


def explained(phases: Sequence[PhaseChange], names: AbstractSet[str], contention_s: float = 0.0) -> float:
    """The share of the step's growth that these phases account for (0 when the step did not grow, 1 at most). The
    compute phases' growth that the DataLoader workers' added CPU took (`contention_s`) counts for the data
    phases, not the compute ones; so does, in a data-parallel trial, backward's longer wait for the all-reduce."""
    if any(p.baseline_s is None for p in phases):
        return 0.0
    growth = sum(p.change_s for p in phases)
    if growth <= 0:
        return 0.0
    moved = contention_s if names == DATA else -contention_s if names == COMPUTE else 0.0
    # At most all of it: other phases that got quicker would otherwise leave a share over 100%.
    return min(1.0, (sum(p.change_s for p in phases if p.phase in names) + moved) / growth)
