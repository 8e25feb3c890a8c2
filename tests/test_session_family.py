"""One false-alarm rate for a pytest session: alpha split over its checks (`judge.family`), Holm within each, and
exact comparisons outside the family."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.app.judging import judge
from perfgate.app.request import PluginRequest
from perfgate.app.suite import GateSuite, configured_test
from perfgate.judge.family import SessionShares
from perfgate.judge.settings import levels_at
from perfgate.judge.verdict import compare_entries, holm_divisors, merge_results, one_error_rate
from perfgate.project import ProjectConfig
from perfgate.records.baselines import BaselineEntry
from perfgate.records.comparisons import DEFAULT_ALPHA
from perfgate.records.results import GateRecord
from perfgate.records.verdicts import GateResult, GateSettings, Look, SessionRate
from perfgate.report.markdown import format_markdown
from perfgate.report.text import format_gate
from tests.helpers.baselines import GATE_BASE, gate_entry

SETTINGS = GateSettings(first_n=3, max_n=3)
SLOWER = gate_entry([470, 478, 466, 474, 471], [1000, 1008, 992, 1003, 997])  # about 6% slower, probe unchanged


def _named(entry: BaselineEntry, workload: str) -> BaselineEntry:
    return replace(entry, workload=workload)


def _check(base: BaselineEntry, candidate: BaselineEntry, settings: GateSettings = SETTINGS) -> GateResult:
    """One check of one workload, judged as `perfgate check` judges: Holm over its comparisons."""
    return one_error_rate(
        lambda family: GateResult([compare_entries(base, candidate, settings, family=family)], settings)
    )


def _cuda(entry: BaselineEntry) -> BaselineEntry:
    """The entry as a GPU measures it: CUDA's peak allocated memory, which repeats to the byte."""
    configs = {
        name: replace(c, trials=[replace(t, memory_kind="cuda-max-allocated") for t in c.trials])
        for name, c in entry.configs.items()
    }
    return replace(entry, configs=configs)


# -- exact comparisons stay out of the family (issue 42, 5a) ----------------------------------------------


def test_a_config_with_an_exact_memory_comparison_leaves_throughput_its_whole_alpha():
    result = _check(_cuda(GATE_BASE), _cuda(SLOWER))
    (verdict,) = result.verdicts
    assert verdict.memory is not None and verdict.memory.exact  # the same bytes on every trial
    assert verdict.throughput is not None
    assert holm_divisors(result).get(("w", "fp32"), (1.0, 1.0))[0] == 1.0
    assert result.comparisons == 1  # throughput alone: the exact memory comparison cannot be a false alarm
    assert verdict.throughput.alpha == pytest.approx(levels_at(SETTINGS, None).alpha)


def test_a_memory_comparison_with_sampling_error_still_shares_alpha_with_throughput():
    result = _check(GATE_BASE, SLOWER)  # resident memory: a session noise, so a p-value between 0 and 1
    (verdict,) = result.verdicts
    assert verdict.memory is not None and not verdict.memory.exact
    assert result.comparisons == 2
    assert max(holm_divisors(result)[("w", "fp32")]) == 2.0


# -- the session's shares of alpha (issue 42, 4) ---------------------------------------------------------

# Two configured items (2 comparisons each), a fixture test of three configs (6), three pytest-benchmark tests.
PLAN = {"perfgate::w[fp32]": 2, "perfgate::w[bf16]": 2, "test_perf.py::test_fixture": 6, "b1": 1, "b2": 1, "b3": 1}
CHECKS = {
    "configured": (("perfgate::w[fp32]", "perfgate::w[bf16]"), 4),
    "fixture": (("test_perf.py::test_fixture",), 6),
}


@pytest.mark.parametrize("order", list(itertools.permutations(CHECKS)))
def test_each_check_of_a_session_gets_alpha_in_proportion_to_its_comparisons_in_any_order(order):
    shares = SessionShares(0.01, PLAN)
    given = {}
    for name in order:
        tests, comparisons = CHECKS[name]
        divisor, shares = shares.share(tests, comparisons)
        given[name] = 0.01 / divisor
    divisor, shares = shares.share(("b1", "b2", "b3"), 3, last=True)
    given["micro"] = 0.01 / divisor
    assert given == pytest.approx({"configured": 0.01 * 4 / 13, "fixture": 0.01 * 6 / 13, "micro": 0.01 * 3 / 13})
    assert sum(given.values()) <= 0.01 * (1 + 1e-12)


def test_the_shares_of_a_session_never_add_up_to_more_than_alpha_however_wrong_its_plan():
    shares = SessionShares(0.01, PLAN)
    given = []
    # A fixture test judging more than planned, twice; a test nobody planned; the configured items; the benchmarks.
    for tests, comparisons in [
        (("test_perf.py::test_fixture",), 18),
        (("test_perf.py::test_fixture",), 18),
        (("test_other.py::test_unplanned",), 4),
        (("perfgate::w[fp32]", "perfgate::w[bf16]"), 4),
    ]:
        divisor, shares = shares.share(tests, comparisons)
        given.append(0.01 / divisor)
    divisor, shares = shares.share((), 3, last=True)
    given.append(0.01 / divisor)
    assert all(g > 0 for g in given)
    assert sum(given) == pytest.approx(0.01) and sum(given) <= 0.01 * (1 + 1e-12)
    assert shares.checks == 5


def test_a_session_of_one_check_judges_it_with_the_whole_alpha():
    divisor, _ = SessionShares(0.01, {"perfgate::w[fp32]": 2}).share(["perfgate::w[fp32]"], 2)
    assert divisor == 1.0


def test_a_session_share_divides_each_looks_alpha_and_count_level_and_leaves_the_no_change_error():
    look = Look(4, 3, False)
    alone, shared = levels_at(SETTINGS, look), levels_at(replace(SETTINGS, session_divisor=4.0), look)
    assert shared.alpha == pytest.approx(alone.alpha / 4)
    assert alone.count_alpha is not None and shared.count_alpha == pytest.approx(alone.count_alpha / 4)
    assert shared.pass_error == alone.pass_error


def test_the_suite_plans_its_shares_from_the_collected_perf_tests():
    request = PluginRequest("check", {}, ProjectConfig(), GateSettings(alpha=0.01), Path("baselines"), ("fp32",))
    suite = GateSuite(request, terminal=lambda: None)  # type: ignore[arg-type, return-value]
    suite.plan(configured=[("w", "fp32"), ("v", "fp32")], fixture_tests=["t.py::test_a"], benchmarks=["b1", "b2"])
    configured = [configured_test("w", "fp32"), configured_test("v", "fp32")]
    first, shares = suite.shares.share(configured, 4)  # 4 of the 8 comparisons planned
    second, shares = shares.share(["t.py::test_a"], 2)
    micro, _ = shares.share((), 2, last=True)
    assert (first, second, micro) == pytest.approx((2.0, 4.0, 4.0))


# -- the merged session: one alpha, each config at its check's level, and the report says so -------------


def test_a_session_keeps_its_alpha_and_each_configs_level_from_its_own_check():
    """Two checks at their shares (alpha / 2 each): the merged result holds the session's alpha, and each config's
    divisors are Holm's within its check times the check's, so a report from the results file judges every
    config at the level its check did."""
    checks = [
        _check(_named(GATE_BASE, name), _named(SLOWER, name), replace(SETTINGS, session_divisor=2.0))
        for name in ("w", "v")
    ]
    rate = SessionRate(DEFAULT_ALPHA, sum(c.comparisons for c in checks), len(checks))
    merged = merge_results(checks, rate)
    assert merged.settings.alpha == DEFAULT_ALPHA and merged.settings.session_divisor == 1.0
    assert merged.session == rate and rate.comparisons == 4
    for check, name in zip(checks, ("w", "v"), strict=True):
        holm = check.family.get((name, "fp32"), (1.0, 1.0))
        assert merged.family[(name, "fp32")] == (2.0 * holm[0], 2.0 * holm[1])
        again = compare_entries(
            _named(GATE_BASE, name), _named(SLOWER, name), merged.settings, family=merged.family
        ).configs[0]
        (judged,) = check.verdicts
        assert again.throughput is not None and judged.throughput is not None
        assert again.throughput.alpha == pytest.approx(judged.throughput.alpha)
        assert again.status == judged.status
    record = GateRecord.from_dict(merged.to_record(Path("baselines")).to_dict())
    assert record.session == {"comparisons": 4, "checks": 2}


def test_a_session_of_one_check_at_a_share_is_recorded_at_the_session_alpha():
    (check,) = [_check(GATE_BASE, SLOWER, replace(SETTINGS, session_divisor=3.0))]
    merged = merge_results([check], SessionRate(DEFAULT_ALPHA, check.comparisons, 2))
    assert merged.settings.session_divisor == 1.0
    assert merged.family[("w", "fp32")][0] == pytest.approx(3.0 * check.family.get(("w", "fp32"), (1.0, 1.0))[0])


def test_the_sessions_report_states_its_one_false_alarm_rate():
    checks = [_check(_named(GATE_BASE, n), _named(SLOWER, n), replace(SETTINGS, session_divisor=2.0)) for n in "wv"]
    merged = merge_results(checks, SessionRate(0.01, 5, 3))
    line = (
        "one false-alarm rate for the session: alpha 0.01 over 5 comparisons in 3 checks "
        "(Holm within each check's share of alpha)"
    )
    assert SessionRate(0.01, 5, 3).line == line
    text = format_gate(judge(merged, diagnosed=False), command="pytest --perfgate")
    assert "alpha 0.01 for the whole session, over 5 comparisons in 3 checks (Holm within each check's share" in text
    assert "for the whole check" not in text
    assert "One false-alarm rate for the session: alpha 0.01 over 5 comparisons in 3 checks" in format_markdown(
        judge(merged, diagnosed=False)
    )
    alone = _check(GATE_BASE, SLOWER)  # a CLI check: unchanged
    assert "alpha 0.01 for the whole check (2 comparisons, Holm)" in format_gate(
        judge(alone, diagnosed=False), command="perfgate check"
    )
    assert "false-alarm rate for the session" not in format_markdown(judge(alone, diagnosed=False))
