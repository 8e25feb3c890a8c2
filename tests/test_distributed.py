"""Data-parallel trials (`--nproc`): the job's record from its ranks, the all-reduce's timing, the per-rank
table, the baseline's ranks, the rules that name communication, a load imbalance or a straggler, and models
holding parameters their loss does not use.

The rules' tests build the ranks' records by hand and merge them with the code a trial uses
(`distributed.merge_ranks`); the end-to-end tests run real 2-rank jobs under torchrun with gloo on the
test workload tests/workloads/ranks.py, with faults planted on rank 1.
"""

from __future__ import annotations

import dataclasses
import json
import statistics

import psutil
import pytest
import torch

from perfgate.app.judging import judge, read_run
from perfgate.errors import UsageError, WorkloadError
from perfgate.judge.diagnosis import diagnose
from perfgate.judge.verdict import compare_run
from perfgate.measure import distributed
from perfgate.measure.device import Device
from perfgate.records.baselines import entry_from_workload, entry_to_dict, parse_baseline, render_baseline
from perfgate.records.results import ConfigResult, TrialRecord, TrialResult
from perfgate.records.shapes import Distributed, PeakMemory, RankResult, UnusedParameters
from perfgate.records.summary import PHASES
from perfgate.records.verdicts import GateSettings
from perfgate.report.markdown import format_markdown
from perfgate.report.text import format_diagnoses, format_run
from perfgate.workload import Workload
from tests.helpers.cli import run_in_process, run_main
from tests.helpers.results import BASE_MS, STEPS, phased_run, validate_results
from tests.helpers.workloads import WORKLOADS

SETTINGS = GateSettings(first_n=3, max_n=3)


def rank_record(rank, ms, comm_ms=None, *, trial=0, peak=50 << 20, jitter=0.01):
    """Rank `rank`'s record and figures: `ms` per phase a step; `comm_ms` (in flight, waited[, MiB]) a step."""
    wobble = [1 + jitter * ((i + trial + rank) % 3 - 1) for i in range(STEPS)]
    phases = {p: [ms[p] / 1000 * w for w in wobble] for p in PHASES}
    step_s = [sum(phases[p][i] for p in PHASES) for i in range(STEPS)]
    result = TrialResult(
        config="fp32",
        trial=trial,
        status="ok",
        samples_per_sec=8 * STEPS / sum(step_s),
        step_s=step_s,
        phases_s=phases,
        first_losses=[1.0 + rank],
        data_checksum=f"sha256:{rank}",
        memory=PeakMemory(kind="cpu-rss-above-setup", peak_bytes=peak, reserved_bytes=None),
        memory_step_bytes=[peak] * STEPS,
    )
    record = TrialRecord(result)
    mib = comm_ms[2] if comm_ms is not None and len(comm_ms) > 2 else 4
    comm = None if comm_ms is None else [(comm_ms[0] / 1000 * w, comm_ms[1] / 1000 * w, 1, mib << 20) for w in wobble]
    return record, distributed.rank_result(record, distributed.Rank(rank, 2, rank, "gloo"), comm)


def job(rank_ms, comm_ms, trial=0):
    """One data-parallel trial of two ranks: per rank, ms per phase and (in flight, waited) ms of the all-reduce."""
    pairs = [rank_record(r, ms, comm, trial=trial) for r, (ms, comm) in enumerate(zip(rank_ms, comm_ms, strict=True))]
    return distributed.merge_ranks([p[0] for p in pairs], [p[1] for p in pairs], "gloo", "DistributedDataParallel")


def ranked_run(rank_ms, comm_ms):
    """`phased_run`'s workload `w`, its three fp32 trials data-parallel jobs of two ranks."""
    run = phased_run(BASE_MS)
    (workload,) = run.workloads
    trials = [job(rank_ms, comm_ms, trial=i).result for i in range(3)]
    settings = dataclasses.replace(workload.settings, nproc=2)
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, settings=settings, configs=configs)])


def diagnosed(baseline_run, current_run):
    baseline = {"w": entry_from_workload(baseline_run, baseline_run.workloads[0])}
    (d,) = diagnose(compare_run(current_run, baseline, SETTINGS), every_config=True)
    return d


def plus(ms, **extra):
    return {p: ms[p] + extra.get(p, 0.0) for p in PHASES}


# Two even ranks, each backward holding 2 ms of all-reduce it waited for.
BALANCED = ([BASE_MS, BASE_MS], [(2.0, 2.0), (2.0, 2.0)])
BASE = ranked_run(*BALANCED)


def test_the_jobs_record_is_all_ranks_samples_over_the_slowest_ranks_time():
    # Rank 1 loads slowly (10 ms more data wait); rank 0 waits for it in the all-reduce (10 ms more backward).
    slow_data, waiting = plus(BASE_MS, data_wait=10.0), plus(BASE_MS, backward=10.0)
    (r0, f0), (r1, f1) = rank_record(0, waiting, (12.0, 12.0), peak=40 << 20), rank_record(1, slow_data, (2.0, 2.0))
    merged = distributed.merge_ranks([r0, r1], [f0, f1], "gloo", "DistributedDataParallel").result
    times = [sum(r0.result.step_s), sum(r1.result.step_s)]
    assert merged.samples_per_sec == pytest.approx(2 * 8 * STEPS / max(times))
    # The pace is rank 1's: the most time outside the wait; rank 0's extra backward was waiting.
    assert merged.phases_s == r1.result.phases_s and merged.step_s == r1.result.step_s
    assert merged.memory.peak_bytes == 50 << 20  # the largest rank's
    assert merged.first_losses == [1.0]  # rank 0's
    assert merged.data_checksum not in ("sha256:0", "sha256:1") and merged.data_checksum.startswith("sha256:")
    assert [r.rank for r in merged.distributed.ranks] == [0, 1]
    assert merged.distributed.ranks[0].comm_exposed_s[0] == pytest.approx(0.012, rel=0.02)
    # The record round-trips through the trial's JSON and the results file's schema.
    assert TrialResult.from_dict(json.loads(json.dumps(merged.to_dict()))) == merged
    from perfgate.measure.environment import collect_environment

    document = json.loads(json.dumps(dataclasses.replace(BASE, environment=collect_environment("cpu", 2)).to_dict()))
    document["workloads"][0]["data_checksum"] = "sha256:" + "0" * 64
    for t in document["workloads"][0]["configs"]["fp32"]["trials"]:
        t["data_checksum"] = "sha256:" + "0" * 64
    validate_results(document)
    # A one-process trial's record has no `distributed` key at all: files written before read the same.
    assert "distributed" not in phased_run(BASE_MS).workloads[0].configs["fp32"].trials[0].to_dict()


def test_a_rank_result_with_a_misspelt_field_is_refused_in_one_line():
    (_, figures) = rank_record(0, BASE_MS, (1.0, 1.0))
    document = {**figures.to_dict(), "comm": 1.0}
    del document["comm_s"]
    with pytest.raises(ValueError, match="a rank's result has the unknown field 'comm' and lacks the field 'comm_s'"):
        RankResult.from_dict(document)


def test_the_baseline_keeps_each_ranks_totals_and_reads_them_back():
    entry = entry_from_workload(BASE, BASE.workloads[0])
    (stored,) = parse_baseline(render_baseline("w", [entry]), source="w.yaml").values()
    ranks = stored.configs["fp32"].trials[0].ranks
    assert [sorted(r) for r in ranks] == [sorted([*PHASES, "step", "comm", "comm_exposed", "comm_bytes"])] * 2
    assert ranks[1]["comm"] == pytest.approx(2.0 / 1000 * STEPS, rel=0.01)
    assert "ranks" in entry_to_dict(entry)["configs"]["fp32"]["trials"][0]
    one = entry_from_workload(phased_run(BASE_MS), phased_run(BASE_MS).workloads[0])
    assert "ranks" not in entry_to_dict(one)["configs"]["fp32"]["trials"][0]  # one process: as before


def test_intervals_in_flight_are_counted_once_where_they_overlap():
    assert distributed._union_length([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)
    assert distributed._union_length([]) == 0.0


@pytest.fixture
def gloo_group(tmp_path):
    """A real process group of one rank (gloo) in this process, for DDP."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def wrapped_in_buckets_of_one_mib(model):
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, bucket_cap_mb=1)


def test_a_workloads_own_wrap_replaces_ddp_and_a_model_that_is_not_ddp_is_trained_untimed(gloo_group):
    linear = torch.nn.Linear(4, 4)
    common = {"name": "w", "model": lambda: linear, "dataset": list, "loss": lambda m, b: None, "batch_size": 1}
    own = Workload(**common, wrap=wrapped_in_buckets_of_one_mib)
    wrapped = distributed.wrap_model(linear, own, Device())
    assert type(wrapped).__name__ == "DistributedDataParallel" and wrapped.bucket_bytes_cap == 1024 * 1024
    assert distributed.CommTimer(Device()).attach(wrapped) is None  # the user's DDP is timed too
    plain = Workload(**common)
    assert type(distributed.wrap_model(torch.nn.Linear(4, 4), plain, Device())).__name__ == "DistributedDataParallel"
    fsdp_like = Workload(**common, wrap=lambda m: m)
    kept = distributed.wrap_model(linear, fsdp_like, Device())
    assert kept is linear
    reason = distributed.CommTimer(Device()).attach(kept)
    assert reason == "the gradient all-reduce is not timed: the model is a Linear, not DistributedDataParallel"
    with pytest.raises(WorkloadError, match="wrap must be a callable"):
        Workload(**common, wrap=3)


def test_the_timed_hook_reduces_gradients_as_ddp_does_and_times_each_bucket(gloo_group):
    """A real one-rank gloo group in this process: DDP with perfgate's hook gives the gradients plain DDP
    gives, and the timer sees every bucket of the step."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 4))
    twin = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 4))
    twin.load_state_dict(model.state_dict())
    timed, plain = DistributedDataParallel(model), DistributedDataParallel(twin)
    timer = distributed.CommTimer(Device())
    assert timer.attach(timed) is None
    assert "not timed" in timer.attach(timed)  # a second hook: DDP refuses, the reason is kept
    assert "not DistributedDataParallel" in distributed.CommTimer(Device()).attach(model)
    x = torch.randn(8, 64)
    for _ in range(2):  # DDP rebuilds its buckets after the first step
        for p in [*model.parameters(), *twin.parameters()]:
            p.grad = None
        timer.begin_step()
        timed(x).square().mean().backward()
        in_flight, waited, buckets, nbytes = timer.end_step(backward_s=1.0)
        plain(x).square().mean().backward()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad)
    assert buckets >= 1 and 0 < waited <= in_flight < 1.0
    assert nbytes == 4 * sum(p.numel() for p in model.parameters())  # every gradient, in float32


def test_a_grown_all_reduce_is_communication_ahead_of_the_backward_it_lengthens():
    # Twice the gradient: the all-reduce 2 -> 6 ms in flight on both ranks, backward 4 ms longer waiting for it.
    slower = ranked_run([plus(BASE_MS, backward=4.0)] * 2, [(6.0, 6.0, 8), (6.0, 6.0, 8)])
    d = diagnosed(BASE, slower)
    assert d.suspect == "communication", format_diagnoses([d])
    text = format_diagnoses([d])
    assert "communication: the gradient all-reduce is in flight 2.0 -> 6.0 ms a step" in text
    assert "explains 100% of the slower step" in text
    assert "backward waits for it after its last bucket: 2.0 -> 6.0 ms a step" in text
    assert "the gradient all-reduced: 4.0 -> 8.0 MiB a step" in text
    assert "model compute" not in text.split("phase ")[0]  # the longer backward is the wait, not the model
    # The same longer backward with the all-reduce unchanged is the model's compute.
    compute = diagnosed(BASE, ranked_run([plus(BASE_MS, backward=4.0)] * 2, BALANCED[1]))
    assert compute.suspect == "model compute" and "communication" not in format_diagnoses([compute])


def ranked_in_rounds(run, rounds):
    """`ranked_run`'s jobs timing their slice `rounds` times over: each rank's steps repeated, the same per step."""
    (workload,) = run.workloads

    def repeated(rank):
        return dataclasses.replace(
            rank,
            step_s=rank.step_s * rounds,
            phases_s={p: values * rounds for p, values in rank.phases_s.items()},
            comm_s=None if rank.comm_s is None else rank.comm_s * rounds,
            comm_exposed_s=None if rank.comm_exposed_s is None else rank.comm_exposed_s * rounds,
        )

    trials = [
        dataclasses.replace(
            t,
            rounds=rounds,
            step_s=t.step_s * rounds,
            phases_s={p: values * rounds for p, values in t.phases_s.items()},
            distributed=dataclasses.replace(t.distributed, ranks=[repeated(r) for r in t.distributed.ranks]),
        )
        for t in workload.configs["fp32"].trials
    ]
    configs = {"fp32": ConfigResult("fp32", trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])


def test_a_base_of_many_rounds_reads_each_ranks_all_reduce_per_step_as_a_head_of_one():
    # The base's ranks keep totals over every round's steps: per step they are the head's unit, not rounds times it.
    slower = ranked_run([plus(BASE_MS, backward=4.0)] * 2, [(6.0, 6.0, 8), (6.0, 6.0, 8)])
    d = diagnosed(ranked_in_rounds(BASE, 5), slower)
    text = format_diagnoses([d])
    assert d.suspect == "communication", text
    assert "communication: the gradient all-reduce is in flight 2.0 -> 6.0 ms a step" in text
    assert "backward waits for it after its last bucket: 2.0 -> 6.0 ms a step" in text
    assert "the gradient all-reduced: 4.0 -> 8.0 MiB a step" in text
    assert diagnosed(ranked_in_rounds(BASE, 5), BASE).findings == ()


def test_one_ranks_slow_loader_is_a_load_imbalance_naming_the_rank_and_the_phase():
    # Rank 1's data wait +10 ms a step; rank 0 waits for it in the all-reduce (its in-flight time grows).
    imbalanced = ranked_run([plus(BASE_MS, backward=10.0), plus(BASE_MS, data_wait=10.0)], [(12.0, 12.0), (2.0, 2.0)])
    d = diagnosed(BASE, imbalanced)
    text = format_diagnoses([d])
    assert d.suspect == "load imbalance", text
    assert "load imbalance: rank 1's data wait is 10.0 ms a step longer than the other ranks'" in text
    assert "the others wait 12.0 ms a step in the all-reduce" in text
    assert "communication" not in text  # rank 1's all-reduce, the transfer itself, did not grow


def test_a_rank_slow_in_every_phase_is_a_straggler_and_even_ranks_are_neither():
    late = plus(BASE_MS, data_wait=3.0, forward=3.0, optimizer=3.0)
    straggling = ranked_run([plus(BASE_MS, backward=9.0), late], [(11.0, 11.0), (2.0, 2.0)])
    text = format_diagnoses([d := diagnosed(BASE, straggling)])
    assert d.suspect == "straggler", text
    assert "straggler: rank 1 reaches the all-reduce " in text and "in no one phase" in text
    assert "rank 1's lead by phase, ms a step: data wait +3.0, forward + loss +3.0, optimizer +3.0" in text
    # Both ranks 9 ms slower alike: the model, on every rank; no rank leads.
    even = diagnosed(BASE, ranked_run([plus(BASE_MS, forward=9.0)] * 2, BALANCED[1]))
    assert even.suspect == "model compute"
    assert not any(f.suspect in ("load imbalance", "straggler") for f in even.findings)


def test_the_report_shows_each_rank(tmp_path):
    text = format_run(read_run(BASE))
    assert "fp32: 2 ranks (gloo, DistributedDataParallel), per rank, ms per timed step:" in text
    assert "rank  samples/s  step p50 ms  data ms  h2d ms  fwd ms  bwd ms  opt ms  all-reduce ms  waited ms" in text
    assert "batch 8, 20 timed steps after 1 warm-up, 3 trials, 2 threads, cpu, 2 ranks)" in text
    markdown = format_markdown(
        judge(compare_run(BASE, {"w": entry_from_workload(BASE, BASE.workloads[0])}, SETTINGS), diagnosed=False)
    )
    assert "<details><summary>w fp32: 2 ranks (gloo)</summary>" in markdown
    assert "| 1 | 717.5 | 11.2 | 0.1 | 0.1 | 4.0 | 6.0 | 1.0 | 2.0 | 2.0 | 50.0 MiB |" in markdown


def test_a_bad_nproc_is_refused_in_one_line(capsys, tmp_path):
    with pytest.raises(WorkloadError, match="nproc must be an integer >= 1 or None, got 0"):
        Workload(name="w", model=lambda: None, dataset=list, loss=lambda m, b: None, batch_size=1, nproc=0)
    result = run_main(capsys, "run", "lm", "--nproc", "0")
    assert result.returncode == 2
    assert result.stderr == (
        "error: argument --nproc: must be at least 1, got 0; give a count such as 3; see 'perfgate run --help'\n"
    )
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\nnproc = 0\n", encoding="utf-8")
    from perfgate.project import load_project_config

    with pytest.raises(UsageError, match="nproc must be a whole number of at least 1, got 0"):
        load_project_config(tmp_path)


# -- real 2-rank jobs -----------------------------------------------------------------------------------

WIDE = f"{WORKLOADS / 'ranks.py'}:wide"
QUICK = ("--configs", "fp32", "--threads", "1", "--quiet")


def no_process_mentions(text):
    """No process left whose command line names `text` (a trial's scratch folder or spec)."""
    left = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(text in part for part in process.info["cmdline"] or []):
                left.append(process.pid)
        except psutil.Error:
            continue
    return left


@pytest.fixture(scope="module")
def ranked_baseline(tmp_path_factory):
    """A project folder whose baselines/ holds `wide` run as two ranks (2 trials), and that run's results."""
    folder = tmp_path_factory.mktemp("ranks")
    results = folder / "base.json"
    update = run_in_process(
        "update", WIDE, *QUICK, "--trials", "2", "--json", str(results), "--allow-dirty", cwd=folder
    )
    assert update.returncode == 0, update.stdout + update.stderr
    return folder, update, json.loads(results.read_text(encoding="utf-8"))


@pytest.mark.e2e
def test_a_two_rank_run_reports_each_rank_and_keeps_them_in_the_results(ranked_baseline):
    _, update, document = ranked_baseline
    assert "fp32: 2 ranks (gloo, DistributedDataParallel), per rank, ms per timed step:" in update.stdout
    (workload,) = document["workloads"]
    assert workload["settings"]["nproc"] == 2
    for trial in workload["configs"]["fp32"]["trials"]:
        ranks = trial["distributed"]["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert ranks[0]["data_checksum"] != ranks[1]["data_checksum"]  # each rank its own share of the slice
        assert all(r["buckets"] >= 1 and len(r["comm_s"]) == len(r["step_s"]) for r in ranks)
        assert trial["samples_per_sec"] == pytest.approx(
            sum(r["samples_per_sec"] * sum(r["step_s"]) for r in ranks) / max(sum(r["step_s"]) for r in ranks)
        )
    # Every trial's ranks read the same shares: the job's checksum is the same in each.
    assert workload["data_checksum"] is not None


def check_with(folder, plant, *args):
    results = folder / f"{plant}.json"
    result = run_in_process(
        "check", WIDE, *QUICK, *args, "--json", str(results), cwd=folder, env={"PERFGATE_TEST_PLANT": plant}
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result, json.loads(results.read_text(encoding="utf-8"))


def comm_figures(document):
    """Per trial: the all-reduce's time in flight a step on the rank that waited least (the transfer itself), and
    the gradient bytes it carried a step."""
    trials = document["workloads"][0]["configs"]["fp32"]["trials"]
    ranks = [t["distributed"]["ranks"] for t in trials]
    seconds = [min(sum(r["comm_s"]) / len(r["comm_s"]) for r in job) for job in ranks]
    return seconds, {r["comm_bytes"] for job in ranks for r in job}


@pytest.mark.e2e
def test_twice_the_gradient_raises_the_communication_figures(ranked_baseline):
    """The all-reduce carries 4 -> 8 MiB a step and takes longer. Whether the rule names communication depends
    on how quiet the trials are (it must clear 4 standard errors); its firing and quiet cases are tested above."""
    folder, _, base = ranked_baseline
    _, document = check_with(folder, "grad", "--trials", "2", "--max-trials", "2")
    (before, carried_before), (after, carried_after) = comm_figures(base), comm_figures(document)
    assert len(carried_before) == len(carried_after) == 1  # every rank and trial alike
    assert carried_after.pop() == 2 * carried_before.pop()
    assert statistics.median(after) > statistics.median(before), (before, after)


@pytest.mark.e2e
def test_a_slow_loader_on_rank_1_is_a_load_imbalance_naming_rank_1(ranked_baseline):
    folder, _, _ = ranked_baseline
    result, _ = check_with(folder, "slowdata1", "--trials", "1", "--max-trials", "1", "--diagnose")
    assert "wide fp32: suspect load imbalance" in result.stdout, result.stdout
    assert "load imbalance: rank 1's data wait is " in result.stdout


@pytest.mark.e2e
def test_a_rank_that_crashes_ends_the_trial_with_its_error_and_leaves_no_process(tmp_path):
    result = run_in_process(
        "run",
        WIDE,
        *QUICK,
        "--trials",
        "1",
        cwd=tmp_path,
        env={"PERFGATE_TEST_PLANT": "crash1", "TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 4, result.stdout + result.stderr  # the workload failed
    assert "rank 1: loss(model, batch) raised RuntimeError: planted on rank 1" in result.stderr
    assert no_process_mentions(str(tmp_path)) == []


@pytest.mark.e2e
def test_a_rank_that_hangs_times_out_and_every_rank_is_stopped(tmp_path):
    env = {"PERFGATE_TEST_PLANT": "hang1", "TMPDIR": str(tmp_path)}
    result = run_in_process("run", WIDE, *QUICK, "--trials", "1", "--timeout", "10", cwd=tmp_path, env=env)
    assert result.returncode == 4, result.stdout + result.stderr  # no trial produced a measurement
    assert "fp32 failed: timed out after 10 s" in result.stdout
    assert no_process_mentions(str(tmp_path)) == []


# -- parameters the loss does not use ------------------------------------------------------------------


class Spare(torch.nn.Module):
    """A layer and a batch norm the loss uses, and a layer, `spare`, it does not."""

    def __init__(self):
        super().__init__()
        self.used, self.norm, self.spare = torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.norm(self.used(x))


def spare_loss(model, batch):
    return model(batch).square().mean()


def test_the_check_before_the_steps_names_the_unused_parameters_and_leaves_model_and_rng_as_they_were():
    from perfgate.measure import trial
    from perfgate.variants import CONFIGS

    torch.manual_seed(0)
    model = Spare()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    workload = Workload(name="w", model=Spare, dataset=list, loss=spare_loss, batch_size=4, steps=2, warmup_steps=1)
    dataset = [torch.randn(4) for _ in range(16)]
    state = torch.get_rng_state()
    found = trial._find_unused_parameters(
        workload, CONFIGS["fp32"], dataset, model, Device(), distributed.Rank(0, 1, 0, "gloo")
    )
    names, nodes = found
    assert names == ["spare.weight", "spare.bias"] and nodes > 3
    assert torch.equal(torch.get_rng_state(), state)  # the DataLoader it made drew a seed; put back
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # running stats restored
    assert all(p.grad is None for p in model.parameters())
    # The record keeps them only where there are some; a file without them (all files before) reads as before.
    job = Distributed(2, "gloo", "DistributedDataParallel", [], UnusedParameters(names, True, nodes))
    assert Distributed.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    assert "unused_parameters" not in dataclasses.replace(job, unused_parameters=None).to_dict()
    with pytest.raises(ValueError, match="a trial's unused parameters lacks the field 'autograd_nodes'"):
        Distributed.from_dict({**job.to_dict(), "unused_parameters": {"names": names, "find_unused_parameters": True}})


def test_ddps_error_on_an_unused_layer_becomes_one_line_naming_it(gloo_group):
    from torch.nn.parallel import DistributedDataParallel

    model = Spare()
    ddp = DistributedDataParallel(model)  # without find_unused_parameters: the second step stops
    with pytest.raises(RuntimeError, match=distributed.UNREDUCED) as raised:
        for _ in range(2):
            spare_loss(ddp, torch.randn(4, 4)).backward()
    own = distributed.unreduced_failure(raised.value, model, ["spare.weight", "spare.bias"], own_wrap=True)
    assert own == (
        "the workload's wrap(model) returns a DistributedDataParallel without find_unused_parameters=True, and the "
        "model holds 2 parameters the loss does not use (spare.weight, spare.bias), on which DDP stops; pass "
        "find_unused_parameters=True to DistributedDataParallel in wrap, or remove the unused layer"
    )
    # Missed by the check (a loss that uses them on some batches only): named from DDP's parameter indices.
    missed = distributed.unreduced_failure(raised.value, model, [], own_wrap=False)
    assert missed.startswith("the model holds 2 parameters the loss does not use (spare.weight, spare.bias) on some")
    assert distributed.unreduced_failure(RuntimeError("other"), model, [], own_wrap=True) is None


def test_the_reports_name_the_unused_parameters_and_what_ddp_does_about_them():
    unused = UnusedParameters([f"spare.{i}" for i in range(6)], True, 57)
    (workload,) = BASE.workloads
    trials = [
        dataclasses.replace(t, distributed=dataclasses.replace(t.distributed, unused_parameters=unused))
        for t in workload.configs["fp32"].trials
    ]
    configs = {"fp32": ConfigResult("fp32", trials)}
    run = dataclasses.replace(BASE, workloads=[dataclasses.replace(workload, configs=configs)])
    note = (
        "unused parameters: 6 get no gradient from the loss (spare.0, spare.1, spare.2, spare.3 and 2 more); DDP "
        "ran with find_unused_parameters=True, as training this model needs: it walks the step's autograd graph "
        "(57 nodes) from the outputs every step"
    )
    assert note in format_run(read_run(run))
    markdown = format_markdown(
        judge(compare_run(run, {"w": entry_from_workload(BASE, BASE.workloads[0])}, SETTINGS), diagnosed=False)
    )
    assert "Unused parameters: 6 get no gradient from the loss (spare.0," in markdown
    assert "unused parameters" not in format_run(read_run(BASE))


UNUSED = {"PERFGATE_TEST_PLANT": "unused", "PERFGATE_TEST_WIDTH": "64", "PERFGATE_TEST_STEPS": "4"}


@pytest.mark.e2e
def test_a_model_with_a_layer_its_loss_does_not_use_trains_with_find_unused_parameters(tmp_path):
    results = tmp_path / "run.json"
    result = run_in_process("run", WIDE, *QUICK, "--trials", "1", "--json", str(results), cwd=tmp_path, env=UNUSED)
    assert result.returncode == 0, result.stdout + result.stderr
    (trial,) = json.loads(results.read_text(encoding="utf-8"))["workloads"][0]["configs"]["fp32"]["trials"]
    unused = trial["distributed"]["unused_parameters"]
    assert unused["names"] == ["spare.weight", "spare.bias"] and unused["find_unused_parameters"] is True
    assert (
        "unused parameters: 2 get no gradient from the loss (spare.weight, spare.bias); DDP ran with "
        "find_unused_parameters=True"
    ) in result.stdout
    # The all-reduce carries every parameter's gradient, the spare layer's too.
    every = (64 * 64 + 64) + (64 + 1) + (64 * 4 + 4)
    assert {r["comm_bytes"] for r in trial["distributed"]["ranks"]} == {4 * every}


@pytest.mark.e2e
def test_a_workloads_own_ddp_without_find_unused_parameters_stops_in_one_line_naming_them(tmp_path):
    wrapped = f"{WORKLOADS / 'ranks.py'}:wrapped"
    result = run_in_process("run", wrapped, *QUICK, "--trials", "1", cwd=tmp_path, env=UNUSED)
    assert result.returncode == 4, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: rank "), result.stderr
    assert (
        "returns a DistributedDataParallel without find_unused_parameters=True, and the model holds 2 parameters "
        "the loss does not use (spare.weight, spare.bias), on which DDP stops; pass find_unused_parameters=True "
        "to DistributedDataParallel in wrap, or remove the unused layer (workload 'wrapped', config fp32)"
    ) in result.stderr
