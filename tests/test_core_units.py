"""Unit tests of the core pieces: configs, the workload contract, references, summaries, the lab reading."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import perfgate
from perfgate.errors import UsageError, WorkloadError, WorkloadReferenceError
from perfgate.judge.reading import read_lab
from perfgate.measure.lab import RunSettings, plan_trials
from perfgate.records.summary import ConfigSummary, Spread, percentile
from perfgate.references import Reference, parse_reference, resolve_references
from perfgate.variants import parse_configs
from tests.helpers.workloads import WORKLOADS


def test_configs_come_back_in_lab_order_whatever_order_they_are_given():
    assert parse_configs("bf16-compile, fp32") == ("fp32", "bf16-compile")
    assert parse_configs("fp32,fp32") == ("fp32",)


def test_unknown_config_error_says_what_is_allowed():
    with pytest.raises(UsageError) as info:
        parse_configs("fp32,amp")
    assert info.value.one_line() == "unknown config 'amp' (--configs); choose from fp32, bf16, bf16-compile, fp16"


def _workload(**overrides):
    fields = dict(name="w", model=lambda: torch.nn.Linear(2, 2), dataset=list, loss=lambda m, b: b, batch_size=4)
    fields.update(overrides)
    return perfgate.Workload(**fields)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": ""}, "workload name must be a non-empty string"),
        ({"name": "my model"}, "contains ' '"),
        ({"model": "resnet"}, "model must be callable, got str"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"batch_size": 2.5}, "batch_size must be an integer >= 1, got 2.5"),
        ({"steps": True}, "steps must be an integer >= 1, got True"),
        ({"warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
        ({"loader": {"shuffle": True}}, "loader sets shuffle, which perfgate controls"),
        ({"loader": [("num_workers", 2)]}, "loader must be a dict"),
        ({"optimizer": "adam"}, "optimizer must be a callable"),
    ],
)
def test_workload_contract_is_checked_when_the_workload_is_built(overrides, message):
    with pytest.raises(WorkloadError) as info:
        _workload(**overrides)
    assert message in info.value.one_line()


def test_slice_covers_warmup_and_timed_steps():
    assert _workload(steps=10, warmup_steps=2, batch_size=4).slice_samples == 48


@pytest.mark.e2e
def test_builtin_workloads_do_not_need_numpy():
    # torch does not depend on numpy; a machine without it must still run the built-in workloads.
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "from perfgate import builtin\n"
        "for name in builtin.BUILTINS:\n"
        "    dataset = builtin.load(name, 'small').dataset()\n"
        "    print(name, len(dataset), type(dataset[0]).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["lm", "1024", "tuple", "vision", "2048", "tuple"]


def test_file_reference_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(WORKLOADS)
    reference = parse_reference("tiny.py:tiny")
    assert reference.target == f"file:{WORKLOADS / 'tiny.py'}:tiny"
    assert reference.load().name == "tiny"


def test_a_reference_says_whether_its_file_defines_the_function_without_running_it(tmp_path):
    """A paired check asks it of the base's copy: a function the base's file never names is new in the head."""
    work = tmp_path / "work.py"
    work.write_text("import perfgate\n\n\ndef lm():\n    raise SystemExit('never run')\n")
    (reference,) = resolve_references([f"{work}:lm"])
    assert reference.defined() is True
    new = Reference(reference.text, reference.target.replace(":lm", ":vision"))
    assert new.defined() is False  # "vision" appears nowhere in the file
    work.write_text("from common import *\n")
    assert new.defined() is None  # a star import may bring it: only importing tells
    work.unlink()
    assert reference.defined() is False  # the file itself is new
    assert parse_reference("lm").defined() is None and parse_reference("json:dumps").defined() is None


def test_builtin_reference_defaults_to_the_small_size():
    assert parse_reference("lm").target == "builtin:lm@small"
    assert parse_reference("vision@large").target == "builtin:vision@large"
    assert parse_reference("perfgate.builtin:transformer_lm").load().name == "lm-small"


@pytest.mark.parametrize("text", ["tiny.py:", "a-b:c", ":tiny", "  "])
def test_malformed_references_are_refused(text):
    with pytest.raises(WorkloadReferenceError):
        parse_reference(text)


def test_without_references_or_pyproject_the_builtins_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert [r.target for r in resolve_references([])] == ["builtin:lm@small", "builtin:vision@small"]


def test_pyproject_paths_are_relative_to_the_project(tmp_path, monkeypatch):
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "w.py").write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nworkloads = ["perf/w.py:gpt", "lm"]\n')
    monkeypatch.chdir(tmp_path)
    targets = [r.target for r in resolve_references([])]
    assert targets == [f"file:{(tmp_path / 'perf' / 'w.py').resolve()}:gpt", "builtin:lm@small"]


def test_the_same_workload_twice_runs_once(tmp_path, monkeypatch):
    monkeypatch.chdir(WORKLOADS)
    assert len(resolve_references(["tiny.py:tiny", f"{WORKLOADS}/tiny.py:tiny"])) == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"trials": 0}, "--trials must be at least 1, got 0"),
        ({"threads": 0}, "--threads must be at least 1, got 0"),
        ({"timeout_s": 0.0}, "--timeout must be positive, got 0.0"),
        ({"nproc": 0}, "--nproc must be at least 1, got 0"),
        ({"fork": True, "device": "cuda"}, "--fork-trials forks trials on the CPU only, not on cuda"),
    ],
)
def test_run_settings_refuse_counts_the_front_ends_did_not_check(fields, message):
    with pytest.raises(UsageError, match=message):
        RunSettings(configs=("fp32",), **fields)


def test_plan_interleaves_configs_and_rotates_their_order():
    plan = plan_trials(["a"], ["fp32", "bf16", "bf16-compile"], 3)
    order = [(p.trial, p.config) for p in plan]
    assert order == [
        (0, "fp32"),
        (0, "bf16"),
        (0, "bf16-compile"),
        (1, "bf16"),
        (1, "bf16-compile"),
        (1, "fp32"),
        (2, "bf16-compile"),
        (2, "fp32"),
        (2, "bf16"),
    ]
    assert [p.index for p in plan] == list(range(9))


def test_percentile_interpolates_between_ranks():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 99) == 7.0


def test_spread_is_half_the_range_relative_to_the_median():
    spread = Spread.of([90.0, 100.0, 110.0])
    assert spread.median == 100.0
    assert spread.spread_pct == pytest.approx(10.0)
    assert Spread.of([5.0]).spread_pct == 0.0


def _summary(samples_per_sec: float, data_wait: float = 0.02, spread: float = 0.0) -> ConfigSummary:
    return ConfigSummary(
        samples_per_sec=Spread(samples_per_sec, samples_per_sec * (1 - spread), samples_per_sec * (1 + spread), 3),
        step_p50_s=0.01,
        step_p95_s=0.01,
        step_p99_s=0.01,
        phase_share={"data_wait": data_wait, "h2d": 0.0, "forward": 0.4, "backward": 0.5, "optimizer": 0.08},
        phase_median_s={},
        peak_bytes=0,
        reserved_bytes=None,
        compile_s=None,
        trials_ok=3,
        trials_failed=0,
    )


def test_lab_reading_points_at_the_dataloader_when_bf16_barely_helps_and_data_wait_is_high():
    reading = read_lab({"fp32": _summary(100), "bf16": _summary(110, data_wait=0.35), "bf16-compile": _summary(112)})
    assert reading.bf16_speedup == pytest.approx(1.10)
    assert reading.compile_speedup == pytest.approx(112 / 110)
    assert "data wait is 35% of the bf16 step, so look at the DataLoader first" in reading.lines[0]
    assert "already well fused" in reading.lines[1]


def test_lab_reading_says_take_both_when_both_transitions_are_large():
    reading = read_lab({"fp32": _summary(100), "bf16": _summary(200), "bf16-compile": _summary(260)})
    assert reading.lines[-1].startswith("Both transitions are large")


def test_lab_reading_calls_bf16_slower_only_beyond_the_noise():
    clearly_slower = read_lab({"fp32": _summary(100), "bf16": _summary(80)})
    assert clearly_slower.lines == (
        "fp32 -> bf16: 0.80x. bf16 is slower here: the device lacks fast bf16 kernels "
        "(common on CPUs without AMX or AVX512-BF16) or casts dominate; precision is not where this step's time goes.",
    )
    noisy = read_lab({"fp32": _summary(100), "bf16": _summary(95, spread=0.1)})
    assert noisy.lines[0].startswith("fp32 -> bf16: 0.95x (within trial noise). No gain: precision is not")
    assert noisy.compile_speedup is None


def test_lab_reading_skips_missing_configs():
    assert read_lab({"fp32": _summary(100), "bf16": None}).lines == ()
