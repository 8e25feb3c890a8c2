"""`pytest --perfgate` end to end: a fresh project per test, real pytest sessions, real trials.

A session whose trials are timed and judged runs in a subprocess (`runpytest_subprocess`); one that measures
nothing (usage errors, collection, skipped perf tests, a workload refused before any trial) runs in this
process (`runpytest_inprocess`), which saves a second or so of interpreter start and imports per session."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET

import pytest
import yaml

from perfgate.report.markdown import MARKER
from tests.helpers.cli import UNUSED_PYTEST_PLUGINS, run_main
from tests.helpers.git import git
from tests.helpers.results import validate_results
from tests.helpers.workloads import WORKLOADS

pytestmark = pytest.mark.e2e  # every test here runs a pytest session, most of them real trials in a subprocess

# The configured workload runs one config; `-k` tests add bf16 to show that selection decides what is measured.
# Three trials, no extra ones, one thread: see tests/test_gate.py for why.
PYPROJECT = """
[tool.perfgate]
workloads = ["gated.py:gated"]

[tool.pytest.ini_options]
perfgate_configs = "fp32"
perfgate_trials = "3"
perfgate_max_trials = "3"
perfgate_threads = "1"
"""
TEST_PERF = """
from gated import gated
from tiny import tiny


def test_fixture_style(perfgate):
    perfgate.check(tiny, configs="fp32")


def test_fixture_style_with_a_built_workload(perfgate):
    perfgate.check(gated(), configs="fp32")  # the configured workload's baseline serves here too


def test_correctness():
    assert 1 + 1 == 2
"""
TEST_MICRO = """
import os
import time


def augment():
    time.sleep(0.008 if os.environ.get("PERFGATE_TEST_PLANT") == "slow" else 0.002)


def test_augmentation(benchmark):
    benchmark(augment)
"""


@pytest.fixture(autouse=True)
def no_job_summary(monkeypatch):
    """Under GitHub Actions, pytest --perfgate appends its report to the job summary: not these sessions'."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester, its pytest sessions (and the paired sessions they start) without the unused plugins. Set
    after pytester's own setup, which clears PYTEST_ADDOPTS."""
    monkeypatch.setenv("PYTEST_ADDOPTS", UNUSED_PYTEST_PLUGINS)
    return pytester


def make_project(path):
    for name in ("gated.py", "tiny.py"):
        shutil.copy(WORKLOADS / name, path / name)
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / "test_perf.py").write_text(TEST_PERF)
    (path / "test_micro.py").write_text(TEST_MICRO)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, gated_project):
    """A project whose baselines were written by `pytest --perfgate-update` (and that run's output).

    The gated workload's baseline comes from the gate tests' session fixture (the same workload,
    config and threads), so this update measures only the fixture-style test's workload."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("measured")
    make_project(folder)
    (folder / "baselines").mkdir()
    shutil.copy(gated_project / "baselines" / "gated.yaml", folder / "baselines" / "gated.yaml")
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--perfgate-update",
            "-p",
            "no:cacheprovider",
            "-k",
            "test_fixture_style and not built",
        ],
        cwd=folder,
        env={**os.environ, "PYTEST_ADDOPTS": UNUSED_PYTEST_PLUGINS},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stdout + process.stderr
    return folder, process.stdout


@pytest.fixture
def measured_pytester(pytester, measured):
    """pytester, its folder a copy of the measured project (baselines included)."""
    folder, _ = measured
    shutil.copytree(folder, pytester.path, dirs_exist_ok=True)
    return pytester


@pytest.mark.shares_machine  # measures nothing
def test_perf_tests_are_collected_but_skipped_without_the_flag(pytester):
    make_project(pytester.path)
    collected = pytester.runpytest_inprocess("--collect-only", "-q")
    assert "perfgate::gated[fp32]" in collected.outlines
    result = pytester.runpytest_inprocess("-rs", "-k", "not micro")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["*perf test: run with --perfgate (or --perfgate-update to record baselines)*"])
    assert not (pytester.path / "baselines").exists()


def test_update_writes_the_baselines(measured):
    folder, output = measured
    document = yaml.safe_load((folder / "baselines" / "tiny.yaml").read_text())
    (entry,) = document["machines"].values()
    assert len(entry["configs"]["fp32"]["trials"]) == 3
    assert "baselines/tiny.yaml: new baseline for tiny on " in output
    assert "gated" not in output.split("= perfgate =")[1]  # -k selected the fixture test alone


def test_a_second_run_passes_and_reports_per_config(measured_pytester, monkeypatch, capsys):
    """alpha 0.001 keeps this test's own false-alarm chance negligible (benchmarks/power.py measures the rest).
    The run writes what `perfgate check --json --markdown` writes, and under GitHub Actions the job summary."""
    junit = measured_pytester.path / "junit.xml"
    results = measured_pytester.path / "results.json"
    markdown = measured_pytester.path / "out" / "report.md"
    summary = measured_pytester.path / "step_summary.md"
    summary.write_text("an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    measured_pytester.path.joinpath("pyproject.toml").write_text(
        PYPROJECT.replace('perfgate_configs = "fp32"', 'perfgate_configs = "fp32,bf16"')
    )
    result = measured_pytester.runpytest_subprocess(
        "--perfgate",
        "--perfgate-alpha",
        "0.001",
        "-k",
        "not micro and not built and not bf16",  # bf16 has no baseline: deselected, so never measured
        "--perfgate-trials",  # a pass needs fewer trials than a regression (any verdict but regression passes)
        "2",
        "--perfgate-max-trials",
        "2",
        f"--junitxml={junit}",
        f"--perfgate-json={results}",
        f"--perfgate-markdown={markdown}",
        "-rA",
    )
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["*= perfgate =*", "*workload*config*baseline s/s*current s/s*ratio (CI)*peak mem*verdict*", "*gated*fp32*"]
    )
    assert "PASSED perfgate::gated[fp32]" in result.stdout.str()
    assert "bf16" not in result.stdout.str().split("= perfgate =")[1]
    # The configured item and the fixture test are two checks sharing one alpha, each at its share (issue 42).
    rate = (
        "one false-alarm rate for the session: alpha 0.001 over 4 comparisons in 2 checks "
        "(Holm within each check's share of alpha)"
    )
    result.stdout.fnmatch_lines([rate])
    document = json.loads(results.read_text())
    validate_results(document)
    assert sorted(w["name"] for w in document["workloads"]) == ["gated", "tiny"]
    assert document["gate"]["alpha"] == 0.001 and "micro" not in document  # -k deselected the benchmark
    assert document["gate"]["session"] == {"comparisons": 4, "checks": 2}
    result.stdout.fnmatch_lines([f"results written to {results}", f"report written to {markdown}"])
    report = markdown.read_text()
    assert report.startswith(MARKER + "\n### perfgate: pass\n")
    assert "#### gated\n" in report and "#### tiny\n" in report and "| fp32 |" in report
    assert f"{rate[0].upper()}{rate[1:]}." in report
    assert summary.read_text() == "an earlier step's summary\n" + report  # appended, as the Action does
    # The same report `perfgate report` renders from the results file: the session's settings are in it.
    capsys.readouterr()  # what pytester echoed of the run
    rendered = run_main(capsys, "report", str(results), "--format", "markdown")
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == report
    properties = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(junit).getroot().iter("testcase")
    }
    assert properties["gated[fp32]"]["perfgate_verdict"] in ("no change", "inconclusive", "improvement")
    assert float(properties["gated[fp32]"]["perfgate_ratio"]) > 0
    assert "perfgate_current_samples_per_sec" in properties["test_fixture_style"]


def test_a_planted_slowdown_fails_with_a_readable_message(measured_pytester, monkeypatch):
    monkeypatch.setenv("PERFGATE_TEST_PLANT", "slow")
    result = measured_pytester.runpytest_subprocess("--perfgate", "-k", "gated or built")
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    # The failure text alone says what happened: no table needed, no traceback.
    result.stdout.fnmatch_lines(
        [
            "*gated fp32: REGRESSION: samples/s -*: a regression beyond the 5% threshold on time per sample "
            "(the whole interval lies below samples/s -4.8%; p < *)*",
            "FAILED test_perf.py::test_fixture_style_with_a_built_workload*",
            "FAILED perfgate::gated[[]fp32[]]*",
        ]
    )
    assert "Traceback" not in output


@pytest.mark.shares_machine  # measures nothing
def test_selection_with_k_picks_single_configs(pytester):
    make_project(pytester.path)
    pytester.path.joinpath("pyproject.toml").write_text(
        PYPROJECT.replace('perfgate_configs = "fp32"', 'perfgate_configs = "fp32,bf16,bf16-compile"')
    )
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-k", "gated and bf16 and not compile")
    assert [line for line in result.outlines if line.startswith("perfgate::")] == ["perfgate::gated[bf16]"]
    # pytest counts the configured items with the test functions, as collected and as deselected
    everything = pytester.runpytest_inprocess("--collect-only", "-q")
    listed = [line for line in everything.outlines if "::" in line]
    assert sum(line.startswith("perfgate::") for line in listed) == 3
    assert everything.outlines[-1].startswith(f"{len(listed)} tests collected in ")
    assert result.outlines[-1].startswith(f"1/{len(listed)} tests collected ({len(listed) - 1} deselected) in ")


PACED = """
import time

from tiny import PlainSGD, Points, mlp, mse

import perfgate

PAUSE_S = {pause_s}  # waiting, not computing: a slowdown that other jobs on the machine cannot blur


def paced_loss(model, batch):
    time.sleep(PAUSE_S)
    return mse(model, batch)


def paced():
    return perfgate.Workload(
        name="paced", model=mlp, dataset=Points, loss=paced_loss, optimizer=PlainSGD, batch_size=8, steps=4
    )
"""


FRESH_PACED = """

def fresh():
    return perfgate.Workload(
        name="fresh", model=mlp, dataset=Points, loss=mse, optimizer=PlainSGD, batch_size=8, steps=2, warmup_steps=1
    )
"""


def test_against_a_git_ref_measures_the_workloads_beside_that_commit(pytester):
    """HEAD~1 pauses 5 ms a step, HEAD 25 ms. No baselines are stored: only the base commit, measured
    beside the working tree, can show the slowdown, and let the unchanged fixture-style test pass. The
    unchanged pytest-benchmark test is measured in session pairs against HEAD~1 too (tests/test_micro_pairs.py)."""
    shutil.copy(WORKLOADS / "tiny.py", pytester.path / "tiny.py")
    pytester.makepyprojecttoml(
        '[tool.perfgate]\nworkloads = ["paced.py:paced"]\n\n'
        '[tool.pytest.ini_options]\nperfgate_trials = "4"\nperfgate_max_trials = "4"\n'  # 4 pairs (fewer call nothing)
        'addopts = ["--benchmark-max-time=0.05"]\n'  # short sessions for the benchmark's pairs
    )
    pytester.makepyfile(
        test_perf="from tiny import tiny\n\n\ndef test_fixture_style(perfgate):\n    perfgate.check(tiny)\n",
        test_micro=TEST_MICRO,
    )
    paced = pytester.path / "paced.py"
    paced.write_text(PACED.format(pause_s=0.005))
    git(pytester.path, "init", "-q")
    git(pytester.path, "config", "user.email", "ci@example.com")
    git(pytester.path, "config", "user.name", "CI")
    git(pytester.path, "add", ".")
    git(pytester.path, "commit", "-q", "-m", "base")
    # the head is slower, and adds a workload the base does not define: new, its configured item and a fixture-style
    # test of it skipped, not failed
    paced.write_text(PACED.format(pause_s=0.025) + FRESH_PACED)
    pyproject = pytester.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('["paced.py:paced"]', '["paced.py:paced", "paced.py:fresh"]'))
    pytester.makepyfile(test_fresh='def test_fresh(perfgate):\n    perfgate.check("paced.py:fresh")\n')
    git(pytester.path, "add", ".")
    git(pytester.path, "commit", "-q", "-am", "slower")
    base, head = git(pytester.path, "rev-parse", "HEAD~1", "HEAD").split()
    result = pytester.runpytest_subprocess(
        "--perfgate",
        "--perfgate-against",
        "HEAD~1",
        "--perfgate-configs",
        "fp32",
        "--perfgate-threads",
        "1",
        "--perfgate-threshold",
        "25%",  # far above pair noise, far below the 5x slowdown: the unchanged items pass however busy the machine
        "--perfgate-rounds",
        "1",  # calibrated rounds would stretch the later pairs' 25 ms steps to seconds; a fivefold pause needs none
        "--perfgate-fork-trials",  # the plugin's pairing options reach the check (a fresh process each: test_against)
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=2, failed=1, skipped=2)
    assert "! fresh: new: HEAD~1 does not define it, so there is nothing to compare it with" in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*paced fp32: REGRESSION: samples/s -*",
            "*= perfgate =*",
            f"mode: paired: the working tree ({head[:10]}) against HEAD~1 ({base[:10]}), each pair measured taking "
            "turns at the training steps, trials forked from one server a side",
            "*tiny*fp32*",
            "*paced*fp32*REGRESSION*",
            "*test_micro.py::test_augmentation *",
            f"pytest-benchmark tests: measured in 4 session pairs against HEAD~1 ({base[:10]}), alternating which "
            "side runs first",
        ]
    )
    micro = [line for line in result.outlines if line.strip().startswith("test_micro.py::test_augmentation ")]
    assert len(micro) == 1 and "REGRESSION" not in micro[0]  # the unchanged benchmark
    assert "FAILED perfgate::paced[fp32]" in result.stdout.str()
    assert result.stdout.str().count("mode: ") == 1  # the configured item and the fixture test: one base, one mode
    assert not (pytester.path / "baselines").exists()


def test_pytest_benchmark_results_are_gated(pytester, monkeypatch, capsys):
    (pytester.path / "test_micro.py").write_text(TEST_MICRO)
    update = pytester.runpytest_subprocess("--perfgate-update")
    assert update.ret == 0, update.stdout.str()
    update.stdout.fnmatch_lines(["*baselines/pytest-benchmark.yaml: test_micro.py::test_augmentation: *calls/s*(new)"])
    same = pytester.runpytest_subprocess("--perfgate")
    assert same.ret == 0, same.stdout.str()  # one session cannot prove "no change" on a noisy machine, but passes
    same.stdout.fnmatch_lines(["*pytest-benchmark test*baseline calls/s*current calls/s*ratio (CI)*machine*verdict"])
    assert "REGRESSION" not in same.stdout.str()
    # Each call sleeps 8 ms instead of 2: far enough that even the machine probe swinging 2x in the
    # pytest process (it does, on a busy machine) cannot make the adjusted verdict disagree.
    monkeypatch.setenv("PERFGATE_TEST_PLANT", "slow")
    slow = pytester.runpytest_subprocess("--perfgate", "--perfgate-json=micro.json", "--perfgate-markdown=micro.md")
    assert slow.ret == 1, slow.stdout.str()
    slow.stdout.fnmatch_lines(
        ["*test_micro.py::test_augmentation*REGRESSION*", "*! test_micro.py::test_augmentation: calls/s -*"]
    )
    # The verdicts go into the results file, and `perfgate report` shows them as the session decided them.
    document = json.loads((pytester.path / "micro.json").read_text())
    validate_results(document)
    assert document["workloads"] == []
    (benchmark,) = document["micro"]["benchmarks"]
    assert (benchmark["name"], benchmark["status"]) == ("test_micro.py::test_augmentation", "regression")
    assert benchmark["ratio"] < 0.5 and benchmark["rounds"] > 0
    assert document["micro"]["mode"] == "stored baselines (baselines/pytest-benchmark.yaml)"
    capsys.readouterr()  # what pytester echoed of the runs
    reported = run_main(capsys, "report", "micro.json")
    assert reported.returncode == 0, reported.stderr
    assert [line.split()[-1] for line in reported.stdout.splitlines() if "::test_augmentation " in line] == [
        "REGRESSION"
    ]
    assert reported.stdout.rstrip().endswith(  # report exits 0: it gives the session's verdict, not an exit of its own
        "perfgate report: 1 regression (test_micro.py::test_augmentation). The check's verdict: fail (its exit code 1)."
    )
    report = (pytester.path / "micro.md").read_text()
    assert report.startswith(MARKER + "\n### perfgate: fail\n\n1 regression (test_micro.py::test_augmentation).")
    assert "| `test_micro.py::test_augmentation` |" in report and "| **regression** |" in report
    # Warn-only: the same verdict, reported; the session passes and says which verdict would have failed it.
    warned = pytester.runpytest_subprocess("--perfgate", "--perfgate-warn-only", "--perfgate-markdown=warned.md")
    assert warned.ret == 0, warned.stdout.str()
    warned.stdout.fnmatch_lines(
        [
            "*test_micro.py::test_augmentation*REGRESSION*",
            "*warn-only mode: every verdict is reported and none fails the session (these would: "
            "test_micro.py::test_augmentation)*",
        ]
    )
    assert "### perfgate: fail (warn-only: not failing the build)" in (pytester.path / "warned.md").read_text()


@pytest.mark.shares_machine  # measures nothing
def test_a_workload_that_cannot_be_rebuilt_fails_its_test_in_one_line(pytester):
    pytester.makepyfile(
        test_bad="""
        def test_lambda(perfgate):
            perfgate.check(lambda: None)
        """
    )
    result = pytester.runpytest_inprocess("--perfgate")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*<lambda> is not a module-level function in a file: trial processes cannot import it; "
            "define the workload function at the top level of a .py file"
        ]
    )


@pytest.mark.shares_machine  # measures nothing
@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (
            ["--perfgate", "--perfgate-threshold", "5"],
            "",
            "ERROR: perfgate: '5' is ambiguous: a fraction must be below 1 (--perfgate-threshold); "
            'write a percentage such as "5%" (or the fraction 0.05)',
        ),
        (
            ["--perfgate"],
            'perfgate_threshold = "150%"',
            "ERROR: perfgate: '150%' must be between 0% and 100% (ini perfgate_threshold); "
            'write a percentage such as "5%" (or the fraction 0.05)',
        ),
        (
            ["--perfgate", "--perfgate-trials", "0"],
            "",
            "ERROR: perfgate: must be at least 1, got 0 (--perfgate-trials); give a count such as 3",
        ),
        (
            ["--perfgate-configs", "fp64"],
            "",
            "ERROR: perfgate: unknown config 'fp64' (--perfgate-configs); choose from fp32, bf16, bf16-compile, fp16",
        ),
        (
            ["--perfgate", "--perfgate-update"],
            "",
            "ERROR: perfgate: --perfgate and --perfgate-update both given; use --perfgate to check against the "
            "baselines, or --perfgate-update to rewrite them",
        ),
        (
            ["--perfgate-update", "--perfgate-against", "main"],
            "",
            "ERROR: perfgate: --perfgate-against and --perfgate-update both given; use --perfgate --perfgate-against "
            "REF to check against REF, or --perfgate-update alone to write the baselines",
        ),
        (
            ["--perfgate", "--perfgate-trials", "4", "--perfgate-max-trials", "2"],
            "",
            "ERROR: perfgate: --perfgate-max-trials 2 is below --perfgate-trials 4; give --perfgate-max-trials at "
            "least as large as --perfgate-trials (or equal, for no extra trials)",
        ),
        (
            ["--perfgate", "--perfgate-parallel-pairs"],
            "",
            "ERROR: perfgate: --perfgate-parallel-pairs needs --perfgate-against; add --perfgate-against REF, e.g. "
            "--perfgate-against main",
        ),
        (
            ["--perfgate"],
            "perfgate_interleaved_pairs = false",
            "ERROR: perfgate: ini perfgate_interleaved_pairs needs --perfgate-against; add --perfgate-against REF, "
            "e.g. --perfgate-against main",
        ),
        (
            ["--perfgate"],
            "perfgate_environment = per-side",
            "ERROR: perfgate: ini perfgate_environment needs --perfgate-against; add --perfgate-against REF, "
            "e.g. --perfgate-against main",
        ),
        (
            ["--perfgate", "--perfgate-environment", "sideways"],
            "",
            "ERROR: perfgate: invalid choice 'sideways' (--perfgate-environment); choose from auto, shared, per-side",
        ),
        (
            ["--perfgate", "-n", "2"],
            "",
            "ERROR: perfgate: perf tests cannot run under pytest-xdist (-n 2): two benchmarks at once on one machine "
            "measure each other; run them in their own pytest call without -n, e.g. pytest --perfgate -m perfgate "
            "-p no:xdist",
        ),
    ],
)
def test_bad_option_values_are_usage_errors(pytester, args, ini, message):
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.lines, result.stderr.str()


@pytest.mark.shares_machine  # measures nothing
def test_a_configured_workload_that_cannot_be_found_stops_pytest_in_one_line(pytester):
    pytester.makepyprojecttoml('[tool.perfgate]\nworkloads = ["perf/missing.py:gpt"]\n')
    result = pytester.runpytest_inprocess("--perfgate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: perfgate: file perf/missing.py not found (perf/missing.py:gpt); check the path*"]
    )


def test_a_configured_workload_whose_code_fails_fails_each_item_once(pytester):
    shutil.copy(WORKLOADS / "tiny.py", pytester.path / "tiny.py")
    pytester.makepyprojecttoml(
        '[tool.perfgate]\nworkloads = ["tiny.py:model_raises"]\n\n'
        '[tool.pytest.ini_options]\nperfgate_configs = "fp32,bf16"\nperfgate_trials = "1"\nperfgate_threads = "1"\n'
    )
    result = pytester.runpytest_subprocess("--perfgate-update", "-p", "no:cacheprovider")
    assert result.ret == 1
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    assert output.count("weights file missing") >= 2 and "Traceback" not in output
    # Measured once for both items: the first trial's failure ends the lab, and each item reports it.
    # (Counted in the failure sections: pytest repeats or truncates the messages in its short summary
    # depending on the terminal width and on whether $CI is set.)
    failures = output.split("short test summary info")[0]
    assert failures.count("weights file missing (workload 'tiny', config fp32); fix the workload") == 2
    assert "config bf16" not in output
