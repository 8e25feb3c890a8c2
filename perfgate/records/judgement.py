"""A finished measurement judged once: the one bundle every report reads.

`app.judging` builds it, from a live check's verdicts or a saved results file's: the verdicts, the diagnoses,
the lab's reading of the run judged (each config's use of the hardware, what the speedups suggest) and the
samples/s bound of each throughput threshold. The reports (text, Markdown, JSON, the chart, the Action's
outputs) only read it, so none judges a second time and none can disagree with the verdict (torch.utils.benchmark's
`Compare` renders the `Measurement`s it is given the same way). A lab run, judged by nothing, is read alone
(`RunReading`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from perfgate.records.diagnoses import Diagnosis
from perfgate.records.reading import LabReading, WorkloadUtilisation
from perfgate.records.results import MicroSection, RunResult
from perfgate.records.series import Trend
from perfgate.records.verdicts import GateResult


@dataclass(frozen=True)
class WorkloadReading:
    """One measured workload as the lab reads it: each counted config's use of the hardware (None: no config's
    FLOPs were counted) and what the speedups between its configs suggest."""

    utilisation: WorkloadUtilisation | None
    reading: LabReading


@dataclass(frozen=True)
class RunReading:
    """A measured run and the lab's reading of each of its workloads, by name: a lab run's whole judgement (it has
    no verdict), and the run a check judged."""

    run: RunResult
    workloads: Mapping[str, WorkloadReading]

    def of(self, workload: str) -> WorkloadReading:
        return self.workloads[workload]


@dataclass(frozen=True)
class Judgement:
    """A check judged once, for every report: its verdicts (`result`, whose `exit_code` is the build's answer), the
    diagnoses, the lab's reading of the run it judged and the samples/s bound of each throughput threshold; and what
    the reports show beside them: the pytest-benchmark tests' verdicts, the recorded runs charted beside this one,
    what failed outside any verdict, and a pytest session's checks and runs, each as it was judged and read."""

    result: GateResult
    diagnoses: tuple[Diagnosis, ...] = ()
    lab: RunReading | None = None  # `result.run`, read; None where the check measured nothing
    # each throughput threshold of the verdicts -> the samples/s ratio below which it is a regression
    bounds: Mapping[float, float] = field(default_factory=dict)
    micro: MicroSection | None = None  # the pytest-benchmark tests' verdicts (`pytest --perfgate`)
    trends: tuple[Trend, ...] = ()  # each judged config's recorded runs and this one (`records.series.trends_of`)
    problems: tuple[str, ...] = ()  # what failed outside any verdict (a pytest session fails on it)
    checks: tuple[GateResult, ...] = ()  # a pytest session's checks, each as it judged (`result` merges them)
    runs: tuple[RunReading, ...] = ()  # a pytest session's runs (its checks' and its updates'), each read

    def bound(self, threshold: float) -> float:
        """The samples/s ratio below which a throughput change beyond `threshold` is a regression."""
        return self.bounds[threshold]
