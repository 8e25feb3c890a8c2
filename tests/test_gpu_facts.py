"""The GPU facts a verdict needs: NVML's clocks-event bitmask named, a trial's readings summed up into its
`GpuFacts`, a throttled trial flagged (and kept) in the reports, and two sides on different GPU models refused.

All but the last test run without a GPU: the decoding and the summary are pure functions of NVML's raw values,
and the records are built by hand and judged by the real functions."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from perfgate.app.judging import judge, read_run
from perfgate.check.stored import compare_saved
from perfgate.judge.verdict import Status, compare_results
from perfgate.measure.gpu import CLOCKS_EVENT_BITS, GpuReading, decode_clocks_event_reasons, gpu_facts
from perfgate.measure.lab import RunningTrial, TrialPlace
from perfgate.measure.sampler import Samples
from perfgate.measure.trial import TrialSpec
from perfgate.records.baselines import BaselineStore
from perfgate.records.results import Against, RunResult, TrialResult
from perfgate.records.shapes import Environment, GpuFacts, ShapeError, SystemSummary
from perfgate.records.verdicts import GateSettings
from perfgate.references import resolve_references
from perfgate.report.json import gate_to_dict
from perfgate.report.markdown import format_lab_markdown, format_markdown
from perfgate.report.render import lab_to_dict
from perfgate.report.text import format_gate, format_run, throttle_note
from tests.helpers.cuda import needs_cuda
from tests.helpers.results import BASE_MS, phased_run, results_document, validate_results

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
POWER_CAP, THERMAL_SW, IDLE, SYNC_BOOST = 0x4, 0x20, 0x1, 0x10
TINY = Path(__file__).parent / "workloads" / "tiny.py"


def readings(masks: list[int], sm: tuple[float, float] = (1410.0, 1980.0)) -> list[GpuReading]:
    """One reading per mask: the SM clock at its low value where a slowing reason is set, else at its high."""
    return [
        GpuReading(
            sm_clock_mhz=sm[0] if mask & (POWER_CAP | THERMAL_SW) else sm[1],
            memory_clock_mhz=2619.0,
            power_w=300.0 if mask & POWER_CAP else 250.0 + i,
            temperature_c=60.0 + i,
            reasons_mask=mask,
        )
        for i, mask in enumerate(masks)
    ]


def facts(name: str = H100, slowed: int = 4, of: int = 10) -> GpuFacts:
    facts = gpu_facts(name, readings([POWER_CAP] * slowed + [0] * (of - slowed)), power_limit_w=300.0)
    assert facts is not None
    return facts


# -- NVML's bitmask and a trial's readings ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0x0, ()),
        (0x1, ("idle",)),
        (0x24, ("power cap", "thermal (software)")),
        (0x48, ("hardware slowdown", "thermal (hardware)")),
        (0x80, ("power brake",)),
        (0x12, ("applications clocks setting", "sync boost")),
        (0x204, ("power cap", "bit 0x200")),  # a bit newer than this list is named by its value, not dropped
    ],
)
def test_the_clocks_event_bitmask_is_named_bit_by_bit(mask, names):
    assert decode_clocks_event_reasons(mask) == names


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="needs nvidia-ml-py (perfgate[gpu])")
def test_the_bit_table_matches_the_installed_nvml_bindings():
    import pynvml

    names = {
        "GpuIdle": "idle",
        "ApplicationsClocksSetting": "applications clocks setting",
        "SwPowerCap": "power cap",
        "HwSlowdown": "hardware slowdown",
        "SyncBoost": "sync boost",
        "SwThermalSlowdown": "thermal (software)",
        "HwThermalSlowdown": "thermal (hardware)",
        "HwPowerBrakeSlowdown": "power brake",
        "DisplayClockSetting": "display clock setting",
    }
    prefix = "nvmlClocksEventReason" if hasattr(pynvml, "nvmlClocksEventReasonGpuIdle") else "nvmlClocksThrottleReason"
    assert {getattr(pynvml, prefix + bit): name for bit, name in names.items()} == CLOCKS_EVENT_BITS


def test_a_trials_readings_give_its_clocks_power_temperature_and_the_share_slowed():
    got = gpu_facts(H100, readings([POWER_CAP] * 4 + [IDLE] + [0] * 5), power_limit_w=300.0)
    assert got == GpuFacts(
        name=H100,
        samples=10,
        sm_clock_mean_mhz=(4 * 1410.0 + 6 * 1980.0) / 10,
        sm_clock_min_mhz=1410.0,
        sm_clock_max_mhz=1980.0,
        memory_clock_mean_mhz=2619.0,
        memory_clock_min_mhz=2619.0,
        power_mean_w=(4 * 300.0 + sum(250.0 + i for i in range(4, 10))) / 10,
        power_max_w=300.0,
        power_limit_w=300.0,
        temperature_max_c=69.0,
        reasons={"idle": 1, "power cap": 4},
        slowed_samples=4,
    )
    assert got.throttled and got.slowed_share == 0.4 and got.slowing_reasons == ["power cap"]


def test_reasons_that_do_not_slow_the_gpu_and_a_rare_slowdown_leave_a_trial_unflagged():
    settings_only = gpu_facts(H100, readings([SYNC_BOOST | IDLE, 0x2, IDLE, 0]))
    assert settings_only is not None and settings_only.slowed_samples == 0 and not settings_only.throttled
    assert settings_only.reasons == {"applications clocks setting": 1, "idle": 2, "sync boost": 1}
    rare = facts(slowed=1, of=20)  # 5%: below the 10% that counts as throttled
    assert rare.slowed_samples == 1 and not rare.throttled
    assert facts(slowed=2, of=20).throttled  # 10%: throttled


def test_a_card_at_its_power_cap_at_full_clock_is_reported_not_flagged_and_capped_clocks_are():
    """An H200 that sits at its power cap in every reading while its SM clock stays within 6% of its top clock
    costs nothing (its pairs agreed to 0.3%): the reason is kept, the trial is not flagged. The same card with its
    clock held a quarter below the top is flagged, with NVML's reason as the why and the top clock in the note."""
    at_cap = gpu_facts(H200, readings([POWER_CAP] * 10, sm=(1870.0, 1980.0)), 700.0, sm_clock_limit_mhz=1980.0)
    assert at_cap is not None and at_cap.reasons == {"power cap": 10}
    assert at_cap.slowed_samples == 0 and not at_cap.throttled and at_cap.sm_clock_limit_mhz == 1980.0
    capped = gpu_facts(H200, readings([POWER_CAP] * 10, sm=(1485.0, 1980.0)), 700.0, sm_clock_limit_mhz=1980.0)
    assert capped is not None and capped.slowed_samples == 10 and capped.throttled
    assert throttle_note(capped).startswith("throttled (power cap) in 100% of samples; SM clock 1485-1485 MHz of 1980")
    # without NVML's top clock, the trial's own highest reading is the top
    alone = gpu_facts(H200, readings([POWER_CAP] * 5 + [0] * 5, sm=(1870.0, 1980.0)))
    assert alone is not None and alone.slowed_samples == 0 and alone.reasons == {"power cap": 5}
    # the top clock is kept in the file, and a file without it reads as before
    document = capped.to_dict()
    assert document["sm_clock_limit_mhz"] == 1980.0 and GpuFacts.from_dict(document) == capped
    assert "sm_clock_limit_mhz" not in GpuFacts.from_dict({**document, "sm_clock_limit_mhz": None}).to_dict()
    del document["sm_clock_limit_mhz"]
    assert GpuFacts.from_dict(document).sm_clock_limit_mhz is None


def test_readings_nvml_could_not_take_are_left_out_and_no_name_means_no_facts():
    partial = gpu_facts(A100, [GpuReading(sm_clock_mhz=1200.0), GpuReading(), GpuReading(reasons_mask=THERMAL_SW)])
    assert partial is not None and partial.samples == 3 and partial.sm_clock_mean_mhz == 1200.0
    assert partial.power_mean_w is None and partial.temperature_max_c is None and partial.power_limit_w is None
    assert partial.slowed_samples == 1 and partial.slowing_reasons == ["thermal (software)"]
    empty = gpu_facts(A100, [])  # a trial shorter than one sampling interval still names its GPU
    assert empty is not None and empty.samples == 0 and empty.sm_clock_min_mhz is None and not empty.throttled
    assert gpu_facts(None, readings([POWER_CAP])) is None  # no NVML: no facts, as without CUDA


def test_the_samplers_summary_carries_the_gpu_facts_only_where_nvml_named_a_gpu():
    samples = Samples(gpu_name=H100, gpu_power_limit_w=300.0, gpu_readings=readings([POWER_CAP, 0, 0]))
    summary = samples.summary()
    assert summary.gpu is not None and summary.gpu.name == H100 and summary.gpu.slowed_samples == 1
    assert Samples().summary().gpu is None and "gpu" not in Samples().summary().to_dict()


# -- the files keep them, strictly ------------------------------------------------------------------------


def test_gpu_facts_round_trip_through_a_results_file_and_older_files_load_without_them():
    system = SystemSummary(10, None, None, None, None, gpu=facts())
    document = json.loads(json.dumps(system.to_dict()))
    assert document["gpu"]["reasons"] == {"power cap": 4} and SystemSummary.from_dict(document) == system
    older = {k: v for k, v in document.items() if k != "gpu"}
    assert SystemSummary.from_dict(older).gpu is None
    results = results_document()  # as perfgate writes one, with the GPU facts in a trial: the schema allows them
    results["workloads"][0]["configs"]["fp32"]["trials"][0]["system"] = document
    validate_results(results)
    trial = phased_run(BASE_MS, system=system).workloads[0].configs["fp32"].trials[0]
    assert TrialResult.from_dict(json.loads(json.dumps(trial.to_dict()))) == trial


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda gpu: gpu.pop("slowed_samples"), "a trial's system summary's gpu lacks the field 'slowed_samples'"),
        (lambda gpu: gpu.update(clock=1), "a trial's system summary's gpu has the unknown field 'clock'"),
        (lambda gpu: gpu.update(reasons=["power cap"]), "reasons that are not a JSON object of reading counts"),
        (lambda gpu: gpu.update(name=None), "a trial's system summary's gpu has a name that is not a string"),
    ],
)
def test_gpu_facts_are_loaded_strictly(change, message):
    document = SystemSummary(1, None, None, None, None, gpu=facts()).to_dict()
    change(document["gpu"])
    with pytest.raises(ShapeError, match=message):
        SystemSummary.from_dict(document)


# -- a throttled trial in the reports: flagged, and counted ------------------------------------------------


def gpu_run(name: str = H100, throttled: int | None = None, sps: tuple[float, ...] = (100.0, 100.0, 100.0)):
    """Workload w's three fp32 trials on GPU `name` (the environment says so too), trial `throttled` slowed by the
    power cap in 40% of its samples."""
    run = phased_run(BASE_MS)
    workload = run.workloads[0]
    trials = []
    for t, value in zip(workload.configs["fp32"].trials, sps, strict=True):
        gpu = facts(name, slowed=4 if t.trial == throttled else 0)
        system = SystemSummary(10, None, None, None, None, gpu=gpu)
        trials.append(dataclasses.replace(t, system=system, samples_per_sec=value))
    config = dataclasses.replace(workload.configs["fp32"], trials=trials)
    environment = Environment.from_dict(
        {"device": {"type": "cuda", "name": name, "count": 1}, "cuda": "12.4", "torch": "2.5.0"}
    )
    return dataclasses.replace(
        run, environment=environment, workloads=[dataclasses.replace(workload, configs={"fp32": config})]
    )


def paired(base: RunResult, head: RunResult) -> RunResult:
    return dataclasses.replace(head, against=Against("main", "0123456789abcdef", None, True, base))


NOTE = "throttled (power cap) in 40% of samples; SM clock 1410-1980 MHz; up to 69 C, 300 W of 300 W"


def test_the_lab_report_flags_a_throttled_trial_beside_its_config():
    run = gpu_run(throttled=2)
    assert f"  ! fp32 trial 3: {NOTE}" in format_run(read_run(run)).splitlines()
    assert f"- fp32 trial 3: {NOTE}" in format_lab_markdown(read_run(run))
    (record,) = lab_to_dict(read_run(run))["workloads"][0]["configs"][0]["throttled_trials"]
    assert record == {
        "side": None,
        "trial": 2,
        "gpu": H100,
        "reasons": ["power cap"],
        "slowed_share": 0.4,
        "sm_clock_min_mhz": 1410.0,
        "sm_clock_max_mhz": 1980.0,
    }


def test_a_paired_check_flags_a_throttled_trial_on_its_side_and_still_counts_its_pair():
    base, head = gpu_run(throttled=1), gpu_run(sps=(100.0, 101.0, 99.0))
    result = compare_results(paired(base, head), GateSettings(first_n=3, max_n=3))
    (verdict,) = result.verdicts
    assert verdict.throughput is not None and verdict.throughput.n_candidate == 3  # the throttled pair is counted
    assert (
        f"  ! fp32 base trial 2: {NOTE}"
        in format_gate(judge(result, diagnosed=False), command="perfgate check").splitlines()
    )
    assert f"- fp32 base trial 2: {NOTE}" in format_markdown(judge(result, diagnosed=False))
    (record,) = gate_to_dict(judge(result, diagnosed=False))["workloads"][0]["configs"][0]["throttled_trials"]
    assert record["side"] == "base" and record["trial"] == 1 and record["slowed_share"] == 0.4
    assert "throttled" not in format_gate(
        judge(compare_results(paired(gpu_run(), head), GateSettings()), diagnosed=False), command="c"
    )


# -- two GPU models are not compared ----------------------------------------------------------------------


def test_a_paired_check_whose_sides_ran_on_different_gpu_models_is_refused_in_one_line():
    result = compare_results(paired(gpu_run(A100), gpu_run(H100)), GateSettings(first_n=3, max_n=3))
    (workload,) = result.workloads
    assert workload.problem_status == Status.NOT_COMPARABLE and not workload.configs and result.exit_code == 3
    assert workload.problem == (
        f"not comparable: the base (main) ran on {A100} and the head on {H100} (fp32 pair 1); timings on one GPU "
        "model say nothing about another: run both sides on one GPU model (make one GPU visible to the check with "
        "CUDA_VISIBLE_DEVICES)"
    )
    assert (
        f"  ! {workload.problem}" in format_gate(judge(result, diagnosed=False), command="perfgate check").splitlines()
    )
    same = compare_results(paired(gpu_run(H100), gpu_run(H100)), GateSettings(first_n=3, max_n=3))
    assert same.workloads[0].problem is None and same.verdicts[0].status == Status.NO_CHANGE


def test_a_baseline_stored_on_another_gpu_model_is_refused_naming_both_and_what_to_do(tmp_path):
    store = BaselineStore(tmp_path / "baselines")
    store.write_run(gpu_run(A100))
    result = compare_saved(gpu_run(H100), GateSettings(first_n=3, max_n=3), store=store)
    (workload,) = result.workloads
    assert workload.problem_status == Status.NO_BASELINE and result.exit_code == 3
    assert workload.problem == (
        f"no baseline for w on this GPU model: the stored baselines were recorded on {A100}, this machine has "
        f"{H100}, and timings on one GPU model say nothing about another; record a baseline on this runner with "
        f"perfgate update (writes {store.path_for('w')}; commit it), or run the check where the baseline was taken"
    )
    assert "\n" not in workload.problem
    same = compare_saved(gpu_run(A100), GateSettings(first_n=3, max_n=3), store=store)
    assert same.workloads[0].problem is None and same.verdicts[0].status == Status.NO_CHANGE


# -- on a real GPU ----------------------------------------------------------------------------------------


def _nvml_works() -> bool:
    if importlib.util.find_spec("pynvml") is None:
        return False
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    return True


@pytest.mark.e2e
@needs_cuda
@pytest.mark.skipif(not _nvml_works(), reason="needs nvidia-ml-py (perfgate[gpu]) and a working NVML")
def test_a_real_cuda_trials_record_carries_the_gpus_facts(tmp_path):
    (reference,) = resolve_references([f"{TINY}:tiny"])
    trial = RunningTrial(
        TrialSpec(reference.text, reference.target, "fp32", 0, "cuda", 1), tmp_path, 300.0, TrialPlace()
    )
    record = trial.wait()
    assert record.result.ok, record.result.failure
    system = record.result.system
    assert system is not None and system.gpu is not None and system.gpu.name.strip()
    assert system.gpu.name == torch.cuda.get_device_name(0) or torch.cuda.get_device_name(0) in system.gpu.name
    document = json.loads(trial.out_path.read_text(encoding="utf-8"))
    assert document["result"]["system"]["gpu"]["name"] == system.gpu.name
