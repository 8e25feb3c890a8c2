"""The job's memory, DataLoader workers included: a worker that keeps what it loads fails a paired check on
peak memory, and the verdict and the diagnosis name the loader workers; the unchanged workload passes.

Real git repositories under the test's temporary folder, real trials with real DataLoader workers (two, fp32,
one thread, one round, forked from one server a side), four pairs a check, the fewest from which a paired memory
verdict with trial noise may call a change (`stats.MIN_DECIDING`): the sizes are chosen so that no noise decides.
Each worker of the cached workload keeps 4 MiB per sample it loads, 112 samples between the two: 448 MiB in all,
against a job of about 20 MiB without the cache, a change that neither the 5% tolerance nor the trial-to-trial
noise of a few MiB can hide; between two cached sides, the same noise stays well inside the 5% of about 470 MiB.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.judge.verdict import compare_results
from perfgate.records.results import load_results
from perfgate.records.verdicts import ConfigVerdict, GateSettings
from tests.helpers.cli import run_in_process
from tests.helpers.git import commit, new_repository
from tests.helpers.workloads import PLAIN_SGD

WORKLOAD = "perf/bench.py:bench"
# One round a trial (`--rounds 1`): a worker that keeps what it loads keeps more with every round over the slice.
# Trials forked from one server a side (`--fork-trials`): the subject is the workers' memory, not how a trial
# process starts; both sides alike, and a forked child's own memory above setup stays within a few MiB of a fresh
# process's (perfgate.measure.trialserver), far inside the 448 MiB the cache adds and the 5% of the cached job.
FOUR_PAIRS = (
    "--configs",
    "fp32",
    "--threads",
    "1",
    "--trials",
    "4",
    "--max-trials",
    "4",
    "--time-budget",
    "120",
    "--rounds",
    "1",
    "--fork-trials",
)
BATCH, WARMUP, STEPS = 16, 1, 6  # 7 batches of 16: 112 samples between the two workers
KEEP_MIB = 4

SOURCE = """\
import torch
from torch.nn import functional as F

import perfgate

KEEP_MIB = {keep}  # {comment}


class Points(torch.utils.data.Dataset):
    def __init__(self):
        self.kept = []  # each DataLoader worker has its own copy of the dataset, and so its own cache

    def __len__(self):
        return {samples}

    def __getitem__(self, index):
        if KEEP_MIB:
            self.kept.append(torch.ones(KEEP_MIB << 20, dtype=torch.uint8))  # written: resident
        x = torch.randn(16, generator=torch.Generator().manual_seed(index))
        return x, x.sum(dim=0, keepdim=True)


def model():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


{plain_sgd}

def bench():
    return perfgate.Workload(
        name="bench", model=model, dataset=Points, loss=loss, optimizer=PlainSGD, batch_size={batch},
        steps={steps}, warmup_steps={warmup}, loader={{"num_workers": 2}},
    )
"""


def bench(keep_mib: int, comment: str = "") -> str:
    samples = BATCH * (WARMUP + STEPS)
    return SOURCE.format(
        keep=keep_mib, comment=comment, samples=samples, batch=BATCH, steps=STEPS, warmup=WARMUP, plain_sgd=PLAIN_SGD
    )


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    """Three commits: no cache, the cache, the cache and a comment. The working tree (the third) is checked
    against the first (the workers' memory grew) and against the second (nothing changed)."""
    top = tmp_path_factory.mktemp("loader-memory")
    repo = new_repository(top / "repo")
    commit(repo, {"perf/bench.py": bench(0)}, "no cache")
    commit(repo, {"perf/bench.py": bench(KEEP_MIB)}, "each worker keeps what it loads")
    commit(repo, {"perf/bench.py": bench(KEEP_MIB, "a comment")}, "a comment")
    env = {"TMPDIR": str(top)}
    results = {}
    for name, ref in (("grown", "HEAD~2"), ("unchanged", "HEAD~1")):
        out = top / f"{name}.json"
        check = run_in_process("check", WORKLOAD, "--against", ref, *FOUR_PAIRS, "--json", str(out), cwd=repo, env=env)
        results[name] = (check, out)
    return results


def trials_memory(results: Path, side: str) -> list[dict]:
    """Each trial's `memory` as the results file keeps it, on the head's side or the base's."""
    document = json.loads(results.read_text(encoding="utf-8"))
    workloads = document["against"]["base"]["workloads"] if side == "base" else document["workloads"]
    return [t["memory"] for t in workloads[0]["configs"]["fp32"]["trials"]]


def judged(results: Path) -> ConfigVerdict:
    """The check's verdict, judged again from its results file as `perfgate compare` judges it."""
    (verdict,) = compare_results(load_results(results), GateSettings()).verdicts
    return verdict


@pytest.mark.e2e
def test_a_worker_that_keeps_what_it_loads_fails_the_check_on_memory_naming_the_loader_workers(checks):
    check, results = checks["grown"]
    assert check.returncode == 1, check.stdout + check.stderr
    verdict = judged(results)
    assert verdict.memory is not None and verdict.memory.verdict == "regression"
    assert "a memory regression (loader workers +" in check.stdout
    assert "peak memory regression: " in check.stdout and ": a worker keeps what it loads)" in check.stdout
    for memory in trials_memory(results, "head"):
        assert memory["kind"] == "cpu-job-above-setup" and memory["loader_workers"] == 2
        assert memory["loader_workers_bytes"] >= BATCH * (WARMUP + STEPS) * KEEP_MIB << 20
        assert memory["peak_bytes"] == memory["process_bytes"] + memory["loader_workers_bytes"]
    for memory in trials_memory(results, "base"):
        assert memory["kind"] == "cpu-job-above-setup" and memory["loader_workers"] == 2
        assert memory["loader_workers_bytes"] < 100 << 20  # no cache: what the workers' own work touches


@pytest.mark.e2e
def test_the_same_cached_workload_unchanged_passes_on_memory(checks):
    check, results = checks["unchanged"]
    assert check.returncode == 0, check.stdout + check.stderr
    verdict = judged(results)
    assert verdict.memory is not None and verdict.memory.verdict == "no change", check.stdout
    assert "peak memory" not in verdict.reason and "peak memory regression" not in check.stdout
    for side in ("base", "head"):
        assert all(
            m["loader_workers_bytes"] >= BATCH * (WARMUP + STEPS) * KEEP_MIB << 20 for m in trials_memory(results, side)
        )
