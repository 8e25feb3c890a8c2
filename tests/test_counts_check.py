"""`perfgate check --counts-only`: a pull request decided by its exact counts, in real git repositories, with
transformers' GPT-2 (random weights) as the model; and the judgement of counting trials without a base commit."""

from __future__ import annotations

import json

import pytest

from perfgate.judge.verdict import Status, judge_counts_only
from perfgate.records.baselines import entry_from_workload
from perfgate.records.results import ConfigResult, RunResult, TrialResult, WorkloadResult, WorkloadSettings
from perfgate.records.shapes import Counts, Environment
from perfgate.records.verdicts import GateSettings
from tests.helpers.cli import run_in_process
from tests.helpers.git import commit, new_repository
from tests.helpers.workloads import WORKLOADS

# Under pytest-xdist these run beside other tests: nothing here reads a verdict or a figure that load changes.
pytestmark = pytest.mark.shares_machine

SOURCE = (WORKLOADS / "outside_gpt2.py").read_text(encoding="utf-8")


def with_default(source: str, variable: str, value: str) -> str:
    """The workload file with an environment variable's default changed: a change committed to the code."""
    old = f'os.environ.get("{variable}", "")' if variable == "PERFGATE_TEST_PLANT" else f'"{variable}", "2"'
    new = (
        f'os.environ.get("{variable}", "{value}")' if variable == "PERFGATE_TEST_PLANT" else f'"{variable}", "{value}"'
    )
    assert old in source
    return source.replace(old, new)


def repository(tmp_path, head: str):
    repo = new_repository(tmp_path / "repo")
    commit(repo, {"bench.py": SOURCE}, "base")
    commit(repo, {"bench.py": head}, "head")
    return repo


@pytest.mark.e2e
def test_one_more_block_fails_by_its_counts_and_a_slow_getitem_passes(tmp_path):
    grown = repository(tmp_path / "grown", with_default(SOURCE, "PERFGATE_TEST_LAYERS", "3"))
    out = grown / "results.json"
    check = run_in_process(
        "check", "bench.py:gpt2", "--counts-only", "--against", "HEAD~1", "--configs", "fp32", "--json", str(out),
        cwd=grown,
    )  # fmt: skip
    assert check.returncode == 1, check.stdout + check.stderr
    assert "FLOPs per sample +43.3% (tolerance +2%)" in check.stdout
    assert "parameters 118,528 -> 168,512" in check.stdout
    assert "counted" in check.stderr and "samples/s" not in check.stderr  # nothing timed
    trials = json.loads(out.read_text())["workloads"][0]["configs"]["fp32"]["trials"]
    assert trials[0]["counts"]["flops_per_sample"] == 33816576 and trials[0]["step_s"] == []
    report = run_in_process("report", str(out), "--format", "json", cwd=grown)  # the file judged again
    config = json.loads(report.stdout)["workloads"][0]["configs"][0]
    assert config["status"] == "regression" and config["counts"]["fails"]

    slow = repository(tmp_path / "slow", with_default(SOURCE, "PERFGATE_TEST_PLANT", "slowitem"))
    check = run_in_process(
        "check", "bench.py:gpt2", "--counts-only", "--against", "HEAD~1", "--configs", "fp32", cwd=slow
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "fp32: every count the same" in check.stdout


@pytest.mark.e2e
def test_counts_only_refuses_what_it_cannot_do(tmp_path):
    repo = repository(tmp_path, SOURCE + "# a comment\n")
    check = run_in_process("check", "bench.py:gpt2", "--counts-only", "--against", "HEAD~1", "--record", cwd=repo)
    assert check.returncode == 2
    assert "--record cannot be combined with --counts-only" in check.stderr


def counting_trial(config: str, counts: Counts | None, ok: bool = True) -> TrialResult:
    return TrialResult(
        config=config,
        trial=0,
        status="ok" if ok else "failed",
        failure=None if ok else "RuntimeError: boom",
        data_checksum="sha256:0",
        counts=counts,
        threads=1,
    )


def counts(flops: float, breaks: int | None = None) -> Counts:
    return Counts("cpu", 1000, 1000, flops, 400, None, 4096, "cpu-live-storage", None, breaks, None)


def counted_run(configs: dict[str, TrialResult]) -> RunResult:
    settings = WorkloadSettings.from_dict({"batch_size": 8, "steps": 4, "warmup_steps": 2, "seed": 0})
    workload = WorkloadResult(
        "w", "w.py:w", settings, None, {}, {name: ConfigResult(name, [trial]) for name, trial in configs.items()}
    )
    return RunResult(
        perfgate_version="0", created_at="now", environment=Environment.from_dict({}), workloads=[workload]
    )


def test_counting_trials_are_judged_against_a_stored_baselines_counts():
    baseline_run = counted_run({"fp32": counting_trial("fp32", counts(1e6))})
    baseline = entry_from_workload(baseline_run, baseline_run.workloads[0])
    assert baseline.configs["fp32"].counts == counts(1e6)
    run = counted_run(
        {
            "fp32": counting_trial("fp32", counts(1.05e6)),
            "bf16": counting_trial("bf16", counts(1e6)),
            "bf16-compile": counting_trial("bf16-compile", None, ok=False),
        }
    )
    assert run.workloads[0].counted_only and run.workloads[0].configs["fp32"].summary is None
    result = judge_counts_only(run, GateSettings(), baselines={"w": baseline})
    verdicts = {v.config: v for v in result.verdicts}
    assert verdicts["fp32"].status == Status.REGRESSION
    assert verdicts["fp32"].reason.startswith("FLOPs per sample +5.0% (tolerance +2%)")
    assert verdicts["bf16"].status == Status.NO_BASELINE and "perfgate update" in verdicts["bf16"].reason
    assert verdicts["bf16-compile"].status == Status.FAILED
    assert result.exit_code == 1


def test_a_count_within_its_tolerance_passes_without_statistics():
    base = counted_run({"fp32": counting_trial("fp32", counts(1e6))})
    run = counted_run({"fp32": counting_trial("fp32", counts(1.01e6))})
    result = judge_counts_only(run, GateSettings(), baselines={"w": entry_from_workload(base, base.workloads[0])})
    (verdict,) = result.verdicts
    assert verdict.status == Status.NO_CHANGE and verdict.reason == "every count within its tolerance"
    assert result.exit_code == 0
