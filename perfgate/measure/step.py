"""One training step as the workload trains: perfgate's own or the workload's, under the trial's config.

The timed steps, the warm-up, the counting passes and the torch-call count all run a step through `TrainingStep`,
so each sees the same work: perfgate's step (per micro-batch the loss and its backward, the fp16 config's loss
scaling, clipping, the optimizer, the scheduler, zeroing the gradients) or the workload's own `step`, handed the
model, the batch (the list of micro-batches with accumulation), the optimizer and a `StepState`.

Phases. perfgate's step marks its own phase boundaries on the step clock. A workload's own step is timed from
hooks: backward's entry and exit (`torch.autograd.backward`, which `Tensor.backward` calls) end a stretch of
forward and of backward, the step's return ends the optimizer phase (clipping, the scaler, the optimizer, the
scheduler: what follows the last backward). Where no backward is seen (the step is compiled whole, or computes its
gradients another way) the step's time cannot be told apart and is one stretch, counted as forward, with a
warning: never divided by a guess.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from perfgate.records.results import FailureKind
from perfgate.workload import StepState, Workload, _positional_parameters

# The phases one step's marks end (perfgate.records.summary.PHASES)
DATA_WAIT, H2D, FORWARD, BACKWARD, OPTIMIZER = "data_wait", "h2d", "forward", "backward", "optimizer"

NOT_TOLD_APART = (
    "the workload's own step was timed as one stretch (no backward seen inside it: compiled whole, or its gradients "
    "computed another way): its time is shown as forward"
)


class TrialFailure(Exception):
    """Raised inside the trial with the kind and message that go into the record."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class NoClock:
    """The marks of a step nobody times (the counting passes)."""

    def mark(self, phase: str | None = None) -> None:
        pass


@dataclass
class TrainingStep:
    """The step a trial runs, built once from the workload and the trial's setup.

    `model` is what the steps call (torch.compile's wrapper in the compile config); `parameters_of` the module
    whose gradients are clipped. `own_step` is the workload's step, compiled where the workload asks.
    """

    workload: Workload
    model: Any
    clipped: Any  # the module whose parameters' gradients are clipped
    optimizer: Any
    autocast: Callable[[], Any]
    scaler: Any = None  # the fp16 config's GradScaler
    scheduler: Any = None
    own_step: Callable[..., Any] | None = None
    hooked: bool = True  # whether the own step's phases come from hooks (False: compiled whole)
    comm: Any = None  # a data-parallel model's all-reduce timer (`distributed.CommTimer`)
    state: StepState = field(default_factory=StepState)
    optimizer_steps: int = 0  # optimizer steps the own step took, counted by a hook
    backward_seen: bool = False
    current: str = "the DataLoader"  # the part of the step running now: what an exception is reported in
    last_batch: Any = None  # the last (micro-)batch, for the counts after the timed steps

    passes_state: bool = field(init=False)  # whether the own step takes `state`: read once, not in every step

    def __post_init__(self) -> None:
        step = self.workload.step
        self.passes_state = step is not None and _positional_parameters(step) in (4, None)

    def run(self, fetch: Callable[[], Any], clock: Any, index: int) -> Any:
        """One optimizer step: its micro-batches from `fetch()` (each marks its data wait and copy), the step's
        phases marked on `clock`. Returns the step's loss (the micro-batches' mean)."""
        if self.own_step is not None:
            return self._run_own(fetch, clock, index)
        return self._run_perfgates(fetch, clock, index)

    def _run_perfgates(self, fetch: Callable[[], Any], clock: Any, index: int) -> Any:
        import torch

        accumulation = self.workload.accumulation
        losses = []
        for micro in range(accumulation):
            batch = self.last_batch = fetch()
            self.current = "loss(model, batch)"
            with self.autocast():
                loss = self.workload.loss(self.model, batch)
            check_loss(loss, index, "loss(model, batch)")
            clock.mark(FORWARD)
            scaled = loss / accumulation if accumulation > 1 else loss
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            self.current = "loss.backward()"
            last = micro == accumulation - 1
            no_sync = getattr(self.model, "no_sync", None) if not last and self.comm is not None else None
            with no_sync() if no_sync is not None else contextlib.nullcontext():
                if self.comm is not None and last:
                    self.comm.begin_step()
                scaled.backward()
            clock.mark(BACKWARD)
            losses.append(loss.detach())
        self.current = "the optimizer step"
        if self.workload.max_grad_norm is not None:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.clipped.parameters(), self.workload.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        clock.mark(OPTIMIZER)
        return losses[0] if accumulation == 1 else torch.stack(losses).mean()

    def _run_own(self, fetch: Callable[[], Any], clock: Any, index: int) -> Any:
        accumulation = self.workload.accumulation
        batches = [fetch() for _ in range(accumulation)]
        batch = batches[0] if accumulation == 1 else batches
        self.last_batch = batches[-1]
        self.current = "step(model, batch, optimizer, state)"
        self.state.index = index
        arguments = (
            (self.model, batch, self.optimizer, self.state)
            if self.passes_state
            else (
                self.model,
                batch,
                self.optimizer,
            )
        )
        steps_before = self.optimizer_steps
        with self._hooks(clock) if self.hooked else contextlib.nullcontext(), self.autocast():
            loss = self.own_step(*arguments)  # type: ignore[misc]
        check_loss(loss, index, "step(model, batch, optimizer, state)", needs_grad=False)
        if self.hooked and self.backward_seen:
            clock.mark(OPTIMIZER)
        else:
            clock.mark(FORWARD)
        if self.hooked and self.optimizer_steps == steps_before and self.scaler is None:
            raise TrialFailure(
                "workload",
                f"step(model, batch, optimizer, state) at step {index} did not call optimizer.step(); "
                "make your step take one optimizer step, as your training does",
            )
        return loss.detach()

    @contextlib.contextmanager
    def _hooks(self, clock: Any) -> Iterator[None]:
        """For the own step's duration: backward's entry and exit marked, optimizer steps counted."""
        import torch
        import torch.optim.optimizer as optim

        original = torch.autograd.backward
        depth = 0

        def backward(*args: Any, **kwargs: Any) -> Any:
            nonlocal depth
            if depth == 0:
                clock.mark(FORWARD)
            depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                depth -= 1
                if depth == 0:
                    self.backward_seen = True
                    clock.mark(BACKWARD)

        def stepped(*_: Any) -> None:
            self.optimizer_steps += 1

        handle = optim.register_optimizer_step_post_hook(stepped)
        torch.autograd.backward = backward
        try:
            yield
        finally:
            torch.autograd.backward = original
            handle.remove()


def check_loss(loss: Any, step: int, what: str, needs_grad: bool = True) -> None:
    """The loss must be a scalar tensor (and, from perfgate's step, depend on the parameters)."""
    import torch

    if not isinstance(loss, torch.Tensor):
        got = "nothing" if loss is None else type(loss).__name__
        fix = "; return the loss" if what.startswith("step") else ""
        raise TrialFailure("workload", f"{what} returned {got} at step {step}, not a tensor{fix}")
    if loss.numel() != 1:
        raise TrialFailure(
            "workload",
            f"{what} returned a tensor of shape {tuple(loss.shape)} at step {step}, not a scalar; "
            "reduce it, for example with .mean()",
        )
    if needs_grad and not loss.requires_grad:
        raise TrialFailure(
            "workload", f"{what} at step {step} does not require grad; it must depend on the model's parameters"
        )
