"""pytest-benchmark tests against a git ref: whole sessions of both sides in ABBA pairs, judged paired.

The decision logic runs on made-up session figures; the end-to-end tests build a real git repository,
run `pytest --perfgate --perfgate-against` in a real subprocess, and its paired sessions are real
pytest subprocesses too. A session costs about 3 s here whatever the benchmark (pytest's start and
pytest-benchmark's one-second timer calibration), so the repositories keep to one benchmark and few pairs.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from perfgate.check.micro import INNER_SESSION_ENV, PairLimits, decide_pairs, pair_sides
from perfgate.judge.verdict import Status
from perfgate.records.micro import MicroBenchmark
from tests.helpers.cli import UNUSED_PYTEST_PLUGINS
from tests.helpers.git import git

# -- the decision, on made-up sessions -----------------------------------------------------------------


def bench(name, rate):
    return MicroBenchmark(name, rounds=10, block_calls_per_sec=[rate], median_s=1 / rate, min_s=1 / rate)


class Sessions:
    """A made-up pair of sides: calls/s per benchmark and side, with noise, and a clock that each
    session advances by `session_s`."""

    def __init__(self, rates, noise=0.002, session_s=3.0, seed=0):
        self.rates = rates  # {name: {"base": rate, "head": rate}}; a side without a rate lacks the benchmark
        self.noise = noise
        self.session_s = session_s
        self.now = 0.0
        self.calls = []
        self.rng = random.Random(seed)

    def clock(self):
        return self.now

    def measure(self, side, pair):
        self.calls.append((pair, side))
        self.now += self.session_s
        return {
            name: bench(name, sides[side] * (1 + self.noise * self.rng.gauss(0, 1)))
            for name, sides in self.rates.items()
            if side in sides
        }


def decide(sessions, names, notify=None, **options):
    limits = {"threshold": 0.05, "max_pairs": 10, "min_pairs": 3, "time_budget_s": 600.0}
    limits.update(options)
    return decide_pairs(
        sessions.measure, names, ref="main", limits=PairLimits(**limits), notify=notify, clock=sessions.clock
    )


def test_pairs_alternate_which_side_runs_first():
    assert [pair_sides(i) for i in range(4)] == [("base", "head"), ("head", "base"), ("base", "head"), ("head", "base")]
    sessions = Sessions({"t::a": {"base": 100.0, "head": 50.0}})
    result = decide(sessions, ["t::a"])
    # four pairs: fewer never call a change (stats.MIN_DECIDING)
    assert sessions.calls == [
        (0, "base"),
        (0, "head"),
        (1, "head"),
        (1, "base"),
        (2, "base"),
        (2, "head"),
        (3, "head"),
        (3, "base"),
    ]
    assert result.order == ["#0: base, head", "#1: head, base", "#2: base, head", "#3: head, base"]


def test_a_clear_slowdown_and_an_unchanged_benchmark_are_decided_after_the_first_pairs():
    sessions = Sessions({"t::slow": {"base": 100.0, "head": 50.0}, "t::same": {"base": 100.0, "head": 100.0}})
    result = decide(sessions, ["t::slow", "t::same"])
    assert result.pairs == 4 and result.stopped_because is None  # the first look (3 pairs) cannot call a change
    slow, same = result.verdicts
    assert slow.status == Status.REGRESSION
    assert slow.reason.startswith("calls/s -50.0% (0.500x, ")
    assert slow.throughput.n_candidate == 4
    assert (slow.baseline.name, slow.current.name) == ("t::slow", "t::slow")  # the last pair's sessions
    assert same.status == Status.NO_CHANGE


def test_an_open_verdict_gets_one_more_pair_at_a_time_up_to_the_most_allowed():
    sessions = Sessions({"t::noisy": {"base": 100.0, "head": 97.0}}, noise=0.05)
    notes = []
    result = decide(sessions, ["t::noisy"], max_pairs=6, notify=notes.append)
    (verdict,) = result.verdicts
    assert verdict.status == Status.INCONCLUSIVE
    assert result.pairs == 6
    assert result.stopped_because == "6 pairs, the most allowed"
    assert "inconclusive so far: t::noisy; running one more session pair" in notes
    assert "and 6 pairs it could detect" in verdict.reason


def test_the_time_budget_stops_the_pairs_and_makes_that_look_the_last():
    # 3 s a session, 6 s a pair: after 4 pairs (24 s) a fifth would end at 30 s, past the 28 s budget.
    sessions = Sessions({"t::noisy": {"base": 100.0, "head": 97.0}}, noise=0.05)
    result = decide(sessions, ["t::noisy"], time_budget_s=28.0)
    assert result.pairs == 4
    assert result.stopped_because == "time budget 28 s"
    # The budget cuts the first pairs short too, but one pair always runs.
    assert decide(Sessions({"t::a": {"base": 1.0, "head": 1.0}}), ["t::a"], time_budget_s=1.0).pairs == 1


def test_a_benchmark_missing_on_one_side_is_not_judged():
    sessions = Sessions({"t::new": {"head": 100.0}, "t::broken": {"base": 100.0}, "t::a": {"base": 1.0, "head": 1.0}})
    new, broken, _ = decide(sessions, ["t::new", "t::broken", "t::a"]).verdicts
    assert new.status == Status.NO_BASELINE
    assert new.reason.startswith("not on main's side (a new or renamed benchmark")
    assert broken.status == Status.FAILED
    assert decide(Sessions({}), []).pairs == 0  # nothing to compare: no session runs


# -- end to end: real repositories, real pytest sessions -------------------------------------------------

PACKAGE = "import time\n\n\ndef work():\n    time.sleep({pause_s})\n"
TEST_BENCH = "from pkg import work\n\n\ndef test_work(benchmark):\n    benchmark(work)\n"
# Few short rounds: a session's benchmark takes well under a second (its start does not).
PYPROJECT = """
[tool.pytest.ini_options]
addopts = ["--benchmark-min-rounds=5", "--benchmark-max-time=0.05", "--benchmark-warmup=off"]
perfgate_trials = "{pairs}"
perfgate_max_trials = "{pairs}"
"""


def make_repo(path, pairs):
    (path / "pkg").mkdir()
    (path / "pkg" / "__init__.py").write_text(PACKAGE.format(pause_s=0.002))
    (path / "tests").mkdir()
    (path / "tests" / "test_bench.py").write_text(TEST_BENCH)
    (path / "pyproject.toml").write_text(PYPROJECT.format(pairs=pairs))
    git(path, "init", "-q")
    git(path, "config", "user.email", "ci@example.com")
    git(path, "config", "user.name", "CI")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "base")


def run_pytest(path, *args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != INNER_SESSION_ENV}
    full_env["PYTEST_ADDOPTS"] = UNUSED_PYTEST_PLUGINS  # for the paired sessions too: they inherit it
    full_env.update(env or {})
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return process.returncode, process.stdout + process.stderr


def worktrees(path):
    return git(path, "worktree", "list").splitlines()


@pytest.mark.e2e
def test_a_slower_working_tree_fails_against_head(tmp_path):
    """Each call sleeps 4 ms in the working tree, 2 ms at HEAD: half the calls per second, whatever the
    machine's load does to the sessions in between."""
    make_repo(tmp_path, pairs=4)  # fewer pairs never call a change
    (tmp_path / "pkg" / "__init__.py").write_text(PACKAGE.format(pause_s=0.004))  # uncommitted
    head = git(tmp_path, "rev-parse", "HEAD")
    code, output = run_pytest(tmp_path, "--perfgate", "--perfgate-against", "HEAD")
    assert code == 1, output
    lines = output.splitlines()
    assert f"perfgate: measuring pytest-benchmark tests against HEAD ({head[:10]}) in session pairs, " in output
    assert "perfgate: pytest-benchmark session pair 2: head, base (" in output
    assert any(line.split()[:1] == ["tests/test_bench.py::test_work"] and "REGRESSION" in line for line in lines)
    assert "! tests/test_bench.py::test_work: calls/s -" in output
    assert f"pytest-benchmark tests: measured in 4 session pairs against HEAD ({head[:10]}), alternating " in output
    # Nothing declared differs: the base's sessions ran in the head's packages, and the summary says so.
    assert "environment: both sides ran in the head's environment (the two commits declare the same packages" in output
    assert "stored baselines" not in output
    assert not (tmp_path / "baselines").exists()
    assert len(worktrees(tmp_path)) == 1  # the base's worktree is gone


@pytest.mark.e2e
def test_unchanged_code_passes_and_a_new_test_file_has_nothing_to_compare(tmp_path):
    make_repo(tmp_path, pairs=2)
    (tmp_path / "tests" / "test_new.py").write_text(TEST_BENCH.replace("test_work", "test_new_work"))  # untracked
    code, output = run_pytest(tmp_path, "--perfgate", "--perfgate-against", "HEAD")
    assert code == 0, output
    lines = output.splitlines()
    assert any(line.split()[:1] == ["tests/test_bench.py::test_work"] for line in lines)
    (new,) = [line for line in lines if line.split()[:1] == ["tests/test_new.py::test_new_work"]]
    assert new.split()[1:] == ["-", "-", "-", "-", "new"]
    assert "  ! tests/test_new.py::test_new_work: new: tests/test_new.py is not in HEAD, nothing to compare" in lines
    assert "REGRESSION" not in output
    assert "pytest-benchmark tests: measured in 2 session pairs against HEAD" in output
    assert len(worktrees(tmp_path)) == 1


@pytest.mark.e2e
def test_the_plugin_is_off_inside_a_paired_session(pytester):
    """The paired sessions run the user's pytest configuration, which may ask for --perfgate (even against
    a ref): inside them the plugin gates nothing and needs no ref."""
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = ["--perfgate", "--perfgate-against", "no-such-ref"]\n'
    )
    pytester.makepyfile(test_perf="def test_fixture_style(perfgate):\n    raise AssertionError('measured')\n")
    code, output = run_pytest(pytester.path, "-rs", env={INNER_SESSION_ENV: "1"})
    assert code == 0, output
    assert "1 skipped" in output and "perf test: run with --perfgate" in output
    assert "= perfgate =" not in output
