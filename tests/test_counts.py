"""The exact counts (`perfgate.measure.counting`): what one training step does, the same in every run.

The first tests count real torch steps in this process; the e2e ones run real counting trials of transformers'
GPT-2 (a model perfgate's authors did not write, random weights) in fresh processes, with real changes planted
(tests/workloads/outside_gpt2.py)."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys

import pytest
import torch

from perfgate.measure.counting import count_step
from perfgate.measure.lab import TrialPlace, run_trial_process
from perfgate.measure.trial import TrialSpec
from perfgate.records.shapes import Counts
from perfgate.references import resolve_references
from tests.helpers.cuda import needs_cuda
from tests.helpers.workloads import WORKLOADS

# Under pytest-xdist these run beside other tests: nothing here reads a verdict or a figure that load changes.
pytestmark = pytest.mark.shares_machine


def mlp_step(keep: list[torch.Tensor] | None = None, extra_ops: int = 0):
    """A real training step of a two-layer MLP (AdamW), and its model, optimizer and batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters())
    batch = (torch.randn(32, 64), torch.randint(0, 10, (32,)))

    def step(b):
        hidden = model[1](model[0](b[0]))
        for _ in range(extra_ops):
            hidden = hidden + 0.0
        if keep is not None:
            keep.append(hidden.detach().clone())  # an activation kept for a metric
        loss = torch.nn.functional.cross_entropy(model[2](hidden), b[1])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(batch)  # the optimizer's state exists, as after a trial's warm-up
    return step, model, optimizer, batch


def counted(step, model, optimizer, batch) -> Counts:
    return count_step(step, None, model, optimizer, batch, 32, "cpu", None)


def test_a_step_counted_twice_gives_the_same_counts():
    first = counted(*mlp_step())
    second = counted(*mlp_step())
    assert first.counting_s > 0
    assert {**first.to_dict(), "counting_s": 0} == {**second.to_dict(), "counting_s": 0}


COUNT_WITHOUT_AN_OPTIMIZER = """
import json
import sys

import torch

from perfgate.measure.counting import count_step

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
batch = (torch.randn(32, 64), torch.randint(0, 10, (32,)))


def step(b):  # SGD written out, as a workload with its own update rule has it
    torch.nn.functional.cross_entropy(model(b[0]), b[1]).backward()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= 0.01 * parameter.grad
            parameter.grad = None


counts = [count_step(step, None, model, None, batch, 32, "cpu", None)]
before = "torch._dynamo" in sys.modules
import torch._dynamo  # noqa: E402 - as a compile or a torch optimizer would have imported it

counts.append(count_step(step, None, model, None, batch, 32, "cpu", None))
print(json.dumps({"dynamo_before": before, "counts": [{**c.to_dict(), "counting_s": 0} for c in counts]}))
"""


@pytest.mark.e2e
def test_counting_a_step_imports_no_torch_dynamo_where_nothing_had_and_counts_the_same_either_way():
    """torch's dispatch modes import torch._dynamo at their first operator (about a second of a trial whose
    workload builds no torch optimizer); the counting pass does without it, and counts what it counts with it."""
    command = [sys.executable, "-c", COUNT_WITHOUT_AN_OPTIMIZER]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["dynamo_before"] is False
    without, with_dynamo = report["counts"]
    assert without == with_dynamo and without["operators_per_step"] > 0 and without["flops_per_sample"] > 0


def test_flops_parameters_and_operators_of_a_known_step():
    counts = counted(*mlp_step())
    assert counts.parameters == counts.trainable_parameters == 64 * 256 + 256 + 256 * 10 + 10
    # forward 2*(64*256 + 256*10) a sample; backward: both weights' gradients, and the input gradient of the second
    # layer only (the batch needs none): 2*(64*256) + 2*2*(256*10)
    assert counts.flops_per_sample == 2 * (64 * 256 + 256 * 10) + 2 * 64 * 256 + 4 * 256 * 10
    assert counts.operators_per_step is not None and counts.operators_per_step > 20
    assert counts.kernels_per_step is None and counts.graphs is None
    assert counts.allocated_kind == "cpu-live-storage"


def test_more_operators_and_a_kept_activation_are_counted_exactly():
    plain = counted(*mlp_step())
    extra = counted(*mlp_step(extra_ops=5))
    kept: list[torch.Tensor] = []
    keeping = counted(*mlp_step(keep=kept))
    assert plain.operators_per_step is not None and plain.allocated_peak_bytes is not None
    # each `+ 0.0` is one add forward and, in backward, its gradient passes through: 5 operators or more
    assert extra.operators_per_step is not None and extra.operators_per_step >= plain.operators_per_step + 5
    assert extra.flops_per_sample == plain.flops_per_sample  # additions are not FLOPs the counter counts
    # the kept copy of the 32x256 float activation is alive at the step's peak: exactly its bytes more
    assert keeping.allocated_peak_bytes == plain.allocated_peak_bytes + 32 * 256 * 4
    assert keeping.flops_per_sample == plain.flops_per_sample


def test_the_allocated_peak_counts_what_the_step_allocates_not_what_was_there():
    step, model, optimizer, batch = mlp_step()
    before = counted(step, model, optimizer, batch)
    ballast = torch.zeros(1_000_000)  # held by the caller, untouched by the step: not the step's memory
    after = counted(step, model, optimizer, batch)
    assert ballast.numel() and after.allocated_peak_bytes == before.allocated_peak_bytes


@needs_cuda
def test_on_cuda_kernels_and_the_allocators_peak_are_counted():
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.randn(32, 64, device="cuda")

    def step(b):
        model(b).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(batch)
    first = count_step(step, None, model, optimizer, batch, 32, "cuda", None)
    second = count_step(step, None, model, optimizer, batch, 32, "cuda", None)
    assert first.allocated_kind == "cuda-max-allocated" and first.allocated_peak_bytes
    assert first.kernels_per_step is not None and first.kernels_per_step >= 3
    assert (first.kernels_per_step, first.allocated_peak_bytes) == (
        second.kernels_per_step,
        second.allocated_peak_bytes,
    )


# -- counting trials of a model perfgate's authors did not write -------------------------------------------------

GPT2 = f"{WORKLOADS / 'outside_gpt2.py'}:gpt2"


def count_trial(tmp_path, config: str = "fp32", *, layers: int = 2, plant: str = "", timed: bool = False) -> Counts:
    """One real trial of the outside GPT-2 in a fresh process: a counting trial, or (`timed`) a timed one, whose
    counts come from an extra step after its timed steps."""
    (reference,) = resolve_references([GPT2])
    spec = TrialSpec(reference.text, reference.target, config, 0, "cpu", 1, probe=False, counts_only=not timed)
    env = (("PERFGATE_TEST_LAYERS", str(layers)), ("PERFGATE_TEST_PLANT", plant))
    scratch = tmp_path / f"{config}-{layers}-{plant or 'plain'}-{'timed' if timed else 'counted'}"
    scratch.mkdir()
    record = run_trial_process(spec, scratch, 300.0, TrialPlace(name="head", env=env))
    assert record.result.ok, record.result.failure
    assert record.result.counts is not None, record.result.warnings
    return record.result.counts


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """`count_trial`, each distinct trial run once for the module: the plain 2-layer counting trial, which three
    tests compare against, is one real trial process instead of three (the counts are exact, the same in every run).

    `gpt2.many(...)` runs a test's trials that have not run yet two at a time, one per core: each trial has one
    torch thread, and nothing a neighbour's load changes is read (counts, parameters, the allocator's peak)."""
    return CountingTrials(tmp_path_factory.mktemp("gpt2"))


class CountingTrials:
    def __init__(self, scratch) -> None:
        self.scratch = scratch
        self.done: dict[tuple, Counts] = {}

    def many(self, *keys: tuple[str, int, str, bool]) -> list[Counts]:
        """The counts of each (config, layers, plant, timed), running those not yet run at the same time."""
        missing = list(dict.fromkeys(key for key in keys if key not in self.done))
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            counted = pool.map(
                lambda key: count_trial(self.scratch, key[0], layers=key[1], plant=key[2], timed=key[3]), missing
            )
            self.done.update(zip(missing, counted, strict=True))
        return [self.done[key] for key in keys]


def same_counts(a: Counts, b: Counts) -> bool:
    return {**a.to_dict(), "counting_s": 0} == {**b.to_dict(), "counting_s": 0}


@pytest.mark.e2e
def test_gpt2_counts_are_the_same_in_two_runs_and_in_a_timed_trial(gpt2):
    first, timed = gpt2.many(("fp32", 2, "", False), ("fp32", 2, "", True))
    assert same_counts(first, timed)
    assert first.parameters > 100_000 and first.operators_per_step and first.allocated_peak_bytes


@pytest.mark.e2e
def test_one_more_gpt2_block_adds_its_flops_exactly(gpt2):
    one, two, three = gpt2.many(*(("fp32", n, "", False) for n in (1, 2, 3)))
    assert one.flops_per_sample and two.flops_per_sample and three.flops_per_sample
    d, t = 64, 32  # n_embd and the sequence: a block's matmuls are 24 d^2 a token, attention 4 t d; x3 with backward
    block = 3 * (24 * d * d * t + 4 * t * t * d)
    assert two.flops_per_sample - one.flops_per_sample == block
    assert three.flops_per_sample - two.flops_per_sample == block
    assert three.parameters - two.parameters == 12 * d * d + 13 * d  # a block's weights and biases
    assert three.operators_per_step > two.operators_per_step > one.operators_per_step  # type: ignore[operator]


@pytest.mark.e2e
def test_a_slow_getitem_leaves_every_count_unchanged_and_a_kept_activation_raises_the_peak(gpt2):
    plain, slow, kept = gpt2.many(*(("fp32", 2, plant, False) for plant in ("", "slowitem", "keep")))
    assert same_counts(plain, slow)
    assert kept.flops_per_sample == plain.flops_per_sample and kept.parameters == plain.parameters
    assert kept.allocated_peak_bytes == plain.allocated_peak_bytes + 8 * 32 * 256 * 4  # the logits' copy  # type: ignore[operator]


@pytest.mark.e2e
def test_a_graph_break_planted_in_forward_is_counted_with_its_place(gpt2):
    plain, broken = gpt2.many(("bf16-compile", 2, "", False), ("bf16-compile", 2, "graphbreak", False))
    assert plain.graph_breaks is not None and broken.graph_breaks is not None
    assert broken.graph_breaks > plain.graph_breaks
    planted = [place for place in broken.break_places if "outside_gpt2.py" in place]
    assert planted and "in breaking" in planted[0] and "graph_break" in planted[0], broken.break_places
    assert not any("outside_gpt2.py" in place for place in plain.break_places)
    assert broken.flops_per_sample == plain.flops_per_sample  # the same arithmetic
    assert broken.operators_per_step is None  # compiled: operators are not the eager model's to count


# dynamo's tracing reads a non-leaf's .grad, and torch warns; the suite makes warnings errors (the trial does not)
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@pytest.mark.e2e  # about two seconds: torch._dynamo's import and its trace
def test_only_a_sides_first_trial_traces_the_forward_again_for_where_its_graph_breaks_are():
    """Finding the places traces the model's forward again (`torch._dynamo.explain`; seconds a trial for a real
    model), so a trial finds them only where asked (`places`: its side's first trial, `TrialSpec.trial` 0); the
    others count the same breaks without them. In this process, on a model with a planted break."""
    from perfgate.measure import trial
    from perfgate.measure.counting import CompileCounts
    from perfgate.measure.device import Device
    from perfgate.variants import CONFIGS
    from tests.helpers.workloads import TINY_FILE

    (reference,) = resolve_references([f"{TINY_FILE}:graph_break"])
    workload = reference.load()
    setup, _ = trial._set_up(workload, CONFIGS["fp32"], Device())
    found = {}
    for places in (True, False):
        counts, failure = trial._count(setup, CompileCounts(2, 1, 0, []), places=places)
        assert counts is not None, failure
        found[places] = counts
    assert found[True].graph_breaks == found[False].graph_breaks == 1
    (place,) = found[True].break_places
    assert place.startswith("workloads/tiny.py:") and " in forward: " in place and "graph_break" in place, place
    assert found[False].break_places == []
