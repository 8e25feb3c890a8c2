"""Diagnosis rules on measured-looking trials: each fires on its fault and stays quiet on a clean run."""

from __future__ import annotations

import dataclasses

import pytest

from perfgate.app.judging import judge
from perfgate.judge.diagnosis import COUNT_TOLERANCES, count_tolerances, diagnose
from perfgate.judge.verdict import Status, compare_run
from perfgate.project import REPORT, CountTolerances, DiagnosisThresholds
from perfgate.records.baselines import entry_from_workload
from perfgate.records.results import ConfigResult
from perfgate.records.shapes import SystemSummary, UsageSpread
from perfgate.records.verdicts import GateSettings
from perfgate.report.markdown import format_markdown
from perfgate.report.text import format_diagnoses
from tests.helpers.results import BASE_MS, BASELINE, BASELINE_RUN, STEPS, counts, phased_run, phased_trial, with_trials

SETTINGS = GateSettings(first_n=3, max_n=3)


def diagnosed(ms, *, every_config=False, **kwargs):
    result = compare_run(phased_run(ms, **kwargs), BASELINE, SETTINGS)
    return result, diagnose(result, every_config=every_config)


def test_a_slow_loader_is_the_data_pipeline_with_loader_hints():
    result, (d,) = diagnosed({**BASE_MS, "data_wait": 9.0})
    assert result.verdicts[0].status == Status.REGRESSION
    assert d.suspect == "data pipeline"
    (finding, *_) = d.findings
    assert finding.line == (
        "data pipeline: waiting for data explains 100% of the slower step (1% -> 45% of the step); "
        "look at the Dataset, its transforms and the DataLoader settings this change touched; "
        "measured at 2 torch threads, num_workers=0, 8 cores"
    )
    assert d.headline == "data pipeline (explains 100% of the slower step)"
    assert "data wait: 0.10 -> 9.00 ms per step" in finding.evidence[0]
    assert any(e.startswith("num_workers=0: batches are loaded in the training process") for e in finding.evidence)


def test_heavier_forward_and_backward_are_model_compute():
    _, (d,) = diagnosed({**BASE_MS, "forward": 8.0, "backward": 12.0})
    assert d.suspect == "model compute"
    assert d.findings[0].line == (
        "model compute: backward and forward + loss explain 100% of the slower step; "
        "look at the model code this change touched"
    )


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
    text = format_markdown(judge(result, diagnoses=diagnoses))
    assert "#### Diagnosis: w fp32\n\nSuspect: **data pipeline**" in text
    assert "| data_wait | 0.10 | 9.00 | +8.90 | 100% |" in text


def test_memory_rising_step_over_step_is_memory_growth():
    rising = [(50 << 20) + (1 << 20) * i for i in range(STEPS)]
    _, (d,) = diagnosed(BASE_MS, every_config=True, memory=rising)
    assert d.suspect == "memory"
    assert d.findings[0].line == "memory growth: memory in use rose 1.0 MiB per step, 19.0 MiB over 20 timed steps"


def test_memory_growth_leads_even_when_the_step_is_slower_for_its_pressure_slows_it():
    rising = [(50 << 20) + (1 << 20) * i for i in range(STEPS)]
    result, (d,) = diagnosed({**BASE_MS, "forward": 6.0}, memory=rising)
    assert result.verdicts[0].slower
    assert [f.suspect for f in d.findings][:2] == ["memory", "model compute"]
    assert d.headline == "memory"


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
    return SystemSummary(
        samples=40,
        cpu_percent=None,
        busiest_core_percent=UsageSpread(mean=core_p95 - 5, p95=core_p95),
        process_cpu_percent=None,
        gpu_util_percent=UsageSpread(mean=gpu_mean, p95=gpu_p95),
    )


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
    result = compare_run(phased_run({**BASE_MS, "data_wait": 9.0}), BASELINE, GateSettings(project, first_n=3, max_n=3))
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


def scaled_phases(run, factors):
    """The same run with each trial's phases scaled by its factor: steps that scatter from trial to trial."""
    (workload,) = run.workloads
    trials = [
        dataclasses.replace(t, phases_s={p: [v * f for v in values] for p, values in t.phases_s.items()})
        for t, f in zip(workload.configs["fp32"].trials, factors, strict=True)
    ]
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])


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
    # 600 more calls while the machine had a bad hour: the steps scatter +-40% and average 18 ms slower, which
    # would be 30 us a call, but two standard errors under that growth is no growth: dispatch-sized calls still.
    noisy = counted({**BASE_MS, "forward": 22.0}, torch_calls_per_step=800, host_syncs_per_step=2)
    d = diagnosed_against(before, scaled_phases(noisy, (0.6, 1.0, 1.4)))
    assert [f.suspect for f in d.findings][:1] == ["framework overhead"], d.findings


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


def test_data_wait_grown_with_changed_loader_settings_is_the_data_pipeline_only_when_the_step_is_slower():
    baseline_run = phased_run(BASE_MS, loader={"num_workers": 2})
    # Data wait 0.1 -> 2.0 ms of a step 17% slower, with num_workers 2 -> 0: the data pipeline.
    slower = diagnosed_against(baseline_run, phased_run({**BASE_MS, "data_wait": 2.0}, loader={"num_workers": 0}))
    assert slower.suspect == "data pipeline"
    assert "the DataLoader's settings changed: num_workers 2 -> 0" in slower.findings[0].evidence
    # The same wait in a step no slower (fewer workers can be faster on two busy cores): worth a line, no
    # suspect, for no data-pipeline regression happened.
    moved = {**BASE_MS, "data_wait": 2.0, "forward": 2.1}
    changed = diagnosed_against(baseline_run, phased_run(moved, loader={"num_workers": 0}))
    assert changed.suspect is None
    (finding,) = changed.findings
    assert finding.standing and finding.line.endswith("(the step is not measurably slower)")
    assert "the DataLoader's settings changed: num_workers 2 -> 0" in finding.evidence
    same = diagnosed_against(baseline_run, phased_run(moved, loader={"num_workers": 2}))
    assert "data pipeline" not in [f.suspect for f in same.findings]
    # Changed settings with no more waiting for data (the step no slower): still named, never the suspect.
    unmoved = diagnosed_against(baseline_run, phased_run(BASE_MS, loader={"num_workers": 0}))
    assert unmoved.suspect is None
    (finding,) = unmoved.findings
    assert finding.standing and "the DataLoader's settings changed: num_workers 2 -> 0" in finding.evidence
    # ... and in a step slower by its compute, named beside the compute suspect, not as one.
    computed = diagnosed_against(baseline_run, phased_run({**BASE_MS, "forward": 30.0}, loader={"num_workers": 0}))
    assert computed.suspect == "model compute"
    pipeline = next(f for f in computed.findings if f.suspect == "data pipeline")
    assert pipeline.standing and pipeline.line.endswith("(waiting for data did not grow with the changed settings)")
    assert "the DataLoader's settings changed: num_workers 2 -> 0" in pipeline.evidence


def scattered(run, factors=(0.5, 1.15, 0.7)):
    """The same trials with their samples/s scattered (a machine too noisy for a samples/s verdict), their
    phases unchanged."""
    (workload,) = run.workloads
    trials = [
        dataclasses.replace(t, samples_per_sec=BASELINE["w"].configs["fp32"].samples_per_sec[0] * f)
        for t, f in zip(workload.configs["fp32"].trials, factors, strict=True)
    ]
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])


def with_peak(run, peak_bytes):
    (workload,) = run.workloads
    trials = [
        dataclasses.replace(t, memory=dataclasses.replace(t.memory, peak_bytes=peak_bytes))
        for t in workload.configs["fp32"].trials
    ]
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])


def test_a_compute_slowdown_that_also_grows_memory_names_compute_first_whichever_verdict_is_decided():
    # The case: forward +7 ms and backward +12.8 ms a step, peak memory 50 -> 80 MiB.
    slower = with_peak(phased_run({**BASE_MS, "forward": 11.0, "backward": 18.8}), 80 << 20)
    for run, early in ((slower, False), (scattered(slower), True)):
        result = compare_run(run, BASELINE, SETTINGS)
        (verdict,) = result.verdicts
        assert verdict.memory.verdict == "regression" and verdict.status == Status.REGRESSION
        assert verdict.slower is not early  # samples/s decided, or still open on a noisy machine
        (d,) = diagnose(result)
        assert d.early is early
        assert [f.suspect for f in d.findings] == ["model compute", "memory"]
        assert d.headline.startswith("model compute (explains 100% of the slower step)")
        assert d.findings[1].line == "peak memory regression: 50.0 MiB -> 80.0 MiB (+30.0 MiB)"


def test_a_pure_memory_regression_names_memory():
    result = compare_run(with_peak(phased_run(BASE_MS), 80 << 20), BASELINE, SETTINGS)
    assert result.verdicts[0].status == Status.REGRESSION and not result.verdicts[0].slower
    (d,) = diagnose(result)
    assert d.suspect == "memory" and not d.early
    assert d.headline == "memory"
    assert d.findings[0].line == "peak memory regression: 50.0 MiB -> 80.0 MiB (+30.0 MiB)"


def test_one_slow_step_in_a_clean_run_is_not_a_finding_but_a_tail_in_every_trial_is():
    trials = [phased_trial(i, BASE_MS, tail_ms=400.0 if i == 0 else 0.0, jitter=0.01) for i in range(3)]
    (workload,) = BASELINE_RUN.workloads
    one_slow = dataclasses.replace(
        BASELINE_RUN, workloads=[dataclasses.replace(workload, configs={"fp32": ConfigResult("fp32", trials)})]
    )
    (d,) = diagnose(compare_run(one_slow, BASELINE, SETTINGS), every_config=True)
    assert d.findings == () and d.suspect is None
    _, (d,) = diagnosed(BASE_MS, every_config=True, tail_ms=400.0)  # the same slow step in every trial
    assert [f.suspect for f in d.findings] == ["tail latency"]


def test_early_evidence_is_shown_while_samples_per_sec_is_open_and_the_build_does_not_fail():
    result = compare_run(scattered(phased_run({**BASE_MS, "data_wait": 9.0})), BASELINE, SETTINGS)
    assert result.verdicts[0].status == Status.INCONCLUSIVE and result.exit_code == 0
    (d,) = diagnose(result)  # diagnosed without --diagnose: the evidence is that strong
    assert d.early and d.suspect == "data pipeline"
    text = format_diagnoses([d])
    assert "suspect data pipeline (explains 100% of the slower step); early evidence: the samples/s verdict is " in text
    assert "| data_wait | 0.10 | 9.00 | +8.90 | 100% |" in format_markdown(judge(result, diagnoses=[d]))
    # The same scatter without a phase that moved: no evidence, no diagnosis.
    quiet = compare_run(scattered(phased_run(BASE_MS)), BASELINE, SETTINGS)
    assert quiet.verdicts[0].status == Status.INCONCLUSIVE and diagnose(quiet) == []


def with_workers(run, loader_ms, cores=2):
    """`run` on a machine of `cores` cores whose DataLoader workers used `loader_ms` of CPU per step in every
    trial (the system sampler's `loader_cpu_s`)."""
    (workload,) = run.workloads
    system = SystemSummary(
        samples=10, cpu_percent=None, busiest_core_percent=None, process_cpu_percent=None, gpu_util_percent=None
    )
    trials = [
        dataclasses.replace(t, system=dataclasses.replace(system, loader_cpu_s=loader_ms / 1000 * STEPS * (1 + i / 50)))
        for i, t in enumerate(workload.configs["fp32"].trials)
    ]
    cpu = run.environment.cpu
    assert cpu is not None
    environment = dataclasses.replace(run.environment, cpu=dataclasses.replace(cpu, available_cores=cores))
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(run, environment=environment, workloads=[dataclasses.replace(workload, configs=configs)])


def test_workers_that_take_the_cores_the_step_needs_are_the_data_pipeline_and_unchanged_workers_leave_compute():
    # A heavier augmentation: the workers keep up (data wait unchanged) but use 4 -> 14 ms of CPU per step on two
    # cores, and forward and backward grow 6 ms together: about 5 ms of it is the workers' (10 ms over 2 cores).
    workers = {"num_workers": 2}
    baseline_run = with_workers(phased_run(BASE_MS, loader=workers), loader_ms=4.0)
    grown = {**BASE_MS, "forward": 6.5, "backward": 9.5}
    d = diagnosed_against(baseline_run, with_workers(phased_run(grown, loader=workers), loader_ms=14.0))
    assert d.suspect == "data pipeline"
    assert d.contention_s == pytest.approx(0.005, rel=0.05)
    assert d.headline == "data pipeline (explains 85% of the slower step)"
    assert d.findings[0].line.startswith(
        "data pipeline: waiting for data and the DataLoader workers' added CPU work explain 85% of the slower step "
        "(waiting 1% -> 1% of the step; the workers take about 5.10 ms a step of the cores the training step needs)"
    )
    assert "the DataLoader workers' CPU: 4.08 -> 14.28 ms per step on 2 cores" in d.findings[0].evidence
    assert "model compute" not in [f.suspect for f in d.findings]  # a sixth of the growth is left to it
    assert d.to_dict()["contention_s"] == pytest.approx(0.005, rel=0.05)
    # The same growth with the workers' CPU unchanged: the model's compute, and no data-pipeline finding.
    same_workers = diagnosed_against(baseline_run, with_workers(phased_run(grown, loader=workers), loader_ms=4.0))
    assert same_workers.suspect == "model compute" and same_workers.contention_s == 0.0
    assert same_workers.headline == "model compute (explains 100% of the slower step)"
    assert "data pipeline" not in [f.suspect for f in same_workers.findings]
    # On a machine of many cores the same added worker CPU takes little from the step: compute stays the suspect.
    many = with_workers(phased_run(BASE_MS, loader=workers), loader_ms=4.0, cores=64)
    d = diagnosed_against(many, with_workers(phased_run(grown, loader=workers), loader_ms=14.0, cores=64))
    assert d.suspect == "model compute"


def test_with_every_count_unchanged_the_workers_added_cpu_can_explain_all_the_compute_growth():
    # As measured on two cores (docs/performance.md): token masking in the Dataset added 25 ms of the workers' CPU a
    # step, and forward grew 30 ms with data wait unchanged. Shared fairly over the 2 cores that would be 12.5 ms,
    # 42% of the growth, and the runtime or the machine was named; but the model does the same work, and torch's
    # intra-op threads wait for each other, so the workers' added CPU is counted whole: the data pipeline.
    workers = {"num_workers": 1}
    base_ms = {**BASE_MS, "forward": 58.0, "backward": 32.0, "optimizer": 4.0}
    baseline_run = with_trials(with_workers(phased_run(base_ms, loader=workers), loader_ms=5.0), counts=counts())
    masked = with_trials(
        with_workers(phased_run({**base_ms, "forward": 88.0}, loader=workers), loader_ms=30.0), counts=counts()
    )
    d = diagnosed_against(baseline_run, masked)
    assert d.suspect == "data pipeline"
    assert d.contention_s == pytest.approx(0.0255, rel=0.05)  # the workers' added CPU: 30.6 - 5.1 ms
    assert d.findings[0].line.startswith("data pipeline: waiting for data and the DataLoader workers' added CPU work ")
    assert "runtime or machine" not in [f.suspect for f in d.findings]
    assert d.findings[0].evidence[-1].startswith("every count of the step is unchanged: ")
    # The same growth with the workers' CPU unchanged: the runtime or the machine, as before.
    unchanged = with_trials(
        with_workers(phased_run({**base_ms, "forward": 88.0}, loader=workers), loader_ms=5.0), counts=counts()
    )
    assert diagnosed_against(baseline_run, unchanged).suspect == "runtime or machine"
    # Without counts (the model may have changed) the fair share stays the estimate: 12.75 ms of 30.
    plain = diagnosed_against(
        with_workers(phased_run(base_ms, loader=workers), loader_ms=5.0),
        with_workers(phased_run({**base_ms, "forward": 88.0}, loader=workers), loader_ms=30.0),
    )
    assert plain.contention_s == pytest.approx(0.01275, rel=0.05) and plain.suspect == "model compute"


def test_behind_a_failing_memory_verdict_a_step_slower_beyond_two_standard_errors_puts_compute_first():
    # Forward and backward 3 ms a step slower (27%) in trials scattered +-10%: about 3.7 standard errors, short
    # of the 4 that early evidence needs, while peak memory 50 -> 80 MiB fails the build.
    noisy = scaled_phases(
        with_peak(phased_run({**BASE_MS, "forward": 5.5, "backward": 7.5}), 80 << 20), (0.9, 1.0, 1.1)
    )
    result = compare_run(scattered(noisy), BASELINE, SETTINGS)
    (verdict,) = result.verdicts
    assert verdict.status == Status.REGRESSION and not verdict.slower  # on memory; samples/s still open
    (d,) = diagnose(result)
    assert [f.suspect for f in d.findings] == ["model compute", "memory"] and d.early
    # Without the memory verdict the same step is no early evidence on its own: nothing is shown.
    alone = compare_run(
        scattered(dataclasses.replace(noisy, workloads=[with_peak(noisy, 50 << 20).workloads[0]])), BASELINE, SETTINGS
    )
    assert alone.verdicts[0].status == Status.INCONCLUSIVE and diagnose(alone) == []


def test_workers_cpu_far_beyond_its_noise_is_early_evidence_while_the_step_is_too_noisy_to_tell():
    # A heavy augmentation on two cores: the trials' steps scatter +-40%, so the step's growth is no evidence on
    # its own, but the workers' CPU went from 4 to 40 ms a step in every trial.
    workers = {"num_workers": 2}
    baseline_run = with_workers(phased_run(BASE_MS, loader=workers), loader_ms=4.0)
    noisy = scaled_phases(phased_run({**BASE_MS, "forward": 8.0, "backward": 10.0}, loader=workers), (0.6, 1.0, 1.4))
    baseline = {"w": entry_from_workload(baseline_run, baseline_run.workloads[0])}
    result = compare_run(scattered(with_workers(noisy, loader_ms=40.0)), baseline, SETTINGS)
    assert result.verdicts[0].status == Status.INCONCLUSIVE and result.exit_code == 0
    (d,) = diagnose(result)
    assert d.early and d.suspect == "data pipeline"
    # The same scattered steps with the workers' CPU unchanged: no evidence, no diagnosis.
    quiet = compare_run(scattered(with_workers(noisy, loader_ms=4.0)), baseline, SETTINGS)
    assert quiet.verdicts[0].status == Status.INCONCLUSIVE and diagnose(quiet) == []


def test_against_a_stored_baseline_a_part_must_move_beyond_the_sessions_noise_to_be_early_evidence():
    """A clean run can be slower for a whole session than its stored baseline's session (the suite once saw
    backward 21.9 -> 26.8 ms a step on unchanged code): early evidence against a stored baseline must clear
    `session_noise` as well as the trials' spread. Far beyond it (backward 6 -> 12 ms) it still is evidence."""
    session = scattered(phased_run({**BASE_MS, "backward": 7.7}))  # the step 15% longer, trials alike
    result = compare_run(session, BASELINE, SETTINGS)
    assert result.verdicts[0].status == Status.INCONCLUSIVE
    assert diagnose(result) == []  # within a session's 10% at 4 sigmas: no suspect
    (d,) = diagnose(result, thresholds=DiagnosisThresholds(session_noise=0.0))  # the trials' spread alone
    assert d.early and d.suspect == "model compute"
    doubled = compare_run(scattered(phased_run({**BASE_MS, "backward": 12.0})), BASELINE, SETTINGS)
    (d,) = diagnose(doubled)
    assert d.early and d.suspect == "model compute"


def test_the_diagnosis_reads_the_counts_with_the_projects_tolerances():
    """`[tool.perfgate.counts]` decides when a count moved, for the diagnosis as for the gate; a count the project
    only reports keeps the gate's default tolerance."""
    tolerances = count_tolerances(CountTolerances(flops_per_sample=0.5, operators_per_step=REPORT))
    assert tolerances["flops_per_sample"] == 0.5
    assert tolerances["operators_per_step"] == 0.05 and tolerances["kernels_per_step"] == 0.05
    assert count_tolerances(CountTolerances()) == COUNT_TOLERANCES


def in_rounds(run, rounds):
    """The same run with every trial timing its slice `rounds` times over: `rounds` times the steps, the same work
    and time per step (a paired check calibrates its rounds per config: `perfgate.measure.rounds`)."""
    (workload,) = run.workloads

    def repeated(t):
        system = t.system
        if system is not None and system.loader_cpu_s is not None:
            system = dataclasses.replace(system, loader_cpu_s=system.loader_cpu_s * rounds)
        return dataclasses.replace(
            t,
            rounds=rounds,
            step_s=t.step_s * rounds,
            phases_s={p: values * rounds for p, values in t.phases_s.items()},
            memory_step_bytes=t.memory_step_bytes * rounds,
            system=system,
        )

    configs = {"fp32": ConfigResult("fp32", [repeated(t) for t in workload.configs["fp32"].trials])}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])


@pytest.mark.parametrize(("base_rounds", "head_rounds"), [(14, 1), (1, 14), (3, 5)])
def test_a_side_of_many_rounds_reads_the_same_time_per_step_as_a_side_of_one(base_rounds, head_rounds):
    # A base calibrated to 14 rounds once read 14x slower per phase than its head ("forward 133.99 -> 11.29 ms per
    # step"): the same work a step must read the same per step, whatever the rounds each side ran.
    workers = {"num_workers": 2}
    base = in_rounds(with_workers(phased_run(BASE_MS, loader=workers), loader_ms=4.0), base_rounds)
    same = in_rounds(with_workers(phased_run(BASE_MS, loader=workers), loader_ms=4.0), head_rounds)
    d = diagnosed_against(base, same)
    for p in d.phases:
        assert p.baseline_s == pytest.approx(BASE_MS[p.phase] / 1000, rel=0.01), p
        assert p.baseline_s == pytest.approx(p.current_s, rel=0.01), p
    assert d.loader_cpu is not None
    assert d.loader_cpu.before_s == pytest.approx(0.004, rel=0.03)
    assert abs(d.loader_cpu.change_s) < 0.03 * d.loader_cpu.before_s
    # A heavier forward reads as such, in the report's words, against the base's own time per step.
    heavier = in_rounds(
        with_workers(phased_run({**BASE_MS, "forward": 8.0}, loader=workers), loader_ms=4.0), head_rounds
    )
    d = diagnosed_against(base, heavier)
    assert d.suspect == "model compute"
    assert "forward + loss: 4.00 -> 8.00 ms per step" in format_diagnoses([d])


def on_a_card(run, host_ms, loader=None):
    """`run` as a trial timed with CUDA events records it: data_wait the device's idle wait for the batch, and the
    host's own wait in next(batches) kept apart, `host_ms` a step."""
    (workload,) = run.workloads
    trials = [
        dataclasses.replace(t, clocking="cuda-events", data_wait_host_s=[host_ms / 1000] * len(t.step_s))
        for t in workload.configs["fp32"].trials
    ]
    settings = dataclasses.replace(workload.settings, device="cuda", loader=loader or workload.settings.loader)
    workload = dataclasses.replace(workload, settings=settings, configs={"fp32": ConfigResult("fp32", trials)})
    return dataclasses.replace(run, workloads=[workload])


def test_on_a_card_the_hosts_wait_and_the_devices_idle_wait_together_tell_a_starved_loader_from_a_slow_host():
    loader = {"num_workers": 8, "pin_memory": True}
    before = on_a_card(phased_run(BASE_MS, loader=loader), host_ms=0.1)
    baseline = {"w": entry_from_workload(before, before.workloads[0])}
    assert [t.data_wait_host_s for t in baseline["w"].configs["fp32"].trials] == [pytest.approx(0.1 / 1000 * STEPS)] * 3
    # num_workers 8 -> 0: the host waits 9 ms for each batch, and the device waits 8.9 ms of it: a starved loader.
    starved = on_a_card(
        phased_run({**BASE_MS, "data_wait": 8.9}), host_ms=9.0, loader={"num_workers": 0, "pin_memory": True}
    )
    (d,) = diagnose(compare_run(starved, baseline, SETTINGS), every_config=True)
    assert d.suspect == "data pipeline"
    assert d.findings[0].line.startswith("data pipeline: waiting for data explains 100% of the slower step")
    assert "the host's wait for each batch: 0.10 -> 9.00 ms per step, 8.90 ms of it with the device idle" in (
        d.findings[0].evidence
    )
    assert "the DataLoader's settings changed: num_workers 8 -> 0" in d.findings[0].evidence
    # The device idles as long, but the host had its batch at once: the host's own work between steps, not the loader.
    host_bound = on_a_card(phased_run({**BASE_MS, "data_wait": 8.9}, loader=loader), host_ms=0.1)
    (d,) = diagnose(compare_run(host_bound, baseline, SETTINGS), every_config=True)
    assert d.suspect == "CPU bottleneck"
    (finding,) = [f for f in d.findings if f.suspect in ("CPU bottleneck", "data pipeline")]
    assert finding.line == (
        "CPU bottleneck: the device idles 8.90 ms a step waiting for the host, which waits only 0.10 ms for its "
        "batch: the host's own work between steps (Python, kernel launches, copies to the host), not the "
        "DataLoader, keeps the device waiting"
    )
    assert finding.evidence == (
        "data wait: 0.10 -> 8.90 ms per step",
        "host-to-device copy: 0.05 -> 0.05 ms per step",
        "the host's wait for each batch: 0.10 -> 0.10 ms per step, 0.10 ms of it with the device idle",
    )  # the DataLoader's hints are not for this
    # The host waits 5 ms a step for its batch but the device never idles for it: named, no suspect, the step no slower.
    hidden = on_a_card(phased_run(BASE_MS, loader=loader), host_ms=5.0)
    (d,) = diagnose(compare_run(hidden, baseline, SETTINGS), every_config=True)
    assert d.suspect is None
    (finding,) = d.findings
    assert finding.standing and finding.line == (
        "data pipeline: the host waits 5.00 ms a step for its batch (45% of the step), hidden behind the device's "
        "queued work (the device idles 0.10 ms a step): no cost yet, but a slower loader or a faster step will show it"
    )
    # On the host clock (the CPU) the host's wait is the data wait phase itself: none of this is said.
    (d,) = diagnose(compare_run(phased_run(BASE_MS), BASELINE, SETTINGS), every_config=True)
    assert d.findings == ()


def test_against_a_stored_baseline_the_workers_cpu_alone_is_no_early_evidence():
    # As read in a clean check against a baseline stored minutes before (docs/performance.md): the workers' CPU
    # 7.17 -> 14.00 ms a step with the same code, the compute phases 6% slower, samples/s open. Across sessions the
    # workers' CPU can double by itself, so nothing is suspected; the same figures within one session are evidence.
    workers = {"num_workers": 2}
    base_ms = {**BASE_MS, "forward": 20.0, "backward": 16.0}
    baseline_run = with_workers(phased_run(base_ms, loader=workers), loader_ms=7.0)
    clean = scattered(with_workers(phased_run({**base_ms, "forward": 22.3}, loader=workers), loader_ms=14.0))
    baseline = {"w": entry_from_workload(baseline_run, baseline_run.workloads[0])}
    stored = compare_run(clean, baseline, SETTINGS)
    assert stored.verdicts[0].status == Status.INCONCLUSIVE
    assert diagnose(stored) == []
    (same_session,) = diagnose(stored, thresholds=dataclasses.replace(DiagnosisThresholds(), session_noise=0.0))
    assert same_session.early and same_session.suspect == "data pipeline"
