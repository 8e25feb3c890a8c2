"""Diagnosis: which part of the step explains a change, and rules that name a suspect with evidence.

Per-phase attribution compares the time per step of each phase (data wait, host-to-device copy,
forward + loss, backward, optimizer) with the baseline's, and says which phase explains how much of
the change in step time. The rules read the same figures, one module each (its docstring says when it speaks):

- `pipeline`: the data pipeline (data wait, the DataLoader's settings, its workers' CPU);
- `compute`: model compute (the compute phases, FLOPs per sample);
- `tail`: tail latency, and a slow path that only some trial processes take (intermittent);
- `memory`: memory growth step over step, a peak-memory regression, the counted allocated peak;
- `framework`: framework overhead (torch calls, operators, host syncs, torch.compile graph breaks and recompiles);
- `dependencies`: the same work (a slower step with every count unchanged: the runtime or the machine), and the
  packages of a paired check whose sides ran on other versions;
- `utilisation`: accelerator utilisation (CUDA);
- `ranks`: data-parallel trials (communication, load imbalance, straggler);
- `numerics`: a loss that was not finite;
- `operators`: the operators whose self time grew (with `--profile`).

`core` runs them over each config and ranks their findings; `counted` compares the step's exact counts, `common`
holds what the rules share. The exact counts (`Counts`: one untimed step on each side) are stronger evidence than
the timed phases: where both sides have them, operators that grew replace the torch calls (which FLOPs that grew
silence: the calls came with compute), the counted graph breaks replace the trials' figure, and a slower step with
unchanged counts is no model-compute finding; where the base has none (baseline files written before them) no rule
reads them.

Each finding is one line plus its evidence. The findings are ranked by what explains the change (see
`_strength`): with a slower step, the part that explains most of its growth leads and memory follows;
without one, memory leads when it is what changed. A slower step is a samples/s regression, or, while
that verdict is still open, early evidence: the step grew past the threshold's worth beyond
evidence_sigmas standard errors of the trials' spread (the diagnosis is then shown, marked as early,
and fails nothing), or beyond ranking_sigmas when a peak-memory regression fails the build anyway (then
the question is only what explains the change). Pure functions over the gate's result: nothing here runs.
"""

from __future__ import annotations

from perfgate.judge.diagnosis.common import DEFAULT_THRESHOLDS, PHASE_NAMES
from perfgate.judge.diagnosis.compute import FLOPS_LINE
from perfgate.judge.diagnosis.core import diagnose, diagnose_config
from perfgate.judge.diagnosis.counted import COUNT_TOLERANCES, count_tolerances
from perfgate.judge.diagnosis.dependencies import DEPENDENCIES, ONLY_PACKAGES, SAME_WORK_PACKAGES
from perfgate.judge.diagnosis.memory import ALLOCATED_KINDS
from perfgate.judge.diagnosis.operators import grown_operators
from perfgate.judge.diagnosis.ranks import RANK_SUSPECTS, Ranks

__all__ = [
    "ALLOCATED_KINDS",
    "COUNT_TOLERANCES",
    "DEFAULT_THRESHOLDS",
    "DEPENDENCIES",
    "FLOPS_LINE",
    "ONLY_PACKAGES",
    "PHASE_NAMES",
    "RANK_SUSPECTS",
    "SAME_WORK_PACKAGES",
    "Ranks",
    "count_tolerances",
    "diagnose",
    "diagnose_config",
    "grown_operators",
]
