"""The results file: atomic writes, no NaN in JSON, and the schema."""

from __future__ import annotations

import dataclasses
import json

import pytest

from perfgate.errors import ResultsError
from perfgate.records.results import (
    ConfigResult,
    MicroResult,
    MicroSection,
    RunResult,
    TrialResult,
    WorkloadResult,
    WorkloadSettings,
    parse_results,
    write_text_atomic,
)
from perfgate.records.shapes import Environment, PeakMemory
from tests.helpers.results import micro_regression, validate_results


def _trial(trial: int, samples_per_sec: float) -> TrialResult:
    return TrialResult(
        config="fp32",
        trial=trial,
        status="ok",
        samples_per_sec=samples_per_sec,
        step_s=[0.1, 0.1],
        phases_s={p: [0.02, 0.02] for p in ("data_wait", "h2d", "forward", "backward", "optimizer")},
        first_losses=[1.0],
        final_loss=float("nan"),
        data_checksum="sha256:" + "0" * 64,
        memory=PeakMemory(kind="cpu-rss-above-setup", peak_bytes=10, reserved_bytes=None, setup_bytes=5),
        threads=1,
    )


def _run() -> RunResult:
    failed = TrialResult(config="fp32", trial=2, status="failed", failure="timed out after 1 s")
    workload = WorkloadResult(
        name="w",
        reference="w.py:w",
        settings=WorkloadSettings.from_dict(
            {
                "batch_size": 4,
                "steps": 2,
                "warmup_steps": 1,
                "seed": 0,
                "trials": 3,
                "threads": 1,
                "device": "cpu",
                "loader": {},
            }
        ),
        data_checksum="sha256:" + "0" * 64,
        first_losses={"fp32": [1.0]},
        configs={"fp32": ConfigResult("fp32", [_trial(0, 10.0), _trial(1, 12.0), failed])},
    )
    environment = {
        "python": "3.11",
        "platform": "linux",
        "torch": "2",
        "cuda": None,
        "cudnn": None,
        "device": {"type": "cpu", "name": "cpu", "count": 1, "driver": None},
        "cpu": {"model": "cpu", "logical_cores": 2, "available_cores": 2},
        "threads": 1,
        "git": None,
    }
    return RunResult("0.1.0", "2026-11-22T00:00:00+00:00", Environment.from_dict(environment), [workload])


def test_written_results_validate_and_keep_raw_trials(tmp_path):
    path = tmp_path / "out" / "results.json"
    _run().write_json(path)
    document = json.loads(path.read_text())
    validate_results(document)
    config = document["workloads"][0]["configs"]["fp32"]
    assert [t["samples_per_sec"] for t in config["trials"][:2]] == [10.0, 12.0]
    assert config["summary"]["samples_per_sec"]["median"] == 11.0
    assert config["summary"]["trials_failed"] == 1
    assert config["trials"][0]["final_loss"] is None  # NaN is not JSON


def test_schema_rejects_an_unknown_version(tmp_path):
    import jsonschema

    document = _run().to_dict()
    document["schema_version"] = 3
    with pytest.raises(jsonschema.ValidationError):
        validate_results(document)


def _written(tmp_path) -> dict:
    _run().write_json(tmp_path / "results.json")
    return json.loads((tmp_path / "results.json").read_text())


def test_a_results_file_of_schema_version_1_is_still_read(tmp_path):
    document = _written(tmp_path)
    document["schema_version"] = 1
    run = parse_results(json.dumps(document), source="old.json")
    assert run.against is None
    assert [w.name for w in run.workloads] == [w.name for w in _run().workloads]


def test_a_file_read_back_is_written_again_byte_for_byte_and_an_unknown_key_inside_a_trial_is_refused(tmp_path):
    document = _written(tmp_path)
    trials = document["workloads"][0]["configs"]["fp32"]["trials"]
    del trials[1]["memory"]["setup_bytes"]  # an older file's memory: left out when written again
    trials[1]["autocast"] = {"active": True, "probe_dtype": "bfloat16"}
    document["workloads"][0]["profiles"] = {"fp32": {"failure": "timed out after 1 s"}}
    text = json.dumps(document, indent=2) + "\n"
    parse_results(text, source="r.json").write_json(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == text
    trials[0]["memory"]["peak"] = 1
    with pytest.raises(ResultsError) as raised:
        parse_results(json.dumps(document), source="r.json")
    assert raised.value.one_line() == (
        "r.json is not a valid results file: a trial's memory has the unknown field 'peak'; "
        "give a results file written by perfgate --json"
    )


def test_a_paired_section_is_refused_in_a_schema_version_1_file(tmp_path):
    document = _written(tmp_path)
    document["schema_version"] = 1
    document["against"] = {"ref": "main"}
    with pytest.raises(ResultsError, match="against"):
        parse_results(json.dumps(document), source="old.json")


def test_ctrl_c_during_a_write_leaves_the_old_file_and_no_debris(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text("old")

    def interrupted(fd: int) -> None:  # the new text is written but not yet renamed into place
        raise KeyboardInterrupt

    monkeypatch.setattr("perfgate._files.os.fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(path, "new" * 1000)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ResultsError, match="cannot write"):
        write_text_atomic(blocker / "results.json", "{}")


def _micro() -> MicroSection:
    return MicroSection(
        mode="stored baselines (baselines/pytest-benchmark.yaml)",
        paired=False,
        benchmarks=[
            micro_regression("calls/s -75.0% (0.250x, ...): a regression beyond the 5% threshold on time per call"),
            MicroResult(name="test_micro.py::test_new", status="no baseline", reason="no baseline", rounds=12),
        ],
    )


def test_the_pytest_benchmark_verdicts_are_an_optional_section_read_back_as_written(tmp_path):
    path = tmp_path / "results.json"
    dataclasses.replace(_run(), micro=_micro()).write_json(path)
    document = json.loads(path.read_text())
    validate_results(document)
    assert document["schema_version"] == 2  # an optional section: files without it read as before
    assert document["micro"]["benchmarks"][1]["ratio"] is None
    again = parse_results(path.read_text(), source="results.json")
    assert again.micro == _micro()
    assert parse_results(json.dumps(_written(tmp_path)), source="r.json").micro is None  # a file without it


def test_a_pytest_benchmark_section_is_read_strictly(tmp_path):
    path = tmp_path / "results.json"
    dataclasses.replace(_run(), micro=_micro()).write_json(path)
    unknown_key = json.loads(path.read_text())
    unknown_key["micro"]["benchmarks"][0]["speed"] = 1.0
    with pytest.raises(ResultsError, match=r"micro\.benchmarks\[0\]"):
        parse_results(json.dumps(unknown_key), source="r.json")
    unknown_status = json.loads(path.read_text())
    unknown_status["micro"]["benchmarks"][0]["status"] = "slower"
    with pytest.raises(ResultsError, match="slower"):
        parse_results(json.dumps(unknown_status), source="r.json")
    version_1 = json.loads(path.read_text())
    version_1["schema_version"] = 1  # version 1 files never had it
    with pytest.raises(ResultsError, match="micro"):
        parse_results(json.dumps(version_1), source="old.json")
