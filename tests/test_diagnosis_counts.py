"""The diagnosis reads the step's exact counts (FLOPs, operators, graph breaks, allocated peak) beside its phases."""

from __future__ import annotations

import dataclasses

from perfgate.judge.diagnosis import diagnose
from perfgate.judge.verdict import compare_run
from perfgate.records.baselines import entry_from_workload
from perfgate.records.verdicts import GateSettings
from tests.helpers.results import BASE_MS, counts, phased_run, with_trials

SETTINGS = GateSettings(first_n=3, max_n=3)
MIB = 2**20
PLACES = ["model.py:42 in forward: call to builtin print", "model.py:57 in forward: data-dependent branch"]


def diagnosed(base_run, head_run):
    """The head's diagnosis against the base run's stored entry (its counts are its first trial's)."""
    baseline = {"w": entry_from_workload(base_run, base_run.workloads[0])}
    (d,) = diagnose(compare_run(head_run, baseline, SETTINGS), every_config=True)
    return d


def lines(d):
    return [f.line for f in d.findings]


def test_a_slower_step_whose_flops_grew_is_model_compute_the_model_grew_in_one_finding():
    base = with_trials(phased_run(BASE_MS), counts=counts())
    bigger = counts(flops_per_sample=2.96e8, parameters=1_300_000, trainable_parameters=1_300_000)
    d = diagnosed(base, with_trials(phased_run({**BASE_MS, "forward": 5.5, "backward": 8.3}), counts=bigger))
    assert d.suspect == "model compute"
    assert d.findings[0].line == (
        "model compute: FLOPs per sample +38% (the model grew); backward and forward + loss explain 100% of the "
        "slower step; look at the model code this change touched"
    )
    assert d.findings[0].evidence[0] == (
        "counted exactly: FLOPs per sample 2.14e8 -> 2.96e8, parameters 1,000,000 -> 1,300,000, "
        "operators a step 400 -> 400"
    )
    assert [f.suspect for f in d.findings].count("model compute") == 1  # the phases' finding, not a second one
    # The same FLOPs with the same parameters: more work a sample (longer inputs), not a bigger model.
    longer = counts(flops_per_sample=2.96e8)
    d = diagnosed(base, with_trials(phased_run({**BASE_MS, "forward": 5.5, "backward": 8.3}), counts=longer))
    assert d.findings[0].line.startswith("model compute: FLOPs per sample +38% (the same parameters do more work);")
    assert d.findings[0].line.endswith("; look at the model code this change touched")
    # ... on batches that changed too (a collate function padding to twice the length): the inputs come first.
    padded = with_trials(phased_run({**BASE_MS, "forward": 5.5, "backward": 8.3}), counts=longer)
    (workload,) = padded.workloads
    d = diagnosed(
        base, dataclasses.replace(padded, workloads=[dataclasses.replace(workload, data_checksum="sha256:11")])
    )
    assert d.findings[0].line.endswith(
        "; the batches changed too: look at their shapes (padding, sequence length, image size), then the model code"
    )
    assert any(e.startswith("the data pipeline's output changed (data-slice checksum ") for e in d.findings[0].evidence)


def test_flops_that_explain_the_slowdown_lead_a_data_wait_that_the_phases_make_look_larger():
    # The step grows 4.9 ms: data wait +2.9 ms (59% of it), forward and backward +1 ms each (41%). By the phases
    # the data pipeline explains most; FLOPs per sample +38% over 11 ms of compute explain 86% of it.
    base = with_trials(phased_run(BASE_MS), counts=counts())
    grown = {**BASE_MS, "data_wait": 3.0, "forward": 5.0, "backward": 7.0}
    d = diagnosed(base, with_trials(phased_run(grown), counts=counts(flops_per_sample=2.96e8)))
    assert [f.suspect for f in d.findings][:2] == ["model compute", "data pipeline"]
    assert d.findings[0].line == (
        "model compute: FLOPs per sample +38% (the same parameters do more work); at the baseline's time per FLOP "
        "that is 86% of the slower step; look at the model code this change touched"
    )
    assert d.headline == "model compute (explains 86% of the slower step)"
    # FLOPs +5% explain a tenth of it: the data pipeline leads, the FLOPs follow.
    d = diagnosed(base, with_trials(phased_run(grown), counts=counts(flops_per_sample=2.25e8)))
    assert [f.suspect for f in d.findings][:2] == ["data pipeline", "model compute"]
    # Without counts the same phases name the data pipeline alone.
    d = diagnosed(phased_run(BASE_MS), phased_run(grown))
    assert "model compute" not in [f.suspect for f in d.findings] and d.suspect == "data pipeline"


def test_flops_that_grew_in_a_step_no_slower_lead_the_memory_the_bigger_model_takes():
    base = with_trials(phased_run(BASE_MS), counts=counts())
    bigger = counts(flops_per_sample=2.96e8, parameters=1_300_000, allocated_peak_bytes=int(35.4 * MIB))
    d = diagnosed(base, with_trials(phased_run(BASE_MS), counts=bigger))
    assert [f.suspect for f in d.findings] == ["model compute", "memory"]
    assert d.findings[0].line == (
        "model compute: FLOPs per sample +38% (the model grew); the step is not measurably slower; "
        "look at the model code this change touched"
    )


def test_more_operators_with_flops_unchanged_are_framework_overhead_counted_once():
    base = with_trials(phased_run(BASE_MS), counts=counts(), torch_calls_per_step=200)
    # 120 more operators, 1.2 ms more a step: 10 us each, dispatch-sized.
    head = with_trials(
        phased_run({**BASE_MS, "forward": 5.2}), counts=counts(operators_per_step=520), torch_calls_per_step=800
    )
    d = diagnosed(base, head)
    assert d.suspect == "framework overhead"
    assert d.findings[0].line == "framework overhead: +120 operators a step (400 -> 520), FLOPs per sample unchanged"
    # The torch calls say the same: the operators' evidence, not a second finding.
    assert d.findings[0].evidence[:1] == ("a step calls 800 torch functions, 4.0x the baseline's 200",)
    assert d.findings[0].evidence[1].endswith("us, dispatch-sized, not compute")
    assert not any("torch functions" in line for line in lines(d))
    # The same operators costing 500 us each (60 ms more a step): work the FLOP count leaves out, model compute.
    d = diagnosed(base, with_trials(phased_run({**BASE_MS, "forward": 64.0}), counts=counts(operators_per_step=520)))
    assert d.suspect == "model compute"
    assert "; +120 operators a step, FLOPs per sample unchanged, " in d.findings[0].line
    assert "us each: work the FLOP count leaves out (elementwise operations, copies)" in d.findings[0].line
    # Operators counted on another device type decompose differently: not compared.
    cuda = with_trials(phased_run(BASE_MS), counts=counts(device="cuda", allocated_kind="cuda-max-allocated"))
    d = diagnosed(cuda, with_trials(phased_run({**BASE_MS, "forward": 5.2}), counts=counts(operators_per_step=520)))
    assert not any("operators a step" in line for line in lines(d))
    # FLOPs one side did not count: the operators still tell, and the line says what was not compared.
    uncounted = with_trials(phased_run(BASE_MS), counts=counts(flops_per_sample=None))
    d = diagnosed(
        uncounted, with_trials(phased_run({**BASE_MS, "forward": 5.2}), counts=counts(operators_per_step=520))
    )
    assert d.findings[0].line == "framework overhead: +120 operators a step (400 -> 520), FLOPs per sample not compared"
    # Five more operators (1%) are within the tolerance: no finding.
    d = diagnosed(base, with_trials(phased_run(BASE_MS), counts=counts(operators_per_step=405)))
    assert d.findings == ()


def test_new_graph_breaks_are_named_with_their_places_and_new_recompiles_with_their_reasons():
    compiled = counts(operators_per_step=None, graphs=1, graph_breaks=0, recompiles=0)
    base = with_trials(phased_run(BASE_MS), counts=compiled, compile_stats={"graphs": 1, "graph_breaks": 0})
    reason = "model.py:40 in forward: tensor 'x' size mismatch at index 0. expected 8, actual 4"
    broken = dataclasses.replace(
        compiled, graphs=3, graph_breaks=2, break_places=PLACES, recompiles=1, recompile_reasons=[reason]
    )
    d = diagnosed(base, with_trials(phased_run(BASE_MS), counts=broken, compile_stats={"graphs": 3, "graph_breaks": 2}))
    breaks, recompiles = (f for f in d.findings if f.suspect == "framework overhead")
    assert breaks.line == (
        "framework overhead: torch.compile graph breaks 0 -> 2, at model.py:42 in forward, model.py:57 in forward"
    )
    assert breaks.evidence[:2] == tuple(PLACES)
    assert recompiles.line == f"framework overhead: torch.compile recompiles 0 -> 1: {reason}"
    assert sum("graph breaks" in line for line in lines(d)) == 1  # the trials' own break count adds no second line
    # A base that broke at the first place already: only the new one is named.
    once = dataclasses.replace(compiled, graph_breaks=1, break_places=PLACES[:1])
    d = diagnosed(with_trials(phased_run(BASE_MS), counts=once), with_trials(phased_run(BASE_MS), counts=broken))
    assert d.findings[0].line == "framework overhead: torch.compile graph breaks 1 -> 2, at model.py:57 in forward"
    # The same breaks on both sides: nothing new.
    same = with_trials(phased_run(BASE_MS), counts=broken)
    assert diagnosed(same, same).findings == ()


def test_an_allocated_peak_that_grew_leads_the_memory_finding_with_its_figure():
    base = with_trials(phased_run(BASE_MS), counts=counts())
    kept = counts(allocated_peak_bytes=int(35.4 * MIB))
    d = diagnosed(base, with_trials(phased_run(BASE_MS), counts=kept))
    assert d.suspect == "memory"
    assert d.findings[0].line == "memory: allocated peak +24% (28.5 MiB -> 35.4 MiB)"
    assert d.findings[0].evidence[0].startswith("counted exactly: the peak of live tensor storage over one untimed")
    # Beside a peak-memory regression the counted figure leads the verdict's.
    (workload,) = phased_run(BASE_MS).workloads
    peak = dataclasses.replace(workload.configs["fp32"].trials[0].memory, peak_bytes=80 * MIB)
    d = diagnosed(base, with_trials(phased_run(BASE_MS), counts=kept, memory=peak))
    (memory,) = d.findings
    assert memory.line == (
        "memory: allocated peak +24% (28.5 MiB -> 35.4 MiB); peak memory regression: 50.0 MiB -> 80.0 MiB (+30.0 MiB)"
    )
    # A peak-memory regression whose counted step allocates what it did: said, for the growth is elsewhere.
    d = diagnosed(base, with_trials(phased_run(BASE_MS), counts=counts(), memory=peak))
    (memory,) = d.findings
    assert memory.line == "peak memory regression: 50.0 MiB -> 80.0 MiB (+30.0 MiB)"
    assert memory.evidence[-1].startswith("the allocated peak of one counted step is unchanged (28.5 MiB -> 28.5 MiB)")
    # A peak counted on the GPU says nothing of one counted on the CPU.
    cuda = with_trials(phased_run(BASE_MS), counts=counts(device="cuda", allocated_kind="cuda-max-allocated"))
    assert diagnosed(cuda, with_trials(phased_run(BASE_MS), counts=kept)).findings == ()


def test_a_slower_step_with_every_count_unchanged_points_at_the_runtime_or_the_machine_not_the_model():
    base = with_trials(phased_run(BASE_MS), counts=counts())
    d = diagnosed(base, with_trials(phased_run({**BASE_MS, "forward": 5.5, "backward": 8.3}), counts=counts()))
    assert d.suspect == "runtime or machine"
    (finding,) = d.findings  # no model-compute finding: the model does the same work
    assert finding.line == (
        "runtime or machine: the step is slower with every count unchanged, so the model does the same work; "
        "look at the data pipeline, the runtime (torch and library versions, threads, backend settings) or the machine"
    )
    assert finding.evidence[0] == (
        "every count of the step is unchanged: FLOPs per sample 2.14e8 -> 2.14e8, operators a step 400 -> 400, "
        "parameters 1,000,000 -> 1,000,000, allocated peak 28.5 MiB -> 28.5 MiB"
    )
    assert d.headline == "runtime or machine (explains 100% of the slower step)"
    # One count moved: not the same work, and the phases' model-compute finding is back.
    d = diagnosed(
        base, with_trials(phased_run({**BASE_MS, "forward": 5.5, "backward": 8.3}), counts=counts(parameters=1))
    )
    assert d.suspect == "model compute"
    # A clean run with the same counts: nothing to say.
    assert diagnosed(base, base).findings == ()


def test_a_slow_loader_with_every_count_unchanged_is_the_data_pipeline_with_the_counts_as_evidence():
    base = with_trials(phased_run(BASE_MS), counts=counts())
    d = diagnosed(base, with_trials(phased_run({**BASE_MS, "data_wait": 9.0}), counts=counts()))
    assert d.suspect == "data pipeline"
    assert "runtime or machine" not in [f.suspect for f in d.findings]  # the data pipeline explains it: one finding
    assert d.findings[0].evidence[-1].startswith("every count of the step is unchanged: FLOPs per sample 2.14e8")


def test_a_baseline_without_counts_gives_the_diagnosis_it_gave_before():
    plain = phased_run(BASE_MS)
    broken = counts(flops_per_sample=2.96e8, operators_per_step=900, allocated_peak_bytes=80 * MIB, graph_breaks=3)
    for ms in (BASE_MS, {**BASE_MS, "forward": 5.5, "backward": 8.3}, {**BASE_MS, "data_wait": 9.0}):
        before = diagnosed(plain, phased_run(ms))
        after = diagnosed(plain, with_trials(phased_run(ms), counts=broken))
        assert after.findings == before.findings and after.suspect == before.suspect
