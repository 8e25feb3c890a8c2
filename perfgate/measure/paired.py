"""Paired checks: the working tree (head) against a git ref (base), measured side by side on one runner.

A stored baseline was measured at another time, and a shared runner's speed drifts between then and
now by more than the regressions a gate must catch. A paired check removes that drift: the base
commit is checked out into a temporary git worktree, and every pair of trials (one base, one head,
identical settings, each its own process) runs back to back, in alternating order (base-head, then
head-base: ABBA), at the same time on separate CPUs (`parallel`), or started together and
taking turns at their training steps, the waiting side stopped (`interleaved`, `perfgate.measure.turns`).
With `fork` (CPU only) each side's trials
are forked from a server that imported torch once (`perfgate.measure.trialserver`): the imports a fresh
process would spend on every trial are paid once a side. `check.paired` judges the per-pair ratios
(`judge.stats.compare_paired`) and gives the configs that are still undecided more pairs until a
decision or the time budget (`check.sequential.decide_sequentially`).

The base side imports the workload and the user's own code from the worktree: the checkout's source
folders (its root, `src/`, and any folder of it on `sys.path` or behind an editable install) come
first on each side's PYTHONPATH, with the mapping from the working tree to the worktree applied for
the base. perfgate itself, the harness that measures, is the same on both sides. The installed packages are
the head's on both sides too, unless the commits declare different ones or the project builds an extension:
then the base runs in an environment of its own (`perfgate.measure.packages`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import perfgate
from perfgate._files import OwnedTempDir, owner_alive, sweep_tempdirs
from perfgate.errors import UsageError, WorkloadError
from perfgate.gitrepo import GitFailed, Repository, find_repository
from perfgate.measure.lab import (
    DEFAULT_PAIRING,
    Pairing,
    PlannedTrial,
    ProgressCallback,
    RunningTrial,
    RunSettings,
    TrialEvent,
    TrialPlace,
    collect_workload,
    load_workloads,
    raise_when_all_failed,
    start_trial_server,
    workload_error,
)
from perfgate.measure.packages import BaseEnvironment, base_environment
from perfgate.measure.rounds import calibrated_rounds, pair_limit_s
from perfgate.measure.sources import import_from, inside, relative, source_folders
from perfgate.measure.trial import TrialSpec
from perfgate.measure.trialserver import ServerGone, TrialServer
from perfgate.measure.turns import TurnCoordinator
from perfgate.naming import CLI, FrontEnd
from perfgate.records.results import Against, RunResult, TrialRecord, TrialResult
from perfgate.records.shapes import Profile
from perfgate.references import Reference

SIDES = ("base", "head")
AGAINST = CLI.option("against")  # the option that names the base, as the command line spells it (the default)
WORKTREE_PREFIX = "perfgate-"  # the temporary folders of a check: `perfgate-base-*` holds the base worktree
_WORKTREE_FOLDERS = tuple(f"{WORKTREE_PREFIX}{side}-" for side in SIDES)


class GitError(UsageError):
    """The repository or the ref cannot give a base to measure against."""


@dataclass(frozen=True)
class Checkout:
    """One side's code: the folder it runs in and the folders its Python code is imported from."""

    name: str  # "base" or "head"
    root: Path  # the repository's top folder on this side
    commit: str | None
    dirty: bool = False

    def place(
        self,
        repo_root: Path,
        sources: Sequence[Path],
        cpus: frozenset[int] | None,
        env: Sequence[tuple[str, str]] = (),
    ) -> TrialPlace:
        """Where this side's trials run: the same folder relative to the checkout as the user is in now."""
        cwd = self.root / relative(Path.cwd(), repo_root) if inside(Path.cwd(), repo_root) else Path.cwd()
        package_root = Path(perfgate.__file__).resolve().parent.parent
        return TrialPlace(
            cwd=cwd if cwd.is_dir() else self.root,
            pythonpath=tuple(str(self.root / relative(p, repo_root)) for p in sources),
            safe_path=True,
            cpus=cpus,
            env=tuple(env),
            harness_first=inside(package_root, repo_root),
        )

    def reference(self, reference: Reference, repo_root: Path) -> Reference:
        """The reference as this side sees it: a workload file inside the repository is this side's copy."""
        kind, _, rest = reference.target.partition(":")
        if kind != "file":
            return reference
        location, _, function = rest.rpartition(":")
        path = Path(location)
        if not inside(path, repo_root):
            return reference
        return Reference(reference.text, f"file:{self.root / relative(path, repo_root)}:{function}")


@contextlib.contextmanager
def base_checkout(
    ref: str, directory: Path | None = None, *, where: str = AGAINST
) -> Iterator[tuple[Checkout, Checkout]]:
    """Check `ref` out into a temporary git worktree; yield (base, head); remove the worktree on any exit.
    `where`: the option that named the ref, as the front end spells it, for the errors."""
    repo = open_repository(directory or Path.cwd(), where=where)
    base_commit = resolve_ref(repo, ref, where=where)
    head = Checkout("head", repo.root, repo.head_commit(), repo.dirty() is True)
    with worktree(repo, base_commit, ref, "base", where=where) as path:
        yield Checkout("base", path, base_commit), head


@dataclass(frozen=True)
class Sides:
    """What a paired check against a ref measures with: both checkouts, the base's environment, a scratch folder."""

    base: Checkout
    head: Checkout
    environment: BaseEnvironment
    scratch: Path


@contextlib.contextmanager
def base_sides(
    ref: str,
    environment: str,
    directory: Path | None = None,
    *,
    front_end: FrontEnd = CLI,
    notify: Any = None,
) -> Iterator[Sides]:
    """`ref` checked out beside the working tree (`base_checkout`), a scratch folder of this process's, and the
    base's environment built in it (`measure.packages.base_environment`; `environment`: one of its MODES); all
    removed on any exit. Errors name the front end's option for the ref."""
    with (
        base_checkout(ref, directory, where=front_end.option("against")) as (base, head),
        OwnedTempDir("perfgate-") as scratch,
        base_environment(
            environment,
            base.root,
            head.root,
            Path(scratch),
            front_end=front_end,
            notify=notify,
            changed=changed_files(head, base),
        ) as own,
    ):
        yield Sides(base, head, own, Path(scratch))


@contextlib.contextmanager
def commit_checkouts(
    base_commit: str, head_commit: str, directory: Path | None = None, *, where: str = AGAINST
) -> Iterator[tuple[Checkout, Checkout, Path]]:
    """Both sides as commits, each in a temporary worktree (bisect measures one commit against another);
    yield (base, head, the repository's top folder); remove both worktrees on any exit."""
    repo = open_repository(directory or Path.cwd(), where=where)
    with (
        worktree(repo, base_commit, base_commit, "base", where=where) as base,
        worktree(repo, head_commit, head_commit, "head", where=where) as head,
    ):
        yield Checkout("base", base, base_commit), Checkout("head", head, head_commit), repo.root


@contextlib.contextmanager
def worktree(repo: Repository, commit: str, ref: str, side: str, *, where: str = AGAINST) -> Iterator[Path]:
    """`commit` checked out, detached, in a temporary git worktree named like the repository's folder."""
    # Marked as this process's: a check killed before the cleanup below leaves it to `sweep_leftovers`.
    scratch = Path(OwnedTempDir(f"{WORKTREE_PREFIX}{side}-").name)
    path = scratch / repo.root.name
    # One cleanup for everything from `worktree add` on: git registers the worktree before it checks
    # the files out, so a failing post-checkout hook or a Ctrl-C during the checkout leaves one too.
    try:
        try:
            repo.add_worktree(path, commit)
        except GitFailed as exc:
            raise GitError(f"cannot check out {ref} into a worktree: {exc.reason}", where=where) from exc
        yield path
    finally:
        repo.remove_worktree(path)
        shutil.rmtree(scratch, ignore_errors=True)
        repo.prune_worktrees()


def sweep_leftovers(repo_dir: Path | None = None) -> list[str]:
    """Remove what checks that were killed (SIGKILL, SIGHUP) left, and say what: the git worktrees perfgate
    registered in `repo_dir`'s repository (`worktree`: `perfgate-base-*`, `perfgate-head-*` in the temporary
    folder) whose owner process has died (`git worktree remove --force`, the folder, `git worktree prune`), then
    the temporary folders of a dead owner (`_files.sweep_tempdirs`). Only folders perfgate marked as its own
    are touched; a check still running (here or in another process) keeps its worktree and folders.

    Outside a git repository, or without git, only the temporary folders are swept."""
    removed: list[str] = []
    temporary = Path(tempfile.gettempdir()).resolve()
    repo = find_repository(repo_dir or Path.cwd())
    if repo is not None:
        prune = False
        for path in repo.worktrees():
            folder = path.parent.resolve()
            if folder.parent != temporary or not folder.name.startswith(_WORKTREE_FOLDERS):
                continue
            if not folder.is_dir():
                prune = True  # its folder is gone: git forgets it below
                continue
            if owner_alive(folder) is not False:
                continue  # a running check's, or not marked by perfgate
            repo.remove_worktree(path, locked=True)  # killed inside `git worktree add`, it is still locked
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(f"the worktree {path}")
            prune = True
        if prune:
            repo.prune_worktrees()
    removed.extend(f"the folder {folder}" for folder in sweep_tempdirs(WORKTREE_PREFIX))
    return removed


def changed_files(head: Checkout, base: Checkout) -> list[str] | None:
    """The files head's tree changes against the base commit (tracked changes and new untracked files, paths
    relative to the repository's top); None where git cannot say."""
    if not base.commit:
        return None
    return Repository(head.root).changed_since(base.commit)


def working_tree() -> Checkout:
    """The working tree as a side of its own: the repository's top folder, or the current folder outside git."""
    repo = find_repository(Path.cwd())
    if repo is None:
        return Checkout("head", Path.cwd().resolve(), None)
    return Checkout("head", repo.root, repo.head_commit(), repo.dirty() is True)


def open_repository(directory: Path, *, where: str = AGAINST) -> Repository:
    repo = find_repository(directory)
    if repo is None:
        raise GitError(
            f"{directory} is not inside a git repository",
            where=where,
            hint="run the paired check from your project's git checkout, or give no ref to compare with the "
            "stored baselines",
        )
    return repo


def resolve_ref(repo: Repository, ref: str, *, where: str = AGAINST) -> str:
    """The commit `ref` names, or a one-line error that says how to get it (a shallow clone lacks history).
    `where`: the option that named it, as the front end spells it."""
    if not ref.strip() or ref.startswith("-"):
        raise GitError(f"{ref!r} is not a git ref", where=where, hint="give a branch, tag or commit, e.g. main")
    commit = repo.commit_of(ref)
    if commit:
        return commit
    if repo.shallow():
        raise GitError(
            f"{ref} is not in this shallow clone (it holds only the most recent commits)",
            where=where,
            hint="fetch it first: git fetch --deepen=100 origin"
            + ("" if any(c in ref for c in "~^@") else f", or git fetch origin {ref}")
            + "; in GitHub Actions give actions/checkout fetch-depth: 0",
        )
    raise GitError(
        f"unknown git ref {ref}",
        where=where,
        hint="give a branch, tag or commit that exists here (git fetch origin first if it lives on the remote)",
    )


# A trial that takes HANG_FACTOR times the slowest trial of its config so far (either side), and at least
# HANG_FLOOR_S, has hung: it fails as a timeout would, found minutes before the fixed timeout (`--timeout`).
HANG_FACTOR = 5.0
HANG_FLOOR_S = 60.0


@dataclass
class SideTrials:
    """One side's trials so far, per (workload, config), and configs that cannot run on it."""

    trials: dict[tuple[str, str], list[TrialResult]] = field(default_factory=dict)
    config_failures: dict[tuple[str, str], str] = field(default_factory=dict)
    identities: dict[str, dict[str, Any]] = field(default_factory=dict)  # workload settings, from its trials
    problems: dict[str, str] = field(default_factory=dict)  # workloads this side cannot measure at all
    profiles: dict[tuple[str, str], Profile] = field(default_factory=dict)  # `PairedSession.profile`'s


class PairedSession:
    """Both sides' trials, scheduled in pairs: the lab of a paired check."""

    def __init__(
        self,
        references: Sequence[Reference],
        settings: RunSettings,
        base: Checkout,
        head: Checkout,
        ref: str,
        *,
        pairing: Pairing = DEFAULT_PAIRING,
        progress: ProgressCallback | None = None,
        planted_slowdown: float = 0.0,
        repo_root: Path | None = None,
        base_environment: BaseEnvironment | None = None,
        budget_s: Callable[[int], float] | None = None,
    ) -> None:
        """`pairing`: how the pairs run (its `interleaved` None: `takes_turns` decides; its `environment` is the
        caller's, which places the base in `base_environment`). `repo_root`: the user's checkout, whose workload
        files each side maps to its own copy (default: head's folder, the working tree; bisect measures two
        worktrees of it). `base_environment`: where the base's trials run when not in the head's environment
        (`perfgate.measure.packages.base_environment`). `budget_s`: the check's time budget for a number of configs
        (`GateSettings.budget_s`), which the calibrated rounds leave room in for LEAST_PAIRS pairs of each."""
        from perfgate.measure.environment import collect_environment

        self.settings = settings
        parallel = pairing.parallel
        interleaved = takes_turns(parallel, pairing.interleaved, settings.device, settings.front_end)
        # Trials forked from one server a side (torch imported once): CPU only (`RunSettings` refuses it elsewhere),
        # see perfgate.measure.trialserver.
        self.fork = settings.fork
        self.servers: dict[str, TrialServer] = {}
        self.planted = {"base": 0.0, "head": planted_slowdown}  # calibration plants a slowdown in head
        self.ref = ref
        self.progress = progress
        option = settings.front_end.option
        if parallel and interleaved:
            raise UsageError(
                f"{option('parallel-pairs')} and {option('interleaved-pairs')} cannot be combined: a pair runs either "
                "at once or in turns",
                hint="keep one of the two options",
            )
        self.parallel = parallel
        # A pair's trials take turns at the steps (`perfgate.measure.turns`); where processes cannot be stopped
        # and resumed (Windows) the pair runs in turn.
        self.interleaved = interleaved and hasattr(os, "mkfifo") and hasattr(signal, "SIGSTOP")
        repo_root = repo_root or head.root
        sources = source_folders(repo_root)
        # Head's workloads load here as its trials will: the checkout's folders first, so a bad
        # reference or a missing module fails before any trial.
        import_from(sources)
        self.loaded = load_workloads(references, settings)
        self.names = [workload.name for _, workload in self.loaded]
        if any(settings.nproc_of(workload) > 1 for _, workload in self.loaded):
            # A data-parallel trial is torchrun and its ranks: a pair runs one side after the other.
            self.interleaved = self.fork = False
        self.checkouts = {"base": base, "head": head}
        cpus = _cpu_halves(settings.front_end) if parallel else (None, None)
        if parallel and cpus[0] is not None and settings.threads is None:
            # Each side runs on half the CPUs: torch's default would count all of them.
            settings = self.settings = replace(settings, threads=len(cpus[0]))
        if parallel and cpus[0] is not None and settings.threads is not None and settings.threads > len(cpus[0]):
            raise UsageError(
                f"{option('threads')} {settings.threads} is more than the {len(cpus[0])} CPU(s) each side of a "
                "parallel pair gets",
                hint=f"give {option('threads')} {len(cpus[0])} or fewer, or drop {option('parallel-pairs')}",
            )
        self.places = {
            # Named by side, not by checkout: calibration measures one checkout on both sides.
            "base": replace(base.place(repo_root, sources, cpus[0]), name="base"),
            "head": replace(head.place(repo_root, sources, cpus[1]), name="head"),
        }
        self.base_environment = base_environment
        self.budget_s = budget_s
        if base_environment is not None:
            self.places["base"] = base_environment.place(self.places["base"])
        self.references = {
            (side, workload.name): self.checkouts[side].reference(reference, repo_root)
            for reference, workload in self.loaded
            for side in SIDES
        }
        # Workloads the base's copy of the file does not define: a pull request that adds them (`Against.new`).
        self.new = {name for (side, name), ref in self.references.items() if side == "base" and ref.defined() is False}
        self.sides = {side: SideTrials() for side in SIDES}
        self.workload_failures: dict[str, WorkloadError] = {}  # head's workloads whose own code failed, in order
        for side in SIDES:
            self.sides[side].trials = {(n, c): [] for n in self.names for c in settings.configs}
        self.sides["head"].identities = {w.name: _identity(w, settings.nproc_of(w)) for _, w in self.loaded}
        self.order: list[str] = []
        self.rounds: dict[tuple[str, str], int] = {}  # calibrated by each config's first pair (measure.rounds)
        # As a lab's: forked trials are their own machine type in the history's series.
        self.environment = collect_environment(settings.device, settings.torch_threads, forked=self.fork)
        self._scratch = OwnedTempDir("perfgate-")  # marked: a later check removes it if this one is killed

    def __enter__(self) -> PairedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers.values():
            server.close()
        self._scratch.cleanup()

    def pairs(self, key: tuple[str, str]) -> int:
        """How many pairs of this (workload, config) have run."""
        return len(self.sides["head"].trials[key])

    def ok_pairs(self, key: tuple[str, str]) -> int:
        head = {t.trial for t in self.sides["head"].trials[key] if t.ok}
        return sum(1 for t in self.sides["base"].trials[key] if t.ok and t.trial in head)

    def run_pairs(self, count: int) -> None:
        """`count` more pairs of every workload and config."""
        for _ in range(count):
            self.run_more([(n, c) for n in self.names for c in self.settings.configs])

    def run_more(self, keys: Sequence[tuple[str, str]]) -> None:
        """One more pair of each (workload, config), configs rotated, each pair's order alternating (ABBA)."""
        keys = [k for k in keys if not self._stopped(k)]
        if not keys:
            return
        shift = self.pairs(keys[0]) % len(keys)
        keys = keys[shift:] + keys[:shift]
        for index, key in enumerate(keys):
            pair = self.pairs(key)
            sides = SIDES if pair % 2 == 0 else SIDES[::-1]
            self.order.append(f"{key[0]} {key[1]} #{pair}: {', '.join(sides)}")
            self._run_pair(key, pair, sides, index, len(keys))

    def _stopped(self, key: tuple[str, str]) -> bool:
        """A config that cannot run on either side, or a workload the base cannot measure, gets no more pairs."""
        return any(key in self.sides[s].config_failures or key[0] in self.sides[s].problems for s in SIDES)

    def _run_pair(self, key: tuple[str, str], pair: int, sides: Sequence[str], index: int, total: int) -> None:
        planned = PlannedTrial(index, key[0], key[1], pair)
        started = time.perf_counter()
        if self.progress:
            self.progress(TrialEvent(planned, total))
        limit = self._hang_limit(key)
        if self.parallel or self.interleaved:
            running: dict[str, RunningTrial] = {}
            turns = TurnCoordinator(Path(self._scratch.name) / "turns", sides) if self.interleaved else None
            deadline = None
            try:  # started one by one inside the try: Ctrl-C between the two starts takes the first down too
                for side in sides:
                    running[side] = self._start(side, key, pair, None if turns is None else turns.prefix(side), limit)
                stalled: set[str] = set()
                if turns is not None:
                    processes = {side: trial.process for side, trial in running.items()}
                    fixed = time.perf_counter() + (limit or self.settings.timeout_s)
                    deadline = turns.run(processes, sides[0], fixed, hang_after=None if limit else self._hang_after)
                    stalled = turns.stalled
                    for side in stalled:  # found from the other side's time, not the timeout
                        running[side].timeout_note = running[side].timeout_note or (
                            f"hung: no result {HANG_FACTOR:g}x as long as the other side of its pair took (at least "
                            f"{HANG_FLOOR_S:g} s)"
                        )
                # The hung side is stopped first; a side that only waited for it goes on alone, with a limit of its
                # own from now (its pair is not timed: the other trial failed).
                records = {side: running[side].wait(deadline) for side in sides if side in stalled}
                alone = time.perf_counter() + (limit or self.settings.timeout_s)
                records |= {
                    side: running[side].wait(alone if stalled else deadline) for side in sides if side not in stalled
                }
            finally:
                if turns is not None:
                    turns.close({side: trial.process for side, trial in running.items()})
                for process in running.values():
                    process.kill()
        else:
            records = {}
            for side in sides:  # the second side's limit may come from the first's time
                earlier = self._limit_from(r.result for r in records.values())
                records[side] = self._start(side, key, pair, None, limit or earlier).wait()
        for side in sides:
            self._record(side, key, records[side])
        results = [records[side].result for side in sides]
        if self.settings.rounds is None and key not in self.rounds and all(r.ok for r in results):
            # The first pair calibrates the rounds every later pair runs, both sides alike.
            timed = sum(sum(r.step_s) for r in results)
            configs = len(self.sides["head"].trials)
            limit = None if self.budget_s is None else pair_limit_s(self.budget_s(configs), configs)
            self.rounds[key] = calibrated_rounds(time.perf_counter() - started, timed, results[0].rounds, pair_s=limit)
        if self.progress:
            head = self.sides["head"].trials[key][-1]
            self.progress(TrialEvent(planned, total, finished=head))

    def _hang_limit(self, key: tuple[str, str]) -> float | None:
        """How long a trial of this config may take before it counts as hung: HANG_FACTOR x the slowest trial of it
        so far (either side, wall time), at least HANG_FLOOR_S and at most the timeout; None before any ran."""
        return self._limit_from(t for side in SIDES for t in self.sides[side].trials[key])

    def _limit_from(self, results: Iterable[TrialResult]) -> float | None:
        """`_hang_after` the slowest of these trials that ran (wall time); None where none ran."""
        times = [t.wall_s or t.process_s or 0.0 for t in results if t.ok]
        return self._hang_after(max(times)) if times else None

    def _hang_after(self, other_s: float) -> float:
        return min(self.settings.timeout_s, max(HANG_FLOOR_S, HANG_FACTOR * other_s))

    def profile(self, directory: Path) -> None:
        """One profiling trial per side, workload and config that ran on both sides (`--profile` in a paired
        check), after the pairs, in a fresh process each: DIRECTORY/WORKLOAD-CONFIG.SIDE.trace.json. Its times
        are not used; its operator table is each side's, so the diagnosis compares head's with the base's."""
        for key in self.sides["head"].trials:
            if self._stopped(key) or not all(any(t.ok for t in self.sides[s].trials[key]) for s in SIDES):
                continue
            for side in SIDES:
                trace = (directory / f"{key[0]}-{key[1]}.{side}.trace.json").absolute()
                record = self._start(side, key, -1, profile=str(trace)).wait()
                found = record.profile if record.result.ok else None
                self.sides[side].profiles[key] = found or Profile(failure=record.result.failure or "no profile")

    def _start(
        self,
        side: str,
        key: tuple[str, str],
        pair: int,
        turns: str | None = None,
        limit: float | None = None,
        profile: str | None = None,
    ) -> RunningTrial:
        """Start one side's trial; `limit`: the time after which it counts as hung (`_hang_limit`), else the
        timeout; `profile`: a profiling trial of one round writing its trace there, in a fresh process."""
        reference = self.references[(side, key[0])]
        nproc = self.settings.nproc_of(self._workload(key[0]))
        spec = TrialSpec(
            reference_text=reference.text,
            reference_target=reference.target,
            config=key[1],
            trial=pair,
            device=self.settings.device,
            threads=self.settings.threads,
            planted_slowdown=self.planted[side],
            turns=turns,
            nproc=nproc,
            rounds=1 if nproc > 1 or profile else self.settings.rounds or self.rounds.get(key, 1),
            probe=False,  # pairs need no machine probe (`perfgate.judge.verdict._throughput`)
            counts_only=self.settings.counts_only,
            profile=profile,
        )
        scratch = Path(self._scratch.name)
        place = self.places[side]
        front_end = self.settings.front_end
        timeout_s = limit or self.settings.timeout_s
        hung = (
            None
            if limit is None
            else f"hung: no result after {limit:.0f} s, {HANG_FACTOR:g}x the slowest trial of this config so far "
            f"(at least {HANG_FLOOR_S:g} s)"
        )
        if not self.fork or profile is not None:
            return RunningTrial(spec, scratch, timeout_s, place, front_end=front_end, timeout_note=hung)
        server = self.servers.get(side)
        if server is None or not server.alive:
            self._start_servers()
            server = self.servers[side]
        try:
            return RunningTrial(spec, scratch, timeout_s, place, server, front_end=front_end, timeout_note=hung)
        except ServerGone:  # the side's code cannot even start a server: measure with fresh processes
            self.fork = False
            return RunningTrial(spec, scratch, timeout_s, place, front_end=front_end, timeout_note=hung)

    def _start_servers(self) -> None:
        """Start every side's fork server that is not running, all at once, and wait until each is ready: their
        imports overlap, and no trial runs beside a server's imports. A server that cannot start says so at its
        first fork, and the check goes on with fresh processes."""
        started = []
        for side, place in self.places.items():
            server = self.servers.get(side)
            if server is None or not server.alive:
                if server is not None:
                    server.close()
                workloads = [workload for _, workload in self.loaded]  # the head's: the base's imports follow it
                server = self.servers[side] = start_trial_server(
                    self.settings.threads, place, Path(self._scratch.name), workloads, self.settings.configs
                )
                started.append(server)
        for server in started:
            with contextlib.suppress(ServerGone):
                server.wait_ready()

    def _workload(self, name: str) -> Any:
        return next(workload for _, workload in self.loaded if workload.name == name)

    def _record(self, side: str, key: tuple[str, str], record: TrialRecord) -> None:
        trials = self.sides[side]
        result = record.result
        if record.failure_kind == "workload":
            message = str(result.failure)
            if side == "head":
                # This workload gets no more pairs (its configs fail in the results); the others go on. A head
                # that ran before and raises now is judged (`verdict._with_one_sided_failures`: it fails the check,
                # with its report); when every workload has failed without a trial that ran, the first one's error
                # is the check's.
                ran = any(t.ok for (name, _), done in trials.trials.items() if name == key[0] for t in done)
                if not ran:
                    error = workload_error(key[0], key[1], record, self.settings.front_end)
                    self.workload_failures.setdefault(key[0], error)
                for config in self.settings.configs:
                    trials.config_failures.setdefault((key[0], config), message)
                trials.trials[key].append(result)
                raise_when_all_failed(self.workload_failures, self.names)
                return
            trials.problems[key[0]] = f"{key[0]} cannot be measured at {self.ref}: {message}"
        if record.failure_kind == "config":
            trials.config_failures[key] = result.failure or "failed"
        if result.ok and result.workload and key[0] not in trials.identities:
            trials.identities[key[0]] = {
                k: v for k, v in result.workload.items() if k not in ("slice_indices", "dataset_length")
            }
        trials.trials[key].append(result)

    def result(self, side: str) -> RunResult:
        """Everything one side measured so far, as a run."""
        trials = self.sides[side]
        workloads = [
            collect_workload(
                self.references[(side, workload.name)],
                # the head's name: a pull request that renames a workload pairs its trials with the base's, which
                # built the same reference under its old name
                {
                    **(trials.identities.get(workload.name) or _identity(workload, self.settings.nproc_of(workload))),
                    "name": workload.name,
                },
                self.settings,
                trials.trials,
                trials.config_failures,
                trials.profiles,
            )
            for _, workload in self.loaded
            if workload.name not in trials.problems
        ]
        return RunResult(
            perfgate_version=perfgate.__version__,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            environment=self.environment,
            workloads=workloads,
        )

    def against(self) -> Against:
        base, head = self.checkouts["base"], self.checkouts["head"]
        return Against(
            ref=self.ref,
            base_commit=base.commit or "",  # empty: calibration outside git, the working tree against itself
            head_commit=head.commit,
            head_dirty=head.dirty,
            base=self.result("base"),
            order=list(self.order),
            parallel=self.parallel,
            problems=dict(self.sides["base"].problems),
            forked=self.fork,
            interleaved=self.interleaved,
            environments=self.base_environment.record if self.base_environment is not None else None,
            new=tuple(name for name in self.names if name in self.new and name in self.sides["base"].problems),
        )

    def paired_run(self) -> RunResult:
        """The head run, carrying the base side: what the results file of a paired check holds."""
        return replace(self.result("head"), against=self.against())

    def mean_pair_s(self, key: tuple[str, str]) -> float:
        """How long one more pair of this config should take, from the pairs so far."""
        rounds = self.rounds.get(key, 1)  # pairs of the calibrated length, once there are some
        trials = {side: [t for t in self.sides[side].trials[key] if t.process_s] for side in SIDES}
        if all(any(t.rounds == rounds for t in trials[side]) for side in SIDES):
            trials = {side: [t for t in trials[side] if t.rounds == rounds] for side in SIDES}
        times = [[t.process_s or 0.0 for t in trials[side]] for side in SIDES]
        per_side = [sum(values) / len(values) if values else 10.0 for values in times]
        return max(per_side) if self.parallel or self.interleaved else sum(per_side)


def takes_turns(parallel: bool, interleaved: bool | None, device: str = "cpu", front_end: FrontEnd = CLI) -> bool:
    """Whether a pair's trials take turns at their steps: unless asked otherwise, yes, but for pairs run at
    the same time (`parallel`) and on CUDA. Measured three times quieter per minute of runner time than trials
    one after the other, and the only pairing that met the paired check's targets here (docs/performance.md).

    On CUDA a turn ends at a step boundary on the host while the step's kernels are still queued on the device
    (nothing synchronises inside the timed steps), so they would run during the other side's turn: pairs run
    one after the other there, and asking for turns is a UsageError."""
    if device == "cuda":
        if interleaved:
            option = front_end.option
            raise UsageError(
                f"{option('interleaved-pairs')} cannot be timed on CUDA: a side stopped at a step boundary still has "
                "its kernels queued on the GPU, and they run in the other side's turn",
                where=f"{option('device')} cuda",
                hint=f"leave it out or use {option('no-interleaved-pairs')} (each pair's trials one after the other, "
                "ABBA)",
            )
        return False
    return not parallel if interleaved is None else interleaved


def _identity(workload: Any, nproc: int) -> dict[str, Any]:
    from perfgate.measure.trial import workload_identity

    return workload_identity(workload, nproc)


def _cpu_halves(front_end: FrontEnd = CLI) -> tuple[frozenset[int], frozenset[int]]:
    """The CPUs this process may use, split in two halves: one for each side of a pair run at once."""
    import os

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cpus) < 2:
        parallel = front_end.option("parallel-pairs")
        raise UsageError(
            f"{parallel} needs at least two CPUs", hint=f"drop {parallel} to run each pair's trials in turn"
        )
    half = len(cpus) // 2
    return frozenset(cpus[:half]), frozenset(cpus[half:])
