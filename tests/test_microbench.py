"""pytest-benchmark results in perfgate's terms: blocks of rounds, their baseline file, and verdicts."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import yaml

from perfgate.errors import ResultsError
from perfgate.judge.micro import compare_micro
from perfgate.judge.verdict import Status
from perfgate.records.baselines import BaselineError
from perfgate.records.fingerprint import Fingerprint
from perfgate.records.micro import (
    DEFAULT_RUN_NOISE,
    MICRO_FILE,
    MicroBenchmark,
    MicroStore,
    block_rates,
    parse_pytest_benchmark,
)

FINGERPRINT = Fingerprint(device_type="cpu", cpu_model="Test CPU", threads=2, torch="2.13.0", device_count=1)


def document(times_by_name):
    return {"benchmarks": [{"fullname": name, "stats": {"data": times}} for name, times in times_by_name.items()]}


def rounds(seconds, n=200, noise=0.01, seed=0):
    rng = random.Random(seed)
    return [seconds * (1 + noise * rng.gauss(0, 1)) for _ in range(n)]


def test_rounds_are_cut_into_contiguous_blocks_of_median_rate():
    times = [1.0] * 10 + [2.0] * 10
    assert block_rates(times, max_blocks=2) == [1.0, 0.5]
    assert block_rates([0.5, 0.25]) == [2.0, 4.0]  # fewer rounds than blocks: one round a block
    assert len(block_rates(rounds(0.001, n=1000))) == 10


def test_one_interrupted_round_spoils_nothing():
    times = rounds(0.001)
    times[50] = 0.5  # another job took the core for half a second
    assert max(block_rates(times)) / min(block_rates(times)) < 1.05


def test_parse_reads_fullname_and_raw_rounds_and_skips_benchmarks_that_never_ran():
    measured = parse_pytest_benchmark(
        document({"t.py::test_a": rounds(0.002), "t.py::test_skipped": []}), probe=100.0, commit="abc"
    )
    (only,) = measured
    assert only.name == "t.py::test_a" and only.rounds == 200 and only.probe_steps_per_sec == 100.0
    assert only.median_s == pytest.approx(0.002, rel=0.02) and only.commit == "abc"


@pytest.mark.parametrize("bad", [None, [], {"benchmarks": "x"}, {"benchmarks": [{"fullname": "t", "stats": {}}]}])
def test_parse_refuses_what_is_not_pytest_benchmark_json_with_data(bad):
    with pytest.raises(ResultsError):
        parse_pytest_benchmark(bad)


def test_store_round_trips_and_keeps_other_benchmarks_and_machines(tmp_path):
    store = MicroStore(tmp_path)
    first = parse_pytest_benchmark(document({"t.py::a": rounds(0.001), "t.py::b": rounds(0.002)}), probe=50.0)
    previous = store.write(FINGERPRINT, first)
    assert previous == {"t.py::a": None, "t.py::b": None}
    other_machine = replace(FINGERPRINT, threads=8)
    store.write(other_machine, parse_pytest_benchmark(document({"t.py::a": rounds(0.0005)})))
    again = parse_pytest_benchmark(document({"t.py::a": rounds(0.003, seed=1)}), probe=60.0)
    previous = store.write(FINGERPRINT, again)
    assert previous["t.py::a"] is not None and previous["t.py::a"].median_s == pytest.approx(0.001, rel=0.02)
    mine = store.find(FINGERPRINT)
    assert set(mine) == {"t.py::a", "t.py::b"}
    assert mine["t.py::a"].median_s == pytest.approx(0.003, rel=0.02) and mine["t.py::a"].probe_steps_per_sec == 60
    assert set(store.find(other_machine)) == {"t.py::a"}
    text = (tmp_path / MICRO_FILE).read_text()
    assert text.startswith("# perfgate baseline for pytest-benchmark tests")
    assert yaml.safe_load(text)["schema_version"] == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("machines: [", "invalid YAML"),
        ("schema_version: 9\nmachines: {}\n", "unsupported schema_version 9"),
        (
            "schema_version: 1\nmachines:\n  m:\n    fingerprint: {}\n    benchmarks:\n      t: {rounds: 1, "
            "median_s: 1, min_s: 1, block_calls_per_sec: [-1]}\n",
            "must be finite and not negative",
        ),
        ("!!python/object/apply:os.system ['echo hacked']", "invalid YAML"),
    ],
)
def test_a_bad_file_is_a_one_line_baseline_error(tmp_path, text, message):
    (tmp_path / MICRO_FILE).write_text(text)
    with pytest.raises(BaselineError, match=message) as error:
        MicroStore(tmp_path).load()
    assert "pytest --perfgate-update" in error.value.one_line()


def micro(name, seconds, probe=100.0, seed=0):
    (measured,) = parse_pytest_benchmark(document({name: rounds(seconds, seed=seed)}), probe=probe)
    return measured


def test_verdicts_regression_no_change_and_no_baseline_on_a_machine_without_run_to_run_noise():
    base = {"a": micro("a", 0.001), "b": micro("b", 0.001)}
    current = [micro("a", 0.0013, seed=1), micro("b", 0.001, seed=2), micro("c", 0.001)]
    a, b, c = compare_micro(base, current, threshold=0.05, alpha=0.01, run_noise=0.0)
    assert a.status == Status.REGRESSION and a.reason.startswith("calls/s -2")
    assert b.status == Status.NO_CHANGE
    assert c.status == Status.NO_BASELINE and "pytest --perfgate-update" in c.reason


def test_run_to_run_noise_widens_the_interval_that_blocks_of_one_session_would_make_too_narrow():
    base = {"a": micro("a", 0.001), "b": micro("b", 0.001), "c": micro("c", 0.001)}
    current = [micro("a", 0.0015, seed=1), micro("b", 0.001, seed=2), micro("c", 0.0012, seed=3)]
    narrow = compare_micro(base, current, threshold=0.05, alpha=0.01, run_noise=0.0)
    a, b, c = compare_micro(base, current, threshold=0.05, alpha=0.01, run_noise=DEFAULT_RUN_NOISE)
    assert a.status == Status.REGRESSION  # 50% more time per call stands out even from session-to-session noise
    assert narrow[2].status == Status.REGRESSION and c.status == Status.INCONCLUSIVE  # 20% does not
    assert b.status == Status.INCONCLUSIVE  # but one session cannot rule out a 5% slowdown
    assert b.throughput.ci_low < narrow[1].throughput.ci_low
    assert "could detect slowdowns of" in b.reason


def test_a_slower_machine_is_not_a_regression_of_the_code():
    """30% slower rounds while the probe also ran 30% slower: raw says regression, adjusted says no change."""
    base = {"a": micro("a", 0.001, probe=100.0)}
    (verdict,) = compare_micro(
        base, [micro("a", 0.0013, probe=100 / 1.3, seed=1)], threshold=0.05, alpha=0.01, run_noise=0.0
    )
    assert verdict.status == Status.INCONCLUSIVE
    assert "the machine probe ran 0.769x as fast" in verdict.reason


def test_a_benchmark_without_probe_is_judged_on_raw_rates():
    base = {"a": MicroBenchmark("a", 10, [100.0, 101.0, 99.0], 0.01, 0.01)}
    current = [MicroBenchmark("a", 10, [50.0, 51.0, 49.0], 0.02, 0.02)]
    (verdict,) = compare_micro(base, current, threshold=0.05, alpha=0.01)
    assert verdict.status == Status.REGRESSION and verdict.adjusted is None


def test_update_sessions_of_one_commit_add_up_and_a_new_commit_starts_over(tmp_path):
    store = MicroStore(tmp_path)
    for seconds in (0.001, 0.0011, 0.0012, 0.001, 0.0011, 0.0012):  # six sessions of one commit: five are kept
        (measured,) = parse_pytest_benchmark(document({"a": rounds(seconds)}), probe=100.0, commit="c1")
        store.write(FINGERPRINT, [measured])
    kept = store.find(FINGERPRINT)["a"].sessions
    assert len(kept) == 5 and kept[-1].calls_per_sec == pytest.approx(1 / 0.0012, rel=0.02)
    assert kept[0].probe_steps_per_sec == 100.0
    (measured,) = parse_pytest_benchmark(document({"a": rounds(0.002)}), probe=90.0, commit="c2")
    store.write(FINGERPRINT, [measured])
    (session,) = store.find(FINGERPRINT)["a"].sessions
    assert session.calls_per_sec == pytest.approx(500, rel=0.02) and session.probe_steps_per_sec == 90.0


def baseline_with_sessions(seconds_per_session):
    store_sessions = [micro("a", s, seed=i).session for i, s in enumerate(seconds_per_session)]
    return {"a": replace(micro("a", seconds_per_session[-1]), sessions=store_sessions)}


def test_with_three_sessions_their_own_spread_sets_the_bar():
    tight = baseline_with_sessions([0.00100, 0.00101, 0.00099])
    (few,) = compare_micro(tight, [micro("a", 0.0013, seed=9)], threshold=0.05, alpha=0.01, run_noise=0.5)
    assert few.status == Status.INCONCLUSIVE  # three sessions against one: 2 degrees of freedom, too few to call
    assert "cannot call a change" in few.reason
    four = baseline_with_sessions([0.00100, 0.00101, 0.00099, 0.001005])
    (slow,) = compare_micro(four, [micro("a", 0.0013, seed=9)], threshold=0.05, alpha=0.01, run_noise=0.5)
    assert slow.status == Status.REGRESSION  # run_noise is not used: the sessions show theirs
    assert (slow.throughput.n_baseline, slow.throughput.n_candidate) == (4, 1)
    bimodal = baseline_with_sessions([0.001, 0.003, 0.0011])  # a benchmark that jumps between two speeds
    (verdict,) = compare_micro(bimodal, [micro("a", 0.003, seed=9)], threshold=0.05, alpha=0.01)
    assert verdict.status == Status.INCONCLUSIVE


def test_two_sessions_are_not_enough_to_replace_the_assumed_noise():
    two = baseline_with_sessions([0.00100, 0.00101])
    (verdict,) = compare_micro(two, [micro("a", 0.001, seed=9)], threshold=0.05, alpha=0.01, run_noise=0.0)
    assert verdict.throughput.n_baseline == 10  # blocks of the last session
