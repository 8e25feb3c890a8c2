"""History trends on seeded synthetic series: change points where levels changed, and creep."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from perfgate.judge import trends
from perfgate.judge.trends import change_points, creep

MIB = 1 << 20
SEEDS = range(20)


def history(
    levels: list[float], *, noise: float, seed: int, trials: int = 3, run_noise: float = 0.0
) -> list[list[float]]:
    """Runs around the given levels: each run's level is off by `run_noise` (log sd), each trial by `noise`."""
    rng = random.Random(seed)
    runs = []
    for level in levels:
        run_level = level * math.exp(rng.gauss(0.0, run_noise))
        runs.append([run_level * math.exp(rng.gauss(0.0, noise)) for _ in range(trials)])
    return runs


def test_a_ten_percent_step_in_two_percent_noise_is_found_where_it_happened():
    runs = history([1000.0] * 6 + [900.0] * 6, noise=0.02, seed=1)
    [point] = change_points(runs)
    assert point.index == 6
    assert point.change == pytest.approx(-0.10, abs=0.02)
    assert point.before == pytest.approx(1000, rel=0.03)
    assert point.after == pytest.approx(900, rel=0.03)
    assert point.p_value < 1e-4


def test_a_flat_series_in_five_percent_noise_has_no_change_point():
    found = [seed for seed in SEEDS if change_points(history([1000.0] * 12, noise=0.05, run_noise=0.05, seed=seed))]
    assert found == []


def test_the_penalty_alone_keeps_flat_noise_in_one_segment():
    # with the filters off (any change, any p-value) only the segmentation's penalty decides
    found = [
        seed
        for seed in SEEDS
        if change_points(history([1000.0] * 12, noise=0.05, run_noise=0.05, seed=seed), min_change=0.0, alpha=1.0)
    ]
    assert len(found) <= 2


def test_without_the_penalty_flat_noise_would_be_cut(monkeypatch: pytest.MonkeyPatch):
    # what the test above guards against: a zero penalty cuts nearly every flat series
    monkeypatch.setattr(trends, "PENALTY_FACTOR", 0.0)
    found = [
        seed
        for seed in SEEDS
        if change_points(history([1000.0] * 12, noise=0.05, run_noise=0.05, seed=seed), min_change=0.0, alpha=1.0)
    ]
    assert len(found) >= 15


def test_a_three_percent_step_is_under_min_change_but_there():
    runs = history([1000.0] * 6 + [970.0] * 6, noise=0.005, seed=2)
    assert change_points(runs) == []
    [point] = change_points(runs, min_change=0.02)
    assert point.index == 6
    assert point.change == pytest.approx(-0.03, abs=0.01)


def test_a_regression_that_came_and_went_gives_two_change_points():
    runs = history([1000.0] * 6 + [880.0] * 6 + [1000.0] * 6, noise=0.02, seed=3)
    down, up = change_points(runs)
    assert (down.index, up.index) == (6, 12)
    assert down.change == pytest.approx(-0.12, abs=0.02)
    assert up.change == pytest.approx(1000 / 880 - 1, abs=0.02)
    assert max(down.p_value, up.p_value) < 0.01


def test_exact_peak_memory_that_grew_is_one_certain_change_point():
    runs = [[100.0 * MIB]] * 5 + [[120.0 * MIB]] * 5
    [point] = change_points(runs)
    assert (point.index, point.before, point.after, point.p_value) == (5, 100.0 * MIB, 120.0 * MIB, 0.0)
    assert point.change == pytest.approx(0.20)


def test_runs_without_trials_are_skipped_and_indices_count_them():
    runs = history([1000.0] * 6 + [900.0] * 6, noise=0.02, seed=1)
    with_gaps = [[], *runs[:3], [], *runs[3:]]
    [point] = change_points(with_gaps)
    assert point == replace(change_points(runs)[0], index=8)


def test_a_series_shorter_than_two_segments_has_no_change_point():
    assert change_points([[1000.0], [500.0], [500.0]]) == []


def test_a_steady_two_percent_per_run_creep_is_creep_and_no_step():
    for seed in range(5):
        runs = history([1000.0 * 0.98**i for i in range(6)], noise=0.005, seed=seed)
        points = change_points(runs)
        assert points == []
        found = creep(runs, change_points=points)
        assert found is not None
        assert (found.start, found.end) == (0, 5)
        assert found.change == pytest.approx(0.98**5 - 1, abs=0.015)
        assert found.p_value < 0.01


def test_a_flat_series_has_no_creep():
    assert [seed for seed in SEEDS if creep(history([1000.0] * 12, noise=0.02, run_noise=0.02, seed=seed))] == []


def test_a_step_already_reported_is_not_creep_too():
    runs = history([1000.0] * 6 + [900.0] * 6, noise=0.02, seed=1)
    assert creep(runs) is not None  # a line through the step is a trend...
    assert creep(runs, change_points=change_points(runs)) is None  # ...but the window starts after it


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
def test_a_value_that_is_not_positive_and_finite_is_refused(bad: float):
    runs = [[1000.0, 990.0]] * 2 + [[1000.0, bad]] + [[1000.0, 990.0]] * 3
    with pytest.raises(ValueError, match=rf"^run 2, trial 1: {bad!r} is not a positive finite number$"):
        change_points(runs)
    with pytest.raises(ValueError, match="run 2, trial 1"):
        creep(runs)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_size": 1}, "min_size must be at least 2 runs, got 1"),
        ({"alpha": 0.0}, r"alpha must be in \(0, 1\], got 0.0"),
        ({"min_change": -0.1}, "min_change must be a fraction of 0 or more, got -0.1"),
    ],
)
def test_bad_settings_are_refused(options: dict[str, float], message: str):
    with pytest.raises(ValueError, match=message):
        change_points([[1000.0]] * 6, **options)  # type: ignore[arg-type]


def test_a_long_creep_is_not_cut_into_steps():
    # the halves of 10 runs drifting 2% each differ with p < 0.01: only the ramp check keeps them whole
    runs = history([1000.0 * 0.98**i for i in range(10)], noise=0.005, seed=4)
    assert change_points(runs) == []
    found = creep(runs)
    assert found is not None
    assert found.change == pytest.approx(0.98**9 - 1, abs=0.02)
