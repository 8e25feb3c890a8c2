"""Saved files read back: tests/data/results-v2.json (as `perfgate run --json` writes it) and
tests/data/baselines/mlp.yaml (as `perfgate update` writes it), the verdict they give together and its reports.

tests/data/make_data.py wrote both with perfgate's own writers from fixed, synthetic trials: workload `mlp` on
one made-up machine, fp32 20% slower than its baseline, bf16 unchanged with one trial killed. No trial runs here.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.app.judging import judge, read_run
from perfgate.check.stored import compare_saved
from perfgate.errors import ResultsError
from perfgate.judge.verdict import Status
from perfgate.project import ProjectConfig
from perfgate.records.baselines import BaselineStore, render_baseline
from perfgate.records.comparisons import SLOW_RATE
from perfgate.records.fingerprint import Fingerprint, fingerprint_key, machine_fingerprint
from perfgate.records.results import SCHEMA_PATH as SCHEMA
from perfgate.records.results import GateRecord, load_results, parse_results
from perfgate.records.shapes import ShapeError
from perfgate.records.verdicts import GateSettings, Look
from perfgate.report.markdown import MARKER, format_markdown
from perfgate.report.text import format_gate, format_run
from tests.helpers.cli import run_main
from tests.helpers.results import validate_results

DATA = Path(__file__).parent / "data"
RESULTS = DATA / "results-v2.json"
BASELINES = DATA / "baselines"
MACHINE = Fingerprint(
    device_type="cpu",
    device_name=None,
    device_count=1,
    cuda=None,
    torch="2.13.0+cpu",
    cpu_model="Test CPU",
    cpu_capability=None,  # the saved environment records none
    threads=2,
)
SETTINGS = GateSettings(first_n=3, max_n=3)
REGENERATE = "perfgate now writes this file differently; if that is meant, run python tests/data/make_data.py"


def test_the_saved_results_file_is_valid_and_reads_back_its_trials():
    document = json.loads(RESULTS.read_text(encoding="utf-8"))
    validate_results(document)
    assert document["schema_version"] == 2 and "gate" not in document and "against" not in document
    run = load_results(RESULTS)
    assert (run.perfgate_version, run.created_at) == ("0.1.0", "2026-11-22T10:00:00+00:00")
    assert run.environment.git is not None and run.environment.git.sha == "2" * 40
    assert machine_fingerprint(run.environment) == MACHINE
    (workload,) = run.workloads
    assert (workload.name, workload.reference) == ("mlp", "perf/mlp.py:mlp")
    assert workload.settings.batch_size == 8 and workload.settings.steps == 4
    assert list(workload.configs) == ["fp32", "bf16"]
    fp32, bf16 = workload.configs["fp32"], workload.configs["bf16"]
    assert [t.samples_per_sec for t in fp32.trials] == [800.0, 806.0, 795.0, 802.0]
    assert fp32.trials[0].step_s == [0.01] * 4 and fp32.trials[0].probe_steps_per_sec == [2000.0, 2004.0]
    assert fp32.summary is not None and fp32.summary.samples_per_sec.median == 801.0
    assert [t.status for t in bf16.trials] == ["ok", "ok", "ok", "ok", "failed"]
    assert bf16.trials[4].failure == "trial process was killed by SIGKILL"
    assert bf16.summary is not None and (bf16.summary.trials_ok, bf16.summary.trials_failed) == (4, 1)
    assert bf16.summary.peak_bytes == 30 << 20


def test_the_saved_results_file_round_trips(tmp_path):
    run = load_results(RESULTS)
    again = tmp_path / "again.json"
    run.write_json(again)
    assert load_results(again) == run
    written, saved = (json.loads(path.read_text(encoding="utf-8")) for path in (again, RESULTS))
    assert same_document(written, saved), REGENERATE


def same_document(a: object, b: object) -> bool:
    """Equal JSON, but for the last bits of figures computed again on reading (numpy's quantiles may differ in the
    last place between numpy versions); every key, string, count and null must match exactly."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and a == pytest.approx(b, rel=1e-12, abs=0)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_document(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_document(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def test_the_baseline_store_reads_the_saved_file():
    store = BaselineStore(BASELINES)
    entries = store.load("mlp")
    assert list(entries) == ["cpu Test CPU, 2 threads, torch 2.13.0+cpu"] == [fingerprint_key(MACHINE)]
    entry = store.find("mlp", MACHINE)
    assert entry is not None
    assert (entry.workload, entry.measured_at, entry.commit) == ("mlp", "2026-11-20T09:00:00+00:00", "1" * 40)
    assert entry.data_checksum == "sha256:" + "ab" * 32 and entry.settings.trials == 5
    assert list(entry.configs) == ["fp32", "bf16"]
    assert entry.configs["fp32"].samples_per_sec == [1000.0, 1012.0, 990.0, 1004.0, 996.0]
    assert entry.configs["fp32"].first_losses == [2.5, 2.375]
    assert entry.configs["fp32"].probe_steps_per_sec == [2002.0] * 5  # the probe's two rates a trial, combined
    assert entry.configs["bf16"].peak_bytes == [30 << 20] * 5
    assert store.find("mlp", replace(MACHINE, threads=4)) is None  # another machine type: no baseline
    assert store.load("other") == {}
    # Stable: writing what was read gives the same text back (an empty diff in review).
    assert render_baseline("mlp", entries.values()) == store.path_for("mlp").read_text(encoding="utf-8"), REGENERATE


def judged():
    return compare_saved(load_results(RESULTS), SETTINGS, store=BaselineStore(BASELINES))


def test_the_saved_run_against_the_saved_baseline_is_a_regression_of_fp32_alone():
    result = judged()
    assert result.exit_code == 1
    (workload,) = result.workloads
    assert workload.workload == "mlp" and workload.problem is None
    fp32, bf16 = workload.configs
    assert (fp32.config, fp32.status) == ("fp32", Status.REGRESSION)
    assert fp32.throughput is not None and fp32.throughput.ratio == pytest.approx(0.8004, abs=1e-4)
    assert (fp32.throughput.n_baseline, fp32.throughput.n_candidate) == (5, 4)
    assert fp32.throughput.ci_high < 0.95  # beyond the 5% threshold, whatever the noise
    assert fp32.machine is not None and fp32.machine.ratio == pytest.approx(1.0)  # the same machine, as fast
    assert fp32.reason == (
        "samples/s -20.0% (0.800x, 78.0% CI 0.795-0.806x, p=2.9e-10): a regression beyond the 5% threshold on time "
        "per sample (the whole interval lies below samples/s -4.8%; p < 0.0025)"  # Holm: 4 comparisons
    )
    assert (bf16.config, bf16.status, bf16.trials_failed) == ("bf16", Status.NO_CHANGE, 1)
    assert bf16.throughput is not None and bf16.throughput.n_candidate == 4
    assert bf16.reason.endswith(
        "no regression beyond the 5% threshold on time per sample (the interval stays above samples/s -4.8%) "
        "(1 trial failed and not counted)"
    )


def test_the_text_and_markdown_reports_of_the_saved_verdict():
    result = judged()
    text = format_gate(judge(result, diagnosed=False), command="perfgate check")
    rows = [" ".join(line.split()) for line in text.splitlines() if line.split()[:1] in (["fp32"], ["bf16"])]
    assert rows == [  # config, baseline s/s, current s/s, ratio, CI, p, machine, peak mem, trials, verdict
        "fp32 1,000.0 801.0 0.800x 0.795-0.806 2.9e-10 1.00x +0.0% 5+4 REGRESSION",
        "bf16 1,500.0 1,499.5 1.000x 0.996-1.004 0.5 1.00x +0.0% 5+4 no change",
    ]
    assert "(baseline measured 2026-11-20T09:00:00+00:00 at commit 1111111111; cpu Test CPU, 2 threads" in text
    assert text.rstrip().endswith("perfgate check: 1 regression (mlp fp32); 1 no change. Exit 1 (fail).")
    markdown = format_markdown(judge(result, diagnosed=False), details=RESULTS.name)
    assert markdown.startswith(MARKER + "\n### perfgate: fail\n\n1 regression (mlp fp32); 1 no change.\n")
    assert "Baseline measured 2026-11-20T09:00:00+00:00 at `1111111111`." in markdown
    table = [line for line in markdown.splitlines() if line.startswith("| fp32 ") or line.startswith("| bf16 ")]
    assert table == [
        "| fp32 | 1,000.0 | 801.0 | 0.800x (0.795-0.806) | 2.9e-10 | 1.00x | +0.0% | 0.7% | 2% | 5+4 "
        "| **regression** |",
        "| bf16 | 1,500.0 | 1,499.5 | 1.000x (0.996-1.004) | 0.5 | 1.00x | +0.0% | 0.5% | 1% | 5+4 | no change |",
    ]
    lab = format_run(read_run(load_results(RESULTS)))
    assert lab.startswith("mlp  (perf/mlp.py:mlp; batch 8, 4 timed steps after 1 warm-up, 5 trials, 2 threads, cpu)")
    assert "! bf16 trial 5 failed: trial process was killed by SIGKILL" in lab


def test_compare_and_report_read_the_saved_files_from_the_command_line(monkeypatch, capsys):
    """In the data folder, `baselines/` is the saved one: what `perfgate compare` and `report` read by default."""
    monkeypatch.chdir(DATA)
    compared = run_main(capsys, "compare", RESULTS.name)
    assert compared.returncode == 1, compared.stdout + compared.stderr
    assert "! fp32: samples/s -20.0% (0.800x, " in compared.stdout
    assert compared.stdout.rstrip().endswith("Exit 1 (fail).") and compared.stderr == ""
    assert compared.stdout.rstrip().splitlines()[-1].startswith("perfgate compare: 1 regression (mlp fp32)")


def test_report_shows_a_lab_run_as_the_labs_table_in_every_format(monkeypatch, capsys, tmp_path):
    """The saved file is a lab run (`perfgate run --json`): no check judged it, so `report` shows the lab's table,
    never "no comparable baseline"; `compare` is what judges it."""
    monkeypatch.chdir(DATA)
    text = run_main(capsys, "report", RESULTS.name)
    assert text.returncode == 0 and text.stderr == ""
    assert text.stdout == format_run(read_run(load_results(RESULTS)))
    markdown = run_main(
        capsys, "report", RESULTS.name, "--format", "markdown", "--report-json", str(tmp_path / "lab.json")
    )
    assert markdown.returncode == 0 and markdown.stderr == ""
    assert markdown.stdout.startswith(MARKER + "\n### perfgate run: the lab's table\n\n1 workload measured; no verdict")
    header = "| config | samples/s | step p50/p95/p99 ms | data | h2d | fwd | bwd | opt | peak mem | compile | trials |"
    assert header in markdown.stdout
    assert "| fp32 | 801.0 ±0.7% | 10.0/10.1/10.1 | 5% | 0% | 35% | 50% | 10% | 50.0 MiB | - | 4/4 |" in markdown.stdout
    assert "- **bf16 trial 5 failed: trial process was killed by SIGKILL**" in markdown.stdout
    assert "baseline" not in markdown.stdout.replace("against the baselines", "")
    document = json.loads((tmp_path / "lab.json").read_text())  # --json: what --format json prints
    assert document == json.loads(run_main(capsys, "report", RESULTS.name, "--format", "json").stdout)
    assert document["kind"] == "lab" and "exit_code" not in document
    (workload,) = document["workloads"]
    fp32, bf16 = workload["configs"]
    assert fp32["summary"]["samples_per_sec"]["median"] == 801.0 and bf16["summary"]["trials_failed"] == 1
    assert workload["failures"] == ["bf16 trial 5 failed: trial process was killed by SIGKILL"]
    chart = run_main(capsys, "report", RESULTS.name, "--png", str(tmp_path / "chart.png"))
    assert chart.returncode == 2 and not (tmp_path / "chart.png").exists()
    assert chart.stderr.startswith("error: --png charts a check's verdicts, and this is a lab run that no check")


# --- The typed records write back what they read (issue 32) -------------------------------------------------


def test_the_results_schema_names_the_micro_statuses_perfgate_has():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    statuses = schema["$defs"]["micro_benchmark"]["properties"]["status"]["enum"]
    assert statuses == [s.value for s in Status if s is not Status.ACCEPTED]


def test_the_typed_run_writes_back_the_saved_files_keys_in_their_order():
    saved = json.loads(RESULTS.read_text(encoding="utf-8"))
    again = json.loads(json.dumps(load_results(RESULTS).to_dict()))
    assert same_document(again, saved), REGENERATE
    assert list(again["environment"]) == list(saved["environment"])
    for part in ("device", "cpu", "git"):
        assert list(again["environment"][part]) == list(saved["environment"][part])
    assert list(again["workloads"][0]["settings"]) == list(saved["workloads"][0]["settings"])  # device first


def test_a_checks_gate_record_is_written_in_order_and_read_back_strictly(tmp_path):
    gate = SETTINGS.to_record(
        Path("baselines"),
        mode="stored baselines",
        looks={("mlp", "fp32"): Look(4, 3, True)},
        divisors={("mlp", "fp32"): (2.0, 1.0)},
    )
    path = tmp_path / "check.json"
    replace(load_results(RESULTS), gate=gate).write_json(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    validate_results(document)
    assert list(document["gate"]) == [
        "threshold",
        "alpha",
        "trials",
        "max_trials",
        "fail_on_inconclusive",
        "baseline_dir",
        "spending",
        "accepted",
        "mode",
        "looks",
        "divisors",
    ]
    assert document["gate"]["looks"] == {"mlp/fp32": [4, 3, True]}
    assert document["gate"]["divisors"] == {"mlp/fp32": [2.0, 1.0]}
    assert load_results(path).gate == gate
    older = {key: document["gate"][key] for key in list(document["gate"])[:6]}  # a file from before the rest
    (tmp_path / "older.json").write_text(json.dumps({**document, "gate": older}), encoding="utf-8")
    run = load_results(tmp_path / "older.json")
    assert run.gate is not None and run.gate.looks is None and run.gate.to_dict() == older
    (tmp_path / "unknown.json").write_text(json.dumps({**document, "gate": {**older, "budget": 1}}), encoding="utf-8")
    with pytest.raises(ResultsError, match="the gate record has the unknown field 'budget'"):
        load_results(tmp_path / "unknown.json")


def test_a_checks_slow_pair_rate_is_kept_in_its_gate_record_and_judges_the_file_again(tmp_path):
    calibrated = ProjectConfig(slow_pair_rate=0.02, slow_pair_rate_date=datetime.date(2026, 11, 28))
    gate = GateSettings.from_options(calibrated, trials=3, paired=True).to_record(Path("baselines"))
    path = tmp_path / "check.json"
    replace(load_results(RESULTS), gate=gate).write_json(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    validate_results(document)
    source = "measured by perfgate calibrate on 2026-11-28"
    assert (document["gate"]["slow_rate"], document["gate"]["slow_rate_source"]) == (0.02, source)
    saved = load_results(path).gate
    assert saved == gate
    # judged again where the project now says otherwise: as the check judged it
    now = ProjectConfig(slow_pair_rate=0.2)
    again = GateSettings.from_record(now, saved)
    assert (again.slow_rate, again.slow_rate_source) == (0.02, source)
    # a file from before the rate was recorded was judged at perfgate's default
    older = {key: value for key, value in document["gate"].items() if not key.startswith("slow_rate")}
    (tmp_path / "older.json").write_text(json.dumps({**document, "gate": older}), encoding="utf-8")
    before = load_results(tmp_path / "older.json").gate
    assert before is not None and before.to_dict() == older
    judged = GateSettings.from_record(now, before)
    assert (judged.slow_rate, judged.slow_rate_source) == (SLOW_RATE, "")
    bad = {**document, "gate": {**document["gate"], "slow_rate": 1.5}}
    (tmp_path / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ResultsError, match="gate.slow_rate: 1.5 is greater than or equal to the maximum of 1"):
        load_results(tmp_path / "bad.json")
    with pytest.raises(ShapeError, match="the gate record's slow_rate is 1.5, not a rate between 0 and 1"):
        GateRecord.from_dict(bad["gate"])  # read without the schema, as strictly


def test_an_unknown_environment_key_is_kept_and_an_unknown_settings_key_is_refused(tmp_path):
    document = json.loads(RESULTS.read_text(encoding="utf-8"))
    document["environment"]["kernel"] = "6.1.0"  # the environment is an open record: a newer perfgate may add
    document["environment"]["cpu"]["flags"] = ["avx2"]
    run = parse_results(json.dumps(document), source="r.json")
    assert run.environment.extra == {"kernel": "6.1.0"} and run.environment.cpu is not None
    assert run.environment.cpu.extra == {"flags": ["avx2"]}
    again = json.loads(json.dumps(run.to_dict()))
    assert list(again["environment"]) == list(document["environment"])
    assert again["environment"]["cpu"] == document["environment"]["cpu"]
    document["workloads"][0]["settings"]["speed"] = 1  # perfgate alone writes the settings: a stranger is refused
    with pytest.raises(ResultsError, match="a workload's settings has the unknown field 'speed'"):
        parse_results(json.dumps(document), source="r.json")
