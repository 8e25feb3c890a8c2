"""Each side's packages in a paired check (issue 43): every report says where the two sides ran and which packages
differ, the diagnosis names a dependency change as a suspect, and the results file keeps the record (hand-made
trials, no trials run)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perfgate.app.judging import judge
from perfgate.check.stored import judge_saved
from perfgate.errors import ResultsError
from perfgate.judge.diagnosis import diagnose
from perfgate.judge.verdict import Status, compare_pairs
from perfgate.naming import PYTEST
from perfgate.project import ProjectConfig
from perfgate.records.results import (
    Against,
    ConfigResult,
    Environments,
    RunResult,
    WorkloadResult,
    WorkloadSettings,
    parse_results,
)
from perfgate.records.shapes import Counts, Environment
from perfgate.records.verdicts import GateResult, GateSettings
from perfgate.report.json import gate_to_dict
from perfgate.report.markdown import MARKER, format_markdown
from perfgate.report.text import format_diagnoses, format_gate, format_pytest_summary
from tests.helpers.results import BASE_MS, ENVIRONMENT, STEPS, phased_trial, validate_results

PAIRS = GateSettings(first_n=6, max_n=6)
WHY = "pyproject.toml differs: the base declares evaldep==1.0"
PER_SIDE = Environments(
    "per-side",
    WHY,
    {"base": {"evaldep": "1.0", "torch": "2.5.1"}, "head": {"evaldep": "1.1", "torch": "2.5.1"}},
    prepare_s=3.25,
)
SHARED = Environments(
    "shared",
    "--environment shared",
    {"base": {"evaldep": "1.1", "torch": "2.5.1"}, "head": {"evaldep": "1.1", "torch": "2.5.1"}},
    declared=("evaldep==1.0",),
)
SAME_PACKAGES = Environments(
    "shared",
    "the two commits declare the same packages and the project builds no extension",
    {"base": {"torch": "2.5.1"}, "head": {"torch": "2.5.1"}},
)
BUMP = "dependency change: evaldep 1.0 -> 1.1 (the base ran in an environment built from its own declarations)"
SLOWER_LOSS = {**BASE_MS, "forward": 7.0}  # evaldep 1.1 pauses longer in the loss: forward + loss 4 -> 7 ms


def counts(**fields) -> Counts:
    """One eager step of a small model on the CPU, counted; `fields` change it."""
    step = {
        "device": "cpu",
        "parameters": 1_000_000,
        "trainable_parameters": 1_000_000,
        "flops_per_sample": 2.14e8,
        "operators_per_step": 37,
        "kernels_per_step": None,
        "allocated_peak_bytes": 28 << 20,
        "allocated_kind": "cpu-live-storage",
        "graphs": None,
        "graph_breaks": None,
        "recompiles": None,
    }
    return Counts(**{**step, **fields})


def side(ms, pairs: int = 6, **fields) -> RunResult:
    """One side of workload w: `pairs` fp32 trials spending `ms` per phase, each with `fields` (its counts)."""
    trials = [dataclasses.replace(phased_trial(i, ms, jitter=0.01), **fields) for i in range(pairs)]
    workload = WorkloadResult(
        name="w",
        reference="w.py:w",
        settings=WorkloadSettings(
            batch_size=8, steps=STEPS, warmup_steps=1, seed=0, trials=pairs, threads=2, device="cpu", loader={}
        ),
        data_checksum="sha256:00",
        first_losses={"fp32": [1.0]},
        configs={"fp32": ConfigResult("fp32", trials)},
    )
    return RunResult("0.1.0", "2026-11-22T10:00:00+00:00", ENVIRONMENT, [workload])


def checked(
    environments: Environments | None,
    head_ms=SLOWER_LOSS,
    *,
    base_counts: Counts | None = None,
    head_counts: Counts | None = None,
    pairs: int = 6,
) -> GateResult:
    """A paired check of the head (`head_ms` per phase) against the base (BASE_MS), its sides' packages
    `environments`; both sides counted the same step unless told otherwise."""
    base = side(BASE_MS, pairs, counts=base_counts or counts())
    head = side(head_ms, pairs, counts=head_counts or counts())
    against = Against("main", "0123456789abcdef" * 2, None, True, base, environments=environments)
    settings = dataclasses.replace(PAIRS, first_n=pairs, max_n=pairs)
    return compare_pairs(dataclasses.replace(head, against=against), base, settings, {}, against)


def suspects(result: GateResult, every_config: bool = False) -> list[str]:
    (d,) = diagnose(result, every_config=every_config)
    return [f.suspect for f in d.findings]


# -- the reports --------------------------------------------------------------------------------------------------


def test_a_per_side_check_says_under_its_mode_that_the_base_ran_in_its_own_environment_and_what_differs():
    result = checked(PER_SIDE)
    sentence = f"the base ran in its own environment ({WHY}); packages: evaldep 1.0 -> 1.1"
    text = format_gate(judge(result), command="perfgate check").splitlines()
    assert text[0].startswith("compared with: paired: the working tree against main (0123456789)")
    assert text[1] == f"environment: {sentence}"
    markdown = format_markdown(judge(result))
    mode = next(p for p in markdown.split("\n\n") if p.startswith("Compared with: paired"))
    assert mode.endswith(f". Environment: {sentence}.")  # the header's mode paragraph, one sentence
    document = json.loads(json.dumps(gate_to_dict(judge(result, diagnosed=False))))
    assert document["environments"] == {
        "kind": "per-side",
        "why": WHY,
        "prepare_s": 3.25,
        "declared": [],
        "changed": [{"name": "evaldep", "base": "1.0", "head": "1.1"}],
        "described": sentence,
    }
    summary = format_pytest_summary(judge(result, diagnosed=False, checks=[result]), updates=[], store_dir=Path("."))
    assert summary.startswith(f"environment: {sentence}\n")


def test_a_shared_check_says_both_sides_ran_in_the_heads_environment_and_what_the_base_did_not_get():
    result = checked(SHARED)
    sentence = (
        "both sides ran in the head's environment (--environment shared); the base declares evaldep==1.0, "
        "not installed for it"
    )
    assert (
        format_gate(judge(result, diagnosed=False), command="perfgate check").splitlines()[1]
        == f"environment: {sentence}"
    )
    assert f"Environment: {sentence}." in format_markdown(judge(result, diagnosed=False))
    assert gate_to_dict(judge(result, diagnosed=False))["environments"]["changed"] == []
    plain = checked(SAME_PACKAGES)
    assert format_gate(judge(plain, diagnosed=False), command="perfgate check").splitlines()[1] == (
        "environment: both sides ran in the head's environment (the two commits declare the same packages and the "
        "project builds no extension)"
    )


def test_results_written_before_the_packages_were_recorded_report_no_environment():
    result = checked(None)
    assert not any(
        line.startswith("environment:")
        for line in format_gate(judge(result, diagnosed=False), command="c").splitlines()
    )
    assert "Environment:" not in format_markdown(judge(result, diagnosed=False))
    assert gate_to_dict(judge(result, diagnosed=False))["environments"] is None
    assert not format_pytest_summary(
        judge(result, diagnosed=False, checks=[result]), updates=[], store_dir=Path(".")
    ).startswith("environment")


def test_a_long_environment_sentence_is_shortened_in_the_markdown_headline_and_the_report_keeps_its_limit():
    many = tuple(f"package{i}==1.{i}" for i in range(400))
    result = checked(dataclasses.replace(SHARED, declared=many))
    markdown = format_markdown(judge(result, diagnosed=False), limit=3000)
    assert markdown.startswith(MARKER + "\n### perfgate: fail") and len(markdown.encode()) <= 3000
    (paragraph,) = [p for p in markdown.split("\n\n") if p.startswith("Compared with:")]
    sentence = paragraph.split(" Environment: ", 1)[1]
    assert sentence.startswith("both sides ran in the head's environment (--environment shared); the base declares")
    assert len(sentence) <= 1001 and sentence.endswith("....")  # cut at a word, then the sentence's full stop


# -- the diagnosis ------------------------------------------------------------------------------------------------


def test_a_slower_step_with_every_count_unchanged_and_a_bumped_package_leads_with_the_dependency():
    result = checked(PER_SIDE)
    (verdict,) = result.verdicts
    assert verdict.status == Status.REGRESSION
    (d,) = diagnose(result)
    assert d.suspect == "dependencies" and d.headline == "dependencies"
    lead = d.findings[0]
    assert lead.line == (
        "dependencies: the same work on other packages (evaldep 1.0 -> 1.1): every count of the step is unchanged, "
        "so the change comes with the new versions; look at what they changed, or pin the base's versions to confirm"
    )
    assert lead.evidence == (
        BUMP,
        "every count of the step is unchanged: FLOPs per sample 2.14e8 -> 2.14e8, operators a step 37 -> 37, "
        "parameters 1,000,000 -> 1,000,000, allocated peak 28.0 MiB -> 28.0 MiB",
        "forward + loss: 4.00 -> 7.00 ms per step",
    )
    # The packages are what the same work leaves: no second finding says "the runtime or the machine".
    assert "runtime or machine" not in [f.suspect for f in d.findings]
    assert "Suspect: **dependencies**" in format_markdown(judge(result, diagnoses=[d]))
    assert f"        {BUMP}" in format_diagnoses([d])
    # A slow data pipeline with the same counts: the packages still lead, the data pipeline says where it shows.
    slow_data = checked(PER_SIDE, {**BASE_MS, "data_wait": 9.0})
    assert suspects(slow_data)[:2] == ["dependencies", "data pipeline"]


def test_counts_that_moved_with_the_packages_are_the_dependency_suspects_evidence():
    result = checked(PER_SIDE, head_counts=counts(operators_per_step=120))
    (d,) = diagnose(result)
    (finding,) = [f for f in d.findings if f.suspect == "dependencies"]
    assert finding.line == (
        "dependencies: the packages changed (evaldep 1.0 -> 1.1), and the step's counts with them: the new versions "
        "may have changed what runs, or the code did"
    )
    assert finding.evidence == (BUMP, "counts changed with the packages: operators a step 37 -> 120")
    # A count that moved may be the code's: what explains the slower step leads, the packages follow it.
    assert d.suspect == "model compute" and d.findings.index(finding) == 1
    # Counted on one side only: the packages are named, the counts said not to be compared.
    base = side(BASE_MS)
    head = side(SLOWER_LOSS, counts=counts())
    against = Against("main", "0123456789abcdef" * 2, None, True, base, environments=PER_SIDE)
    uncounted = compare_pairs(dataclasses.replace(head, against=against), base, PAIRS, {}, against)
    (d,) = diagnose(uncounted)
    (finding,) = [f for f in d.findings if f.suspect == "dependencies"]
    assert finding.line.endswith(
        "the step's counts were not compared on both sides, so whether the code does the same work is not known"
    )
    assert finding.evidence == (BUMP,) and d.suspect == "model compute"


def test_counts_that_moved_where_head_changes_no_file_but_the_declarations_lead_with_the_packages():
    """A torch bump alone can change what runs (other operators, other kernels): with no other file changed, the
    packages are the change, and they lead what explains the slower step."""
    only = dataclasses.replace(PER_SIDE, code_changed=False)
    result = checked(only, head_counts=counts(operators_per_step=120))
    (d,) = diagnose(result)
    assert d.suspect == "dependencies"
    assert d.findings[0].line == (
        "dependencies: only the declared packages changed (evaldep 1.0 -> 1.1), no other file: the new versions "
        "changed what runs (the step's counts moved with them); look at what they changed, or pin the base's "
        "versions to confirm"
    )
    assert d.findings[0].evidence == (BUMP, "counts changed with the packages: operators a step 37 -> 120")
    # The same with code changed too: what explains the slower step leads.
    (d,) = diagnose(
        checked(dataclasses.replace(PER_SIDE, code_changed=True), head_counts=counts(operators_per_step=120))
    )
    assert d.suspect == "model compute"


def test_an_open_verdict_that_leans_slower_names_the_packages_and_an_unchanged_step_does_not():
    leaning = checked(PER_SIDE, pairs=3)  # fewer than 4 pairs never call a change
    (verdict,) = leaning.verdicts
    assert verdict.status == Status.INCONCLUSIVE and verdict.throughput.ratio < 1
    assert suspects(leaning, every_config=True)[0] == "dependencies"
    unchanged = checked(PER_SIDE, BASE_MS)
    assert unchanged.verdicts[0].status != Status.REGRESSION
    assert "dependencies" not in suspects(unchanged, every_config=True)


def test_a_shared_environment_whose_base_declares_other_packages_adds_a_caveat_to_the_diagnosis():
    (d,) = diagnose(checked(SHARED))
    caveat = d.findings[-1]
    assert caveat.standing and caveat.line == (
        "dependencies: the base ran in the head's packages: a dependency change is not measured "
        "(--environment per-side measures it)"
    )
    assert caveat.evidence == ("the base declares evaldep==1.0, not installed for it",)
    assert d.suspect == "runtime or machine"  # both sides ran on the same packages: they are no suspect
    assert "dependency change:" not in format_diagnoses([d])
    # The pytest plugin spells the option its own way.
    result = checked(SHARED)
    pytest_result = dataclasses.replace(result, settings=dataclasses.replace(result.settings, front_end=PYTEST))
    (d,) = diagnose(pytest_result)
    assert d.findings[-1].line.endswith("(--perfgate-environment per-side measures it)")
    # The same packages declared on both sides: nothing to say.
    assert "dependencies" not in suspects(checked(SAME_PACKAGES))


def test_without_the_record_of_the_packages_the_diagnosis_is_what_it_was():
    before = diagnose(checked(None))
    assert [f.suspect for d in before for f in d.findings] == ["runtime or machine"]
    assert diagnose(checked(SAME_PACKAGES)) == before


# -- the results file ---------------------------------------------------------------------------------------------

FULL_ENVIRONMENT = Environment.from_dict(
    {
        "python": "3.11",
        "platform": "linux",
        "torch": "2",
        "cuda": None,
        "cudnn": None,
        "device": {"type": "cpu", "name": "cpu", "count": 1, "driver": None},
        "cpu": {"model": "cpu", "logical_cores": 2, "available_cores": 2},
        "threads": 1,
        "git": None,
    }
)


def filed(run: RunResult) -> RunResult:
    """The run as a results file keeps one: the machine's whole environment, full data checksums."""
    checksum = "sha256:" + "0" * 64
    (workload,) = run.workloads
    trials = [dataclasses.replace(t, data_checksum=checksum) for t in workload.configs["fp32"].trials]
    workload = dataclasses.replace(workload, data_checksum=checksum, configs={"fp32": ConfigResult("fp32", trials)})
    return dataclasses.replace(run, environment=FULL_ENVIRONMENT, workloads=[workload])


def paired_run(environments: Environments | None) -> RunResult:
    """A paired check's results: four pairs, head slower, the sides' packages `environments`."""
    base = filed(side(BASE_MS, 4))
    order = [f"w fp32 #{i}: base, head" for i in range(4)]
    against = Against("main", "0123456789" * 4, "fedcba9876" * 4, False, base, order, environments=environments)
    return dataclasses.replace(filed(side(SLOWER_LOSS, 4)), against=against)


@pytest.mark.parametrize("environments", [PER_SIDE, SHARED])
def test_the_environments_are_kept_in_the_results_file_and_read_back_as_written(tmp_path, environments):
    path = tmp_path / "results.json"
    paired_run(environments).write_json(path)
    document = json.loads(path.read_text())
    validate_results(document)
    kept = document["against"]["environments"]
    assert (
        kept["kind"] == environments.kind
        and kept["packages"]["base"]["evaldep"] == environments.packages["base"]["evaldep"]
    )
    again = parse_results(path.read_text(), source="results.json")
    assert again.against is not None and again.against.environments == environments
    again.write_json(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == path.read_text()
    # `perfgate report` on the file says where the sides ran, as the check did.
    report = format_gate(
        judge(judge_saved(again, ProjectConfig(), tmp_path), diagnosed=False), command="perfgate report", exits=False
    )
    assert report.splitlines()[1] == f"environment: {environments.describe()}"


def test_a_results_file_without_the_environments_reads_as_not_recorded_and_a_wrong_one_is_refused(tmp_path):
    path = tmp_path / "results.json"
    paired_run(None).write_json(path)
    document = json.loads(path.read_text())
    assert "environments" not in document["against"]
    validate_results(document)
    assert parse_results(path.read_text(), source="old.json").against.environments is None
    paired_run(PER_SIDE).write_json(path)
    wrong = json.loads(path.read_text())
    wrong["against"]["environments"]["kind"] = "both"
    with pytest.raises(ResultsError, match=r"against\.environments\.kind"):
        parse_results(json.dumps(wrong), source="r.json")
    unknown = json.loads(path.read_text())
    unknown["against"]["environments"]["packages"]["middle"] = {}
    with pytest.raises(ResultsError, match=r"against\.environments\.packages"):
        parse_results(json.dumps(unknown), source="r.json")
