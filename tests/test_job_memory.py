"""The job's memory by part: the DataLoader workers' unique memory summed over real processes, the parts in the
records and baselines, and the verdict and diagnosis naming the part that grew (tests/test_loader_memory.py
runs the whole check end to end)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from perfgate.judge.diagnosis import diagnose
from perfgate.judge.memory import TrialMemory, compared_peaks, grown_parts
from perfgate.judge.verdict import Status, compare_entries, compare_run
from perfgate.measure.device import Device
from perfgate.measure.sampler import SystemSampler, loader_worker_pids, workers_unique_bytes
from perfgate.records.baselines import BaselineStore, entry_from_workload
from perfgate.records.shapes import PeakMemory, ShapeError, peak_memory_from_dict
from perfgate.records.verdicts import GateSettings
from tests.helpers.baselines import STORE_FINGERPRINT, gate_entry, store_entry
from tests.helpers.cuda import needs_cuda
from tests.helpers.results import BASE_MS, phased_run, validate_results

MIB = 1 << 20
SETTINGS = GateSettings(first_n=3, max_n=3)
SAVED_RESULTS = Path(__file__).parent / "data" / "results-v2.json"  # a results file written by perfgate
# A child that writes `{mib}` MiB (resident and its own), says so, and lives until its standard input closes.
HOLDER = "import sys\nkept = b'x' * ({mib} << 20)\nprint('ready', flush=True)\nsys.stdin.read()\n"


@pytest.fixture
def holders():
    """Start children holding the given MiB each; every one still running is ended at the test's end."""
    started: list[subprocess.Popen[str]] = []

    def start(*sizes: int) -> list[subprocess.Popen[str]]:
        for mib in sizes:
            child = subprocess.Popen(
                [sys.executable, "-c", HOLDER.format(mib=mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            started.append(child)
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        return started[-len(sizes) :]

    yield start
    for child in started:
        end(child)


def end(child: subprocess.Popen[str]) -> None:
    """Close its standard input (it exits), wait for it, and close its output."""
    for stream in (child.stdin, child.stdout):
        if stream is not None and not stream.closed:
            stream.close()
    child.wait(timeout=30)


# -- the workers' memory, read from real processes --------------------------------------------------------


def test_the_workers_unique_memory_is_summed_over_the_live_workers(holders):
    small, large = holders(40, 80)
    processes = [psutil.Process(small.pid), psutil.Process(large.pid)]
    reading = workers_unique_bytes(processes)
    assert reading is not None
    total, live = reading
    assert live == 2
    assert 120 * MIB <= total <= 120 * MIB + 2 * 30 * MIB  # what each holds, and a bare interpreter's own pages
    end(large)
    after = workers_unique_bytes(processes)
    assert after is not None and after[1] == 1 and after[0] < 40 * MIB + 30 * MIB  # an exited worker counts no more


def test_the_sampler_keeps_the_peak_of_the_sum_after_a_worker_exits(holders):
    first, second = holders(40, 40)
    sampler = SystemSampler(interval_s=0.01, loader_worker_pids=[first.pid, second.pid], memory_interval_s=0.02)
    with sampler:
        time.sleep(0.1)
        end(second)
        time.sleep(0.1)
    samples = sampler.samples
    assert samples.loader_workers == 2
    assert samples.loader_workers_bytes is not None and samples.loader_workers_bytes >= 80 * MIB


def test_without_worker_ids_the_workers_memory_is_not_measured_and_a_single_process_loader_has_none():
    with SystemSampler(interval_s=0.01) as unmeasured:
        time.sleep(0.02)
    assert (unmeasured.samples.loader_workers_bytes, unmeasured.samples.loader_workers) == (None, None)
    with SystemSampler(interval_s=0.01, loader_worker_pids=[]) as none:
        time.sleep(0.02)
    assert (none.samples.loader_workers_bytes, none.samples.loader_workers) == (0, 0)


class Held(torch.utils.data.Dataset):
    """64 MiB the training process holds: a forked worker shares its pages and must not be charged for them."""

    def __init__(self) -> None:
        self.data = torch.ones(64 * MIB, dtype=torch.uint8)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index : index + 1].clone()


def test_real_dataloader_workers_are_found_and_charged_only_for_what_they_add():
    batches = iter(torch.utils.data.DataLoader(Held(), batch_size=2, num_workers=2))
    try:
        next(batches)
        pids = loader_worker_pids(batches)
        assert pids is not None and len(pids) == 2
        assert set(pids) <= {child.pid for child in psutil.Process().children(recursive=True)}
        reading = workers_unique_bytes([psutil.Process(pid) for pid in pids])
        assert reading is not None and reading[1] == 2
        # The 64 MiB are resident in each worker too (shared, copy-on-write), but are not its own: USS leaves
        # them to the training process, which counts them once.
        assert reading[0] < 64 * MIB
    finally:
        del batches
    assert loader_worker_pids(iter(torch.utils.data.DataLoader(Held(), batch_size=2))) == []


def test_the_cpu_peak_is_the_jobs_where_the_workers_were_measured():
    device = Device()
    device.mark_setup_done()
    device.reset_peak_memory()
    job = device.peak_memory(loader_workers_bytes=300 * MIB, loader_workers=2)
    assert job.kind == "cpu-job-above-setup" and job.loader_workers == 2
    assert job.process_bytes is not None and job.peak_bytes == job.process_bytes + 300 * MIB
    alone = device.peak_memory()
    assert alone.kind == "cpu-rss-above-setup" and alone.peak_bytes == alone.process_bytes
    assert alone.loader_workers_bytes is None


@needs_cuda
def test_on_cuda_the_device_peak_is_judged_and_the_host_parts_are_recorded_beside_it():
    from perfgate.measure.device import CudaDevice

    device = CudaDevice()
    device.mark_setup_done()
    device.reset_peak_memory()
    block = torch.ones(16 * MIB // 4, device="cuda")
    host = torch.ones(64 * MIB // 4)  # the training process's host memory, written: resident
    peak = device.peak_memory(loader_workers_bytes=5 * MIB, loader_workers=1)
    del block, host
    assert peak.kind == "cuda-max-allocated" and peak.peak_bytes == torch.cuda.max_memory_allocated()
    assert (peak.loader_workers_bytes, peak.loader_workers) == (5 * MIB, 1)
    assert peak.process_bytes is not None and peak.process_bytes >= 60 * MIB


# -- the records --------------------------------------------------------------------------------------------


def test_the_parts_round_trip_and_an_older_memory_record_loads_them_as_none():
    memory = PeakMemory("cpu-job-above-setup", 330 * MIB, None, 200 * MIB, 30 * MIB, 300 * MIB, 2)
    assert PeakMemory.from_dict(memory.to_dict()) == memory
    older = {"kind": "cpu-rss-above-setup", "peak_bytes": 10, "reserved_bytes": None, "setup_bytes": 5}
    loaded = peak_memory_from_dict(older)
    assert loaded is not None and (loaded.process_bytes, loaded.loader_workers_bytes, loaded.loader_workers) == (
        None,
        None,
        None,
    )
    assert loaded.to_dict() == older  # nothing unmeasured is written
    with pytest.raises(ShapeError, match="a trial's memory has the unknown field 'loader_worker_bytes'"):
        PeakMemory.from_dict({**older, "loader_worker_bytes": 1})


def test_a_results_file_with_the_jobs_memory_matches_the_schema():
    document = json.loads(SAVED_RESULTS.read_text(encoding="utf-8"))
    trial = document["workloads"][0]["configs"]["fp32"]["trials"][0]
    trial["memory"] = PeakMemory("cpu-job-above-setup", 330 * MIB, None, 200 * MIB, 30 * MIB, 300 * MIB, 2).to_dict()
    validate_results(document)


def test_a_baseline_keeps_the_memory_kind_and_parts_and_an_older_one_has_none(tmp_path):
    entry = store_entry()
    fp32 = entry.configs["fp32"]
    parts = {"memory_kind": "cpu-job-above-setup", "process_bytes": 30 * MIB, "loader_workers_bytes": 300 * MIB}
    trials = [dataclasses.replace(t, **parts) for t in fp32.trials]
    store = BaselineStore(tmp_path)
    store.write(dataclasses.replace(entry, configs={"fp32": dataclasses.replace(fp32, trials=trials)}))
    loaded = store.find("gpt-small", STORE_FINGERPRINT)
    assert loaded is not None and loaded.configs["fp32"].trials == trials
    store.write(entry)
    older = store.find("gpt-small", STORE_FINGERPRINT)
    assert older is not None and {t.memory_kind for t in older.configs["fp32"].trials} == {None}
    assert "memory_kind" not in store.path_for("gpt-small").read_text(encoding="utf-8")


# -- the verdict and the diagnosis name the part that grew ---------------------------------------------------


def with_parts(run, *, process_mib: int, workers_mib: int):
    """`run` with every trial's memory the job's: `process_mib` of training process, `workers_mib` of workers."""
    workload = run.workloads[0]
    memory = PeakMemory(
        "cpu-job-above-setup",
        (process_mib + workers_mib) * MIB,
        None,
        200 * MIB,
        process_mib * MIB,
        workers_mib * MIB,
        2,
    )
    config = workload.configs["fp32"]
    trials = [
        dataclasses.replace(t, memory=dataclasses.replace(memory, peak_bytes=memory.peak_bytes + i * 4096))
        for i, t in enumerate(config.trials)
    ]
    configs = {"fp32": dataclasses.replace(config, trials=trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])


def test_workers_that_grew_fail_on_memory_and_the_verdict_and_diagnosis_name_them():
    base_run = with_parts(phased_run(BASE_MS), process_mib=30, workers_mib=20)
    baseline = {"w": entry_from_workload(base_run, base_run.workloads[0])}
    result = compare_run(with_parts(phased_run(BASE_MS), process_mib=30, workers_mib=430), baseline, SETTINGS)
    (verdict,) = result.verdicts
    assert verdict.status == Status.REGRESSION
    assert "): a memory regression (loader workers +410.0 MiB: a worker keeps what it loads)" in verdict.reason
    (diagnosis,) = diagnose(result)
    assert diagnosis.suspect == "memory"
    assert diagnosis.findings[0].line == (
        "peak memory regression: 50.0 MiB -> 460.0 MiB (+410.0 MiB, loader workers +410.0 MiB: "
        "a worker keeps what it loads)"
    )


def test_a_training_process_that_grew_is_named_instead():
    base_run = with_parts(phased_run(BASE_MS), process_mib=30, workers_mib=20)
    baseline = {"w": entry_from_workload(base_run, base_run.workloads[0])}
    result = compare_run(with_parts(phased_run(BASE_MS), process_mib=126, workers_mib=20), baseline, SETTINGS)
    (verdict,) = result.verdicts
    assert verdict.status == Status.REGRESSION
    assert verdict.reason.endswith("): a memory regression (training process +96.0 MiB)")
    (diagnosis,) = diagnose(result)
    assert (
        diagnosis.findings[0].line
        == "peak memory regression: 50.0 MiB -> 146.0 MiB (+96.0 MiB, training process +96.0 MiB)"
    )


def test_both_parts_that_grew_are_named_the_larger_first():
    base = [TrialMemory("cpu-job-above-setup", 50 * MIB, 30 * MIB, 20 * MIB)] * 3
    grown = [TrialMemory("cpu-job-above-setup", 250 * MIB, 80 * MIB, 170 * MIB)] * 3
    assert grown_parts(base, grown) == (
        "loader workers +150.0 MiB and training process +50.0 MiB: a worker keeps what it loads"
    )
    cuda = [TrialMemory("cuda-max-allocated", 1 << 30, 30 * MIB, 400 * MIB)] * 3
    assert grown_parts([TrialMemory("cuda-max-allocated", 1 << 30, 30 * MIB, 20 * MIB)] * 3, cuda) == ""


def test_a_baseline_recorded_before_the_workers_were_counted_is_compared_for_the_training_process_alone():
    """Its peak_bytes are the training process's: compared with the job's total, any workload with workers would
    fail. The gate compares like with like, and says what it compared and how to gate the workers too."""
    older = gate_entry([500, 505, 495], peak_mib=30)  # no memory kind: written before perfgate kept it
    parts = {"memory_kind": "cpu-job-above-setup", "process_bytes": 30 * MIB, "loader_workers_bytes": 400 * MIB}
    current = gate_entry([500, 505, 495], peak_mib=430)
    trials = [dataclasses.replace(t, **parts) for t in current.configs["fp32"].trials]
    current = dataclasses.replace(
        current, configs={"fp32": dataclasses.replace(current.configs["fp32"], trials=trials)}
    )
    (verdict,) = compare_entries(older, current, SETTINGS).configs
    assert verdict.memory is not None and verdict.memory.verdict == "no change"
    assert verdict.memory.candidate_bytes == 30 * MIB
    assert verdict.reason.endswith(
        "; peak memory compared for the training process alone: the baseline did not measure the DataLoader "
        "workers' memory (recorded by an earlier perfgate: run perfgate update to gate the workers too)"
    )
    same = compared_peaks(
        [TrialMemory("cpu-job-above-setup", 430 * MIB, 30 * MIB, 400 * MIB)],
        [TrialMemory("cpu-job-above-setup", 430 * MIB, 30 * MIB, 400 * MIB)],
        "the baseline",
    )
    assert (same.baseline, same.note) == ([430 * MIB], "")
