"""Thresholds from [tool.perfgate] or perfgate.yaml: parsing, precedence and the errors users see."""

from __future__ import annotations

import pytest

from perfgate.errors import UsageError
from perfgate.project import load_project_config, parse_fraction


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
    (tmp_path / "perfgate.yaml").write_text('thresholds:\n  "lm-small/fp16": {throughput: "5%"}\n')
    with pytest.raises(UsageError, match="bad key 'lm-small/fp16'.*fp32, bf16, bf16-compile"):
        load_project_config(tmp_path)


def test_perfgate_yaml_is_read_when_pyproject_has_no_section(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "perfgate.yaml").write_text('workloads: ["lm"]\nthreshold: 3%\nalpha: 0.005\nmax_trials: 5\n')
    project = load_project_config(tmp_path)
    assert project.workloads == ["lm"]
    assert (project.threshold, project.alpha, project.max_trials) == (0.03, 0.005, 5)
