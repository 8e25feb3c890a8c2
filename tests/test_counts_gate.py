"""The exact counts, gated with no statistics (issue 31, "Gated exactly"): each count of a step against the other
side's by its own tolerance, on hand-made trials and baselines (no trials run)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from perfgate.app.judging import judge
from perfgate.check.stored import judge_saved
from perfgate.errors import UsageError
from perfgate.formatting import format_count
from perfgate.judge.counts import SideCounts, compare_counts, compare_sides, side_counts
from perfgate.judge.verdict import Status, compare_pairs, compare_run
from perfgate.project import REPORT, CountTolerances, ProjectConfig, load_project_config
from perfgate.records.acceptance import parse_acceptance
from perfgate.records.baselines import BaselineStore, entry_from_workload
from perfgate.records.counts import Outcome
from perfgate.records.results import Against, RunResult, TrialResult
from perfgate.records.shapes import Counts
from perfgate.records.verdicts import GateSettings
from perfgate.report.json import gate_to_dict
from perfgate.report.markdown import format_markdown
from perfgate.report.text import format_gate
from tests.helpers.results import BASE_MS, phased_run

COUNTS = Counts(
    device="cpu",
    parameters=124_416,
    trainable_parameters=124_416,
    flops_per_sample=1.76e8,
    operators_per_step=400,
    kernels_per_step=None,
    allocated_peak_bytes=12 << 20,
    allocated_kind="cpu-live-storage",
    graphs=1,
    graph_breaks=0,
    recompiles=0,
)
SETTINGS = GateSettings(first_n=3, max_n=3)
BREAK = "model.py:42 in forward: call_function print"


def counted(*per_trial: Counts | None) -> RunResult:
    """Workload w's run (three fp32 trials at the same speed) whose trials counted `per_trial` (one: all three)."""
    run = phased_run(BASE_MS)
    workload = run.workloads[0]
    config = workload.configs["fp32"]
    counts = per_trial * 3 if len(per_trial) == 1 else per_trial
    trials = [dataclasses.replace(t, counts=c) for t, c in zip(config.trials, counts, strict=True)]
    configs = {"fp32": dataclasses.replace(config, trials=trials)}
    return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])


def stored(base: RunResult, head: RunResult, settings: GateSettings = SETTINGS):
    """The head run's fp32 verdict against the base run stored as a baseline."""
    baselines = {"w": entry_from_workload(base, base.workloads[0])}
    return compare_run(head, baselines, settings).verdicts[0]


def paired(base: RunResult, head: RunResult, settings: GateSettings = SETTINGS):
    """The head run's fp32 verdict in a paired check against the base run."""
    against = Against("main", "0123456789abcdef", None, True, base)
    result = compare_pairs(dataclasses.replace(head, against=against), base, settings, {}, against)
    return result.verdicts[0]


def grown(**changes) -> Counts:
    return dataclasses.replace(COUNTS, **changes)


# -- the verdict -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("judge", [stored, paired])
def test_identical_counts_pass_and_are_reported_the_same(judge):
    verdict = judge(counted(COUNTS), counted(COUNTS))
    assert verdict.counts is not None and not verdict.counts.fails
    assert verdict.status != Status.REGRESSION
    assert {row.name: row.outcome for row in verdict.counts.rows} == {
        "flops_per_sample": Outcome.SAME,
        "operators_per_step": Outcome.SAME,
        "allocated_peak_bytes": Outcome.SAME,
        "parameters": Outcome.SAME,
        "graph_breaks": Outcome.SAME,
        "recompiles": Outcome.SAME,
    }  # kernels: counted on neither side (the CPU), so no row


@pytest.mark.parametrize("judge", [stored, paired])
def test_flops_per_sample_grown_by_38_percent_fail_the_config_with_the_reason_first(judge):
    verdict = judge(counted(COUNTS), counted(grown(flops_per_sample=1.76e8 * 1.38)))
    assert verdict.status == Status.REGRESSION  # the step's speed did not change: the counts alone decide
    assert verdict.throughput is not None and verdict.throughput.verdict != "regression"
    assert verdict.reason.startswith("FLOPs per sample +38.0% (tolerance +2%); samples/s")


def test_operators_three_percent_more_stay_within_their_five_percent_and_pass():
    verdict = stored(counted(COUNTS), counted(grown(operators_per_step=412)))
    assert verdict.counts is not None
    row = verdict.counts.row("operators_per_step")
    assert row is not None and row.outcome == Outcome.WITHIN and row.change == pytest.approx(0.03)
    assert verdict.status == Status.NO_CHANGE and "operators" not in verdict.reason


def test_operators_six_percent_more_fail():
    verdict = stored(counted(COUNTS), counted(grown(operators_per_step=424)))
    assert verdict.status == Status.REGRESSION
    assert verdict.reason.startswith("operators per step +6.0% (tolerance +5%)")


def test_fewer_of_every_count_never_fails():
    fewer = grown(flops_per_sample=1e8, operators_per_step=300, parameters=100_000, allocated_peak_bytes=1 << 20)
    verdict = stored(counted(COUNTS), counted(fewer))
    assert verdict.counts is not None and not verdict.counts.fails and verdict.status != Status.REGRESSION
    assert verdict.counts.row("parameters").outcome == Outcome.FEWER


def test_one_parameter_more_fails_by_default():
    verdict = stored(counted(COUNTS), counted(grown(parameters=124_417)))
    assert verdict.status == Status.REGRESSION
    assert verdict.reason.startswith("parameters 124,416 -> 124,417 (+0.0%, tolerance +0%); samples/s")


@pytest.mark.parametrize("judge", [stored, paired])
def test_a_new_graph_break_fails_naming_its_place(judge):
    verdict = judge(counted(COUNTS), counted(grown(graphs=2, graph_breaks=1, break_places=[BREAK])))
    assert verdict.status == Status.REGRESSION
    assert verdict.reason.startswith(f"1 new graph break at {BREAK}; samples/s")
    assert verdict.counts is not None and verdict.counts.row("graph_breaks").new == (BREAK,)


def test_a_break_the_base_had_already_is_not_named_new_and_a_new_recompile_names_its_reason():
    base = grown(graph_breaks=1, break_places=["model.py:10 in forward: x"])
    head = grown(
        graph_breaks=2,
        break_places=["model.py:10 in forward: x", BREAK],
        recompiles=1,
        recompile_reasons=["model.py:40 in forward: tensor 'x' size mismatch at index 0"],
    )
    comparison = compare_counts(base, head, CountTolerances())
    assert comparison is not None
    assert comparison.reason == (
        f"1 new graph break at {BREAK}; 1 new recompile (model.py:40 in forward: tensor 'x' size mismatch at index 0)"
    )


def test_operators_counted_on_the_cpu_and_on_cuda_are_not_compared_but_flops_are():
    cuda = grown(device="cuda", operators_per_step=900, kernels_per_step=350, allocated_peak_bytes=40 << 20)
    cuda = dataclasses.replace(cuda, allocated_kind="cuda-max-allocated")
    comparison = compare_counts(COUNTS, cuda, CountTolerances())
    assert comparison is not None and not comparison.fails  # 900 operators against 400: the backends differ
    for name in ("operators_per_step", "allocated_peak_bytes"):
        row = comparison.row(name)
        assert row.outcome == Outcome.NOT_COMPARED
        assert row.why.startswith("counted on cpu in the base and on cuda in the head")
    assert comparison.row("kernels_per_step").why == "not counted in the base"
    assert comparison.row("flops_per_sample").outcome == Outcome.SAME
    assert "operators per step and allocated peak not compared: counted on cpu" in "\n".join(comparison.notes)
    more_flops = compare_counts(COUNTS, dataclasses.replace(cuda, flops_per_sample=2e8), CountTolerances())
    assert more_flops is not None and more_flops.fails  # FLOPs are the model's on any device


def test_a_count_the_trials_disagree_on_is_reported_not_deterministic_and_not_gated():
    head = counted(COUNTS, grown(operators_per_step=520), COUNTS)
    assert side_counts(head.workloads[0].configs["fp32"].trials).unsteady == {"operators_per_step": (400, 520)}
    verdict = stored(counted(COUNTS), head)
    assert verdict.status != Status.REGRESSION
    row = verdict.counts.row("operators_per_step")
    assert row.outcome == Outcome.NOT_COMPARED and row.why == "not deterministic: 400, 520 in this run's trials"
    assert verdict.counts.row("flops_per_sample").outcome == Outcome.SAME  # the others are still gated


def test_a_count_the_base_trials_disagree_on_is_not_gated_in_a_paired_check():
    base = counted(COUNTS, COUNTS, grown(flops_per_sample=1.9e8))
    verdict = paired(base, counted(grown(flops_per_sample=1.9e8)))
    assert verdict.status != Status.REGRESSION
    assert verdict.counts.row("flops_per_sample").why == "not deterministic: 1.76e8, 1.90e8 in the base's trials"


def test_a_report_tolerance_shows_the_growth_and_never_fails():
    project = ProjectConfig(counts=CountTolerances(flops_per_sample=REPORT, graph_breaks=REPORT))
    settings = dataclasses.replace(SETTINGS, project=project)
    head = grown(flops_per_sample=1.76e8 * 3, graph_breaks=2, break_places=[BREAK])
    verdict = stored(counted(COUNTS), counted(head), settings)
    assert verdict.status == Status.NO_CHANGE
    flops = verdict.counts.row("flops_per_sample")
    assert flops.outcome == Outcome.GREW and not flops.fails
    assert "FLOPs per sample +200.0% (reported, not gated)" in verdict.counts.notes


def test_counts_with_no_baseline_counts_are_not_compared_and_do_not_fail():
    verdict = stored(counted(None), counted(grown(flops_per_sample=9e9)))
    assert verdict.status == Status.NO_CHANGE and not verdict.counts.fails
    assert all(row.outcome == Outcome.NOT_COMPARED for row in verdict.counts.rows)
    (note,) = verdict.counts.notes
    assert note.endswith("recompiles not compared: not counted in the baseline")
    assert compare_counts(None, None, CountTolerances()) is None
    assert stored(counted(None), counted(None)).counts is None


def test_counts_stay_out_of_the_checks_one_false_alarm_rate():
    baselines = {"w": entry_from_workload(counted(None), counted(None).workloads[0])}
    without = compare_run(counted(None), baselines, SETTINGS)
    with_counts = compare_run(counted(grown(flops_per_sample=2e8)), baselines, SETTINGS)
    assert with_counts.comparisons == without.comparisons == 2  # throughput and memory, not the counts
    assert with_counts.family == without.family


# -- acceptance --------------------------------------------------------------------------------------------


def accepting(text: str) -> GateSettings:
    return dataclasses.replace(SETTINGS, accepted=(parse_acceptance(text, "option", "--accept"),))


def test_an_accepted_slowdown_raises_the_shares_to_the_accepted_percentage():
    settings = accepting("w/fp32 15%")
    verdict = stored(counted(COUNTS), counted(grown(flops_per_sample=1.76e8 * 1.10, parameters=130_000)), settings)
    assert verdict.status != Status.REGRESSION
    assert verdict.counts.row("flops_per_sample").outcome == Outcome.ACCEPTED
    assert "FLOPs per sample +10.0% (tolerance +2%, within the 15% accepted)" in verdict.counts.notes
    beyond = stored(counted(COUNTS), counted(grown(flops_per_sample=1.76e8 * 1.38)), settings)
    assert beyond.status == Status.REGRESSION and beyond.reason.startswith("FLOPs per sample +38.0% (tolerance +2%)")


def test_an_accepted_slowdown_accepts_new_graph_breaks_and_only_for_its_config():
    head = counted(grown(graph_breaks=1, break_places=[BREAK]))
    verdict = paired(counted(COUNTS), head, accepting("w/fp32 10%"))
    assert verdict.status != Status.REGRESSION
    assert verdict.counts.row("graph_breaks").outcome == Outcome.ACCEPTED
    assert f"1 new graph break at {BREAK} (accepted)" in verdict.counts.notes
    assert paired(counted(COUNTS), head, accepting("w/bf16 10%")).status == Status.REGRESSION


# -- stored baselines and saved results --------------------------------------------------------------------


def test_stored_mode_compares_with_the_counts_the_baseline_file_keeps(tmp_path):
    store = BaselineStore(tmp_path)
    base = counted(COUNTS)
    store.write(entry_from_workload(base, base.workloads[0]))
    (entry,) = store.load("w").values()
    assert entry.configs["fp32"].counts == COUNTS  # kept in the YAML file, read back
    result = compare_run(counted(grown(flops_per_sample=2e8)), {"w": entry}, SETTINGS)
    assert result.verdicts[0].status == Status.REGRESSION
    assert result.verdicts[0].reason.startswith("FLOPs per sample +13.6% (tolerance +2%)")
    assert result.exit_code == 1


def test_a_saved_paired_results_file_is_re_judged_from_its_trials_with_the_same_counts(tmp_path):
    more = grown(flops_per_sample=2e8)
    head = counted(more, dataclasses.replace(more, operators_per_step=520), more)
    against = Against("main", "0123456789" * 4, None, True, counted(COUNTS))
    checked = compare_pairs(dataclasses.replace(head, against=against), against.base, SETTINGS, {}, against)

    def saved(run: RunResult) -> RunResult:  # its trials as the results file keeps and reads them
        workload = run.workloads[0]
        trials = [TrialResult.from_dict(json.loads(json.dumps(t.to_dict()))) for t in workload.configs["fp32"].trials]
        configs = {"fp32": dataclasses.replace(workload.configs["fp32"], trials=trials)}
        return dataclasses.replace(run, workloads=[dataclasses.replace(workload, configs=configs)])

    against = dataclasses.replace(against, base=saved(against.base))
    (verdict,) = judge_saved(dataclasses.replace(saved(head), against=against), ProjectConfig(), tmp_path).verdicts
    assert verdict.counts == checked.verdicts[0].counts
    assert verdict.status == Status.REGRESSION and verdict.reason.startswith("FLOPs per sample +13.6%")
    assert verdict.counts.row("operators_per_step").why == "not deterministic: 400, 520 in the head's trials"


# -- tolerances in pyproject.toml --------------------------------------------------------------------------


def project(tmp_path, table: str) -> ProjectConfig:
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate.counts]\n{table}\n", encoding="utf-8")
    return load_project_config(tmp_path)


def test_the_default_tolerances():
    assert ProjectConfig().counts == CountTolerances(
        flops_per_sample=0.02,
        operators_per_step=0.05,
        kernels_per_step=0.05,
        allocated_peak_bytes=0.05,
        parameters=0.0,
        graph_breaks=0,
        recompiles=0,
    )


def test_tolerances_parse_like_the_threshold_with_zero_and_report_allowed(tmp_path):
    counts = project(
        tmp_path,
        'flops_per_sample = "1%"\noperators_per_step = 0.1\nparameters = "0%"\n'
        'allocated_peak_bytes = "report"\ngraph_breaks = 2\nrecompiles = "report"',
    ).counts
    assert counts == CountTolerances(
        flops_per_sample=0.01,
        operators_per_step=0.1,
        kernels_per_step=0.05,
        allocated_peak_bytes=REPORT,
        parameters=0.0,
        graph_breaks=2,
        recompiles=REPORT,
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'flop_per_sample = "2%"',
            "unknown count 'flop_per_sample' ({where} counts); did you mean 'flops_per_sample'?",
        ),
        (
            'flops_per_sample = "150%"',
            "'150%' must be between 0% and 100% ({where} counts.flops_per_sample); write a percentage such as "
            '"5%" (or 0.05), "0%" for any growth, or "report"',
        ),
        (
            'operators_per_step = "lots"',
            "'lots' is not a percentage ({where} counts.operators_per_step); write a percentage such as "
            '"5%" (or 0.05), "0%" for any growth, or "report"',
        ),
        (
            "graph_breaks = -1",
            "graph_breaks must be a whole number of new ones (0 or more) or 'report', got -1 "
            '({where} counts.graph_breaks); write graph_breaks = 0 (any new one fails) or graph_breaks = "report"',
        ),
        (
            'recompiles = "1%"',
            "recompiles must be a whole number of new ones (0 or more) or 'report', got '1%' "
            '({where} counts.recompiles); write recompiles = 0 (any new one fails) or recompiles = "report"',
        ),
    ],
)
def test_bad_tolerances_are_one_line_usage_errors(tmp_path, table, message):
    with pytest.raises(UsageError) as raised:
        project(tmp_path, table)
    where = f"{tmp_path / 'pyproject.toml'} [tool.perfgate]"
    assert raised.value.one_line() == message.format(where=where)


def test_counts_that_are_not_a_table_are_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\ncounts = "strict"\n', encoding="utf-8")
    with pytest.raises(UsageError, match="counts must be a table"):
        load_project_config(tmp_path)


# -- the reports -------------------------------------------------------------------------------------------


def regressed():
    head = counted(grown(flops_per_sample=1.76e8 * 1.38, graph_breaks=1, break_places=[BREAK], operators_per_step=412))
    baselines = {"w": entry_from_workload(counted(COUNTS), counted(COUNTS).workloads[0])}
    return compare_run(head, baselines, SETTINGS)


def test_the_json_report_carries_each_configs_counts_as_rows():
    document = json.loads(json.dumps(gate_to_dict(judge(regressed(), diagnosed=False))))  # plain JSON: no inf, no NaN
    counts = document["workloads"][0]["configs"][0]["counts"]
    assert counts["fails"] is True and counts["base_device"] == counts["head_device"] == "cpu"
    assert counts["reason"].startswith("FLOPs per sample +38.0% (tolerance +2%); 1 new graph break at")
    rows = {row["name"]: row for row in counts["rows"]}
    assert rows["flops_per_sample"]["outcome"] == "grew" and rows["flops_per_sample"]["fails"] is True
    assert rows["flops_per_sample"]["change"] == pytest.approx(0.38)
    assert rows["operators_per_step"] == {
        "name": "operators_per_step",
        "base": 400,
        "head": 412,
        "change": pytest.approx(0.03),
        "relative": True,
        "tolerance": 0.05,
        "outcome": "within",
        "why": None,
        "accepted": None,
        "new": [],
        "fails": False,
    }
    assert rows["graph_breaks"]["new"] == [BREAK] and rows["graph_breaks"]["change"] == 1
    unchanged = gate_to_dict(
        judge(
            compare_run(counted(None), {"w": entry_from_workload(counted(None), counted(None).workloads[0])}, SETTINGS),
            diagnosed=False,
        )
    )
    assert unchanged["workloads"][0]["configs"][0]["counts"] is None


def test_the_terminal_report_shows_the_counts_table_and_the_reason():
    text = format_gate(judge(regressed(), diagnosed=False), command="perfgate check")
    assert "  ! fp32: FLOPs per sample +38.0% (tolerance +2%); 1 new graph break at" in text
    header = next(line for line in text.splitlines() if line.startswith("  counts "))
    assert header.split() == [
        "counts",
        "FLOPs/sample",
        "operators/step",
        "allocated",
        "peak",
        "parameters",
        "graph",
        "breaks",
        "recompiles",
    ]
    row = next(line for line in text.splitlines() if line.startswith("  fp32    1.76e8"))
    assert "1.76e8 -> 2.43e8 (+38.0%, fails)" in row and "400 -> 412 (+3.0%, within)" in row
    assert "0 -> 1 (+1, fails)" in row and "12.0 MiB" in row and "124,416" in row
    assert "only growth beyond its tolerance fails a count (FLOPs/sample +2%, operators/step +5%" in text


def test_the_markdown_report_shows_the_counts_table_with_the_failing_counts_in_bold():
    markdown = format_markdown(judge(regressed(), diagnosed=False))
    assert (
        "| counts | FLOPs/sample | operators/step | allocated peak | parameters | graph breaks | recompiles |"
        in markdown
    )
    assert (
        "| fp32 | **1.76e8 -> 2.43e8 (+38.0%, fails)** | 400 -> 412 (+3.0%, within) | 12.0 MiB | 124,416 | "
        "**0 -> 1 (+1, fails)** | 0 |" in markdown
    )
    assert "Counts: exact, from one untimed step (no statistics)" in markdown


def test_counts_not_compared_are_said_with_why_in_both_reports():
    result = compare_run(
        counted(COUNTS), {"w": entry_from_workload(counted(None), counted(None).workloads[0])}, SETTINGS
    )
    note = (
        "fp32 counts: FLOPs per sample, operators per step, allocated peak, parameters, graph breaks and "
        "recompiles not compared: not counted in the baseline"
    )
    assert f"  ! {note}" in format_gate(judge(result, diagnosed=False), command="perfgate check")
    assert f"- {note}" in format_markdown(judge(result, diagnosed=False))


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("flops_per_sample", 1.76e8, "1.76e8"),
        ("flops_per_sample", 2.14e12, "2.14e12"),
        ("flops_per_sample", 512.0, "512"),
        ("allocated_peak_bytes", 12 << 20, "12.0 MiB"),
        ("parameters", 124_416, "124,416"),
        ("graph_breaks", None, "-"),
    ],
)
def test_counts_read_in_engineering_notation_binary_units_or_whole(name, value, shown):
    assert format_count(name, value) == shown


def test_compare_sides_without_trial_disagreements_is_compare_counts():
    assert compare_sides(SideCounts(COUNTS), SideCounts(COUNTS), CountTolerances()) == compare_counts(
        COUNTS, COUNTS, CountTolerances()
    )
