"""Every bad input ends in one clear line on stderr, exit code 2, and no traceback; a workload whose own code
fails ends the same way with exit code 4 (the workload failed).

Every error is checked in this process, through the CLI's entry point (`perfgate.cli.main`, in the test's
temporary folder): those only a trial can find start real trial processes from there, as `python -m perfgate`
would (each trial is its own process either way; this one has torch imported already). The installed
`perfgate` command is checked end to end once.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import console_script, run_console_script, run_main
from tests.helpers.workloads import TINY_FILE as TINY

# Under pytest-xdist these run beside other tests: nothing here reads a verdict or a figure that load changes.
pytestmark = pytest.mark.shares_machine


def assert_one_line_error(result, *fragments: str, code: int = 2) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """`perfgate ARGS` in this process, in the test's temporary folder: its exit code, stdout and stderr."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_main(capsys, *args)


# -- found before any trial: in this process ---------------------------------------------------------------


def test_missing_file_names_the_path(cli):
    result = cli("run", "--quiet", "nowhere/workloads.py:gpt_small")
    assert_one_line_error(result, "file nowhere/workloads.py not found", "check the path")


def test_missing_function_lists_the_ones_that_exist(cli):
    result = cli("run", "--quiet", f"{TINY}:gpt_small")
    assert_one_line_error(result, "no function 'gpt_small' in", "pick one of: crashes, forward_raises,")
    assert "Points" not in result.stderr  # classes and imported names are not workload functions


def test_missing_module_says_so(cli):
    result = cli("run", "--quiet", "no_such_package.workloads:gpt_small")
    assert_one_line_error(result, "module no_such_package.workloads not found")


def test_function_returning_something_else_than_a_workload(cli):
    result = cli("run", "--quiet", f"{TINY}:not_a_workload")
    assert_one_line_error(result, "not_a_workload() returned dict, not perfgate.Workload")


@pytest.mark.parametrize("configs", ["fp8", "fp32,bf16,compile"])
def test_unknown_config_names_are_refused(cli, configs):
    result = cli("run", "--configs", configs, f"{TINY}:tiny")
    assert_one_line_error(result, "unknown config", "choose from fp32, bf16, bf16-compile")


@pytest.mark.parametrize("trials", ["0", "-1", "three"])
def test_trials_must_be_a_positive_whole_number(cli, trials):
    result = cli("run", "--trials", trials, f"{TINY}:tiny")
    assert_one_line_error(result, "--trials")


def test_unknown_builtin_suggests_the_real_ones(cli):
    result = cli("run", "gpt")
    assert_one_line_error(result, "unknown built-in workload 'gpt'", "use one of lm, vision")


def test_unknown_builtin_size(cli):
    result = cli("run", "lm@huge")
    assert_one_line_error(result, "unknown size 'huge'", "small, medium, large")


def test_bad_workload_in_pyproject(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nworkloads = "lm"\n')
    result = cli("run")
    assert_one_line_error(result, "workloads must be a list of strings", "[tool.perfgate]")


def test_json_path_that_cannot_be_written_is_refused_before_measuring(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = cli("run", "--json", str(blocker / "results.json"), f"{TINY}:tiny")
    assert_one_line_error(result, f"cannot write {blocker / 'results.json'}: {blocker} is not a writable folder")
    result = cli("run", "--json", str(tmp_path), f"{TINY}:tiny")
    assert_one_line_error(result, f"{tmp_path} is a directory (--json); give a file name")


BAD_GATE_OPTIONS = [
    (
        ("check", "--threshold", "5"),
        "error: argument --threshold: '5' is ambiguous: a fraction must be below 1; "
        "write a percentage such as \"5%\" (or the fraction 0.05); see 'perfgate check --help'",
    ),
    (
        ("check", "--threshold", "150%"),
        "error: argument --threshold: '150%' must be between 0% and 100%; "
        "write a percentage such as \"5%\" (or the fraction 0.05); see 'perfgate check --help'",
    ),
    (
        ("check", f"{TINY}:tiny", "--trials", "4", "--max-trials", "3"),
        "error: --max-trials 3 is below --trials 4; "
        "give --max-trials at least as large as --trials (or equal, for no extra trials)",
    ),
    (
        ("check", f"{TINY}:tiny", "--environment", "per-side"),
        "error: --environment needs --against; add --against REF, e.g. --against main",
    ),
    (
        ("compare", "a.json", "b.json", "c.json"),
        "error: compare takes one or two results files; perfgate compare [BASELINE.json] CANDIDATE.json",
    ),
    (
        ("compare", "missing.json"),
        "error: results file missing.json not found; write one with --json PATH",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_GATE_OPTIONS)
def test_bad_gate_options_say_what_to_do(cli, args, message):
    result = cli(*args)
    assert result.returncode == 2
    assert result.stderr == message + "\n"


def test_a_results_file_of_another_version_is_refused(cli, tmp_path):
    (tmp_path / "old.json").write_text('{"schema_version": 0}')
    result = cli("compare", "old.json")
    assert_one_line_error(result, "old.json has schema_version 0; this perfgate reads 1 and 2")


def test_a_broken_baseline_file_stops_the_check_before_measuring(cli, tmp_path):
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "tiny.yaml").write_text("schema_version: 1\nworkload: [unclosed\n")
    result = cli("check", f"{TINY}:tiny", "--quiet")
    assert_one_line_error(result, "invalid YAML", "tiny.yaml", "restore it from git, then run perfgate update")


# -- the installed command, end to end ---------------------------------------------------------------------


@pytest.mark.e2e
def test_the_installed_command_prints_one_line_errors_and_exits_2(tmp_path):
    """The console script that `pip install` writes ([project.scripts]) reaches the same one-line errors:
    one from argparse, one from resolving a workload."""
    assert console_script().is_file(), f"{console_script()} is missing: pip install -e . first"
    args, message = BAD_GATE_OPTIONS[0]
    result = run_console_script(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == message + "\n"
    result = run_console_script("run", "--quiet", "nowhere/workloads.py:gpt_small", cwd=tmp_path)
    assert_one_line_error(result, "file nowhere/workloads.py not found", "check the path")


# -- found by a trial: real trial processes, started from this process ----------------------------------


@pytest.mark.e2e
def test_model_factory_that_raises(cli):
    result = cli("run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:model_raises")
    assert_one_line_error(
        result, "model() raised RuntimeError: weights file missing", "workload 'tiny', config fp32", code=4
    )


@pytest.mark.e2e
def test_loss_that_raises(cli):
    result = cli("run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:forward_raises")
    assert_one_line_error(result, "loss(model, batch) raised ValueError: shape mismatch in my loss", code=4)


@pytest.mark.e2e
def test_nan_loss_fails_the_config_with_the_step(cli):
    result = cli("run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:nan_loss")
    assert result.returncode == 4  # a config failure (bf16 may overflow where fp32 does not): nothing measured
    assert "fp32 failed: loss is nan at step 0; the workload must train with a finite loss" in result.stdout
    assert result.stderr == "error: no trial produced a measurement; see the failures above\n"


@pytest.mark.e2e
def test_loss_that_is_not_a_scalar(cli):
    result = cli("run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:vector_loss")
    assert_one_line_error(result, "returned a tensor of shape (8, 1) at step 0, not a scalar", ".mean()", code=4)


@pytest.mark.e2e
def test_loss_that_is_not_a_tensor(cli):
    result = cli("run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:loss_not_tensor")
    assert_one_line_error(result, "loss(model, batch) returned float at step 0, not a tensor", code=4)


@pytest.mark.e2e
def test_dataset_shorter_than_the_slice(cli):
    result = cli("run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:short_dataset")
    assert_one_line_error(
        result, "dataset has 10 samples but the slice needs 40", "(warmup_steps 1 + steps 4) x batch_size 8", code=4
    )


@pytest.mark.e2e
def test_iterable_dataset_is_refused(cli):
    result = cli("run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:iterable_dataset")
    assert_one_line_error(result, "which has no len(); return a map-style torch Dataset", code=4)


@pytest.mark.e2e
def test_debug_shows_the_traceback(cli):
    result = cli("--debug", "run", "--quiet", "--configs", "fp32", "--threads", "1", f"{TINY}:forward_raises")
    assert result.returncode == 4
    assert "Traceback" in result.stderr
    assert "shape mismatch in my loss" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
