"""The step you train with (issue 44): a workload's own step, clipping, accumulation, a scheduler, fp16 with a
GradScaler and compile options, as the trial runs them.

The unit tests run `perfgate.measure.step.TrainingStep` in this process on a tiny real model; the end-to-end tests
run real trials (`perfgate run`) and a real paired check in a git repository made under the test's folder.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import perfgate
from perfgate.errors import WorkloadError
from perfgate.measure.device import HostStepClock
from perfgate.measure.step import NoClock, TrainingStep, TrialFailure
from perfgate.records.summary import PHASES
from perfgate.workload import StepState
from tests.helpers.cli import run_in_process
from tests.helpers.git import commit, new_repository


def _data() -> torch.utils.data.Dataset:
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _loss(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x).float(), y)


def _workload(batch_size: int = 8, **fields) -> perfgate.Workload:
    return perfgate.Workload(name="tiny", model=_model, dataset=_data, loss=_loss, batch_size=batch_size, **fields)


def _batches(n: int, size: int = 8):
    data = _data()
    return [tuple(t[i * size : (i + 1) * size] for t in data.tensors) for i in range(n)]


def _training(workload, model=None, scaler=None, autocast=None):
    import contextlib

    model = model or workload.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = None if workload.scheduler is None else workload.scheduler(optimizer)
    autocast = autocast or contextlib.nullcontext
    state = StepState(scaler, scheduler, workload.max_grad_norm, workload.accumulation, autocast)
    step = TrainingStep(
        workload,
        model,
        model,
        optimizer,
        autocast,
        scaler=scaler,
        scheduler=scheduler,
        own_step=workload.step,
        state=state,
    )
    return step, model, optimizer


class _RecordingClock:
    def __init__(self) -> None:
        self.marks: list[str | None] = []

    def mark(self, phase=None):
        self.marks.append(phase)


# --- The contract's one-line errors, before any trial -------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"step": "train"}, "step must be callable"),
        ({"step": lambda model, batch: None}, "step takes 2 positional argument(s)"),
        ({"accumulation": 0}, "accumulation must be an integer >= 1"),
        ({"max_grad_norm": -1.0}, "max_grad_norm must be a number > 0"),
        ({"scheduler": 3}, "scheduler must be a callable taking the optimizer"),
        ({"compile_options": {"mood": "fast"}}, "compile_options has unknown key(s) 'mood'"),
        ({"compile_options": {"target": "loss"}}, "compile_options target must be 'model' or 'step'"),
        ({"compile_options": {"target": "step"}}, "compile_options target 'step' needs a workload with its own step"),
    ],
)
def test_a_bad_step_field_is_a_one_line_error_naming_the_workload(fields, expected):
    with pytest.raises(WorkloadError) as caught:
        _workload(**fields)
    line = caught.value.one_line()
    assert expected in line and "'tiny'" in line and "\n" not in line


def test_a_step_may_take_the_state_or_leave_it_out():
    _workload(step=lambda model, batch, optimizer: None)
    _workload(step=lambda model, batch, optimizer, state: None)


# --- The step clock's named marks -----------------------------------------------------------------------------


def test_named_marks_add_each_stretch_to_its_phase_and_unnamed_ones_follow_the_order():
    clock = HostStepClock()
    clock.start_timing()
    clock.begin_step()
    for phase in ("data_wait", "h2d", "forward", "backward", "data_wait", "h2d", "forward", "backward", "optimizer"):
        clock.mark(phase)
    clock.end_step()
    clock.begin_step()
    for _ in PHASES:
        clock.mark()
    clock.end_step()
    clock.stop_timing()
    times = clock.times()
    assert all(len(times.phases[p]) == 2 for p in PHASES)
    assert times.step_s[0] == pytest.approx(sum(times.phases[p][0] for p in PHASES))
    assert all(value >= 0 for p in PHASES for value in times.phases[p])


# --- perfgate's own step: accumulation, clipping, the scheduler, the scaler -----------------------------------


def test_perfgates_step_accumulates_clips_and_steps_the_scheduler_once_per_optimizer_step():
    workload = _workload(
        accumulation=3,
        max_grad_norm=1e-3,
        scheduler=lambda optimizer: torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5),
    )
    step, model, optimizer = _training(workload)
    batches = iter(_batches(3))
    norms: list[float] = []
    hook = optimizer.register_step_pre_hook(
        lambda *_: norms.append(float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm()))
    )
    before = [p.detach().clone() for p in model.parameters()]
    clock = _RecordingClock()
    loss = step.run(lambda: next(batches), clock, 0)
    hook.remove()
    assert loss.dim() == 0 and not loss.requires_grad
    assert norms == [pytest.approx(1e-3, rel=1e-3)]  # one optimizer step, its gradients clipped to the norm
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)  # the scheduler stepped once
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert clock.marks == ["forward", "backward"] * 3 + ["optimizer"]
    assert all(p.grad is None for p in model.parameters())


def test_the_accumulated_gradient_is_the_mean_over_the_micro_batches():
    """Three micro-batches of 8 step as one batch of 24 would: each loss divided by the accumulation."""
    micro = _batches(3)
    whole = tuple(torch.cat(parts) for parts in zip(*micro, strict=True))
    accumulated, model_a, _ = _training(_workload(accumulation=3))
    plain, model_b, _ = _training(_workload(batch_size=24))
    batches = iter(micro)
    accumulated.run(lambda: next(batches), NoClock(), 0)
    plain.run(lambda: whole, NoClock(), 0)
    for a, b in zip(model_a.parameters(), model_b.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_fp16_scaler_scales_the_loss_and_unscales_before_clipping():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    workload = _workload(max_grad_norm=1e-3)
    step, model, optimizer = _training(workload, scaler=scaler)
    norms: list[float] = []
    optimizer.register_step_pre_hook(
        lambda *_: norms.append(float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm()))
    )
    batch = _batches(1)[0]
    step.run(lambda: batch, NoClock(), 0)
    assert norms == [pytest.approx(1e-3, rel=1e-3)]  # unscaled first: clipped to the norm, not to 1024 times it
    assert scaler.get_scale() == 1024.0


# --- A workload's own step -------------------------------------------------------------------------------------


def test_an_own_step_gets_the_micro_batches_and_the_state_and_its_phases_come_from_hooks():
    seen = {}

    def train_step(model, batch, optimizer, state):
        seen["batch"], seen["state"] = batch, state
        total = 0.0
        for micro in batch:
            loss = _loss(model, micro) / state.accumulation
            loss.backward()
            total = total + loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), state.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        return total

    workload = _workload(step=train_step, accumulation=2, max_grad_norm=0.5)
    step, _, _ = _training(workload)
    batches = iter(_batches(2))
    clock = _RecordingClock()
    loss = step.run(lambda: next(batches), clock, 4)
    assert isinstance(seen["batch"], list) and len(seen["batch"]) == 2
    assert seen["state"].max_grad_norm == 0.5 and seen["state"].index == 4
    assert clock.marks == ["forward", "backward", "forward", "backward", "optimizer"]
    assert step.backward_seen and step.optimizer_steps == 1 and loss.dim() == 0


def test_an_own_step_that_returns_nothing_or_skips_the_optimizer_fails_in_one_line():
    def returns_nothing(model, batch, optimizer):
        _loss(model, batch).backward()
        optimizer.step()

    def no_optimizer(model, batch, optimizer):
        loss = _loss(model, batch)
        loss.backward()
        return loss

    def not_a_scalar(model, batch, optimizer):
        optimizer.step()
        return torch.ones(3)

    batch = _batches(1)[0]
    for own, expected in [
        (returns_nothing, "returned nothing at step 0, not a tensor; return the loss"),
        (no_optimizer, "did not call optimizer.step()"),
        (not_a_scalar, "returned a tensor of shape (3,) at step 0, not a scalar"),
    ]:
        step, _, _ = _training(_workload(step=own))
        with pytest.raises(TrialFailure) as caught:
            step.run(lambda: batch, NoClock(), 0)
        assert expected in caught.value.message and "\n" not in caught.value.message


# --- End to end: real trials ----------------------------------------------------------------------------------

# A workload with its own step, accumulation, clipping and a scheduler; CLIP_DTYPE is the planted change: clipping
# in float64 (the gradients converted, the norm taken and the scale applied in double) costs the step its time.
OWN_STEP_SOURCE = """\
import torch
from torch import nn

import perfgate

CLIP_DTYPE = torch.{clip_dtype}
ACCUMULATION = {accumulation}


def data():
    x = torch.randn(4096, 256, generator=torch.Generator().manual_seed(0))
    return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))


def model():
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1))


def loss(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x).float(), y)


def clip(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    wide = [g.to(CLIP_DTYPE) for g in grads]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in wide]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g, w in zip(grads, wide):
        g.copy_(w * scale)


def train_step(model, batch, optimizer, state):
    micro_batches = batch if state.accumulation > 1 else [batch]
    total = 0.0
    for micro in micro_batches:
        value = loss(model, micro) / state.accumulation
        (state.scaler.scale(value) if state.scaler is not None else value).backward()
        total = total + value.detach()
    if state.scaler is not None:
        state.scaler.unscale_(optimizer)
    clip(list(model.parameters()), state.max_grad_norm)
    if state.scaler is not None:
        state.scaler.step(optimizer)
        state.scaler.update()
    else:
        optimizer.step()
    state.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return total


def workload():
    return perfgate.Workload(
        name="own-step",
        model=model,
        dataset=data,
        loss=loss,
        step=train_step,
        batch_size=4,
        accumulation=ACCUMULATION,
        max_grad_norm=1.0,
        scheduler=lambda optimizer: torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=100),
        optimizer=lambda params: torch.optim.SGD(params, lr=1e-3),
        steps=12,
        warmup_steps=2,
    )
"""


def own_step_source(clip_dtype: str = "float32", accumulation: int = 1) -> str:
    return OWN_STEP_SOURCE.format(clip_dtype=clip_dtype, accumulation=accumulation)


@pytest.mark.e2e
def test_a_workload_with_its_own_step_runs_the_lab_and_fp16_with_its_phases(tmp_path):
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "own.py").write_text(own_step_source(accumulation=2), encoding="utf-8")
    out = tmp_path / "out.json"
    result = run_in_process(
        "run",
        "perf/own.py:workload",
        "--configs",
        "fp32,fp16",
        "--trials",
        "1",
        "--threads",
        "1",
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "batch 4 x 2 micro-batches" in result.stdout
    document = json.loads(out.read_text())
    workload = document["workloads"][0]
    assert workload["settings"]["accumulation"] == 2
    for config in ("fp32", "fp16"):
        trial = workload["configs"][config]["trials"][0]
        assert trial["status"] == "ok", trial
        for phase in ("data_wait", "h2d", "forward", "backward", "optimizer"):
            assert len(trial["phases_s"][phase]) == 12
        assert all(sum(trial["phases_s"][p]) > 0 for p in ("forward", "backward", "optimizer"))
        assert trial["samples_per_sec"] == pytest.approx(12 * 8 / sum(trial["step_s"]), rel=1e-6)


@pytest.mark.e2e
def test_a_change_only_the_own_step_contains_fails_a_paired_check(tmp_path):
    """The head clips its gradients in float64: perfgate's fixed step would never run that code."""
    repo = new_repository(tmp_path / "repo")
    commit(repo, {"perf/own.py": own_step_source()}, "base")
    commit(repo, {"perf/own.py": own_step_source(clip_dtype="float64")}, "clip in float64")
    options = ("--configs", "fp32", "--threads", "1", "--trials", "3", "--max-trials", "6", "--time-budget", "120")
    options += ("--fork-trials",)  # torch imported once a side: the suite's time
    result = run_in_process("check", "perf/own.py:workload", "--against", "HEAD~1", *options, "--rounds", "1", cwd=repo)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "perfgate check: 1 regression (own-step fp32)" in result.stdout
