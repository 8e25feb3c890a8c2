"""Timed rounds: a trial runs its pinned slice's timed steps `rounds` times, calibrated once per config so the
runner's time goes to measuring (`perfgate.measure.rounds`), and the same count for every later trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.measure.rounds import LEAST_PAIRS, MAX_ROUNDS, MAX_TIMED_S, TARGET_SHARE, calibrated_rounds, pair_limit_s
from perfgate.measure.trial import TrialSpec, run_trial
from perfgate.references import resolve_references
from tests.helpers.cli import run_in_process

# Under pytest-xdist these run beside other tests: nothing here reads a verdict or a figure that load changes.
pytestmark = pytest.mark.shares_machine

TINY = Path(__file__).parent / "workloads" / "tiny.py"


def test_rounds_put_the_target_share_of_the_runners_time_into_timed_steps():
    # 2.5 s of timed steps in a 9.5 s trial: 7 s of fixed cost, so 6 rounds (15 s) make 15 / 22 = 68% timed.
    rounds = calibrated_rounds(9.5, 2.5)
    assert rounds == 6
    assert 15 / (7 + 15) >= TARGET_SHARE > 12.5 / (7 + 12.5)  # 5 rounds would fall short


def test_a_trial_that_already_measures_most_of_the_time_keeps_one_round():
    assert calibrated_rounds(10.0, 9.0) == 1
    assert calibrated_rounds(10.0, 10.5) == 1  # timed steps over the wall time (clocks disagree): one round


def test_rounds_are_bounded_by_a_count_and_by_the_timed_seconds_a_trial_may_take():
    assert calibrated_rounds(10.0, 0.01) == MAX_ROUNDS
    per_round = MAX_TIMED_S / 3 + 1  # four rounds would pass MAX_TIMED_S
    assert calibrated_rounds(100 * per_round, per_round) == 2
    assert calibrated_rounds(1000.0, 2 * MAX_TIMED_S) == 1


def test_rounds_leave_the_time_budget_room_for_the_pairs_a_decision_needs():
    # A GPU-sized pair: 30 s to start both trials, 5 s of timed steps. The target share asks for 6 rounds (a 60 s
    # pair), and 200 s a config would then fit the calibrating pair and 2 more: nothing decides in 3 pairs.
    assert calibrated_rounds(35.0, 5.0) == 6
    limit = pair_limit_s(600.0, 3)
    assert limit == 600.0 / (3 * LEAST_PAIRS) == 40.0
    assert calibrated_rounds(35.0, 5.0, pair_s=limit) == 2  # a 40 s pair: 5 of them fit
    assert calibrated_rounds(35.0, 5.0, pair_s=20.0) == 1  # not even one round fits: one round, never none
    assert calibrated_rounds(9.5, 2.5, pair_s=pair_limit_s(600.0, 1)) == calibrated_rounds(9.5, 2.5)  # room enough
    assert calibrated_rounds(35.0, 5.0, pair_s=float("inf")) == 6


def test_calibrating_from_a_trial_of_several_rounds_uses_its_time_per_round():
    assert calibrated_rounds(9.5 + 2.5, 5.0, rounds=2) == calibrated_rounds(9.5, 2.5)


@pytest.mark.parametrize(("wall", "timed"), [(0.0, 1.0), (10.0, 0.0), (float("nan"), 1.0), (10.0, float("inf"))])
def test_nonsense_timings_give_one_round(wall, timed):
    assert calibrated_rounds(wall, timed) == 1


def spec(rounds: int) -> TrialSpec:
    (reference,) = resolve_references([f"{TINY}:tiny"])
    return TrialSpec(reference.text, reference.target, "fp32", 0, "cpu", 1, rounds=rounds)


def test_a_trial_of_three_rounds_times_the_slice_three_times_over_the_same_data():
    one, three = run_trial(spec(1)), run_trial(spec(3))
    assert one is not None and three is not None
    assert one.result.ok and three.result.ok, (one.result.failure, three.result.failure)
    assert (one.result.rounds, three.result.rounds) == (1, 3)
    steps = len(one.result.step_s)
    assert len(three.result.step_s) == 3 * steps
    assert all(len(values) == 3 * steps for values in three.result.phases_s.values())
    batch = 8  # tiny's batch_size
    assert three.result.samples_per_sec == pytest.approx(3 * steps * batch / sum(three.result.step_s))
    # The same pinned slice: the same warm-up losses and the same data checksum (one pass over the slice).
    assert three.result.first_losses == one.result.first_losses
    assert three.result.data_checksum == one.result.data_checksum


@pytest.mark.e2e
def test_a_lab_run_times_the_slice_once_unless_asked_for_more_rounds(tmp_path):
    # Calibrated rounds are a paired check's (tests/test_against.py): a stored baseline and its check are two sessions.
    counts = {}
    for rounds in (None, "3"):
        out = tmp_path / f"results-{rounds}.json"
        extra = () if rounds is None else ("--rounds", rounds)
        args = ("run", f"{TINY}:tiny", "--configs", "fp32", "--trials", "2", "--quiet", *extra, "--json", str(out))
        result = run_in_process(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        trials = json.loads(out.read_text())["workloads"][0]["configs"]["fp32"]["trials"]
        assert all(t["wall_s"] > sum(t["step_s"]) for t in trials)
        counts[rounds] = [(t["rounds"], len(t["step_s"])) for t in trials]
    assert counts[None] == [(1, 4), (1, 4)]  # tiny: 4 timed steps
    assert counts["3"] == [(3, 12), (3, 12)]


def test_rounds_must_be_auto_or_a_count(tmp_path):
    result = run_in_process("run", f"{TINY}:tiny", "--rounds", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "--rounds" in result.stderr and "at least 1" in result.stderr
