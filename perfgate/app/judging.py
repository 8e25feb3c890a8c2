"""Judge a finished measurement once, into the one bundle every report reads (`records.judgement`).

A live check's verdicts (`app.gate`, `app.suite`) and a saved results file's (`judge_file`: `perfgate report`,
the Action, the demo) go through `judge`: the diagnoses, the lab's reading of the run judged and the bounds of the
thresholds are computed here and nowhere else, so the text, the Markdown, the JSON, the chart and the Action's
annotations show one judgement. A lab run, judged by nothing, is read by `read_run`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from perfgate.check.stored import judge_saved
from perfgate.judge.diagnosis import diagnose
from perfgate.judge.reading import read_lab
from perfgate.judge.stats import slowdown_bound
from perfgate.judge.utilisation import workload_utilisation
from perfgate.project import ProjectConfig
from perfgate.records.diagnoses import Diagnosis
from perfgate.records.judgement import Judgement, RunReading, WorkloadReading
from perfgate.records.results import MicroSection, RunResult
from perfgate.records.series import Trend
from perfgate.records.verdicts import ConfigVerdict, GateResult


def read_run(run: RunResult, peak_tflops: Mapping[str, float] | None = None) -> RunReading:
    """The lab's reading of each workload of a run: its configs' use of the hardware (`peak_tflops`, from
    `[tool.perfgate]`, replaces the GPU's peaks) and what its speedups suggest."""
    workloads = {}
    for workload in run.workloads:
        use = workload_utilisation(workload, run.environment, peak_tflops)
        reading = read_lab({name: config.summary for name, config in workload.configs.items()}, use)
        workloads[workload.name] = WorkloadReading(use, reading)
    return RunReading(run, workloads)


def bounds_of(verdicts: Iterable[ConfigVerdict]) -> dict[float, float]:
    """Each throughput threshold of these verdicts and the samples/s ratio below which it is a regression."""
    return {t: slowdown_bound(t) for t in sorted({v.thresholds.throughput for v in verdicts})}


def judge(
    result: GateResult,
    *,
    diagnosed: bool = True,
    every_config: bool = False,
    diagnoses: Sequence[Diagnosis] | None = None,
    micro: MicroSection | None = None,
    trends: Sequence[Trend] = (),
    problems: Sequence[str] = (),
    checks: Sequence[GateResult] = (),
    runs: Sequence[RunReading] = (),
) -> Judgement:
    """A check's verdicts judged once for every report: diagnosed (every config's with `every_config`; none when
    not `diagnosed`, as calibrate's A/A check; `diagnoses`: a pytest session's, diagnosed check by check), the run
    judged read by the lab, the thresholds' bounds; `micro`, `trends`, `problems`, `checks` and `runs` are carried
    for the reports (`records.judgement.Judgement`)."""
    if diagnoses is None:
        diagnoses = diagnose(result, every_config=every_config) if diagnosed else []
    peaks = result.settings.project.peak_tflops
    return Judgement(
        result=result,
        diagnoses=tuple(diagnoses),
        lab=None if result.run is None else read_run(result.run, peaks),
        bounds=bounds_of(result.verdicts),
        micro=micro,
        trends=tuple(trends),
        problems=tuple(problems),
        checks=tuple(checks),
        runs=tuple(runs),
    )


def judge_file(
    run: RunResult, project: ProjectConfig, baseline_dir: Path | None = None, *, diagnosed: bool = True
) -> Judgement:
    """A saved results file judged as the check that wrote it did (`check.stored.judge_saved`: its settings are in
    the file, the baselines it was judged against in `baseline_dir` or the folder it names), with the
    pytest-benchmark verdicts a `pytest --perfgate` session kept in it."""
    return judge(judge_saved(run, project, baseline_dir), diagnosed=diagnosed, micro=run.micro)
