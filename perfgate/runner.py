"""Schedule the lab: one subprocess per trial, configs interleaved, timeouts, and the collected results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import perfgate
from perfgate.errors import UsageError, WorkloadError
from perfgate.references import Reference
from perfgate.results import ConfigResult, RunResult, TrialResult, WorkloadResult
from perfgate.trial import TrialSpec
from perfgate.workload import Workload

DEFAULT_TRIALS = 3
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class RunSettings:
    """How to run the lab: which configs, how many trials, where, and how long a trial may take."""

    configs: tuple[str, ...]
    trials: int = DEFAULT_TRIALS
    device: str = "cpu"
    threads: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise UsageError(f"--trials must be at least 1, got {self.trials}", hint="use --trials 3 or more")
        if self.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.threads}")
        if self.timeout_s <= 0:
            raise UsageError(f"--timeout must be positive, got {self.timeout_s}")


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
        workload = reference.load()
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
                hint="set warmup_steps=1 or more, or leave bf16-compile out of --configs",
            )
        loaded.append((reference, workload))
    return loaded


def run_lab(
    references: Sequence[Reference],
    settings: RunSettings,
    progress: ProgressCallback | None = None,
) -> RunResult:
    """Run every trial of every workload and config, each in a fresh process, and collect them."""
    from perfgate.environment import collect_environment

    loaded = load_workloads(references, settings)
    by_name = {workload.name: (reference, workload) for reference, workload in loaded}
    plan = plan_trials(list(by_name), settings.configs, settings.trials)
    trials: dict[tuple[str, str], list[TrialResult]] = {
        (name, config): [] for name in by_name for config in settings.configs
    }
    config_failures: dict[tuple[str, str], str] = {}
    environment = collect_environment(settings.device, settings.threads)
    with tempfile.TemporaryDirectory(prefix="perfgate-") as scratch:
        for planned in plan:
            key = (planned.workload, planned.config)
            if key in config_failures:
                continue
            if progress:
                progress(TrialEvent(planned, len(plan)))
            reference, _ = by_name[planned.workload]
            spec = TrialSpec(
                reference_text=reference.text,
                reference_target=reference.target,
                config=planned.config,
                trial=planned.trial,
                device=settings.device,
                threads=settings.threads,
            )
            record = run_trial_process(spec, Path(scratch), settings.timeout_s)
            if record.get("status") == "error" and record.get("kind") == "workload":
                raise WorkloadError(
                    str(record.get("message")),
                    where=f"workload {planned.workload!r}, config {planned.config}",
                    hint="fix the workload and run again (--debug shows the trial's traceback)",
                    details=str(record.get("traceback") or "") or None,
                )
            result = TrialResult.from_record(record)
            if record.get("status") == "error" and record.get("kind") == "config":
                config_failures[key] = result.failure or "failed"
            trials[key].append(result)
            if progress:
                progress(TrialEvent(planned, len(plan), finished=result))
    workloads = [
        _collect_workload(reference, workload, settings, trials, config_failures) for reference, workload in loaded
    ]
    return RunResult(
        perfgate_version=perfgate.__version__,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        environment=environment,
        workloads=workloads,
    )


def run_trial_process(spec: TrialSpec, scratch: Path, timeout_s: float) -> dict[str, object]:
    """Run one trial in a fresh Python process and return its record; crashes become failed records."""
    stem = f"{spec.reference_target.rsplit(':', 1)[-1]}-{spec.config}-{spec.trial}".replace("/", "_").replace("@", "_")
    spec_path = scratch / f"{stem}.spec.json"
    out_path = scratch / f"{stem}.out.json"
    log_path = scratch / f"{stem}.log"
    spec_path.write_text(json.dumps(asdict(spec)), encoding="utf-8")
    out_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "perfgate.trial", str(spec_path), str(out_path)]
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=trial_environment(spec.threads),
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return _failed(
                spec, f"timed out after {timeout_s:g} s (raise --timeout if the trial needs longer)", started
            )
        except BaseException:
            _kill_group(process)  # Ctrl-C: take the trial and its DataLoader workers down too
            raise
    if out_path.is_file():
        try:
            record: dict[str, object] = json.loads(out_path.read_text(encoding="utf-8"))
            return record
        except json.JSONDecodeError:
            pass
    return _failed(spec, f"trial process {_describe_exit(returncode)}; last output: {_tail(log_path)}", started)


def trial_environment(threads: int) -> dict[str, str]:
    """The trial's environment: pinned thread counts and this perfgate importable."""
    env = dict(os.environ)
    threads_text = str(threads)
    env.update(OMP_NUM_THREADS=threads_text, MKL_NUM_THREADS=threads_text, PYTHONHASHSEED="0")
    package_root = str(Path(perfgate.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def _collect_workload(
    reference: Reference,
    workload: Workload,
    settings: RunSettings,
    trials: dict[tuple[str, str], list[TrialResult]],
    config_failures: dict[tuple[str, str], str],
) -> WorkloadResult:
    configs = {
        config: ConfigResult(config, trials[(workload.name, config)], config_failures.get((workload.name, config)))
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
    for name, config in configs.items():
        losses = [t.first_losses for t in config.trials if t.ok]
        if losses:
            first_losses[name] = losses[0]
            if any(other != losses[0] for other in losses[1:]):
                warnings.append(f"{name}: first-step losses differed between trials (non-deterministic model or data)")
    for config in configs.values():
        for trial in config.trials:
            warnings.extend(f"{config.config} trial {trial.trial + 1}: {w}" for w in trial.warnings)
    return WorkloadResult(
        name=workload.name,
        reference=reference.text,
        settings={
            "batch_size": workload.batch_size,
            "steps": workload.steps,
            "warmup_steps": workload.warmup_steps,
            "seed": workload.seed,
            "trials": settings.trials,
            "threads": settings.threads,
            "device": settings.device,
            "loader": {k: v for k, v in workload.loader.items() if isinstance(v, bool | int | float | str)},
        },
        data_checksum=checksums[0] if len(checksums) == 1 else None,
        first_losses=first_losses,
        configs=configs,
        warnings=warnings,
    )


def _failed(spec: TrialSpec, message: str, started: float) -> dict[str, object]:
    return {
        "status": "error",
        "kind": "crash",
        "message": message,
        "config": spec.config,
        "trial": spec.trial,
        "process_s": time.perf_counter() - started,
    }


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode} without a result"


def _tail(path: Path, limit: int = 300) -> str:
    try:
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(none)"
    return lines[-1][:limit] if lines else "(none)"
