"""`perfgate calibrate`: the runner's paired noise, its rate of one-sided slow pairs (r0, which a paired check's
count test reads from `[tool.perfgate]`) and a planted slowdown, outside git too."""

from __future__ import annotations

import datetime
import json
import math
import random
import re
from dataclasses import replace

import pytest

from perfgate.check.calibrate import detectable_slowdown, runner_slow_rate
from perfgate.judge.stats import binomial_tail, count_slow_pairs, rate_upper_bound
from perfgate.judge.verdict import compare_pairs
from perfgate.judge.wording import count_text
from perfgate.measure.environment import torch_default_threads
from perfgate.project import ProjectConfig
from perfgate.records.comparisons import SLOW_RATE
from perfgate.records.results import Against
from perfgate.records.verdicts import GateSettings, Look
from perfgate.report.calibration import slow_pair_lines
from tests.helpers.cli import run_in_process
from tests.helpers.results import BASE_MS, phased_run, validate_results
from tests.helpers.workloads import TINY_FILE

TINY = f"{TINY_FILE}:tiny"


@pytest.mark.e2e
def test_calibrate_outside_git_reports_noise_and_sees_a_planted_slowdown(tmp_path):
    results = tmp_path / "planted.json"
    result = run_in_process(
        "calibrate", TINY, "--pairs", "2", "--trials", "2", "--max-trials", "2", "--time-budget", "40",
        "--slowdown", "90%", "--json", str(results),
        "--fork-trials",  # the subject is what calibrate reports, not how a trial process starts
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # progress counts pairs, of the pairs planned: 2 for the A/A, then 2 for the planted pass (its --max-trials)
    progress = [line for line in result.stderr.splitlines() if "] tiny fp32 " in line]
    assert len(progress) == 4 and all(re.search(r"\] tiny fp32 pair [12]/2: ", line) for line in progress), progress
    assert "calibration: this runner, the working tree against itself" in result.stdout
    (row,) = [line.split() for line in result.stdout.splitlines() if line.startswith("  tiny ")]
    assert row[1] == "fp32" and row[2].endswith("%")  # the pair noise was measured
    assert row[6] in ("regression", "inconclusive") and float(row[-1].rstrip("x")) < 0.8  # head took 1.9x as long
    threads = torch_default_threads()  # nothing pinned: what the user's training gets
    assert f"settings: {threads} torch thread(s) per trial (torch's default) on cpu" in result.stdout
    # r0 from the A/A pairs: 2 pairs are 4 pair-sides, far too few to move it from the default but by a stall
    assert re.search(
        r"\n  one-sided slow pairs: [0-4] of 4 pair-sides \(at most \d+% at 95%\); "
        r"the count test will assume at most \d+%",
        result.stdout,
    ), result.stdout
    assert re.search(r'add to \[tool.perfgate\] \(pyproject.toml\): slow_pair_rate = "\d+%" and '
                     r"slow_pair_rate_date = \d{4}-\d\d-\d\d\n", result.stdout)  # fmt: skip
    document = json.loads(results.read_text())
    validate_results(document)
    assert document["against"]["ref"] == "itself" and document["against"]["base_commit"] == ""


def test_the_detectable_slowdown_shrinks_with_more_pairs_and_never_undercuts_the_threshold():
    settings = GateSettings(first_n=3, max_n=20)
    few, many = detectable_slowdown(0.03, 5, settings, 0.05), detectable_slowdown(0.03, 20, settings, 0.05)
    assert 0.05 < many < few
    assert detectable_slowdown(0.001, 20, settings, 0.05) > 0.05  # beyond the threshold, whatever the noise
    assert math.isnan(detectable_slowdown(math.nan, 20, settings, 0.05))
    assert math.isnan(detectable_slowdown(0.03, 1, settings, 0.05))


# -- r0: the runner's rate of one-sided slow pairs, from the A/A pairs ------------------------------------------


def aa_count(n: int, *, head_slow: frozenset[int] = frozenset(), base_slow: frozenset[int] = frozenset(), seed=0):
    """The count test of `n` A/A pairs at 2% pair noise, with head's (base's) trials in `head_slow` (`base_slow`)
    stalled 2x."""
    rng = random.Random(seed)
    differences = [
        rng.gauss(0, 0.02) - (math.log(2) if i in head_slow else 0.0) + (math.log(2) if i in base_slow else 0.0)
        for i in range(n)
    ]
    return count_slow_pairs(differences, SLOW_RATE, 0.001)


def test_the_rates_upper_bound_is_clopper_pearsons():
    assert rate_upper_bound(0, 24, 0.95) == pytest.approx(1 - 0.05 ** (1 / 24))  # 11.7%
    # the largest rate under which 3 or fewer of 48 are seen 5% of the time
    assert 1 - binomial_tail(4, 48, rate_upper_bound(3, 48, 0.95)) == pytest.approx(0.05)
    assert rate_upper_bound(0, 24, 0.8) < rate_upper_bound(0, 24, 0.95)
    assert rate_upper_bound(5, 5, 0.95) == 1.0 and math.isnan(rate_upper_bound(0, 0, 0.95))
    with pytest.raises(ValueError, match="a count of 3 in 2 chances"):
        rate_upper_bound(3, 2, 0.95)


def test_a_few_quiet_aa_pairs_cannot_lower_the_rate_and_the_line_says_what_the_count_test_assumes():
    found = runner_slow_rate([aa_count(5), aa_count(7, seed=1)])  # two configs' pairs, pooled: 24 pair-sides
    assert (found.slow, found.sides, found.bound, found.rate) == (0, 24, 0.12, SLOW_RATE)
    seen, keep = slow_pair_lines(found, datetime.date(2026, 11, 28))
    assert seen == (
        "one-sided slow pairs: 0 of 24 pair-sides (at most 12% at 95%); the count test will assume at most 5%"
    )
    assert keep.endswith('[tool.perfgate] (pyproject.toml): slow_pair_rate = "5%" and slow_pair_rate_date = 2026-11-28')


def test_enough_quiet_aa_pairs_show_a_rate_below_the_default():
    found = runner_slow_rate([aa_count(40)])  # 0 of 80: at most 3.7% at 95%
    assert (found.slow, found.sides, found.rate) == (0, 80, 0.04)
    assert slow_pair_lines(found, datetime.date(2026, 11, 28))[0].endswith(
        "the count test will assume at most 4%, below perfgate's default of 5%: these pairs show this runner stalls "
        "less often"
    )


def test_a_runner_that_stalls_either_side_often_is_assumed_to_stall_at_its_bound():
    # 4 of 24 pair-sides stalled, on both sides: beyond 5% at p=0.03, as a check's count test would stand down on
    found = runner_slow_rate([aa_count(12, head_slow=frozenset({2, 9}), base_slow=frozenset({4, 7}))])
    assert (found.slow, found.sides) == (4, 24) and found.measured == pytest.approx(4 / 24)
    assert found.rate == found.bound == 0.35  # Clopper-Pearson's 95% bound of 4 in 24, up to a whole percent
    assert (
        "the count test will assume at most 35%: this runner stalls one side of a pair more often than "
        in (slow_pair_lines(found, datetime.date(2026, 11, 28))[0])
    )
    # 1 of 24 is no evidence either way: the default stands
    assert runner_slow_rate([aa_count(12, base_slow=frozenset({4}))]).rate == SLOW_RATE


def test_a_calibration_without_pairs_assumes_the_default():
    found = runner_slow_rate([])
    assert found.rate == SLOW_RATE and math.isnan(found.bound)
    assert slow_pair_lines(found, datetime.date(2026, 11, 28)) == [
        "one-sided slow pairs: no A/A pair was measured; the count test will assume at most 5% "
        "(perfgate's default of 5%)"
    ]


def test_a_paired_verdicts_count_line_names_where_the_projects_rate_came_from():
    base, head = phased_run(BASE_MS), phased_run(BASE_MS)
    against = Against(ref="main", base_commit="b" * 40, head_commit="h" * 40, head_dirty=False, base=base)
    looks = {("w", "fp32"): Look(3, 0, True)}

    def count(project: ProjectConfig):
        settings = GateSettings.from_options(project, trials=3, paired=True)
        result = compare_pairs(replace(head, against=against), base, settings, looks, against)
        (verdict,) = result.verdicts
        assert verdict.throughput is not None and verdict.throughput.count is not None
        return verdict.throughput.count

    calibrated = count(ProjectConfig(slow_pair_rate=0.02, slow_pair_rate_date=datetime.date(2026, 11, 28)))
    assert calibrated.rate == 0.02
    assert "at most 2% (measured by perfgate calibrate on 2026-11-28)" in count_text(calibrated)
    by_hand = count(ProjectConfig(source="pyproject.toml [tool.perfgate]", slow_pair_rate=0.025))
    assert "at most 2.5% (from [tool.perfgate] slow_pair_rate)" in count_text(by_hand)
    assert "at most 5% (perfgate's default)" in count_text(count(ProjectConfig()))
