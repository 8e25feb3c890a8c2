"""`perfgate update`, `check` and `compare` end to end: real trials, real baseline files, real git."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
import yaml

from tests.helpers.cli import run_in_process, run_main
from tests.helpers.git import git
from tests.helpers.results import results_document, validate_results
from tests.helpers.workloads import GATED, WORKLOADS

# One config, three trials, no extra trials: each check is three trial processes. One thread: on a busy
# 2-core machine, two OpenMP threads stall on each other's barriers and a trial of tiny ops can take 40x longer.
CHECK = ("check", GATED, "--configs", "fp32", "--trials", "3", "--max-trials", "3", "--threads", "1", "--quiet")


@pytest.mark.e2e
def test_update_writes_a_reviewable_baseline_for_this_machine(gated_project):
    document = yaml.safe_load((gated_project / "baselines" / "gated.yaml").read_text())
    assert document["schema_version"] == 1 and document["workload"] == "gated"
    (entry,) = document["machines"].values()
    assert entry["fingerprint"]["device_type"] == "cpu"
    assert entry["settings"]["steps"] == 8 and entry["settings"]["trials"] == 5
    assert entry["data_checksum"].startswith("sha256:")
    fp32 = entry["configs"]["fp32"]
    assert len(fp32["trials"]) == 5 and len(fp32["first_losses"]) == 3
    assert set(fp32["trials"][0]["phase_s"]) == {"data_wait", "h2d", "forward", "backward", "optimizer"}
    assert all(trial["probe_steps_per_sec"] > 0 for trial in fp32["trials"])


@pytest.mark.e2e
def test_check_of_the_same_code_passes_and_compare_agrees(gated_project, tmp_path, monkeypatch, capsys):
    """Exit 0 for the same code. alpha 0.001 keeps this test's own false-alarm chance negligible; the
    false-alarm rate at the default alpha is measured by benchmarks/power.py, not here."""
    results = tmp_path / "results.json"
    markdown = tmp_path / "report.md"
    two_trials = ("--trials", "2", "--max-trials", "2")  # a pass needs no more: any verdict but regression does
    outputs = ("--json", str(results), "--markdown", str(markdown))
    result = run_in_process(*CHECK, *two_trials, "--alpha", "0.001", *outputs, cwd=gated_project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gate: gated  (baseline measured " in result.stdout
    assert "REGRESSION" not in result.stdout
    assert "Exit 0 (pass)." in result.stdout
    monkeypatch.chdir(gated_project)  # compare and report measure nothing: run in this process
    compared = run_main(capsys, "compare", str(results), "--alpha", "0.001")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    gate_lines = [line for line in result.stdout.splitlines() if line.startswith("  fp32 ") and "x " in line]
    assert gate_lines and gate_lines[-1] in compared.stdout  # the same verdict row, measured once
    # `perfgate report` judges the saved run with the check's own settings (kept in the file): same report.
    rendered = run_main(capsys, "report", str(results), "--format", "markdown")
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == markdown.read_text()
    assert "### perfgate: pass" in rendered.stdout and "| fp32 |" in rendered.stdout
    as_json = json.loads(run_main(capsys, "report", str(results), "--format", "json").stdout)
    saved = json.loads(results.read_text())
    validate_results(saved)
    # Holm over the check's two comparisons (throughput, memory): the one with the smaller p-value at alpha / 2,
    # the other at alpha / 1 if that was significant, else alpha / 2 too.
    divisors = saved["gate"].pop("divisors")
    assert list(divisors) == ["gated/fp32"] and max(divisors["gated/fp32"]) == 2.0
    assert min(divisors["gated/fp32"]) in (1.0, 2.0)
    assert saved["gate"] == {
        "threshold": None,
        "alpha": 0.001,
        "trials": 2,
        "max_trials": 2,
        "fail_on_inconclusive": False,
        "baseline_dir": "baselines",
        "spending": "hwang-shih-decani",
        "accepted": [],  # no slowdown accepted on purpose (no Perf-Accept trailer, no --accept)
        "mode": "stored baselines",
        "looks": {"gated/fp32": [2, 0, True]},  # one look, at 2 trials, the last: the whole alpha
    }
    assert as_json["exit_code"] == 0 and as_json["workloads"][0]["configs"][0]["config"] == "fp32"
    # A pass: nothing regressed, so nothing is diagnosed but early evidence for a verdict still open. Against a
    # baseline stored earlier in the session, a busier hour can leave two trials inconclusive with the step slower
    # beyond their noise (once: suspect data pipeline, at 949 s for the suite); a "no change" is never diagnosed.
    (verdict,) = as_json["workloads"][0]["configs"]
    for diagnosis in as_json["diagnoses"]:
        assert diagnosis["early_evidence"] and verdict["status"] == "inconclusive", as_json["diagnoses"]
    assert gate_lines[-1] in run_main(capsys, "report", str(results)).stdout


# One trial is enough where the verdict does not rest on statistics (a changed slice) or the effect is
# large (64 MiB more memory): each such check costs one trial process. Planted slowdowns and their
# diagnosis run on the built-in workloads in tests/test_planted_faults.py.
ONE_TRIAL = ("check", GATED, "--configs", "fp32", "--trials", "1", "--max-trials", "1", "--threads", "1", "--quiet")


@pytest.mark.e2e
def test_check_fails_when_peak_memory_grows(gated_project):
    result = run_in_process(*ONE_TRIAL, cwd=gated_project, env={"PERFGATE_TEST_PLANT": "memory"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 regression (gated fp32)" in result.stdout
    assert ", interval +" in result.stdout and "session-to-session noise assumed): a memory regression" in result.stdout


@pytest.mark.e2e
def test_a_changed_data_slice_is_judged_with_the_change_as_evidence(gated_project):
    result = run_in_process(*ONE_TRIAL, cwd=gated_project, env={"PERFGATE_TEST_PLANT": "data"})
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "not comparable" not in result.stdout
    assert "the data pipeline's output changed (data-slice checksum " in result.stdout


@pytest.mark.e2e
def test_a_missing_baseline_exits_3_naming_the_differing_fields(gated_project, tmp_path):
    other = tmp_path / "baselines"
    other.mkdir()
    text = (gated_project / "baselines" / "gated.yaml").read_text()
    document = yaml.safe_load(text)
    (entry,) = document["machines"].values()
    entry["fingerprint"]["threads"] = 64
    document["machines"] = {"another machine": entry}
    (other / "gated.yaml").write_text(yaml.safe_dump(document))
    result = run_in_process(*CHECK, "--baseline-dir", str(other), cwd=gated_project)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "no baseline for gated on this machine" in result.stdout
    assert "differs in threads 64 (this machine: " in result.stdout
    assert f"run perfgate update (writes {other / 'gated.yaml'}; commit it)" in result.stdout
    assert "step p50/p95/p99" not in result.stdout  # nothing was measured: no lab table


def test_no_baseline_file_at_all_exits_3_before_measuring(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, *CHECK)
    assert result.returncode == 3, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "no baseline for gated" in line]
    # the fingerprint it would be filed under: "cpu ..." or "1x NVIDIA H200, cuda ..."
    assert re.search(r"no baseline for gated on this machine \((cpu |\d+x )", line), line
    assert line.endswith(") in baselines/; run perfgate update (writes baselines/gated.yaml; commit it)"), line
    assert "step p50/p95/p99" not in result.stdout


@pytest.mark.e2e
def test_update_refuses_a_dirty_working_tree_unless_allowed(tmp_path, monkeypatch, capsys):
    shutil.copy(WORKLOADS / "tiny.py", tmp_path / "work.py")
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "start")
    git(tmp_path, "add", "work.py")
    monkeypatch.chdir(tmp_path)  # refused before any trial: in this process
    result = run_main(
        capsys, "update", "work.py:tiny", "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet"
    )
    assert result.returncode == 2
    assert result.stderr == (
        "error: the working tree has uncommitted changes (work.py): a baseline must match a commit; "
        "commit them or stash them, or pass --allow-dirty\n"
    ).replace("commit them or stash them", "commit or stash them")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "work")
    (tmp_path / "baselines").mkdir()
    result = run_in_process(
        "update", "work.py:tiny", "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    stored = yaml.safe_load((tmp_path / "baselines" / "tiny.yaml").read_text())
    (entry,) = stored["machines"].values()
    assert entry["git"]["dirty"] is False and len(entry["git"]["sha"]) == 40


def test_compare_of_two_results_files_judges_the_second_against_the_first(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # compare measures nothing: in this process
    base = results_document()
    for trial, sps in zip(base["workloads"][0]["configs"]["fp32"]["trials"], (1000, 1010, 990, 1005), strict=True):
        trial["samples_per_sec"] = sps
    slower = json.loads(json.dumps(base))
    for trial in slower["workloads"][0]["configs"]["fp32"]["trials"]:
        trial["samples_per_sec"] *= 0.8
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "slow.json").write_text(json.dumps(slower))
    result = run_main(capsys, "compare", "base.json", "slow.json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "samples/s -20.0% (0.800x" in result.stdout
    same = run_main(capsys, "compare", "base.json", "base.json")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "1 no change" in same.stdout
    assert same.stderr == ""
    noisy = json.loads(json.dumps(base))
    for trial, sps in zip(noisy["workloads"][0]["configs"]["fp32"]["trials"], (1000, 700, 1300, 900), strict=True):
        trial["samples_per_sec"] = sps
    (tmp_path / "noisy.json").write_text(json.dumps(noisy))
    unsure = run_main(capsys, "compare", "base.json", "noisy.json")
    assert unsure.returncode == 0, unsure.stdout + unsure.stderr
    assert "could detect slowdowns of" in unsure.stdout
    assert unsure.stderr == "warning: inconclusive, not failing the build: w fp32\n"
    strict = run_main(capsys, "compare", "base.json", "noisy.json", "--fail-on-inconclusive")
    assert strict.returncode == 1


@pytest.mark.e2e
def test_a_config_that_ran_before_and_now_fails_fails_the_check(tmp_path):
    oom = f"{WORKLOADS / 'tiny.py'}:oom_under_autocast"
    result = run_in_process(
        "update", oom, "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "baselines" / "oom.yaml"
    document = yaml.safe_load(path.read_text())
    (entry,) = document["machines"].values()
    entry["configs"]["bf16"] = entry["configs"]["fp32"]  # as if bf16 had fit in memory when the baseline was taken
    path.write_text(yaml.safe_dump(document))
    result = run_in_process(
        "check",
        oom,
        "--configs",
        "fp32,bf16",
        "--trials",
        "1",
        "--max-trials",
        "1",
        "--threads",
        "1",
        "--quiet",
        cwd=tmp_path,
    )
    assert result.returncode == 4, result.stdout + result.stderr  # the workload failed; no regression to report
    assert "1 failed (oom bf16)" in result.stdout and "Exit 4 (workload failed)." in result.stdout
    assert "! bf16: the config failed: " in result.stdout and "out of memory" in result.stdout


PARENT_RECORDING = """
import os

from tiny import _tiny, mlp


def recorded_mlp():
    with open(os.environ["PERFGATE_TEST_PARENTS"], "a") as parents:
        parents.write(f"{os.getppid()}\\n")  # the process that started this trial
    return mlp()


def tiny():
    return _tiny(model=recorded_mlp)
"""


@pytest.mark.e2e
def test_forked_trials_are_started_by_one_server_and_judged_only_against_forked_baselines(tmp_path, monkeypatch):
    """`--fork-trials` in a lab: one process imports torch and forks each trial. Their baselines are this
    machine's forked ones (a forked trial's resident memory is not a fresh process's): a check of fresh
    processes does not read them and says why, a forked check does."""
    shutil.copy(WORKLOADS / "tiny.py", tmp_path / "tiny.py")
    (tmp_path / "perf.py").write_text(PARENT_RECORDING, encoding="utf-8")
    parents = tmp_path / "parents.txt"
    monkeypatch.setenv("PERFGATE_TEST_PARENTS", str(parents))
    quick = ("perf.py:tiny", "--configs", "fp32", "--trials", "2", "--threads", "1", "--quiet")
    update = run_in_process("update", *quick, "--fork-trials", cwd=tmp_path)
    assert update.returncode == 0, update.stdout + update.stderr
    forked_parents = parents.read_text().split()
    assert len(forked_parents) == 2 and len(set(forked_parents)) == 1  # one server forked both
    assert forked_parents[0] != str(os.getpid())  # not started by perfgate itself, as a fresh trial is
    ((key, entry),) = yaml.safe_load((tmp_path / "baselines" / "tiny.yaml").read_text())["machines"].items()
    assert key.endswith(", trials forked") and entry["fingerprint"]["trials"] == "forked"

    fresh = run_in_process("check", *quick, "--max-trials", "2", cwd=tmp_path)
    assert fresh.returncode == 3, fresh.stdout + fresh.stderr  # no baseline for this run's kind of trial
    assert "trials forked (this run: fresh processes; " in fresh.stdout + fresh.stderr
    assert "both with --fork-trials or both without" in fresh.stdout + fresh.stderr

    results = tmp_path / "results.json"
    parents.unlink()
    checked = run_in_process(
        "check", *quick, "--max-trials", "2", "--fork-trials", "--alpha", "0.001", "--json", str(results), cwd=tmp_path
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "trials forked)" in checked.stdout  # the gate names the baseline's machine type
    assert len(set(parents.read_text().split()) - {str(os.getpid())}) == 1
    document = json.loads(results.read_text())
    assert document["environment"]["trials"] == "forked"
    validate_results(document)
