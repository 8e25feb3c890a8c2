"""Diagnosis rules on measured-looking trials: each fires on its fault and stays quiet on a clean run."""

from __future__ import annotations

import dataclasses

from perfgate.judge.diagnosis import diagnose
from perfgate.judge.settings import GateSettings
from perfgate.judge.verdict import Status, compare_run
from perfgate.records.baselines import entry_from_workload
from perfgate.records.results import ConfigResult
from perfgate.report.markdown import format_markdown
from perfgate.report.text import format_diagnoses
from tests.helpers.results import BASE_MS, BASELINE, STEPS, phased_run

SETTINGS = GateSettings(trials=3, max_trials=3)


def diagnosed(ms, *, every_config=False, **kwargs):
    result = compare_run(phased_run(ms, **kwargs), BASELINE, SETTINGS)
    return result, diagnose(result, every_config=every_config)


def test_a_slow_loader_is_the_data_pipeline_with_loader_hints():
    result, (d,) = diagnosed({**BASE_MS, "data_wait": 9.0})
    assert result.verdicts[0].status == Status.REGRESSION
    assert d.suspect == "data pipeline"
    (finding, *_) = d.findings
    assert finding.line == "data pipeline: waiting for data takes 1% -> 45% of the step"
    assert "data wait: 0.10 -> 9.00 ms per step" in finding.evidence[0]
    assert "explains 100% of the slower step" in finding.evidence
    assert any(e.startswith("num_workers=0: batches are loaded in the training process") for e in finding.evidence)


def test_heavier_forward_and_backward_are_model_compute():
    _, (d,) = diagnosed({**BASE_MS, "forward": 8.0, "backward": 12.0})
    assert d.suspect == "model compute"
    assert d.findings[0].line.startswith("model compute: backward grew most; compute phases explain 100%")


def test_a_long_tail_of_steps_is_reported():
    _, (d,) = diagnosed({**BASE_MS, "forward": 6.0}, tail_ms=400.0)
    assert "tail latency" in [f.suspect for f in d.findings]


def test_a_clean_run_names_no_suspect_and_regressions_only_are_diagnosed_by_default():
    result, diagnoses = diagnosed(BASE_MS)
    assert result.verdicts[0].status != Status.REGRESSION and diagnoses == []
    _, (d,) = diagnosed(BASE_MS, every_config=True)
    assert d.suspect is None and d.findings == ()
    assert "suspect none (no rule fired)" in format_diagnoses([d])


def test_a_standing_data_wait_is_reported_even_without_a_regression():
    heavy = {**BASE_MS, "data_wait": 4.0}
    baseline_run = phased_run(heavy, loader={"num_workers": 2})
    baseline = {"w": entry_from_workload(baseline_run, baseline_run.workloads[0])}
    result = compare_run(phased_run(heavy, loader={"num_workers": 2}), baseline, SETTINGS)
    (d,) = diagnose(result, every_config=True)
    (finding,) = d.findings
    assert finding.standing and finding.line.endswith("(so did the baseline's)")
    assert d.suspect is None  # true of the baseline too: it explains no change
    assert not any("num_workers=0" in e for e in finding.evidence)


def test_the_diagnosis_is_in_the_markdown_report():
    result, diagnoses = diagnosed({**BASE_MS, "data_wait": 9.0})
    text = format_markdown(result, diagnoses=diagnoses)
    assert "#### Diagnosis: w fp32\n\nSuspect: **data pipeline**" in text
    assert "| data_wait | 0.10 | 9.00 | +8.90 | 100% |" in text


def test_memory_rising_step_over_step_is_memory_growth():
    rising = [(50 << 20) + (1 << 20) * i for i in range(STEPS)]
    _, (d,) = diagnosed(BASE_MS, every_config=True, memory=rising)
    assert d.suspect == "memory"
    assert d.findings[0].line == "memory growth: memory in use rose 1.0 MiB per step, 19.0 MiB over 20 timed steps"


def test_a_slow_steady_rise_like_perfgates_own_bookkeeping_is_not_memory_growth():
    creeping = [(50 << 20) + 1024 * i for i in range(STEPS)]  # 1 KiB per step, perfectly steady
    _, (d,) = diagnosed(BASE_MS, every_config=True, memory=creeping)
    assert "memory" not in [f.suspect for f in d.findings]
    at_threshold = [(50 << 20) + 8 * 1024 * i for i in range(STEPS)]
    _, (d,) = diagnosed(BASE_MS, every_config=True, memory=at_threshold)
    assert d.suspect == "memory"


def test_a_one_off_allocation_is_not_memory_growth():
    jump = [(50 << 20) if i < 10 else (80 << 20) for i in range(STEPS)]  # one 30 MiB allocation mid-way
    _, (d,) = diagnosed(BASE_MS, every_config=True, memory=jump)
    assert "memory" not in [f.suspect for f in d.findings]


def system(gpu_mean, gpu_p95, core_p95):
    return {
        "samples": 40,
        "gpu_util_percent": {"mean": gpu_mean, "p95": gpu_p95},
        "busiest_core_percent": {"mean": core_p95 - 5, "p95": core_p95},
    }


def test_an_idle_gpu_beside_a_busy_core_is_a_cpu_bottleneck_and_a_busy_gpu_is_quiet():
    _, (d,) = diagnosed(BASE_MS, every_config=True, system=system(4, 9, 99))
    assert d.suspect == "CPU bottleneck"
    _, (d,) = diagnosed(BASE_MS, every_config=True, system=system(45, 60, 50))
    assert d.suspect == "low accelerator utilisation" and "GPU utilisation p95 60%" in d.findings[0].line
    _, (d,) = diagnosed(BASE_MS, every_config=True, system=system(92, 98, 60))
    assert d.suspect is None


def test_thresholds_come_from_the_project_and_bad_keys_are_refused(tmp_path):
    import pytest

    from perfgate.errors import UsageError
    from perfgate.project import load_project_config

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate.diagnosis]\ndata_wait_share = 0.99\nexplains = 1.01\n")
    project = load_project_config(tmp_path)
    result = compare_run(
        phased_run({**BASE_MS, "data_wait": 9.0}), BASELINE, GateSettings(project, trials=3, max_trials=3)
    )
    (d,) = diagnose(result)
    assert "data pipeline" not in [f.suspect for f in d.findings]
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate.diagnosis]\ndata_wait_shares = 0.3\n")
    with pytest.raises(UsageError, match="unknown rule threshold 'data_wait_shares'.*did you mean 'data_wait_share'"):
        load_project_config(tmp_path)


def counted(ms, **fields):
    """A run whose trials also carry call counts or compile times."""
    base = phased_run(ms)
    (workload,) = base.workloads
    trials = [dataclasses.replace(t, **fields) for t in workload.configs["fp32"].trials]
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(base, workloads=[dataclasses.replace(workload, configs=configs)])


def diagnosed_against(baseline_run, current_run):
    baseline = {"w": entry_from_workload(baseline_run, baseline_run.workloads[0])}
    (d,) = diagnose(compare_run(current_run, baseline, SETTINGS), every_config=True)
    return d


def test_many_more_cheap_torch_calls_are_framework_overhead_and_costly_ones_are_not():
    before = counted(BASE_MS, torch_calls_per_step=200, host_syncs_per_step=2)
    # 600 more calls costing 1.2 ms in all (2 us each): dispatch-sized.
    d = diagnosed_against(before, counted({**BASE_MS, "forward": 5.2}, torch_calls_per_step=800, host_syncs_per_step=2))
    assert d.suspect == "framework overhead"
    assert d.findings[0].line == "framework overhead: a step calls 800 torch functions, 4.0x the baseline's 200"
    assert "each added call costs 2.0 us, dispatch-sized, not compute" in d.findings[0].evidence[0]
    # The same calls costing 10 ms more (17 us each is under the 20 us bound; 60 ms is not): compute.
    d = diagnosed_against(
        before, counted({**BASE_MS, "forward": 64.0}, torch_calls_per_step=800, host_syncs_per_step=2)
    )
    assert "framework overhead" not in [f.suspect for f in d.findings]
    # The same count as the baseline: quiet.
    assert diagnosed_against(before, before).findings == ()


def test_a_new_host_sync_per_step_is_framework_overhead():
    before = counted(BASE_MS, torch_calls_per_step=200, host_syncs_per_step=2)
    d = diagnosed_against(before, counted(BASE_MS, torch_calls_per_step=201, host_syncs_per_step=3))
    assert d.suspect == "framework overhead"
    assert d.findings[0].line == "framework overhead: 3 host syncs per step, the baseline 2"
    assert ".item(), .cpu(), .tolist() and float(tensor)" in d.findings[0].evidence[0]
    fewer = diagnosed_against(before, counted(BASE_MS, torch_calls_per_step=199, host_syncs_per_step=1))
    assert fewer.findings == ()


def test_the_attribution_shares_out_the_change_and_shows_compile_time():
    before = counted(BASE_MS, compile_s=20.0)
    d = diagnosed_against(before, counted({**BASE_MS, "forward": 7.0, "backward": 7.0}, compile_s=26.0))
    shares = {p.phase: d.share(p) for p in d.phases}
    assert round(shares["forward"], 2) == 0.75 and round(shares["backward"], 2) == 0.25
    assert d.compile_s == (20.0, 26.0)
    text = format_diagnoses([d])
    assert "compile: 20.0 -> 26.0 s (once per process, outside the step times)" in text
    table = [row.split() for row in text.splitlines() if row.strip().startswith(("forward ", "backward "))]
    assert [row[-1] for row in table if "per" not in row] == ["75%", "25%"]
    as_data = d.to_dict()
    assert as_data["compile_s"] == {"baseline": 20.0, "current": 26.0}
    assert [round(p["share"], 2) for p in as_data["phases"] if p["phase"] in ("forward", "backward")] == [0.75, 0.25]
    same = diagnosed_against(before, before)  # no change: nothing to share out
    assert all(same.share(p) is None for p in same.phases)


def test_data_wait_grown_with_changed_loader_settings_is_the_data_pipeline_and_quiet_without():
    # Data wait 0.1 -> 2.0 ms of an unchanged step (15%: under the 20% share, no slowdown to explain).
    moved = {**BASE_MS, "data_wait": 2.0, "forward": 2.1}
    baseline_run = phased_run(BASE_MS, loader={"num_workers": 2})
    changed = diagnosed_against(baseline_run, phased_run(moved, loader={"num_workers": 0}))
    assert changed.suspect == "data pipeline"
    assert "the DataLoader's settings changed: num_workers 2 -> 0" in changed.findings[0].evidence
    same = diagnosed_against(baseline_run, phased_run(moved, loader={"num_workers": 2}))
    assert "data pipeline" not in [f.suspect for f in same.findings]
