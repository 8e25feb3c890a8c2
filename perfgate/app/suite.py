"""Every check of one pytest session (`pytest --perfgate`, `--perfgate-update`), owned in one place as
`app.gate.GateSession` owns one `perfgate check`: `GateSuite`, its share of the session's one alpha for each
check, its pytest-benchmark tests, and the session's outputs."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.app.gate import GateSession
from perfgate.dependencies import dependencies_required
from perfgate.errors import PerfgateError
from perfgate.judge.family import COMPARISONS_PER_CONFIG, SessionShares
from perfgate.outcome import fails_build, micro_fails
from perfgate.records.verdicts import SessionRate

if TYPE_CHECKING:
    from perfgate.app.request import PluginRequest
    from perfgate.check.micro import PairedMicro
    from perfgate.measure.lab import ProgressCallback
    from perfgate.records.baselines import StoredUpdate
    from perfgate.records.diagnoses import Diagnosis
    from perfgate.records.fingerprint import Fingerprint
    from perfgate.records.judgement import Judgement, RunReading
    from perfgate.records.micro import MicroBenchmark
    from perfgate.records.results import MicroSection, RunResult
    from perfgate.records.shapes import Environment
    from perfgate.records.verdicts import ConfigVerdict, GateResult, MicroVerdict, WorkloadVerdict
    from perfgate.references import Reference


# (workload, config): its verdict; a workload that could not be compared, its WorkloadVerdict (a new one's says so);
# a problem's text; None: updated
Verdicts = dict[tuple[str, str], "ConfigVerdict | WorkloadVerdict | str | None"]


def configured_test(workload: str, config: str) -> str:
    """A configured item's key in the session's plan (its pytest node id)."""
    return f"perfgate::{workload}[{config}]"


class GateSuite:
    """Every check of one pytest session, its pytest-benchmark tests and its outputs (`pytest --perfgate`, or
    `--perfgate-update`), owned in one place as `GateSession` owns one `perfgate check`. Each check (a fixture
    test, the configured items of one set of configs, the pytest-benchmark tests at the end) runs at its share of
    the session's one alpha (`judge.family`: a Bonferroni split over the checks, in proportion to the comparisons
    `plan` expects of each, and Holm's procedure within each check), so the session fails unchanged code at most
    alpha of the time however many checks it runs. `finish` writes the session's results file and report and says
    whether the session fails. `terminal`: entered around each measurement, it gives the stream progress lines go
    to (None: quiet)."""

    def __init__(self, request: PluginRequest, terminal: Callable[[], AbstractContextManager[Any]]) -> None:
        self.request = request
        self.terminal = terminal
        self.gates: list[GateResult] = []
        self.runs: list[RunResult] = []
        self.updates: list[StoredUpdate] = []
        self.micro: list[MicroVerdict] = []
        self.micro_updates: list[tuple[MicroBenchmark, MicroBenchmark | None]] = []
        self.micro_paired: PairedMicro | None = None  # --perfgate-against: the session pairs that judged `micro`
        self.micro_mode = "stored baselines"  # what `micro` was compared with, in words
        self.problems: list[str] = []  # what failed outside any test: the session fails
        self.recorded: list[Path] = []  # --perfgate-record: the history records appended
        self.notes: list[str] = []  # warnings of steps after a measurement (not recorded, not pushed)
        self._diagnosed: tuple[int, list[Diagnosis]] | None = None  # (checks diagnosed, their diagnoses)
        self._read: list[RunReading] = []  # the lab's reading of each run so far, in `runs`' order
        self.written: list[Path] = []  # the results file and the report, once written
        self._probes: list[float] = []
        self._environment: Environment | None = None  # this process's, once read for pytest-benchmark
        self.shares = SessionShares(request.gate.alpha)  # the session's alpha and what its checks took of it

    def plan(
        self,
        *,
        configured: Sequence[tuple[str, str]] = (),
        fixture_tests: Sequence[str] = (),
        benchmarks: Sequence[str] = (),
    ) -> None:
        """The perf tests the session collected, which set each check's share of alpha: each configured item
        (workload, config), each test that uses the fixture (by node id: it judges the session's configs, unless it
        says otherwise) and each pytest-benchmark test (one comparison each)."""
        per_config = COMPARISONS_PER_CONFIG
        planned = {configured_test(workload, config): per_config for workload, config in configured}
        planned |= {test: per_config * len(self.request.configs) for test in fixture_tests}
        planned |= dict.fromkeys(benchmarks, 1)
        self.shares = SessionShares(self.request.gate.alpha, planned)

    def rate(self) -> SessionRate | None:
        """The one false-alarm rate the session's checks shared, over the comparisons they judged (None: none)."""
        checks = len(self.gates) + (1 if self.micro else 0)
        if not checks:
            return None
        tested = sum(1 for v in self.micro if v.throughput is not None and not math.isnan(v.throughput.p_slower))
        return SessionRate(self.request.gate.alpha, sum(g.comparisons for g in self.gates) + tested, checks)

    @contextmanager
    def _measuring(self) -> Iterator[tuple[ProgressCallback | None, Callable[[str], None] | None]]:
        from perfgate.report.progress import Progress

        with self.terminal() as stream:
            if stream is None:
                yield None, None
            else:
                yield Progress(self.request.trials, stream), lambda message: stream.write(f"perfgate: {message}\n")

    def failing(self, verdicts: Sequence[ConfigVerdict]) -> list[ConfigVerdict]:
        """The verdicts that fail the build (`outcome.fails_build`): their tests fail, or in warn-only mode they
        warn."""
        fail_on_inconclusive = self.request.gate.fail_on_inconclusive
        return [v for v in verdicts if fails_build(v.status, fail_on_inconclusive=fail_on_inconclusive)]

    def check(
        self, references: Sequence[Reference], configs: str | Sequence[str] | None = None, *, test: str | None = None
    ) -> GateResult:
        """Measure and judge these workloads in these configs (None: the session's), stored or paired, at the
        check's share of the session's alpha; `test`: the perf test it runs for (its node id in `plan`)."""
        return self._check(references, configs, () if test is None else (test,))

    def _check(
        self, references: Sequence[Reference], configs: str | Sequence[str] | None, tests: Sequence[str]
    ) -> GateResult:
        from perfgate.app.sink import StreamSink

        with dependencies_required(), self._measuring() as (progress, notify):
            request = self.request.check(references, configs)
            divisor, self.shares = self.shares.share(tests, COMPARISONS_PER_CONFIG * request.judged)
            request = replace(request, gate=replace(request.gate, session_divisor=divisor))
            session = GateSession(request, StreamSink(quiet=True))
            result = session.measure(progress, notify)
            if request.history is not None and request.history.record:  # --perfgate-record: each check recorded
                session.record(result)
                self.recorded += session.recorded
                self.notes += session.warnings
        self.gates.append(result)
        if result.run is not None:
            self.runs.append(result.run)
        return result

    def update(self, references: Sequence[Reference], configs: str | Sequence[str] | None = None) -> Verdicts:
        """Measure these workloads and write their baselines: None for each config measured, else its problem."""
        from perfgate.measure.lab import run_lab
        from perfgate.records.baselines import BaselineStore

        with dependencies_required():
            with self._measuring() as (progress, _):
                run = run_lab(references, self.request.run(configs), progress)
            self.runs.append(run)
            self.updates.extend(BaselineStore(self.request.baseline_dir).write_run(run))
        outcomes: Verdicts = {}
        for workload in run.workloads:
            for name, config in workload.configs.items():
                measured = any(t.ok for t in config.trials)
                outcomes[(workload.name, name)] = None if measured else f"the config failed: {config.failure_reason}"
        return outcomes

    def check_items(self, items: Sequence[tuple[Reference, str, str]]) -> Verdicts:
        """The selected configured items (reference, workload name, config) measured at once, configs interleaved
        as `perfgate check` does, one check per set of configs. A PerfgateError (a workload whose code fails) is
        every item's text: none re-runs."""
        from perfgate.variants import CONFIG_NAMES

        configs_of: dict[Reference, set[str]] = {}
        workload_of = {reference: workload for reference, workload, _ in items}
        for reference, _, config in items:
            configs_of.setdefault(reference, set()).add(config)
        groups: dict[tuple[str, ...], list[Reference]] = {}
        for reference, names in configs_of.items():
            groups.setdefault(tuple(c for c in CONFIG_NAMES if c in names), []).append(reference)
        outcomes: Verdicts = {}
        try:
            for configs, references in groups.items():
                if self.request.mode == "update":
                    outcomes.update(self.update(references, configs))
                    continue
                tests = [configured_test(workload_of[r], config) for r in references for config in configs]
                for workload in self._check(references, configs, tests).workloads:
                    outcomes.update(
                        {(workload.workload, config): workload if workload.problem else None for config in configs}
                    )
                    outcomes.update({(v.workload, v.config): v for v in workload.configs})
        except PerfgateError as error:
            return {(workload, config): error.one_line() for _, workload, config in items}
        return outcomes

    # -- pytest-benchmark ---------------------------------------------------------------------------

    def probe(self) -> None:
        """Before the first pytest-benchmark test: the machine's speed, to read its results by (paired: none)."""
        if self.request.against is None and not self._probes:
            self._probes.append(_probe())

    def judge_micro(self, output_json: Any) -> None:
        """pytest-benchmark's results (its JSON, raw round times included): judged against their stored
        baselines, written as the baselines (update), or, paired, measured in session pairs against the ref."""
        if self.request.against is not None:
            self._pair_micro(output_json)
            return
        from perfgate.judge.micro import compare_micro
        from perfgate.records.micro import DEFAULT_RUN_NOISE, MicroStore, parse_pytest_benchmark
        from perfgate.records.summary import combine

        try:
            environment, fingerprint = _environment()
            self._environment = environment
            self._probes.append(_probe())
            measured = parse_pytest_benchmark(
                output_json,
                probe=combine(self._probes),
                measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                commit=None if environment.git is None else environment.git.sha,
            )
            store = MicroStore(self.request.baseline_dir)
            if self.request.mode == "update":
                previous = store.write(fingerprint, measured)
                self.micro_updates.extend((m, previous[m.name]) for m in measured)
                return
            gate, noise = self.request.gate, self.request.project.benchmark_noise
            self.micro_mode = f"stored baselines ({store.path})"
            self.micro = compare_micro(
                store.find(fingerprint),
                measured,
                threshold=gate.default_thresholds.throughput,
                alpha=gate.alpha / self._micro_divisor(len(measured)),
                run_noise=DEFAULT_RUN_NOISE if noise is None else noise,
                path=store.path,
            )
        except PerfgateError as error:
            self.problems.append(f"pytest-benchmark results not judged: {error.one_line()}")

    def _pair_micro(self, output_json: Any) -> None:
        """--perfgate-against: this session's run showed the benchmarks pass; session pairs of REF and the
        working tree measure them (`check.micro.run_paired_micro`)."""
        from perfgate.check.micro import PairLimits, run_paired_micro
        from perfgate.records.micro import parse_pytest_benchmark

        against = self.request.against
        assert against is not None
        try:
            names = [m.name for m in parse_pytest_benchmark(output_json)]
            if not names:
                return
            gate = self.request.gate
            with self._measuring() as (_, notify), dependencies_required():
                self.micro_paired = paired = run_paired_micro(
                    against,
                    names,
                    rootdir=self.request.rootpath,
                    limits=PairLimits(
                        threshold=gate.default_thresholds.throughput,
                        alpha=gate.alpha / self._micro_divisor(len(names)),
                        max_pairs=max(gate.first_n, gate.max_n),
                        min_pairs=gate.first_n,
                        time_budget_s=gate.budget_s(0),
                    ),
                    notify=notify,
                    environment=self.request.pairing.environment,
                )
            self.micro = paired.verdicts
            where = f"; {paired.environments.describe()}" if paired.environments is not None else ""
            self.micro_mode = (
                f"paired: {paired.pairs} session pair{'s' if paired.pairs != 1 else ''} against {paired.ref} "
                f"({paired.base_commit[:10]}), alternating which side runs first{where}"
            )
        except PerfgateError as error:
            self.problems.append(f"pytest-benchmark tests not measured against {against}: {error.one_line()}")

    def _micro_divisor(self, benchmarks: int) -> float:
        """The pytest-benchmark tests' divisor of alpha: judged at the session's end, their family is its last
        check and takes what the others left (`judge.family`)."""
        divisor, self.shares = self.shares.share((), benchmarks, last=True)
        return divisor

    # -- the end ------------------------------------------------------------------------------------

    def finish(self) -> bool:
        """Write the session's outputs; whether the session fails although its tests passed: a pytest-benchmark
        test's verdict fails the build (`outcome.micro_fails`; paired, one that REF lacks is new: nothing
        wrong; in warn-only mode, none), or something failed outside any test (the gate itself: warn-only or
        not)."""
        self._write_outputs()
        return (self._micro_fails(self.micro) and not self.request.gate.warn_only) or bool(self.problems)

    def _micro_fails(self, verdicts: Sequence[MicroVerdict]) -> bool:
        """Whether these pytest-benchmark verdicts fail the build (`outcome.micro_fails`; paired, one that REF
        lacks is new: nothing wrong)."""
        return micro_fails(
            [v.status for v in verdicts],
            micro_paired=self.micro_paired is not None,
            fail_on_inconclusive=self.request.gate.fail_on_inconclusive,
        )

    def _micro_section(self) -> MicroSection | None:
        from perfgate.report.json import micro_section

        if not self.micro:
            return None
        return micro_section(self.micro, paired=self.micro_paired is not None, mode=self.micro_mode)

    def _write_outputs(self) -> None:
        """The results file (--perfgate-json), the Markdown report (--perfgate-markdown) and, under GitHub
        Actions, that report appended to the job summary (`app.finish`, as `perfgate check --json --markdown`
        and the Action write them); a step that fails is a problem of the session."""
        from perfgate.app.finish import write_report, write_results

        micro, outputs = self._micro_section(), self.request.outputs
        if outputs.json is not None and (self.runs or micro is not None):
            try:
                write_results(self._results(micro), outputs.json)
                self.written.append(outputs.json)
            except PerfgateError as error:
                self.problems.append(error.one_line())
        if self.request.mode != "check":
            return
        summary = bool(self.gates or micro is not None or self.problems)  # a session without perf tests adds nothing
        try:
            write_report(self.judgement(micro), outputs, self.written, job_summary=summary)
        except PerfgateError as error:
            self.problems.append(error.one_line())

    def _gate(self) -> GateResult:
        """Every check of this session as one result (an empty one when nothing was checked)."""
        from perfgate.judge.verdict import merge_results
        from perfgate.records.verdicts import GateResult

        rate = self.rate()
        return merge_results(self.gates, rate) if self.gates else GateResult([], self.request.gate, session=rate)

    def _results(self, micro: MicroSection | None) -> RunResult:
        """The results file's document: every run merged, the check's settings (so `perfgate report` judges it
        as this session did) and the pytest-benchmark verdicts."""
        import perfgate
        from perfgate.records.results import RunResult, merge_runs

        if self.runs:
            run = merge_runs(self.runs)
        else:  # pytest-benchmark tests alone
            environment = self._environment if self._environment is not None else _environment()[0]
            run = RunResult(perfgate.__version__, datetime.now(UTC).isoformat(timespec="seconds"), environment, [])
        gate = self._gate().to_record(self.request.baseline_dir) if self.gates else None
        return replace(run, gate=gate, micro=micro)

    def diagnoses(self) -> list[Diagnosis]:
        """Every check's diagnoses (every config's with --perfgate-diagnose), each check diagnosed once for every
        report."""
        from perfgate.judge.diagnosis import diagnose

        key = len(self.gates)
        if self._diagnosed is None or self._diagnosed[0] != key:
            every = bool(self.request.values.get("diagnose"))
            self._diagnosed = (key, [d for g in self.gates for d in diagnose(g, every_config=every)])
        return self._diagnosed[1]

    def judgement(self, micro: MicroSection | None = None) -> Judgement:
        """The session judged once for its reports: every check merged (`_gate`), each check's diagnoses
        (`diagnoses`), the lab's reading of the merged run and of each run, the pytest-benchmark tests' verdicts
        (`micro`) and the problems so far."""
        from perfgate.app.judging import judge

        return judge(
            self._gate(),
            diagnoses=self.diagnoses(),
            micro=micro,
            problems=self.problems,
            checks=self.gates,
            runs=self._readings(),
        )

    def _readings(self) -> list[RunReading]:
        """Each run of the session read by the lab, once."""
        from perfgate.app.judging import read_run

        peaks = self.request.project.peak_tflops
        self._read += [read_run(run, peaks) for run in self.runs[len(self._read) :]]
        return list(self._read)

    def summary(self) -> str | None:
        """The session's summary for the terminal (None: nothing measured, nothing to say): the checks' modes,
        every verdict in one table, the lab reading, the pytest-benchmark pairs and what was written."""
        from perfgate.formatting import printable
        from perfgate.report.text import format_pytest_summary

        text = format_pytest_summary(
            self.judgement(self._micro_section()),
            updates=self.updates,
            store_dir=self.request.baseline_dir,
            micro_updates=self.micro_updates,
        )
        if not text:
            return None
        lines = [f"mode: {mode}" for mode in dict.fromkeys(gate.mode for gate in self.gates)]
        lines.append(text.rstrip("\n"))
        rate = self.rate() if self.request.mode == "check" else None
        if rate is not None:
            lines.append(rate.line)
        if self.request.mode == "check" and self.request.gate.warn_only:
            would = [f"{v.workload} {v.config}" for g in self.gates for v in self.failing(g.verdicts)]
            would += [v.name for v in self.micro if self._micro_fails([v])]
            lines.append(
                "warn-only mode: every verdict is reported and none fails the session"
                + (f" (these would: {', '.join(would)})" if would else "")
            )
        paired = self.micro_paired
        if paired is not None and paired.pairs:
            stopped = f"; undecided ones stopped at {paired.stopped_because}" if paired.stopped_because else ""
            lines.append(
                f"pytest-benchmark tests: measured in {paired.pairs} session pair{'s' if paired.pairs > 1 else ''}"
                f" against {paired.ref} ({paired.base_commit[:10]}), alternating which side runs first{stopped}"
            )
            said = f"environment: {paired.environments.describe()}" if paired.environments is not None else None
            if said is not None and said not in text:  # the workloads' checks may have said it already
                lines.append(said)
        lines += [f"{'results' if p == self.request.outputs.json else 'report'} written to {p}" for p in self.written]
        lines += [f"recorded in the history: {path}" for path in self.recorded]
        lines += [f"warning: {note}" for note in self.notes]
        return printable("\n".join(lines))


@dependencies_required()
def _environment() -> tuple[Environment, Fingerprint]:
    """This process's environment (pytest-benchmark measured in it) and its machine's fingerprint."""
    import torch

    from perfgate.measure.environment import collect_environment
    from perfgate.records.fingerprint import machine_fingerprint

    environment = collect_environment("cpu", torch.get_num_threads())
    return environment, machine_fingerprint(environment)


def _probe() -> float:
    from perfgate.measure.device import Device
    from perfgate.measure.probe import probe_steps_per_sec

    return probe_steps_per_sec(Device())
