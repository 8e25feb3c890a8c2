"""pytest-benchmark tests measured against a git ref: whole pytest sessions of both sides, in pairs.

All rounds of one pytest-benchmark session come from one process, and a shared machine's speed
drifts from one session to the next by more than the regressions a gate must catch: a session
compared with sessions stored earlier misses 10% slowdowns. So, as for the workloads (`against`),
the base commit is checked out into a temporary git worktree and both sides are measured now: one
pytest session each, back to back, in alternating order (pair 0 base then head, pair 1 head then
base: ABBA). Each session gives a benchmark's calls per second of its median round; the per-pair
ratios are judged with `stats.compare_paired`, and while a benchmark is undecided one more pair
runs, up to `max_pairs` or the time budget, each look spending its share of the error rates
(`stats.look_levels`).

The sessions are subprocesses, `python -P -m pytest FILES --benchmark-only`, run in the side's
checkout with its source folders first on PYTHONPATH (the base side imports the base's code), and
with INNER_SESSION_ENV set, which switches perfgate's own pytest plugin off inside them (no gate
within the gate). This module never imports pytest.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfgate.check.sequential import measure_until_decided
from perfgate.errors import PerfgateError, ResultsError, UsageError, WorkloadError
from perfgate.judge.stats import LookLevels, compare_paired, holm_steps, look_levels
from perfgate.judge.wording import throughput_reason
from perfgate.measure.lab import TrialPlace, side_environment
from perfgate.measure.paired import SIDES, base_sides
from perfgate.measure.sources import source_folders
from perfgate.naming import PYTEST
from perfgate.outcome import Status
from perfgate.records.comparisons import DEFAULT_ALPHA, ThroughputComparison
from perfgate.records.micro import MicroBenchmark, parse_pytest_benchmark
from perfgate.records.results import Environments
from perfgate.records.verdicts import DEFAULT_MAX_PAIRS, DEFAULT_TIME_BUDGET_S, MicroVerdict

INNER_SESSION_ENV = "PERFGATE_INNER_SESSION"  # set in the paired sessions: perfgate's plugin stays off there
DEFAULT_MIN_PAIRS = 3
PYTEST_OK_CODES = (0, 1, 5)  # passed; a test failed; nothing collected: the JSON holds what was measured

Measure = Callable[[str, int], Mapping[str, MicroBenchmark]]  # (side, pair) -> that session's benchmarks


@dataclass(frozen=True)
class PairedMicro:
    """The outcome of a paired measurement of pytest-benchmark tests."""

    ref: str
    base_commit: str
    verdicts: list[MicroVerdict]
    pairs: int  # session pairs run
    order: list[str] = field(default_factory=list)  # "#0: base, head", per pair
    stopped_because: str | None = None  # why undecided benchmarks got no more pairs
    environments: Environments | None = None  # the packages each side's sessions ran with (`measure.packages`)


def pair_sides(pair: int) -> tuple[str, str]:
    """The order of a pair's two sessions, alternating (ABBA) so a drift in time favours neither side."""
    return (SIDES[0], SIDES[1]) if pair % 2 == 0 else (SIDES[1], SIDES[0])


@dataclass(frozen=True)
class PairLimits:
    """How session pairs decide: the threshold and error rate, and the pairs and time they may take."""

    threshold: float
    alpha: float = DEFAULT_ALPHA
    max_pairs: int = DEFAULT_MAX_PAIRS
    min_pairs: int = DEFAULT_MIN_PAIRS
    time_budget_s: float = DEFAULT_TIME_BUDGET_S


def decide_pairs(
    measure: Measure,
    names: Sequence[str],
    *,
    ref: str,
    limits: PairLimits,
    started: float | None = None,
    notify: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> PairedMicro:
    """Run `limits.min_pairs` pairs of sessions (`measure(side, pair)`), judge every benchmark in `names`, then
    add one pair at a time while any is inconclusive, up to `max_pairs` or until the next pair (as long
    as the pairs so far, on average) would pass `time_budget_s` counted from `started`; that look is
    then the last and spends what is left of the error rates. A decided benchmark keeps its verdict.
    """
    started = clock() if started is None else started
    most = max(limits.min_pairs, limits.max_pairs, 1)
    sessions: dict[str, list[Mapping[str, MicroBenchmark]]] = {side: [] for side in SIDES}
    durations: list[float] = []
    order: list[str] = []

    def run_pair() -> None:
        pair = len(durations)
        sides = pair_sides(pair)
        began = clock()
        for side in sides:
            sessions[side].append(measure(side, pair))
        durations.append(clock() - began)
        order.append(f"#{pair}: {', '.join(sides)}")
        if notify:
            notify(f"pytest-benchmark session pair {pair + 1}: {', '.join(sides)} ({durations[-1]:.1f} s)")

    def budget_left() -> bool:
        return clock() - started + statistics.fmean(durations) <= limits.time_budget_s

    verdicts: dict[str, MicroVerdict] = {}
    previous: dict[str, int] = dict.fromkeys(names, 0)  # pairs at each benchmark's previous look
    if names:
        run_pair()
    while names and len(durations) < min(limits.min_pairs, most) and budget_left():
        run_pair()
    for name in names:  # what the first pair lacks is not a benchmark of that side
        if name not in sessions["base"][0]:
            reason = f"not on {ref}'s side (a new or renamed benchmark, or its test fails there): nothing to compare"
            verdicts[name] = MicroVerdict(name, Status.NO_BASELINE, reason, current=sessions["head"][0].get(name))
        elif name not in sessions["head"][0]:
            reason = "not measured in the working tree's paired session: its test failed or was not collected there"
            verdicts[name] = MicroVerdict(name, Status.FAILED, reason, baseline=sessions["base"][0][name])

    def look(_: bool) -> list[str]:
        """Judge each undecided benchmark that has a new pair; the benchmarks still inconclusive, none after the
        last look. Whether a look is the last is known before it (the pairs run, the budget), so it spends what
        is left of the error rates itself: `measure_until_decided` never needs to look again."""
        final = len(durations) >= most or not budget_left()
        looked: dict[str, tuple[list[MicroBenchmark], list[MicroBenchmark], LookLevels]] = {}
        for name in names:
            if name in verdicts and verdicts[name].status != Status.INCONCLUSIVE:
                continue
            base, head = _paired(sessions, name)
            if len(base) <= previous[name]:
                continue  # no new pair of this benchmark (its test failed in a session): nothing new to look at
            looked[name] = base, head, look_levels(len(base), previous[name], most, alpha=limits.alpha, final=final)
            previous[name] = len(base)
        verdicts.update(_look(looked, limits.threshold))
        pending = [n for n in names if verdicts[n].status == Status.INCONCLUSIVE]
        return [] if final else pending

    def say(pending: Sequence[str]) -> None:
        if notify:
            notify(f"inconclusive so far: {', '.join(pending)}; running one more session pair")

    if names:
        measure_until_decided(look, lambda _: run_pair(), lambda _: True, say)
    stopped = None
    if any(v.status == Status.INCONCLUSIVE for v in verdicts.values()):
        budget = f"time budget {limits.time_budget_s:g} s"
        stopped = f"{most} pairs, the most allowed" if len(durations) >= most else budget
    return PairedMicro(ref, "", [verdicts[n] for n in names], len(durations), order, stopped)


def _look(
    looked: Mapping[str, tuple[list[MicroBenchmark], list[MicroBenchmark], LookLevels]], threshold: float
) -> dict[str, MicroVerdict]:
    """The verdicts of one look at the benchmarks `looked` at, with one false-alarm rate over them: each one's
    alpha divided by Holm's procedure (`stats.holm_steps`), so a session of many tests fails no more often
    than one."""

    def compare(name: str, divisor: float) -> ThroughputComparison:
        base, head, levels = looked[name]
        rates = [b.calls_per_sec for b in base], [h.calls_per_sec for h in head]
        return compare_paired(
            *rates, threshold=threshold, levels=replace(levels, alpha=levels.alpha / divisor), slow_rate=None
        )

    first = {name: compare(name, 1.0) for name in looked}
    tested = [name for name, c in first.items() if not math.isnan(c.p_slower)]
    divisors = dict(zip(tested, holm_steps([first[n].p_slower / first[n].alpha for n in tested]), strict=True))
    verdicts = {}
    for name, comparison in first.items():
        divisor = divisors.get(name, 1.0)
        final = comparison if divisor == 1.0 else compare(name, divisor)
        base, head, _ = looked[name]
        verdicts[name] = _verdict(name, final, base[-1], head[-1])
    return verdicts


def _paired(
    sessions: Mapping[str, Sequence[Mapping[str, MicroBenchmark]]], name: str
) -> tuple[list[MicroBenchmark], list[MicroBenchmark]]:
    """The benchmark's measurements in the pairs that have it on both sides, base and head."""
    pairs = [
        (b[name], h[name]) for b, h in zip(sessions["base"], sessions["head"], strict=True) if name in b and name in h
    ]
    return [b for b, _ in pairs], [h for _, h in pairs]


def _verdict(name: str, t: ThroughputComparison, base: MicroBenchmark, head: MicroBenchmark) -> MicroVerdict:
    reason = throughput_reason(t, None, None, unit="calls/s", sample="pair")
    return MicroVerdict(name, Status.of(t.verdict), reason, baseline=base, current=head, throughput=t)


def run_paired_micro(
    ref: str,
    names: Sequence[str],
    *,
    rootdir: Path,
    limits: PairLimits,
    notify: Callable[[str], None] | None = None,
    environment: str = "auto",
) -> PairedMicro:
    """Measure the pytest-benchmark tests `names` (fullnames, relative to pytest's `rootdir`) in session
    pairs, the working tree against `ref` checked out in a temporary worktree, and judge them paired.

    A test file that `ref` lacks makes its benchmarks new: nothing to compare (NO_BASELINE). A
    session that fails outright (not a failed test: pytest's usage error, a crash, no JSON) raises. The base's
    sessions run in the base's own environment where `environment` gives it one (`measure.packages`)."""
    started = time.monotonic()
    names = list(dict.fromkeys(names))
    with base_sides(ref, environment, rootdir, front_end=PYTEST, notify=notify) as sides:
        base, head, own, scratch = sides.base, sides.head, sides.environment, sides.scratch
        repo_root = head.root
        rootdir = rootdir.resolve()
        if not rootdir.is_relative_to(repo_root):
            raise UsageError(
                f"pytest's rootdir {rootdir} is outside the git repository {repo_root}",
                where="--perfgate-against",
                hint="run pytest from inside the repository",
            )
        sources = source_folders(repo_root)
        roots = {"base": base.root / rootdir.relative_to(repo_root), "head": rootdir}
        files = {name: name.partition("::")[0] for name in names}
        new = {name: file for name, file in files.items() if not (roots["base"] / file).is_file()}
        sessions = {
            side: PytestSession(
                side,
                ref,
                files=[roots[side] / f for f in dict.fromkeys(files.values()) if f not in new.values()],
                rootdir=roots[side],
                place=own.place(checkout.place(repo_root, sources, None))
                if side == "base"
                else checkout.place(repo_root, sources, None),
                scratch=scratch,
                timeout_s=max(limits.time_budget_s, 60.0),
            )
            for side, checkout in (("base", base), ("head", head))
        }
        measured = [name for name in names if name not in new]
        if notify and measured:
            notify(
                f"measuring pytest-benchmark tests against {ref} ({(base.commit or '')[:10]}) in session pairs, "
                f"checked out at {base.root}"
            )
        result = decide_pairs(
            lambda side, pair: sessions[side].run(pair),
            measured,
            ref=ref,
            limits=limits,
            started=started,
            notify=notify,
        )
    judged = {v.name: v for v in result.verdicts}
    for name, file in new.items():
        reason = f"new: {file} is not in {ref}, nothing to compare"
        judged[name] = MicroVerdict(name, Status.NO_BASELINE, reason)
    return PairedMicro(
        ref,
        base.commit or "",
        [judged[n] for n in names],
        result.pairs,
        result.order,
        result.stopped_because,
        own.record,
    )


@dataclass(frozen=True)
class PytestSession:
    """One side's pytest-benchmark session: the command, where it runs, and what it imports."""

    side: str  # "base" or "head"
    ref: str
    files: list[Path]
    rootdir: Path
    place: TrialPlace
    scratch: Path
    timeout_s: float

    @property
    def label(self) -> str:
        return f"{self.ref}'s side" if self.side == "base" else "the working tree's side"

    def command(self, json_path: Path) -> list[str]:
        return [
            self.place.python or sys.executable,
            "-P",  # the checkout's folder never shadows the perfgate that measures
            "-m",
            "pytest",
            *map(str, self.files),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--rootdir={self.rootdir}",  # node ids relative to the same folder on both sides
            "--benchmark-only",
            f"--benchmark-json={json_path}",
            f"--benchmark-storage=file://{self.scratch / 'storage'}",  # an --benchmark-autosave in addopts lands here
        ]

    def run(self, pair: int) -> dict[str, MicroBenchmark]:
        """Run the session; its benchmarks by name (empty when it has none or they all failed)."""
        if not self.files:
            return {}
        stem = self.scratch / f"pair{pair}-{self.side}"
        json_path, log_path = stem.with_suffix(".json"), stem.with_suffix(".log")
        json_path.unlink(missing_ok=True)
        try:
            with open(log_path, "wb") as log:
                code = subprocess.run(
                    self.command(json_path),
                    cwd=self.place.cwd,
                    env=session_environment(self.place),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=self.timeout_s,
                ).returncode
        except subprocess.TimeoutExpired:
            raise self._failure(f"ran past {self.timeout_s:g} s", log_path) from None
        has_json = json_path.is_file() and json_path.stat().st_size > 0
        if code not in PYTEST_OK_CODES or (code == 0 and not has_json):
            raise self._failure(f"exit code {code}", log_path)
        if not has_json:
            return {}
        try:
            document = json.loads(json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ResultsError(f"cannot read the pytest-benchmark JSON of {self.label}: {exc}") from exc
        return {m.name: m for m in parse_pytest_benchmark(document)}

    def _failure(self, what: str, log_path: Path) -> PerfgateError:
        return WorkloadError(
            f"the pytest-benchmark session on {self.label} failed ({what}): {_last_line(log_path)}",
            where=f"pytest {' '.join(str(f.relative_to(self.rootdir)) for f in self.files)} --benchmark-only",
            hint="run that command on that side to see the whole output",
        )


def session_environment(place: TrialPlace) -> dict[str, str]:
    """The user's environment (thread settings included: these are the user's benchmarks), with the side's
    source folders and this perfgate first on PYTHONPATH, as for a trial, and the plugin switched off."""
    return side_environment(place, {INNER_SESSION_ENV: "1"})


def inner_session() -> bool:
    """Whether this process is a paired session's pytest, whose perfgate plugin must stay off."""
    return os.environ.get(INNER_SESSION_ENV, "") not in ("", "0")


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return "no output"
    lines = [line for line in lines if line]
    return lines[-1] if lines else "no output"
