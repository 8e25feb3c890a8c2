"""Regenerate the saved files in tests/data/ with perfgate's own writers:

    python tests/data/make_data.py

- `results-v2.json`: a results file as `perfgate run --json` writes it (schema version 2): workload `mlp`
  measured on a made-up 2-core CPU, fp32 20% slower than its baseline and bf16 unchanged, one bf16 trial failed.
- `baselines/mlp.yaml`: the baseline file `perfgate update` writes (`baselines/*.yaml`) for the same machine,
  from an earlier run of the same workload.

Every figure is synthetic and fixed (no trial runs; no clock, git or machine is read), so the files change only
when perfgate's writers do. tests/test_saved_data.py reads them back; rerun this script when it says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from perfgate.records.baselines import BaselineStore
from perfgate.records.results import ConfigResult, RunResult, TrialResult, WorkloadResult, WorkloadSettings
from perfgate.records.shapes import Environment, PeakMemory

DATA = Path(__file__).resolve().parent
RESULTS = DATA / "results-v2.json"  # not results.json: .gitignore leaves that name out
BASELINES = DATA / "baselines"

BATCH_SIZE, STEPS = 8, 4
CHECKSUM = "sha256:" + "ab" * 32
FIRST_LOSSES = {"fp32": [2.5, 2.375], "bf16": [2.5, 2.375]}
PEAK_BYTES = {"fp32": 50 << 20, "bf16": 30 << 20}
SHARES = {"data_wait": 0.05, "h2d": 0.0, "forward": 0.35, "backward": 0.5, "optimizer": 0.1}


def environment(sha: str) -> Environment:
    """A 2-core CPU machine; only the commit differs between the baseline's run and the candidate's."""
    return Environment.from_dict(
        {
            "python": "3.11.7",
            "platform": "Linux-6.1-x86_64",
            "torch": "2.13.0+cpu",
            "cuda": None,
            "cudnn": None,
            "device": {"type": "cpu", "name": "Test CPU", "count": 1, "driver": None},
            "cpu": {"model": "Test CPU", "logical_cores": 2, "available_cores": 2},
            "threads": 2,
            "git": {"sha": sha, "branch": "main", "dirty": False, "shallow": False},
        }
    )


def trial(config: str, index: int, samples_per_sec: float) -> TrialResult:
    """A measured trial: equal steps at `samples_per_sec`, split into phases by SHARES; a steady machine probe."""
    step = BATCH_SIZE / samples_per_sec
    return TrialResult(
        config=config,
        trial=index,
        status="ok",
        samples_per_sec=samples_per_sec,
        step_s=[step] * STEPS,
        phases_s={phase: [step * share] * STEPS for phase, share in SHARES.items()},
        warmup_step_s=[4 * step],
        timed_elapsed_s=step * STEPS,
        setup_s=0.5,
        process_s=2.0,
        first_losses=FIRST_LOSSES[config],
        final_loss=2.0,
        data_checksum=CHECKSUM,
        memory=PeakMemory(kind="cpu-rss-above-setup", peak_bytes=PEAK_BYTES[config], reserved_bytes=None),
        threads=2,
        probe_steps_per_sec=[2000.0, 2004.0],
    )


def run(created_at: str, sha: str, rates: dict[str, list[float | None]]) -> RunResult:
    """Workload `mlp`: one trial per rate and config (None: a trial whose process was killed)."""
    configs = {
        config: ConfigResult(
            config,
            [
                trial(config, i, rate)
                if rate is not None
                else TrialResult(config, i, "failed", failure="trial process was killed by SIGKILL")
                for i, rate in enumerate(config_rates)
            ],
        )
        for config, config_rates in rates.items()
    }
    workload = WorkloadResult(
        name="mlp",
        reference="perf/mlp.py:mlp",
        settings=WorkloadSettings.from_dict(
            {
                "batch_size": BATCH_SIZE,
                "steps": STEPS,
                "warmup_steps": 1,
                "seed": 0,
                "trials": max(len(r) for r in rates.values()),
                "device": "cpu",
                "threads": 2,
                "loader": {},
            }
        ),
        data_checksum=CHECKSUM,
        first_losses=FIRST_LOSSES,
        configs=configs,
    )
    return RunResult("0.1.0", created_at, environment(sha), [workload])


def baseline_run() -> RunResult:
    return run(
        "2026-11-20T09:00:00+00:00",
        "1" * 40,
        {"fp32": [1000.0, 1012.0, 990.0, 1004.0, 996.0], "bf16": [1500.0, 1510.0, 1490.0, 1505.0, 1495.0]},
    )


def candidate_run() -> RunResult:
    return run(
        "2026-11-22T10:00:00+00:00",
        "2" * 40,
        {"fp32": [800.0, 806.0, 795.0, 802.0], "bf16": [1502.0, 1497.0, 1508.0, 1493.0, None]},
    )


def main() -> None:
    shutil.rmtree(BASELINES, ignore_errors=True)
    BaselineStore(BASELINES).write_run(baseline_run())
    candidate_run().write_json(RESULTS)
    for path in sorted([RESULTS, *BASELINES.iterdir()]):
        path.chmod(0o644)  # written as private temporary files, then renamed into place
        print(f"wrote {path.relative_to(DATA.parent.parent)}")


if __name__ == "__main__":
    main()
