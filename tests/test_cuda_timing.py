"""How a trial's steps are clocked: on the CPU the host clock at every phase boundary; on CUDA events on the stream,
with one synchronisation before the timed steps and one after them, and none in between."""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path

import jsonschema
import pytest
import torch

from perfgate.measure.device import CudaDevice, CudaStepClock, Device
from perfgate.measure.trial import TrialSpec, run_trial
from perfgate.records.results import TrialResult, parse_results
from perfgate.records.shapes import ShapeError
from perfgate.records.summary import PHASES
from perfgate.references import resolve_references
from tests.helpers.cuda import needs_cuda
from tests.helpers.results import results_document, validate_results

WORKLOADS = Path(__file__).parent / "workloads"


@pytest.fixture(autouse=True)
def _torch_threads_kept():
    """The trials here run in this process (to watch its synchronisations), and a trial pins torch's threads."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def set_sync_debug_mode(mode: str) -> None:
    """torch warns, once a process, that this mode is a prototype; the suite's warnings-as-errors would stop on it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Synchronization debug mode is a prototype", UserWarning)
        torch.cuda.set_sync_debug_mode(mode)


def trial_spec(target: str, device: str, planted_slowdown: float = 0.0) -> TrialSpec:
    (reference,) = resolve_references([str(WORKLOADS / target)])
    return TrialSpec(reference.text, reference.target, "fp32", 0, device, 1, planted_slowdown=planted_slowdown)


def phase_sums(result: TrialResult) -> list[float]:
    return [sum(values) for values in zip(*(result.phases_s[p] for p in PHASES), strict=True)]


def test_a_cpu_trial_is_clocked_on_the_host_with_phases_that_sum_to_its_steps():
    record = run_trial(trial_spec("tiny.py:tiny", "cpu"))
    assert record is not None
    result = record.result
    assert result.ok, result.failure
    assert result.clocking == "host-clock" and result.data_wait_host_s is None
    assert "data_wait_host_s" not in result.to_dict()  # written only where the clock keeps it apart
    assert phase_sums(result) == result.step_s
    timed_samples = len(result.step_s) * 8  # tiny's batch size
    assert result.samples_per_sec == timed_samples / sum(result.step_s)
    assert result.timed_elapsed_s is not None and result.timed_elapsed_s >= sum(result.step_s)


def test_the_host_clock_keeps_warm_up_and_bookkeeping_out_of_the_step_times():
    clock = Device().step_clock()
    for step in range(3):
        if step == 1:
            clock.start_timing()
        clock.begin_step()
        for _ in PHASES:
            torch.ones(1000).sum()
            clock.mark()
        torch.ones(100_000).sum()  # bookkeeping: not a step's
        clock.end_step()
    clock.stop_timing()
    times = clock.times()
    assert times.clocking == "host-clock" and len(times.warmup_step_s) == 1 and len(times.step_s) == 2
    assert all(len(times.phases[p]) == 2 for p in PHASES)
    assert times.samples_s == sum(times.step_s) and times.bookkeeping_s > 0
    assert times.timed_elapsed_s > sum(times.step_s)


def test_a_result_without_clocking_reads_as_the_host_clock_and_an_unknown_clocking_is_refused():
    document = TrialResult(config="fp32", trial=0, status="ok").to_dict()
    del document["clocking"]  # a file written before perfgate recorded it
    assert TrialResult.from_dict(document).clocking == "host-clock"
    document["clocking"] = "sundial"
    with pytest.raises(ShapeError, match="clocking 'sundial'"):
        TrialResult.from_dict(document)


def test_a_results_file_keeps_how_each_trial_was_clocked_and_one_without_it_reads_as_the_host_clock():
    document = results_document()
    trials = document["workloads"][0]["configs"]["fp32"]["trials"]
    assert {trial["clocking"] for trial in trials} == {"host-clock"}
    trials[0].update(clocking="cuda-events", data_wait_host_s=[0.001] * len(trials[0]["step_s"]))
    del trials[1]["clocking"]  # a file written before perfgate recorded it
    validate_results(document)
    run = parse_results(json.dumps(document), source="r.json")
    read = run.workloads[0].configs["fp32"].trials
    assert [t.clocking for t in read[:2]] == ["cuda-events", "host-clock"]
    assert read[0].data_wait_host_s == [0.001] * len(read[0].step_s) and read[1].data_wait_host_s is None
    trials[0]["clocking"] = "sundial"
    with pytest.raises(jsonschema.ValidationError):
        validate_results(document)


@pytest.fixture
def sync_log(monkeypatch):
    """The order of explicit synchronisations and the timed region's edges; inside the timed steps an implicit
    synchronisation (`.item()`, a blocking copy) raises (`torch.cuda.set_sync_debug_mode`)."""
    log: list[str] = []
    synchronize, start_timing, stop_timing = (
        torch.cuda.synchronize,
        CudaStepClock.start_timing,
        CudaStepClock.stop_timing,
    )

    def counted_synchronize(*args: object, **kwargs: object) -> None:
        log.append("sync")
        synchronize(*args, **kwargs)  # type: ignore[arg-type]

    def start(self: CudaStepClock) -> None:
        log.append("start")
        start_timing(self)
        log.append("timed steps")
        set_sync_debug_mode("error")

    def stop(self: CudaStepClock) -> None:
        set_sync_debug_mode("default")
        log.append("stop")
        stop_timing(self)
        log.append("stopped")

    monkeypatch.setattr(torch.cuda, "synchronize", counted_synchronize)
    monkeypatch.setattr(CudaStepClock, "start_timing", start)
    monkeypatch.setattr(CudaStepClock, "stop_timing", stop)
    try:
        yield log
    finally:
        set_sync_debug_mode("default")


@needs_cuda
@pytest.mark.parametrize("planted_slowdown", [0.0, 0.5])
def test_a_cuda_trial_synchronises_once_before_its_timed_steps_and_once_after(sync_log, planted_slowdown):
    record = run_trial(trial_spec("pinned.py:pinned", "cuda", planted_slowdown))
    assert record is not None
    result = record.result
    assert result.ok, result.failure  # an implicit synchronisation in the timed steps fails the trial
    region = sync_log[sync_log.index("start") : sync_log.index("stopped") + 1]
    assert region == ["start", "sync", "timed steps", "stop", "sync", "stopped"]
    assert sync_log.count("start") == 1


@needs_cuda
def test_a_cuda_trial_says_cuda_events_and_its_steps_fill_the_wall_time_between_the_synchronisations():
    record = run_trial(trial_spec("pinned.py:pinned", "cuda"))
    assert record is not None
    result = record.result
    assert result.ok, result.failure
    assert result.clocking == "cuda-events"
    steps = len(result.step_s)
    assert steps == 30 and result.data_wait_host_s is not None and len(result.data_wait_host_s) == steps
    assert phase_sums(result) == result.step_s
    assert all(value >= 0 for p in PHASES for value in result.phases_s[p])
    wall = result.timed_elapsed_s
    assert wall is not None and result.samples_per_sec == pytest.approx(steps * 256 / wall)
    # The device's timeline from the first timed step's start to the last one's end, against the host's wall
    # time between the two synchronisations: only the last step's bookkeeping and the final wait lie outside.
    assert sum(result.step_s) == pytest.approx(wall, rel=0.05, abs=0.002)
    assert len(result.first_losses) == 3 and result.warmup_step_s and len(result.warmup_step_s) == 3


@needs_cuda
def test_a_planted_slowdown_on_cuda_slows_the_steps_without_a_synchronisation():
    plain = run_trial(trial_spec("pinned.py:pinned", "cuda"))
    planted = run_trial(trial_spec("pinned.py:pinned", "cuda", planted_slowdown=0.5))
    assert plain is not None and planted is not None and plain.result.ok and planted.result.ok
    ratio = statistics.median(planted.result.step_s) / statistics.median(plain.result.step_s)
    assert 1.2 < ratio < 2.5, ratio


@needs_cuda
def test_the_cuda_step_clock_times_queued_work_on_the_device_without_waiting_for_it():
    device = CudaDevice()
    a = torch.randn(2048, 2048, device=device.torch_device)
    clock = device.step_clock()
    clock.start_timing()
    set_sync_debug_mode("error")
    try:
        for _ in range(3):
            clock.begin_step()
            for _ in PHASES:
                for _ in range(5):
                    product = a @ a
                clock.mark()
            clock.end_step()
    finally:
        set_sync_debug_mode("default")
    clock.stop_timing()
    times = clock.times()
    assert times.clocking == "cuda-events" and len(times.step_s) == 3
    assert all(value > 0 for p in PHASES for value in times.phases[p])  # each phase's matmuls, on the device
    assert times.samples_s == times.timed_elapsed_s >= 0.95 * sum(times.step_s)
    del product
