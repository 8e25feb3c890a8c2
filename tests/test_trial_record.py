"""A trial's record: the trial process writes a `TrialRecord` (its `TrialResult` and what only the runner reads),
and the runner reads it strictly: a field it does not know, or one missing, is a one-line error naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path

import pytest

from perfgate.errors import PerfgateError, TrialRecordError
from perfgate.measure.lab import RunningTrial, TrialPlace
from perfgate.measure.trial import TrialSpec
from perfgate.records.results import FAILURE_KINDS, TrialRecord, TrialResult
from perfgate.records.shapes import AutocastCheck, OperatorRow, PeakMemory, Profile, UsageSpread
from perfgate.references import resolve_references

# Under pytest-xdist these run beside other tests: nothing here reads a verdict or a figure that load changes.
pytestmark = pytest.mark.shares_machine

TINY = Path(__file__).parent / "workloads" / "tiny.py"


def spec(function: str, config: str = "fp32") -> TrialSpec:
    (reference,) = resolve_references([f"{TINY}:{function}"])
    return TrialSpec(reference.text, reference.target, config, 0, "cpu", 1)


def ok_record() -> dict[str, object]:
    """What a trial process writes for a measured trial (the numbers made up), through JSON as it travels."""
    result = TrialResult(
        config="fp32",
        trial=0,
        status="ok",
        samples_per_sec=100.0,
        step_s=[0.08, 0.08],
        phases_s={"data_wait": [0.01, 0.01], "h2d": [0.0, 0.0], "forward": [0.03, 0.03]},
        process_s=2.5,
        memory=PeakMemory(kind="cpu-rss-above-setup", peak_bytes=10, reserved_bytes=None, setup_bytes=5),
    )
    document: dict[str, object] = json.loads(json.dumps(TrialRecord(result).to_dict()))
    return document


def refusal(document: object) -> str:
    """The one-line message a record is refused with."""
    with pytest.raises(TrialRecordError) as caught:
        TrialRecord.from_dict(document, source="trial record tiny-fp32-0.out.json")
    assert isinstance(caught.value, PerfgateError)
    line = caught.value.one_line()
    assert "\n" not in line
    return line


def test_a_well_formed_record_reads_back_as_the_record_written():
    document = ok_record()
    record = TrialRecord.from_dict(document, source="test")
    assert record.to_dict() == document
    assert record.result.ok and record.failure_kind is None
    # every field, but `distributed`, which only a data-parallel trial writes (tests/test_distributed.py), and
    # `data_wait_host_s`, which only a trial timed with CUDA events writes (tests/test_cuda_timing.py), and
    # `counts`, left out where the counting step failed (tests/test_counts.py)
    written_only_where_set = {"distributed", "data_wait_host_s", "counts"}
    assert list(document["result"]) == [f.name for f in fields(TrialResult) if f.name not in written_only_where_set]  # type: ignore[arg-type]


def test_a_misspelt_field_of_the_result_is_refused_naming_it():
    document = ok_record()
    result = document["result"]
    assert isinstance(result, dict)
    result["sampels_per_sec"] = result.pop("samples_per_sec")
    line = refusal(document)
    assert line.startswith(
        "a trial's result has the unknown field 'sampels_per_sec' and lacks the field 'samples_per_sec' "
        "(trial record tiny-fp32-0.out.json)"
    ), line


def test_a_missing_field_is_refused_naming_it():
    document = ok_record()
    result = document["result"]
    assert isinstance(result, dict)
    del result["process_s"]
    assert refusal(document).startswith("a trial's result lacks the field 'process_s' ")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "workload"}, "a trial's record has the unknown field 'kind'"),  # the old record's name
        ({"failure_kind": "workload"}, "a trial's record with status 'ok' has failure_kind 'workload', not none"),
    ],
)
def test_an_unknown_field_or_kind_of_the_record_itself_is_refused(change, message):
    document = ok_record()
    document.update(change)
    assert refusal(document).startswith(message)


def test_the_old_error_status_is_refused_one_vocabulary_ok_or_failed():
    document = ok_record()
    result = document["result"]
    assert isinstance(result, dict)
    result.update(status="error", failure="boom")
    document["failure_kind"] = "workload"
    assert refusal(document).startswith("a trial's result has status 'error'; a trial is 'ok' or 'failed'")


def test_a_record_that_is_not_an_object_is_refused():
    assert refusal([1, 2]).startswith("a trial's record is list, not a JSON object")


def test_a_failed_record_says_failed_with_its_kind():
    record = TrialRecord.failed("bf16", 3, "timed out after 1 s", "crash", process_s=1.0)
    assert record.result.status == "failed" and not record.result.ok
    assert record.result.failure == "timed out after 1 s" and record.failure_kind in FAILURE_KINDS
    assert TrialRecord.from_dict(json.loads(json.dumps(record.to_dict())), source="test") == record


def test_memory_autocast_system_and_profile_travel_as_the_objects_the_files_keep():
    document = ok_record()
    result = document["result"]
    assert isinstance(result, dict)
    result["autocast"] = {
        "active": True,
        "probe_dtype": "bfloat16",
        "bf16_layer_outputs": 3,
        "checked_layer_outputs": 4,
    }
    spread = {"mean": 40.0, "p95": 60.0}
    result["system"] = {
        "samples": 9,
        "cpu_percent": spread,
        "busiest_core_percent": spread,
        "process_cpu_percent": spread,
        "gpu_util_percent": None,
    }
    operators = [{"name": "aten::mm", "calls_per_step": 2.0, "self_cpu_s_per_step": 0.1, "self_device_s_per_step": 0}]
    document["profile"] = {"trace": "traces/w-fp32.trace.json", "top_operators": operators}
    record = TrialRecord.from_dict(document, source="test")
    assert record.result.memory == PeakMemory("cpu-rss-above-setup", 10, None, setup_bytes=5)
    assert record.result.autocast == AutocastCheck(True, "bfloat16", 3, 4)
    assert record.result.system is not None and record.result.system.cpu_percent == UsageSpread(40.0, 60.0)
    mm = OperatorRow("aten::mm", calls_per_step=2.0, self_cpu_s_per_step=0.1, self_device_s_per_step=0)
    assert record.profile == Profile(trace="traces/w-fp32.trace.json", top_operators=[mm])
    assert json.dumps(record.to_dict()) == json.dumps(document)  # the same keys, in the same order
    # a compiled config counts no layer outputs, a saved file may lack setup_bytes: both stay left out
    result["autocast"] = {"active": True, "probe_dtype": "bfloat16"}
    result["memory"] = {"kind": "cuda-max-allocated", "peak_bytes": 10, "reserved_bytes": 20}
    document["profile"] = {"failure": "timed out after 1 s"}
    assert json.dumps(TrialRecord.from_dict(document, source="test").to_dict()) == json.dumps(document)
    # the workers' CPU seconds travel where measured; a file written before lacks them
    result["system"] = {**result["system"], "loader_cpu_s": 0.5}
    record = TrialRecord.from_dict(document, source="test")
    assert record.result.system is not None and record.result.system.loader_cpu_s == 0.5
    assert json.dumps(record.to_dict()) == json.dumps(document)
    failed = TrialRecord.failed("bf16", 3, "timed out after 1 s", "crash").to_dict()
    assert failed["result"]["memory"] == {} and failed["result"]["system"] is None  # a trial that measured nothing


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "memory",
            {"kind": "cpu-rss-above-setup", "peak": 10, "reserved_bytes": None},
            "a trial's memory has the unknown field 'peak' and lacks the field 'peak_bytes'",
        ),
        (
            "autocast",
            {"active": True, "probe_dtype": "bfloat16", "bf16": 3},
            "a trial's autocast check has the unknown field 'bf16'",
        ),
        ("system", {"samples": 1}, "a trial's system summary lacks the fields 'busiest_core_percent', "),
        ("profile", {"trace": "t.json"}, "a profile lacks the field 'top_operators'"),
        (
            "profile",
            {"trace": "t.json", "top_operators": [{"name": "aten::mm", "self_cpu_s_per_step": 0.1}]},
            "a profile's top_operators[0] lacks the fields 'calls_per_step', 'self_device_s_per_step'",
        ),
        (
            "profile",
            {
                "trace": "t.json",
                "top_operators": [
                    {"name": "aten::mm", "calls_per_step": "2", "self_cpu_s_per_step": 0.1, "self_device_s_per_step": 0}
                ],
            },
            "a profile's top_operators[0] has calls_per_step '2', not a finite number",
        ),
    ],
)
def test_an_unknown_or_missing_key_inside_a_field_is_refused_naming_it(field, value, message):
    document = ok_record()
    result = document["result"]
    assert isinstance(result, dict)
    (document if field == "profile" else result)[field] = value
    line = refusal(document)
    assert line.startswith(message) and "(trial record tiny-fp32-0.out.json); the trial process" in line, line


@pytest.mark.e2e
def test_a_real_trials_record_round_trips_through_the_dataclass(tmp_path):
    trial = RunningTrial(spec("tiny"), tmp_path, 120.0, TrialPlace())
    record = trial.wait()
    document = json.loads(trial.out_path.read_text(encoding="utf-8"))
    # The runner adds what only it can measure: the trial process's wall time, start to record.
    assert document["result"]["wall_s"] is None and record.result.wall_s and record.result.wall_s > 0
    record = replace(record, result=replace(record.result, wall_s=None))
    assert TrialRecord.from_dict(document, source="test") == record
    assert record.to_dict() == document
    result = record.result
    assert result.status == "ok" and record.failure_kind is None and record.traceback is None
    assert result.config == "fp32" and result.trial == 0 and result.process_s and result.process_s > 0
    assert result.samples_per_sec > 0 and len(result.step_s) == 4 and len(result.first_losses) == 3
    assert set(result.phases_s) == {"data_wait", "h2d", "forward", "backward", "optimizer"}
    assert result.system is not None and set(result.system.to_dict()) == {
        "samples",
        "cpu_percent",
        "busiest_core_percent",
        "process_cpu_percent",
        "gpu_util_percent",
        "loader_cpu_s",  # the DataLoader workers' CPU: none here (num_workers 0), measured as 0
    }
    assert result.system.loader_cpu_s is not None and result.system.loader_cpu_s < 0.5
    assert result.workload is not None and result.workload["name"] == "tiny"
    assert result.to_dict() == document["result"]  # the results file keeps exactly these fields


@pytest.mark.e2e
def test_a_record_with_a_misspelt_field_stops_the_runner_in_one_line(tmp_path):
    trial = RunningTrial(spec("tiny"), tmp_path, 120.0, TrialPlace())
    assert trial.process.wait(timeout=120) == 0
    document = json.loads(trial.out_path.read_text(encoding="utf-8"))
    document["result"]["final_los"] = document["result"].pop("final_loss")
    trial.out_path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(TrialRecordError, match=r"^a trial's result has the unknown field 'final_los' .*\.out\.json\)"):
        trial.wait()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("function", "config", "kind", "failure"),
    [
        ("forward_raises", "fp32", "workload", "loss(model, batch) raised ValueError: shape mismatch in my loss"),
        ("oom_under_autocast", "bf16", "config", "out of device memory in loss(model, batch): CUDA out of memory."),
        ("crashes", "fp32", "crash", "trial process exited with code 3 without a result"),
    ],
)
def test_failed_trials_say_failed(tmp_path, function, config, kind, failure):
    trial = RunningTrial(spec(function, config), tmp_path, 120.0, TrialPlace())
    record = trial.wait()
    assert record.result.status == "failed" and not record.result.ok
    assert record.failure_kind == kind
    assert record.result.failure is not None and record.result.failure.startswith(failure), record.result.failure
    assert record.result.process_s is not None and record.result.samples_per_sec == 0.0
    if kind != "crash":  # the trial wrote its record: "failed" on disk too, with the cause's traceback
        document = json.loads(trial.out_path.read_text(encoding="utf-8"))
        assert document["result"]["status"] == "failed" and document["failure_kind"] == kind
        assert record.traceback is not None and "Traceback" in record.traceback


@pytest.mark.e2e
def test_the_earlier_entry_points_still_run_a_trial_and_write_the_annotations(tmp_path):
    """`python -m perfgate.trial` and `python -m perfgate.annotations`, which workflows may call, are aliases
    of `perfgate.measure.trial` and `perfgate.action`."""
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(asdict(spec("tiny"))), encoding="utf-8")
    out = tmp_path / "out.json"
    trial = subprocess.run(
        [sys.executable, "-m", "perfgate.trial", str(spec_path), str(out)], capture_output=True, text=True, timeout=300
    )
    assert trial.returncode == 0, trial.stderr
    record = TrialRecord.from_dict(json.loads(out.read_text(encoding="utf-8")), source=str(out))
    assert record.result.ok and record.result.samples_per_sec > 0
    annotations = subprocess.run(
        [sys.executable, "-m", "perfgate.annotations", "update", "0", str(tmp_path / "none.json"), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert annotations.returncode == 0, annotations.stderr
    assert annotations.stdout.strip() == "::notice title=perfgate::baselines written: review and commit them"
