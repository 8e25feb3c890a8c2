"""How figures and verdicts read: no negative zero in any table, and the threshold in one unit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.app.judging import judge
from perfgate.formatting import format_pct, format_signed, format_signed_pct
from perfgate.judge.stats import compare_throughput
from perfgate.judge.verdict import compare_entries
from perfgate.judge.wording import throughput_reason
from perfgate.records.baselines import ConfigEntry
from perfgate.records.verdicts import GateResult, GateSettings
from perfgate.report.markdown import format_markdown
from perfgate.report.text import format_gate, format_pytest_summary, format_update
from tests.helpers.baselines import GATE_BASE, gate_entry

SETTINGS = GateSettings(first_n=3, max_n=3)


@pytest.mark.parametrize(
    ("fraction", "text"),
    [(-0.0004, "+0.0%"), (-0.0, "+0.0%"), (0.0, "+0.0%"), (0.0004, "+0.0%"), (-0.0006, "-0.1%"), (0.052, "+5.2%")],
)
def test_a_signed_change_that_rounds_to_zero_is_plus_zero(fraction, text):
    assert format_signed_pct(fraction) == text


def test_every_signed_and_unsigned_figure_drops_the_sign_of_a_zero():
    assert format_signed(-0.004, 2) == "+0.00"  # the diagnosis's ms/step change
    assert format_signed(-0.006, 2) == "-0.01"
    assert format_signed(-0.04, 1, " ms") == "+0.0 ms"
    assert format_pct(-0.001) == "0%"  # a phase's share of the change
    assert format_pct(-0.2) == "-20%" and format_pct(0.254) == "25%" and format_pct(0.0004, 1) == "0.0%"


def _shrunk_by_a_hair():
    """Workload w's fp32 trials, as fast as GATE_BASE and 1 KiB less peak memory (a -0.002% change)."""
    entry = gate_entry([500, 505, 495, 502, 498], [1000, 1010, 990, 1004, 996])
    trials = [replace(t, peak_bytes=t.peak_bytes - 1024) for t in entry.configs["fp32"].trials]
    return replace(entry, configs={"fp32": ConfigEntry([2.0], trials)})


def test_the_tables_show_a_change_that_rounds_to_zero_as_plus_zero():
    result = GateResult([compare_entries(GATE_BASE, _shrunk_by_a_hair(), SETTINGS)], SETTINGS)
    assert result.verdicts[0].memory.change < 0
    text, markdown = (
        format_gate(judge(result, diagnosed=False), command="perfgate check"),
        format_markdown(judge(result, diagnosed=False)),
    )
    summary = format_pytest_summary(
        judge(result, diagnosed=False, checks=[result]), updates=[], store_dir=Path("baselines")
    )
    for report in (text, markdown, summary):
        assert "-0.0%" not in report and "-0%" not in report
    (row,) = [line for line in text.splitlines() if line.startswith("  fp32 ")]
    assert row.split()[7] == "+0.0%"  # the peak mem column
    (cells,) = [line.split(" | ") for line in markdown.splitlines() if line.startswith("| fp32 ")]
    assert cells[6] == "+0.0%"
    (summary_row,) = [line for line in summary.splitlines() if line.startswith("  w ")]
    assert summary_row.split()[-3] == "+0.0%"


def test_an_update_that_barely_moved_reads_plus_zero():
    old = gate_entry([500.0, 500.0, 500.0])
    new = gate_entry([499.9, 499.9, 499.9])
    line = format_update(new, old, new, Path("baselines/w.yaml")).splitlines()[1]
    assert line.startswith("  fp32: 500.0 -> 499.9 samples/s (+0.0%), peak mem ")


# -- the threshold, in one unit: time per sample, with the samples/s bound it sets --------------------


def _compared(ratio, threshold, noise=0.002):
    base = [1000 * (1 + noise * k) for k in (-2, -1, 0, 1, 2)]
    return compare_throughput(base, [v * ratio for v in base], threshold=threshold)


def test_a_regression_just_past_a_25_percent_threshold_names_the_samples_per_sec_bound():
    """-20.6% samples/s is 26% more time per sample: beyond a 25% threshold, which the words must make plain."""
    reason = throughput_reason(_compared(0.794, 0.25), None, None)
    assert reason.startswith("samples/s -20.6% (0.794x, ")
    assert reason.endswith(
        "a regression beyond the 25% threshold on time per sample "
        "(the whole interval lies below samples/s -20.0%; p < 0.01)"
    )


def test_every_verdict_states_the_threshold_on_time_per_sample_with_its_bound():
    better = throughput_reason(_compared(1.30, 0.25), None, None)
    assert better.endswith(
        "an improvement beyond the 25% threshold on time per sample (the whole interval lies above samples/s +25.0%)"
    )
    same = throughput_reason(_compared(1.0, 0.05), None, None)
    assert same.endswith(
        "no regression beyond the 5% threshold on time per sample (the interval stays above samples/s -4.8%)"
    )
    base = [1000.0, 700.0, 1300.0]
    open_ = throughput_reason(compare_throughput(base, [950.0, 650.0, 1250.0], threshold=0.05), None, None)
    assert ": inconclusive, the interval straddles the 5% threshold on time per sample (samples/s -4.8%); " in open_
    assert "% or more in samples/s (1 of 3 current trials ran 1.5x or more slower than the other side's median" in open_
    calls = throughput_reason(_compared(0.7, 0.05), None, None, unit="calls/s", sample="session")
    assert (
        "a regression beyond the 5% threshold on time per call (the whole interval lies below calls/s -4.8%; p < 0.01)"
        in calls
    )


def test_the_gate_table_states_the_threshold_in_the_same_unit():
    result = GateResult(
        [compare_entries(GATE_BASE, gate_entry([430, 432, 428], [1000, 1002, 998]), SETTINGS)], SETTINGS
    )
    text = format_gate(judge(result, diagnosed=False), command="perfgate check")
    assert "thresholds: 5% on time per sample (samples/s -4.8%), peak memory 5%;" in text
    assert "Threshold: 5% on time per sample (samples/s -4.8%)." in format_markdown(judge(result, diagnosed=False))
