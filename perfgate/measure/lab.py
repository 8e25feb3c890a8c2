"""Schedule the lab: one subprocess per trial, configs interleaved, timeouts, and the collected results."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import perfgate
from perfgate._files import OwnedTempDir
from perfgate.errors import UsageError, WorkloadError
from perfgate.measure import distributed
from perfgate.measure.trial import TrialSpec, workload_identity
from perfgate.measure.trialserver import SKIP_DYNAMO, ForkedProcess, ServerGone, TrialServer
from perfgate.measure.watch import watched, watched_environment
from perfgate.naming import CLI, FrontEnd
from perfgate.project import DEFAULT_TRIALS
from perfgate.records.results import (
    ConfigResult,
    RunResult,
    TrialRecord,
    TrialResult,
    WorkloadResult,
    WorkloadSettings,
)
from perfgate.records.shapes import Profile
from perfgate.references import Reference
from perfgate.variants import CONFIGS
from perfgate.workload import Workload

DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Pairing:
    """How a paired check runs its pairs (`--parallel-pairs`, `--[no-]interleaved-pairs`), and where its base side
    runs (`--environment`: auto, shared or per-side): passed whole wherever pairs are measured (check --against,
    calibrate, bisect, the pytest plugin). How each trial starts (`--fork-trials`) is `RunSettings.fork`."""

    parallel: bool = False
    interleaved: bool | None = None  # None: `measure.paired.takes_turns` decides
    environment: str = "auto"


DEFAULT_PAIRING = Pairing()


@dataclass(frozen=True)
class RunSettings:
    """How to run the lab: which configs, how many trials, where, and how long a trial may take."""

    configs: tuple[str, ...]
    trials: int = DEFAULT_TRIALS
    device: str = "cpu"
    threads: int | None = None  # None: torch's own default, not pinned (`environment.default_threads`)
    rounds: int | None = None  # timed rounds a trial; None: calibrated in a paired check, else 1 (measure.rounds)
    timeout_s: float = DEFAULT_TIMEOUT_S
    profile_dir: Path | None = None  # set: after the trials, one profiling trial per workload and config
    nproc: int | None = None  # ranks per trial (--nproc, else [tool.perfgate] nproc): a workload's own nproc wins
    # Counting trials only (`--counts-only`): each trial runs its warm-up steps and makes the exact counts
    # (`perfgate.measure.counting`); nothing is timed, one process per config (a data-parallel workload too).
    counts_only: bool = False
    # `--fork-trials`: each trial forked from one process that imported torch (`measure.trialserver`; one a side
    # in a paired check), CPU only; a lab records it in its environment, so its baselines are its own machine type.
    fork: bool = False
    front_end: FrontEnd = CLI  # how the messages spell the options (the core never spells a front end's flag)

    def __post_init__(self) -> None:
        option = self.front_end.option
        if self.trials < 1:
            raise UsageError(
                f"{option('trials')} must be at least 1, got {self.trials}", hint=f"use {option('trials')} 3 or more"
            )
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"{option('threads')} must be at least 1, got {self.threads}")
        if self.rounds is not None and self.rounds < 1:
            raise UsageError(
                f"{option('rounds')} must be at least 1, got {self.rounds}", hint=f"use {option('rounds')} auto or 1"
            )
        if self.timeout_s <= 0:
            raise UsageError(f"{option('timeout')} must be positive, got {self.timeout_s}")
        if self.fork and (self.device != "cpu" or not hasattr(os, "fork")):
            where = f"on {self.device}" if self.device != "cpu" else "without os.fork (POSIX only)"
            raise UsageError(
                f"{option('fork-trials')} forks trials on the CPU only, not {where}: a forked child cannot share its "
                "parent's device state",
                hint=f"drop {option('fork-trials')} here: each trial starts as a fresh process",
            )
        if self.nproc is not None and self.nproc < 1:
            raise UsageError(
                f"{option('nproc')} must be at least 1, got {self.nproc}", hint=f"use {option('nproc')} 2 for two ranks"
            )

    @property
    def torch_threads(self) -> int:
        """The torch threads a trial runs with: those asked for, else torch's own default."""
        from perfgate.measure.environment import torch_default_threads

        return self.threads if self.threads is not None else torch_default_threads()

    def nproc_of(self, workload: Workload | None) -> int:
        """Ranks of a trial of `workload`: its own `nproc`, else this run's, else one process (counting trials:
        one process)."""
        if self.counts_only:
            return 1
        own = getattr(workload, "nproc", None)
        return own or self.nproc or 1


@dataclass(frozen=True)
class PlannedTrial:
    """One entry of the schedule."""

    index: int
    workload: str
    config: str
    trial: int


@dataclass(frozen=True)
class TrialEvent:
    """What the progress display is told before and after each trial."""

    planned: PlannedTrial
    total: int
    finished: TrialResult | None = None


ProgressCallback = Callable[[TrialEvent], None]


def plan_trials(workloads: Sequence[str], configs: Sequence[str], trials: int) -> list[PlannedTrial]:
    """Round-robin over trials, then workloads, then configs, rotating the config order every round.

    Slow drift of the machine (thermal, a neighbour's job) then lands on every config alike, and no
    config always runs first in a round.
    """
    plan: list[PlannedTrial] = []
    for trial in range(trials):
        shift = trial % len(configs)
        rotated = list(configs[shift:]) + list(configs[:shift])
        for workload in workloads:
            for config in rotated:
                plan.append(PlannedTrial(len(plan), workload, config, trial))
    return plan


def load_workloads(references: Sequence[Reference], settings: RunSettings) -> list[tuple[Reference, Workload]]:
    """Load every workload once in this process, so bad references fail before any trial starts."""
    loaded: list[tuple[Reference, Workload]] = []
    names: dict[str, str] = {}
    for reference in references:
        workload = reference.load(settings.front_end)
        if workload.name in names:
            raise UsageError(
                f"two workloads are named {workload.name!r} ({names[workload.name]} and {reference.text})",
                hint="give each Workload a distinct name",
            )
        names[workload.name] = reference.text
        if "bf16-compile" in settings.configs and workload.warmup_steps < 1:
            raise WorkloadError(
                "bf16-compile needs warmup_steps >= 1 so compilation stays out of step times",
                where=f"workload {workload.name!r}",
                hint=f"set warmup_steps=1 or more, or leave bf16-compile out of {settings.front_end.option('configs')}",
            )
        check_nproc(settings.nproc_of(workload), settings.device, workload.name, settings.front_end)
        loaded.append((reference, workload))
    return loaded


def check_nproc(nproc: int, device: str, name: str, front_end: FrontEnd = CLI) -> None:
    """A data-parallel trial needs torch.distributed, and on CUDA one device per rank."""
    if nproc == 1:
        return
    import torch

    option = front_end.option
    if not torch.distributed.is_available():
        raise UsageError(
            f"workload {name!r} asks for {nproc} ranks, but this torch build has no torch.distributed",
            hint=f"install a torch build with distributed support, or use {option('nproc')} 1",
        )
    if device == "cuda" and torch.cuda.device_count() < nproc:
        raise UsageError(
            f"workload {name!r} asks for {nproc} ranks, one CUDA device each, but torch sees "
            f"{torch.cuda.device_count()} device(s)",
            hint=f"use {option('nproc')} {torch.cuda.device_count()} or fewer, or {option('device')} cpu (gloo)",
        )


def run_lab(
    references: Sequence[Reference],
    settings: RunSettings,
    progress: ProgressCallback | None = None,
    *,
    failures: dict[str, WorkloadError] | None = None,
) -> RunResult:
    """Run every trial of every workload and config, each in a fresh process (forked, `settings.fork`), and
    collect them.

    A workload whose own code fails is left there (its configs failed in the result) and the others go on;
    `failures` (when given) receives each such workload's error, for the front end to report (exit 4). When
    every workload fails, the first one's WorkloadError is raised."""
    with LabSession(references, settings, progress) as session:
        session.run_trials(settings.trials)
        session.profile()
        if failures is not None:
            failures.update(session.workload_failures)
        return session.result()


class LabSession:
    """Workloads loaded once, trials run in rounds, results collected: a lab that can ask for more.

    `run_lab` runs the planned trials once; a power-aware check calls `run_more` for the configs
    whose verdict is still open.
    """

    def __init__(
        self,
        references: Sequence[Reference],
        settings: RunSettings,
        progress: ProgressCallback | None = None,
    ) -> None:
        from perfgate.measure.environment import collect_environment
        from perfgate.measure.sources import import_from, project_root, source_folders

        # The workloads load here as the trials will import them: the project's source folders first
        # (`measure.sources`), so that a workload file importing the project's own code loads from any front end.
        sources = source_folders(project_root(Path.cwd()))
        import_from(sources)
        self.place = TrialPlace(pythonpath=tuple(str(p) for p in sources))
        self.loaded = load_workloads(references, settings)
        self.settings = settings
        self.progress = progress
        self.keep([workload.name for _, workload in self.loaded])
        self.config_failures: dict[tuple[str, str], str] = {}
        # Workloads whose own code failed (failure_kind "workload"), in the order they failed: each one's
        # configs are failed in the results, and the other workloads keep their trials.
        self.workload_failures: dict[str, WorkloadError] = {}
        self.profiles: dict[tuple[str, str], Profile] = {}
        # `--fork-trials` (CPU only): every trial forked from one server (`measure.trialserver`); a data-parallel
        # workload's stay torchrun's, in its baselines as in its checks. The environment says so, and a check
        # compares like with like (`collect_environment`).
        self.environment = collect_environment(settings.device, settings.torch_threads, forked=settings.fork)
        self._scratch = OwnedTempDir("perfgate-")  # marked: a later check removes it if this one is killed
        self._server: TrialServer | None = None

    def __enter__(self) -> LabSession:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        self._scratch.cleanup()

    def keep(self, names: Sequence[str]) -> None:
        """Measure only these workloads (before any trial runs)."""
        self.loaded = [(reference, workload) for reference, workload in self.loaded if workload.name in names]
        self.by_name = {workload.name: (reference, workload) for reference, workload in self.loaded}
        self.trials: dict[tuple[str, str], list[TrialResult]] = {
            (name, config): [] for name in self.by_name for config in self.settings.configs
        }

    @property
    def workload_names(self) -> list[str]:
        return list(self.by_name)

    def run_trials(self, trials: int) -> None:
        """The planned lab: `trials` rounds over every workload and config."""
        self._run(plan_trials(self.workload_names, self.settings.configs, trials))

    def run_more(self, pairs: Sequence[tuple[str, str]]) -> None:
        """One more trial of each (workload, config) pair, interleaved, numbered after the trials so far."""
        plan: list[PlannedTrial] = []
        for workload, config in pairs:
            if (workload, config) in self.config_failures:
                continue
            plan.append(PlannedTrial(len(plan), workload, config, len(self.trials[(workload, config)])))
        self._run(plan)

    def profile(self) -> None:
        """With `profile_dir` set: one profiling trial per workload and config (its times are not used)."""
        directory = self.settings.profile_dir
        if directory is None:
            return
        for name, (reference, _) in self.by_name.items():
            for config in self.settings.configs:
                if (name, config) in self.config_failures:
                    continue
                trace = (directory / f"{name}-{config}.trace.json").absolute()
                spec = self._spec(reference, config, trial=-1, profile=str(trace))
                settings = self.settings
                record = run_trial_process(
                    spec, Path(self._scratch.name), settings.timeout_s, self.place, front_end=settings.front_end
                )
                if record.result.ok and record.profile is not None:
                    self.profiles[(name, config)] = record.profile
                else:
                    self.profiles[(name, config)] = Profile(failure=record.result.failure or "no profile")

    def _spec(self, reference: Reference, config: str, *, trial: int, profile: str | None = None) -> TrialSpec:
        workload = next(w for r, w in self.loaded if r is reference)
        nproc = self.settings.nproc_of(workload)
        # Calibrated rounds are a paired check's (`PairedSession`): a stored baseline and the check that reads it are
        # measured in two sessions, which would calibrate two counts; here `--rounds N` alone sets them.
        rounds = 1 if profile or nproc > 1 else self.settings.rounds or 1
        return TrialSpec(
            reference_text=reference.text,
            reference_target=reference.target,
            config=config,
            trial=trial,
            device=self.settings.device,
            threads=self.settings.threads,
            profile=profile,
            nproc=nproc,
            rounds=rounds,
            probe=not self.settings.counts_only,
            counts_only=self.settings.counts_only,
        )

    def _run(self, plan: Sequence[PlannedTrial]) -> None:
        settings = self.settings
        for planned in plan:
            key = (planned.workload, planned.config)
            if key in self.config_failures:
                continue
            if self.progress:
                self.progress(TrialEvent(planned, len(plan)))
            reference, _ = self.by_name[planned.workload]
            spec = self._spec(reference, planned.config, trial=planned.trial)
            record = self._trial(spec)
            result = record.result
            if record.failure_kind == "workload":
                # This workload is done (each of its configs failed with its error); the others go on. When
                # every workload has failed, the first one's error is the command's.
                self.trials[key].append(result)
                self.workload_failures[planned.workload] = workload_error(
                    planned.workload, planned.config, record, settings.front_end
                )
                for config in settings.configs:
                    self.config_failures.setdefault((planned.workload, config), result.failure or "failed")
                raise_when_all_failed(self.workload_failures, self.workload_names)
                if self.progress:
                    self.progress(TrialEvent(planned, len(plan), finished=result))
                continue
            if record.failure_kind == "config":
                self.config_failures[key] = result.failure or "failed"
            self.trials[key].append(result)
            if self.progress:
                self.progress(TrialEvent(planned, len(plan), finished=result))

    def _trial(self, spec: TrialSpec) -> TrialRecord:
        """One trial: forked from the session's server (`--fork-trials`; a data-parallel one is torchrun's), else a
        fresh process. A server that cannot start is a one-line error: trials started otherwise than the
        environment says would be filed as what they are not."""
        scratch, settings = Path(self._scratch.name), self.settings
        if not settings.fork or spec.nproc > 1:
            return run_trial_process(spec, scratch, settings.timeout_s, self.place, front_end=settings.front_end)
        try:
            place = self.place
            if self._server is None or not self._server.alive:
                if self._server is not None:
                    self._server.close()
                workloads = [workload for _, workload in self.loaded]
                self._server = start_trial_server(settings.threads, place, scratch, workloads, settings.configs)
            return RunningTrial(
                spec, scratch, settings.timeout_s, place, self._server, front_end=settings.front_end
            ).wait()
        except ServerGone as error:
            option = settings.front_end.option("fork-trials")
            raise UsageError(f"{option}: {error}", hint=f"run without {option}") from None

    def result(self) -> RunResult:
        """Everything measured so far."""
        workloads = [
            collect_workload(reference, workload, self.settings, self.trials, self.config_failures, self.profiles)
            for reference, workload in self.loaded
        ]
        return RunResult(
            perfgate_version=perfgate.__version__,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            environment=self.environment,
            workloads=workloads,
        )


@dataclass(frozen=True)
class TrialPlace:
    """Where a trial process runs: the folder, what it imports first, and its CPUs.

    The default is the lab's: the current folder, perfgate importable, every CPU. A paired check
    gives each side its own checkout (`cwd`) and the source folders its code is imported from
    (`pythonpath`, ahead of anything installed), and `safe_path` keeps the current folder off the
    front of `sys.path` so a checkout's files never shadow the perfgate that measures.
    """

    name: str = ""  # which side of a pair ("base", "head"): names its files in the scratch folder
    cwd: Path | None = None
    pythonpath: tuple[str, ...] = ()
    safe_path: bool = False
    cpus: frozenset[int] | None = None  # pin the trial (and its DataLoader workers) to these CPUs
    env: tuple[tuple[str, str], ...] = ()  # extra environment variables, e.g. OMP_WAIT_POLICY
    harness_first: bool = False  # perfgate lives in the checkout measured: its own copy still measures
    python: str | None = None  # the interpreter (None: this one): the base's own environment (`measure.packages`)


class RunningTrial:
    """A trial process, fresh or forked by a `TrialServer` (`server`); `wait` returns its record."""

    def __init__(
        self,
        spec: TrialSpec,
        scratch: Path,
        timeout_s: float,
        place: TrialPlace,
        server: TrialServer | None = None,
        *,
        front_end: FrontEnd = CLI,
        timeout_note: str | None = None,
    ) -> None:
        """`timeout_note`: what a trial that runs past `timeout_s` is said to have done (default: timed out)."""
        side = f"-{place.name}" if place.name else ""
        stem = f"{spec.reference_target.rsplit(':', 1)[-1]}-{spec.config}-{spec.trial}{side}"
        stem = stem.replace("/", "_").replace("@", "_")
        spec_path = scratch / f"{stem}.spec.json"
        self.out_path = scratch / f"{stem}.out.json"
        self.log_path = scratch / f"{stem}.log"
        self.spec = spec
        self.timeout_s = timeout_s
        self.timeout_note = timeout_note
        self.front_end = front_end
        spec_path.write_text(json.dumps(asdict(spec)), encoding="utf-8")
        self.out_path.unlink(missing_ok=True)
        self.started = time.perf_counter()
        self.process: subprocess.Popen[bytes] | ForkedProcess
        if server is not None:
            self.process = server.fork(spec_path, self.out_path, self.log_path, place.cpus, timeout_s)
            return
        # A data-parallel trial: torchrun starts one trial process per rank (`perfgate.measure.distributed`).
        # Under the watch (`perfgate.measure.watch`): the trial (torchrun and its ranks) ends when perfgate dies.
        launcher = distributed.launcher_arguments(spec.nproc) if spec.nproc > 1 else []
        command = [
            *python_command(place),
            *launcher,
            *watched("perfgate.measure.trial"),
            str(spec_path),
            str(self.out_path),
        ]
        env = trial_environment(spec.threads, place)
        if spec.nproc > 1 and place.safe_path:
            env["PYTHONSAFEPATH"] = "1"  # torchrun starts the ranks without -P: the same, for them
        env, lifeline = watched_environment(env)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=place.cwd,
                start_new_session=True,
                pass_fds=lifeline,
            )
        if place.cpus is not None and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):  # the process may already have ended
                os.sched_setaffinity(self.process.pid, place.cpus)

    def wait(self, deadline: float | None = None) -> TrialRecord:
        """The trial's record; a crash, a timeout or Ctrl-C takes its process group down first.

        A crash, a timeout or an unreadable record is a failed record (`failure_kind` "crash"); a record
        whose fields are not a `TrialRecord`'s raises TrialRecordError (`TrialRecord.from_dict`)."""
        timeout = self.timeout_s if deadline is None else max(0.0, deadline - time.perf_counter())
        try:
            returncode = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return _failed(
                self.spec,
                self.timeout_note
                or f"timed out after {self.timeout_s:g} s (raise {self.front_end.option('timeout')} if the trial needs "
                "longer)",
                self.started,
            )
        except BaseException:
            self.kill()  # Ctrl-C: take the trial and its DataLoader workers down too
            raise
        if self.spec.nproc > 1:
            _kill_ranks(self.out_path, self.spec.nproc)  # torchrun stops them; a rank it missed goes now
            if not self.out_path.is_file():
                failed = _rank_failure(self.out_path, self.spec.nproc)
                if failed is not None:
                    return failed
                crashed = _rank_crash(self.log_path)
                if crashed is not None:
                    return _failed(self.spec, crashed, self.started)
        if self.out_path.is_file():
            try:
                document = json.loads(self.out_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                pass
            else:
                record = TrialRecord.from_dict(document, source=f"trial record {self.out_path.name}")
                return replace(record, result=replace(record.result, wall_s=time.perf_counter() - self.started))
        return _failed(
            self.spec, f"trial process {_describe_exit(returncode)}; last output: {_tail(self.log_path)}", self.started
        )

    def kill(self) -> None:
        """Stop the trial with its DataLoader workers (and a data-parallel trial's ranks, in sessions of their own)."""
        if self.spec.nproc > 1:
            _kill_ranks(self.out_path, self.spec.nproc)
        if self.process.poll() is None:
            _kill_group(self.process)


def workload_error(workload: str, config: str, record: TrialRecord, front_end: FrontEnd = CLI) -> WorkloadError:
    """The one-line error of a trial whose workload's own code failed (failure_kind "workload")."""
    return WorkloadError(
        str(record.result.failure),
        where=f"workload {workload!r}, config {config}",
        hint=f"fix the workload and run again{front_end.traceback_note(trial=True)}",
        details=record.traceback or None,
    )


def raise_when_all_failed(failures: Mapping[str, WorkloadError], workloads: Sequence[str]) -> None:
    """The first workload's error, unchanged, once every workload in `workloads` has failed; else nothing."""
    if failures and all(name in failures for name in workloads):
        raise next(iter(failures.values()))


def python_command(place: TrialPlace) -> list[str]:
    """The interpreter a trial process of `place` runs: this one, `-P` where the checkout must not shadow perfgate."""
    return [place.python or sys.executable, *(["-P"] if place.safe_path else [])]


def start_trial_server(
    threads: int | None,
    place: TrialPlace,
    scratch: Path,
    workloads: Sequence[Workload] = (),
    configs: Sequence[str] = (),
) -> TrialServer:
    """A fork server for `place`'s trials (`perfgate.measure.trialserver`), started as a trial process would be. It
    imports torch._dynamo before its first child only where one of `workloads` may need it (`needs_dynamo`)."""
    log = scratch / f"server-{place.name or 'lab'}.log"
    env = trial_environment(threads, place)
    if workloads and not needs_dynamo(workloads, configs):
        env[SKIP_DYNAMO] = "1"
    return TrialServer(python_command(place), env, place.cwd, log)


def needs_dynamo(workloads: Sequence[Workload], configs: Sequence[str]) -> bool:
    """Whether a trial of these workloads in these configs may import torch._dynamo: a compiled config does, and
    so does creating a torch optimizer (AdamW, the default, among them): 1.1-1.4 s a trial process here, which a
    fork server pays once for every child. A workload whose optimizer is a class of its own that is no torch
    optimizer (a written-out SGD) does not; a factory function may build either, and counts as one that does."""
    import torch

    if any(CONFIGS[name].compile for name in configs if name in CONFIGS):
        return True
    for workload in workloads:
        factory = workload.optimizer
        while isinstance(factory, functools.partial):
            factory = factory.func
        if not (isinstance(factory, type) and not issubclass(factory, torch.optim.Optimizer)):
            return True
    return False


def _threads_run(configs: Mapping[str, Any]) -> int | None:
    """The torch threads the trials ran with (the workload's own where it declares them), as they recorded it."""
    counts = [t.threads for config in configs.values() for t in config.trials if t.ok and t.threads]
    return max(counts, key=counts.count) if counts else None


def run_trial_process(
    spec: TrialSpec, scratch: Path, timeout_s: float, place: TrialPlace | None = None, *, front_end: FrontEnd = CLI
) -> TrialRecord:
    """Run one trial in a fresh Python process and return its record; crashes become failed records."""
    return RunningTrial(spec, scratch, timeout_s, place or TrialPlace(), front_end=front_end).wait()


def trial_environment(threads: int | None, place: TrialPlace | None = None) -> dict[str, str]:
    """The trial's environment: thread counts pinned where asked for (None: torch's own default, as the user's
    training gets it) and this perfgate importable (after `place`'s folders)."""
    pinned = {"PYTHONHASHSEED": "0"}
    if threads is not None:
        pinned.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return side_environment(place or TrialPlace(), pinned)


def side_environment(place: TrialPlace, defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `defaults`, then `place`'s variables, and `place`'s source folders
    ahead of this perfgate on PYTHONPATH (perfgate first where it lives in the checkout measured)."""
    env = dict(os.environ)
    env.update(defaults or {})
    env.update(dict(place.env))
    package_root = str(Path(perfgate.__file__).resolve().parent.parent)
    # An environment of its own sees this perfgate behind its own packages already; put first on the path, an
    # installed perfgate's folder (site-packages) would bring every head package ahead of the base's.
    harness = package_root if place.python is None or place.harness_first else ""
    paths = [*place.pythonpath, harness, env.get("PYTHONPATH", "")]
    if place.harness_first:
        paths.insert(0, package_root)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return env


def collect_workload(
    reference: Reference,
    workload: Workload | Mapping[str, Any],
    settings: RunSettings,
    trials: dict[tuple[str, str], list[TrialResult]],
    config_failures: dict[tuple[str, str], str],
    profiles: dict[tuple[str, str], Profile] | None = None,
) -> WorkloadResult:
    identity = (
        dict(workload) if isinstance(workload, Mapping) else workload_identity(workload, settings.nproc_of(workload))
    )
    name = identity["name"]
    configs = {
        config: ConfigResult(config, trials[(name, config)], config_failures.get((name, config)))
        for config in settings.configs
    }
    ok = [t for config in configs.values() for t in config.trials if t.ok]
    checksums = sorted({t.data_checksum for t in ok if t.data_checksum})
    warnings = []
    if len(checksums) > 1:
        warnings.append(
            f"the data slice differed between trials ({len(checksums)} checksums): the dataset is not "
            "deterministic; seed its randomness from the sample index"
        )
    first_losses: dict[str, list[float]] = {}
    for config_name, config in configs.items():
        losses = [t.first_losses for t in config.trials if t.ok]
        if losses:
            first_losses[config_name] = losses[0]
            if any(other != losses[0] for other in losses[1:]):
                warnings.append(
                    f"{config_name}: first-step losses differed between trials (non-deterministic model or data)"
                )
    for config in configs.values():
        for trial in config.trials:
            warnings.extend(f"{config.config} trial {trial.trial + 1}: {w}" for w in trial.warnings)
    slices = sorted({str(t.workload["slice_indices"]) for t in ok if t.workload and t.workload.get("slice_indices")})
    lengths = sorted({t.workload["dataset_length"] for t in ok if t.workload and t.workload.get("dataset_length")})
    return WorkloadResult(
        name=name,
        reference=reference.text,
        settings=WorkloadSettings(
            batch_size=identity["batch_size"],
            steps=identity["steps"],
            warmup_steps=identity["warmup_steps"],
            seed=identity["seed"],
            trials=max((len(config.trials) for config in configs.values()), default=0),
            threads=_threads_run(configs) or settings.torch_threads,
            device=settings.device,
            loader=identity["loader"],
            nproc=identity.get("nproc"),
            slice_indices=slices[0] if len(slices) == 1 else None,
            accumulation=identity.get("accumulation"),
            dataset_length=lengths[0] if len(lengths) == 1 else None,
        ),
        data_checksum=checksums[0] if len(checksums) == 1 else None,
        first_losses=first_losses,
        configs=configs,
        warnings=warnings,
        profiles={config: p for (owner, config), p in (profiles or {}).items() if owner == name},
    )


def _failed(spec: TrialSpec, message: str, started: float) -> TrialRecord:
    return TrialRecord.failed(spec.config, spec.trial, message, "crash", process_s=time.perf_counter() - started)


def _kill_ranks(out_path: Path, nproc: int) -> None:
    """SIGKILL every rank of a data-parallel trial that is still running, with its DataLoader workers: torchrun
    starts each rank in a session of its own, which killing torchrun's group does not reach."""
    for rank in range(nproc):
        pid_path = distributed.rank_pid_path(out_path, rank)
        try:
            pid = int(pid_path.read_text(encoding="ascii"))
            with open(f"/proc/{pid}/cmdline", "rb") as handle:  # still that rank, not a reused pid
                if str(out_path).encode() not in handle.read():
                    continue
        except (OSError, ValueError):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _rank_failure(out_path: Path, nproc: int) -> TrialRecord | None:
    """The first rank to fail, by its own record, its message naming the rank; None when no rank wrote one.
    The others' records come later and tell of the collective that broke when it stopped."""
    written = sorted(
        (path.stat().st_mtime_ns, rank, path)
        for rank in range(nproc)
        if (path := distributed.rank_failure_path(out_path, rank)).is_file()
    )
    for _, rank, path in written:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        record = TrialRecord.from_dict(document, source=f"rank {rank}'s record {path.name}")
        result = record.result
        return replace(record, result=replace(result, failure=f"rank {rank}: {result.failure}"))
    return None


def _rank_crash(log_path: Path) -> str | None:
    """torchrun's summary of a rank that died without a record: which rank, and how it ended."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", text, re.MULTILINE)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", text, re.MULTILINE)
    if rank is None or code is None:
        return None
    return f"rank {rank.group(1)} {_describe_exit(int(code.group(1)))}; the other ranks were stopped"


def _kill_group(process: subprocess.Popen[bytes] | ForkedProcess) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            return f"was killed by signal {-returncode}"
        if name == "SIGKILL":  # what the kernel's out-of-memory killer sends
            return "was killed by SIGKILL (the out-of-memory killer does this: is the machine short of memory?)"
        return f"was killed by {name}"
    return f"exited with code {returncode} without a result"


def _tail(path: Path, limit: int = 300) -> str:
    try:
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(none)"
    return lines[-1][:limit] if lines else "(none)"
