"""`perfgate run` end to end: real subprocesses, real torch training steps, real DataLoader workers."""

from __future__ import annotations

import json

import pytest
import torch

from perfgate.report.markdown import MARKER
from tests.helpers.cli import run_console_script, run_in_process, run_main
from tests.helpers.git import commit, new_repository
from tests.helpers.results import validate_results
from tests.helpers.workloads import TINY_FILE as TINY
from tests.helpers.workloads import WORKLOADS

# Under pytest-xdist these run beside other tests: nothing here reads a verdict or a figure that load changes.
pytestmark = [pytest.mark.e2e, pytest.mark.shares_machine]  # every test here runs real trials

CONFIGS = ("fp32", "bf16", "bf16-compile")


def run_json(tmp_path, *args, **kwargs):
    """`perfgate run ARGS --json` in `tmp_path`, returning the CLI result and the parsed results file."""
    out = tmp_path / "results.json"
    result = run_in_process("run", *args, "--json", str(out), cwd=tmp_path, **kwargs)
    assert result.returncode == 0, result.stderr
    return result, json.loads(out.read_text())


@pytest.fixture(scope="module")
def builtin_lab(tmp_path_factory):
    """Both built-in workloads, every config, one trial each: the default lab, shortened to 2 timed steps
    of 4 samples after 1 warm-up step (the built-in models, data and optimizers, unplanted; without bf16
    instructions a bf16 step takes 20x as long). The trials are forked from one server (`--fork-trials`): torch
    is imported once, not in each of the six (a fresh process per trial is the rest of this file's)."""
    plants = WORKLOADS / "builtin_plants.py"
    references = (f"{plants}:lm", f"{plants}:vision")
    env = {"PERFGATE_TEST_STEPS": "2", "PERFGATE_TEST_WARMUP": "1", "PERFGATE_TEST_BATCH": "4"}
    env["PERFGATE_TEST_OPTIMIZER"] = "builtin"
    result, document = run_json(tmp_path_factory.mktemp("lab"), *references, "--trials", "1", "--fork-trials", env=env)
    assert document["environment"]["trials"] == "forked"
    return result, document


def test_every_builtin_workload_runs_every_config(builtin_lab):
    _, document = builtin_lab
    assert [w["name"] for w in document["workloads"]] == ["lm-small", "vision-small"]
    for workload in document["workloads"]:
        assert list(workload["configs"]) == list(CONFIGS)
        for name, config in workload["configs"].items():
            assert config["failure"] is None, f"{workload['name']} {name}: {config['failure']}"
            (trial,) = config["trials"]
            assert trial["status"] == "ok"
            assert trial["samples_per_sec"] > 0
            assert len(trial["step_s"]) == workload["settings"]["steps"]
            assert set(trial["phases_s"]) == {"data_wait", "h2d", "forward", "backward", "optimizer"}
            assert trial["memory"]["kind"] == (
                "cuda-max-allocated" if torch.cuda.is_available() else "cpu-job-above-setup"
            )  # on the CPU the job's: the training process and its DataLoader workers


def test_results_validate_against_the_schema(builtin_lab):
    validate_results(builtin_lab[1])


def test_bf16_configs_really_run_under_autocast(builtin_lab):
    for workload in builtin_lab[1]["workloads"]:
        bf16 = workload["configs"]["bf16"]["trials"][0]["autocast"]
        assert bf16["active"] and bf16["bf16_layer_outputs"] == bf16["checked_layer_outputs"] > 0
        assert workload["configs"]["fp32"]["trials"][0]["autocast"] is None


def test_compile_time_is_reported_and_kept_out_of_step_times(builtin_lab):
    for workload in builtin_lab[1]["workloads"]:
        trial = workload["configs"]["bf16-compile"]["trials"][0]
        assert trial["compile_s"] > 0
        # The compiling step is a warm-up step; no timed step comes near it.
        assert max(trial["step_s"]) < trial["warmup_step_s"][0]
        assert workload["configs"]["fp32"]["trials"][0]["compile_s"] is None


def test_the_vision_workload_waits_on_real_dataloader_workers(builtin_lab):
    vision = builtin_lab[1]["workloads"][1]
    assert vision["settings"]["loader"]["num_workers"] == 2
    assert sum(vision["configs"]["fp32"]["trials"][0]["phases_s"]["data_wait"]) > 0
    # The workers' CPU seconds are measured (two timed steps can fall between the clock's 10 ms ticks: >= 0).
    assert vision["configs"]["fp32"]["trials"][0]["system"]["loader_cpu_s"] >= 0


def test_table_shows_each_config_and_the_lab_reading(builtin_lab):
    stdout = builtin_lab[0].stdout
    for heading in ("samples/s", "step p50/p95/p99 ms", "data", "fwd", "bwd", "opt", "peak mem", "compile"):
        assert heading in stdout
    for config in CONFIGS:
        assert f"\n  {config} " in stdout
    assert "fp32 -> bf16:" in stdout
    assert "bf16 -> bf16 + compile:" in stdout


def test_progress_names_each_trial_as_it_finishes(builtin_lab):
    stderr = builtin_lab[0].stderr
    assert "[1/6] lm-small fp32 trial 1/1: " in stderr
    assert "[6/6] vision-small " in stderr


def test_a_workload_loaded_from_a_file_path_and_the_labs_table_as_markdown_rendered_again(
    tmp_path, monkeypatch, capsys
):
    """One trial process for two subjects: a workload loaded from a file path, and `run --markdown` whose
    table `perfgate report` renders again from the results file."""
    markdown = tmp_path / "lab.md"
    _, document = run_json(
        tmp_path, f"{TINY}:tiny_workers", "--configs", "fp32", "--trials", "1", "--quiet", "--markdown", str(markdown)
    )
    validate_results(document)
    (workload,) = document["workloads"]
    assert workload["name"] == "tiny-workers"
    assert [t["trial"] for t in workload["configs"]["fp32"]["trials"]] == [0]
    assert workload["warnings"] == []
    assert workload["settings"]["threads"] >= 1
    written = markdown.read_text()
    assert written.startswith(MARKER + "\n### perfgate run: the lab's table\n\n1 workload measured; no verdict")
    assert "| fp32 | " in written and "baseline" not in written.replace("against the baselines", "")
    monkeypatch.chdir(tmp_path)
    again = run_main(capsys, "report", "results.json", "--format", "markdown")
    assert again.returncode == 0 and again.stdout == written


def test_a_dataset_that_changes_between_trials_is_flagged(tmp_path):
    result, document = run_json(
        tmp_path,
        f"{TINY}:nondeterministic_data",
        "--configs",
        "fp32",
        "--trials",
        "2",
        "--threads",
        "1",
        "--rounds",
        "1",
    )
    (workload,) = document["workloads"]
    assert workload["data_checksum"] is None
    differed = [w for w in workload["warnings"] if w.startswith("the data slice differed between trials")]
    assert differed and differed[0].startswith("the data slice differed between trials (2 checksums)"), workload
    assert "! the data slice differed between trials" in result.stdout


def test_a_module_reference_resolves_from_the_current_directory(tmp_path):
    package = tmp_path / "perf"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workloads.py").write_text(
        f"import sys\nsys.path.insert(0, {str(WORKLOADS)!r})\nfrom tiny import tiny as small\n"
    )
    result = run_in_process(
        "run", "perf.workloads:small", "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "tiny  (perf.workloads:small;" in result.stdout


# A project whose workload file imports the project's own code, installed nowhere: a package at the repository's
# root and one under src/.
PROJECT_CODE = {
    "netcode/__init__.py": """\
from torch import nn


def net():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
""",
    "src/datacode/__init__.py": """\
import torch


class Points(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        x = torch.randn(8, generator=torch.Generator().manual_seed(index))
        return x, x.sum(dim=0, keepdim=True)
""",
    "perf/workloads.py": """\
import torch.nn.functional as F
from datacode import Points
from netcode import net

import perfgate


def workload():
    return perfgate.Workload(
        name="own-code",
        model=net,
        dataset=Points,
        loss=lambda model, batch: F.mse_loss(model(batch[0]), batch[1]),
        batch_size=4,
        steps=2,
        warmup_steps=1,
    )
""",
    "pyproject.toml": '[tool.perfgate]\nworkloads = ["perf/workloads.py:workload"]\n',
}


def test_a_workload_file_imports_the_projects_own_code_from_the_console_script_and_the_plugin(
    tmp_path, pytester, monkeypatch
):
    """perf/workloads.py imports a package at the repository's root and one under src/, neither installed: the
    `perfgate` console script (whose sys.path holds neither the root nor src/) loads it and its trial runs, and the
    plugin collects it, as a paired check always did (`python -m perfgate` found the root package, not src/)."""
    repo = new_repository(tmp_path / "repo")
    commit(repo, PROJECT_CODE, "a project whose workload imports its own code")
    result = run_console_script("run", "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet", cwd=repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("own-code  (perf/workloads.py:workload;"), result.stdout
    # The plugin collects it too, in a pytest session (in this process, whose sys.path holds neither folder).
    monkeypatch.chdir(repo)
    collected = pytester.runpytest_inprocess("--perfgate-update", "--co", "-q", "-p", "no:cacheprovider")
    assert "perfgate::own-code[fp32]" in collected.stdout.str(), collected.stdout.str() + collected.stderr.str()


def test_pyproject_workloads_are_used_when_none_are_given(tmp_path):
    (tmp_path / "pyproject.toml").write_text(f'[tool.perfgate]\nworkloads = ["{TINY.as_posix()}:tiny"]\n')
    result = run_in_process("run", "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tiny  (")


def test_failed_compile_is_reported_and_the_other_configs_still_run(tmp_path):
    # No working C++ compiler, and an empty cache so nothing compiled earlier can be reused.
    env = {"CXX": str(tmp_path / "no-such-c++"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    result, document = run_json(
        tmp_path, f"{TINY}:tiny", "--configs", "bf16,bf16-compile", "--trials", "1", "--threads", "1", env=env
    )
    configs = document["workloads"][0]["configs"]
    assert configs["bf16"]["summary"]["trials_ok"] == 1
    assert configs["bf16-compile"]["failure"].startswith("torch.compile failed: ")
    assert len(configs["bf16-compile"]["trials"]) == 1  # no point retrying a config that cannot compile
    assert "\n  bf16-compile  failed (reason below)\n" in result.stdout
    assert "! bf16-compile failed: torch.compile failed: " in result.stdout


def test_a_config_that_runs_out_of_device_memory_is_failed_and_the_others_still_run(tmp_path):
    result, document = run_json(
        tmp_path, f"{TINY}:oom_under_autocast", "--configs", "fp32,bf16", "--trials", "1", "--threads", "1"
    )
    configs = document["workloads"][0]["configs"]
    assert configs["fp32"]["summary"]["trials_ok"] == 1
    assert configs["bf16"]["failure"] == (
        "out of device memory in loss(model, batch): CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert "! bf16 failed: out of device memory" in result.stdout


def test_a_trial_past_its_timeout_is_failed_and_the_run_goes_on(tmp_path):
    _, document = run_json(
        tmp_path,
        f"{TINY}:hangs",
        f"{TINY}:tiny",
        "--configs",
        "fp32",
        "--trials",
        "1",
        "--timeout",
        "8",  # the tiny trial's process takes 1.6-2.5 s here (it imports no torch._dynamo), 5 s on a loaded machine
        "--threads",
        "1",
        "--quiet",
    )
    hangs, tiny = document["workloads"]
    assert hangs["configs"]["fp32"]["trials"][0]["failure"].startswith("timed out after 8 s")
    assert tiny["configs"]["fp32"]["trials"][0]["status"] == "ok"
    assert tiny["settings"]["dataset_length"] == 64  # tiny's Points: what the slice is drawn from
