"""Thresholds from [tool.perfgate] or perfgate.yaml: parsing, precedence and the errors users see."""

from __future__ import annotations

import datetime

import pytest

from perfgate.errors import UsageError
from perfgate.project import ProjectConfig, load_project_config, parse_fraction
from perfgate.records.comparisons import SLOW_RATE
from perfgate.records.verdicts import GateSettings


@pytest.mark.parametrize(("value", "fraction"), [("5%", 0.05), ("12.5%", 0.125), (0.05, 0.05), ("0.1", 0.1)])
def test_percentages_and_fractions_parse(value, fraction):
    assert parse_fraction(value, "--threshold") == pytest.approx(fraction)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("5", "'5' is ambiguous: a fraction must be below 1"),
        (5, "5 is ambiguous: a fraction must be below 1"),
        ("-1", "'-1' must be positive"),
        ("150%", "'150%' must be between 0% and 100%"),
        ("fast", "'fast' is not a percentage"),
    ],
)
def test_ambiguous_or_out_of_range_thresholds_are_refused(value, message):
    with pytest.raises(UsageError) as raised:
        parse_fraction(value, "--threshold")
    assert raised.value.one_line() == f'{message} (--threshold); write a percentage such as "5%" (or the fraction 0.05)'


def test_the_most_specific_threshold_wins(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.perfgate]\n"
        'threshold = "4%"\n'
        'memory_threshold = "6%"\n'
        "[tool.perfgate.thresholds]\n"
        '"vision-small" = { throughput = "10%" }\n'
        '"*/bf16-compile" = { memory = "20%" }\n'
        '"vision-small/bf16-compile" = { throughput = "15%" }\n'
    )
    project = load_project_config(tmp_path)
    lm = project.thresholds_for("lm-small", "fp32")
    assert (lm.throughput, lm.memory) == pytest.approx((0.04, 0.06))
    vision = project.thresholds_for("vision-small", "fp32")
    assert (vision.throughput, vision.memory) == pytest.approx((0.10, 0.06))
    compiled = project.thresholds_for("vision-small", "bf16-compile")
    assert (compiled.throughput, compiled.memory) == pytest.approx((0.15, 0.20))
    # A --threshold on the command line replaces the global value, not the overrides.
    assert project.thresholds_for("lm-small", "fp32", threshold=0.08).throughput == pytest.approx(0.08)
    assert project.thresholds_for("vision-small", "fp32", threshold=0.08).throughput == pytest.approx(0.10)


def test_an_unknown_key_suggests_the_nearest_valid_one(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nthreshhold = "5%"\n')
    with pytest.raises(UsageError) as raised:
        load_project_config(tmp_path)
    assert raised.value.one_line().startswith("unknown key 'threshhold' (")
    assert raised.value.one_line().endswith("; did you mean 'threshold'?")


def test_a_bad_per_config_key_lists_the_configs(tmp_path):
    (tmp_path / "perfgate.yaml").write_text('thresholds:\n  "lm-small/fp8": {throughput: "5%"}\n')
    with pytest.raises(UsageError, match="bad key 'lm-small/fp8'.*fp32, bf16, bf16-compile, fp16"):
        load_project_config(tmp_path)


def test_perfgate_yaml_is_read_when_pyproject_has_no_section(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "perfgate.yaml").write_text('workloads: ["lm"]\nthreshold: 3%\nalpha: 0.005\nmax_trials: 5\n')
    project = load_project_config(tmp_path)
    assert project.workloads == ["lm"]
    assert (project.threshold, project.alpha, project.max_trials) == (0.03, 0.005, 5)


# -- slow_pair_rate: the count test's r0, as perfgate calibrate prints it ----------------------------------------


def test_the_calibrated_slow_pair_rate_and_its_date_reach_a_paired_checks_settings(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.perfgate]\nslow_pair_rate = "3%"\nslow_pair_rate_date = 2026-11-28\n'
    )
    project = load_project_config(tmp_path)
    assert (project.slow_pair_rate, project.slow_pair_rate_date) == (0.03, datetime.date(2026, 11, 28))
    settings = GateSettings.from_options(project, trials=3, paired=True)
    assert settings.slow_rate == 0.03
    assert settings.slow_rate_source == "measured by perfgate calibrate on 2026-11-28"
    default = GateSettings.from_options(ProjectConfig(), trials=3, paired=True)  # without the key
    assert (default.slow_rate, default.slow_rate_source) == (SLOW_RATE, "")


@pytest.mark.parametrize(
    ("file", "text", "source"),
    [
        ("pyproject.toml", "[tool.perfgate]\nslow_pair_rate = 0.08\n", "from [tool.perfgate] slow_pair_rate"),
        ("perfgate.yaml", "slow_pair_rate: 8%\n", "from perfgate.yaml slow_pair_rate"),
    ],
)
def test_a_slow_pair_rate_without_a_date_is_named_by_its_key(tmp_path, file, text, source):
    (tmp_path / file).write_text(text)
    settings = GateSettings.from_options(load_project_config(tmp_path), trials=3, paired=True)
    assert (settings.slow_rate, settings.slow_rate_source) == (0.08, source)


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("1.5", "1.5 is ambiguous: a fraction must be below 1"),
        ("0", "0 must be positive"),
        ('"100%"', "'100%' must be between 0% and 100%"),
        ('"often"', "'often' is not a percentage"),
    ],
)
def test_a_slow_pair_rate_outside_zero_and_one_is_refused_with_its_key_and_the_fix(tmp_path, value, what):
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\nslow_pair_rate = {value}\n")
    with pytest.raises(UsageError) as raised:
        load_project_config(tmp_path)
    fix = 'write the rate perfgate calibrate printed, such as slow_pair_rate = "5%" (or remove it: 5%)'
    assert raised.value.one_line() == f"{what} ({tmp_path / 'pyproject.toml'} [tool.perfgate] slow_pair_rate); {fix}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slow_pair_rate_date = 2026-11-28\n", "a date without slow_pair_rate"),
        ('slow_pair_rate = "5%"\nslow_pair_rate_date = "last week"\n', "'last week' is not a date"),
    ],
)
def test_a_bad_slow_pair_rate_date_is_refused_with_its_key(tmp_path, text, message):
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\n{text}")
    with pytest.raises(UsageError) as raised:
        load_project_config(tmp_path)
    assert raised.value.one_line().startswith(
        f"{message} ({tmp_path / 'pyproject.toml'} [tool.perfgate] slow_pair_rate_date); "
    )
