"""`from_lightning`: a Workload read from a `LightningModule`, whose step is Lightning's automatic optimization.

The unit tests build a tiny real LightningModule (an MLP on a TensorDataset, `self.log` in its training step, a
scheduler from `configure_optimizers`) and call the workload's factories and its step by hand, as a trial does; one
holds the step to `lightning.Trainer.fit` itself: the same hooks in the same order and the same parameters after
two optimizer steps. The e2e tests run `perfgate run` and paired `perfgate check`s on a workload file that builds
the module.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from perfgate.errors import WorkloadError
from perfgate.workload import StepState
from tests.helpers.cli import run_in_process
from tests.helpers.frameworks import repository, run_the_lab, scratch

L = pytest.importorskip("lightning")

from perfgate.frameworks.lightning import from_lightning  # noqa: E402 - after the skip: its functions need lightning

# Hooks the step calls, as the recording module records them (the model's own, per batch).
PER_BATCH_HOOKS = (
    "on_train_batch_start",
    "on_before_zero_grad",
    "optimizer_zero_grad",
    "on_before_backward",
    "backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "configure_gradient_clipping",
    "optimizer_step",
    "lr_scheduler_step",
    "on_train_batch_end",
)


def points(samples: int = 64) -> TensorDataset:
    """Fixed points and targets ten times their sum: gradients far above the clipping values used here."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=generator)
    return TensorDataset(x, 10 * x.sum(dim=1, keepdim=True))


def collate(samples):
    return torch.utils.data.default_collate(samples)


class Tiny(L.LightningModule):
    """An MLP that logs its loss; SGD with momentum and a StepLR halving the rate every `interval`."""

    def __init__(self, interval: str = "step", frequency: int = 1, log: bool = True) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.interval, self.frequency, self.logs = interval, frequency, log

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        if self.logs:
            self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        config = {"scheduler": scheduler, "interval": self.interval, "frequency": self.frequency}
        return {"optimizer": optimizer, "lr_scheduler": config}

    def train_dataloader(self):
        return DataLoader(points(), batch_size=8)


class Recording(Tiny):
    """Tiny, recording each per-batch hook (and training_step) with the batch index where the hook has one."""

    def __init__(self, **settings) -> None:
        super().__init__(**settings)
        self.calls: list[tuple[str, int | None]] = []

    def training_step(self, batch, batch_idx):
        self.calls.append(("training_step", batch_idx))
        return super().training_step(batch, batch_idx)

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(("on_train_batch_start", batch_idx))

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(("on_train_batch_end", batch_idx))

    def on_before_zero_grad(self, optimizer):
        self.calls.append(("on_before_zero_grad", None))

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.calls.append(("optimizer_zero_grad", batch_idx))
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def on_before_backward(self, loss):
        self.calls.append(("on_before_backward", None))

    def backward(self, loss, *args, **kwargs):
        self.calls.append(("backward", None))
        super().backward(loss, *args, **kwargs)

    def on_after_backward(self):
        self.calls.append(("on_after_backward", None))

    def on_before_optimizer_step(self, optimizer):
        self.calls.append(("on_before_optimizer_step", None))

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.calls.append(("configure_gradient_clipping", None))
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        self.calls.append(("optimizer_step", batch_idx))
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def lr_scheduler_step(self, scheduler, metric):
        self.calls.append(("lr_scheduler_step", None))
        super().lr_scheduler_step(scheduler, metric)


class PointsData(L.LightningDataModule):
    """The points, built in setup("fit"), in batches of 4 through two workers."""

    def __init__(self) -> None:
        super().__init__()
        self.prepared, self.stages = False, []

    def prepare_data(self):
        self.prepared = True

    def setup(self, stage):
        self.stages.append(stage)
        self.points = points(32)

    def train_dataloader(self):
        return DataLoader(self.points, batch_size=4, num_workers=2, persistent_workers=True, collate_fn=collate)


def built(workload):
    """The model, optimizer and scheduler as a trial builds them from the workload's factories."""
    model = workload.model().train()
    optimizer = workload.optimizer(model.parameters())
    return model, optimizer, workload.scheduler(optimizer) if workload.scheduler is not None else None


def batches(workload, count: int) -> list:
    """The dataset's first `count` batches, in order: what the steps are handed."""
    loader = iter(DataLoader(workload.dataset(), batch_size=workload.batch_size))
    return [next(loader) for _ in range(count)]


def run_steps(workload, model, optimizer, scheduler, count: int, **state) -> list[torch.Tensor]:
    """`count` optimizer steps by hand, as a trial runs them (the micro-batches of a step as their list)."""
    accumulation = workload.accumulation
    data = batches(workload, count * accumulation)
    losses = []
    for index in range(count):
        micro = data[index * accumulation : (index + 1) * accumulation]
        step_state = StepState(scheduler=scheduler, accumulation=accumulation, index=index, **state)
        losses.append(workload.step(model, micro if accumulation > 1 else micro[0], optimizer, step_state))
    return losses


def lightning_workload():
    """A module-level function without arguments, as a user's perf/workloads.py has it."""
    return from_lightning(Tiny(), name="tiny-lightning", accumulate_grad_batches=2, gradient_clip_val=0.5)


# --- What the module knows -------------------------------------------------------------------------


def test_the_workload_reads_batch_size_optimizer_scheduler_and_settings_from_the_module():
    workload = lightning_workload()
    assert (workload.name, workload.batch_size, workload.accumulation, workload.loader) == ("tiny-lightning", 8, 2, {})
    assert len(workload.dataset()) == 64
    model, optimizer, scheduler = built(workload)
    assert model is workload.model() and isinstance(model, Tiny)
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9
    assert {id(p) for group in optimizer.param_groups for p in group["params"]} == {id(p) for p in model.parameters()}
    assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR) and scheduler.optimizer is optimizer
    assert (model.trainer.accumulate_grad_batches, model.trainer.gradient_clip_val) == (2, 0.5)


def test_the_workload_is_rebuilt_by_the_function_that_called_from_lightning():
    origin = lightning_workload().origin
    assert origin is not None and (Path(origin[0]).name, origin[1]) == (Path(__file__).name, "lightning_workload")


def test_a_datamodule_gives_the_data_after_prepare_data_and_setup_and_its_loader_options():
    data = PointsData()
    workload = from_lightning(Tiny(), data)
    assert data.prepared and data.stages == ["fit"]
    assert (workload.name, workload.batch_size, len(workload.dataset())) == ("Tiny", 4, 32)
    assert workload.loader == {"num_workers": 2, "persistent_workers": True, "collate_fn": collate}
    assert workload.model().trainer.datamodule is data and data.trainer is workload.model().trainer


class Halved(PointsData):
    def on_after_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return x, y / 2


class AsPair(Tiny):
    """Its data come as dicts; its own on_before_batch_transfer makes the (x, y) its training_step takes."""

    def on_before_batch_transfer(self, batch, dataloader_idx):
        return batch["x"], batch["y"]

    def on_after_batch_transfer(self, batch, dataloader_idx):
        raise AssertionError("the datamodule overrides this hook: Lightning calls the datamodule's")


def test_the_batch_transfer_hooks_run_on_each_batch_the_datamodules_where_it_overrides_them():
    data = Halved()
    workload = from_lightning(AsPair(), data)
    model, _, _ = built(workload)
    x, y = batches(workload, 1)[0]
    loss = workload.loss(model, {"x": x, "y": y})
    assert float(loss.detach()) == pytest.approx(float(F.mse_loss(model(x), y / 2).detach()))


def test_a_given_train_dataloader_wins_over_the_modules_own():
    loader = DataLoader(points(16), batch_size=2, pin_memory=True, num_workers=1, prefetch_factor=4)
    workload = from_lightning(Tiny(), train_dataloader=loader)
    assert (workload.batch_size, len(workload.dataset())) == (2, 16)
    assert workload.loader == {"num_workers": 1, "pin_memory": True, "prefetch_factor": 4}


def test_a_module_class_is_built_after_seeding_so_every_build_has_the_same_weights():
    first, second = from_lightning(Tiny).model(), from_lightning(Tiny, seed=0).model()
    other = from_lightning(Tiny, seed=1).model()
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters(), strict=True))
    assert not torch.equal(first.net[0].weight, other.net[0].weight)


def test_the_settings_are_read_from_a_lightning_trainer():
    with warnings.catch_warnings():  # the Trainer's notes on the devices it could use
        warnings.simplefilter("ignore")
        trainer = L.Trainer(
            accumulate_grad_batches=3,
            gradient_clip_val=0.25,
            gradient_clip_algorithm="value",
            logger=False,
            enable_checkpointing=False,
        )
    workload = from_lightning(Tiny(), trainer=trainer)
    model, _, _ = built(workload)
    assert workload.accumulation == 3
    assert (model.trainer.gradient_clip_val, model.trainer.gradient_clip_algorithm.value) == (0.25, "value")
    assert model.trainer is not trainer  # the module's own, that writes nothing


def test_the_core_does_not_import_lightning():
    """perfgate imports the adapter's module without the framework: only calling from_lightning imports it."""
    code = "import sys, perfgate, perfgate.frameworks.lightning; print('lightning' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# --- The step --------------------------------------------------------------------------------------


def test_the_step_trains_clips_steps_a_step_scheduler_and_logs_through_a_real_trainer():
    workload = from_lightning(Tiny(), gradient_clip_val=0.01, gradient_clip_algorithm="value")
    model, optimizer, scheduler = built(workload)
    before = [p.detach().clone() for p in model.parameters()]
    losses = run_steps(workload, model, optimizer, scheduler, 2)
    assert all(loss.dim() == 0 and not loss.requires_grad and math.isfinite(float(loss)) for loss in losses)
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    # Lightning zeroes the gradients before the next backward, so the last step's clipped ones are still there.
    assert max(float(p.grad.abs().max()) for p in model.parameters()) <= 0.01
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**2)  # StepLR stepped after each step
    assert model.global_step == 2
    assert float(model.trainer.callback_metrics["train_loss"]) == pytest.approx(float(losses[-1]))
    assert model.trainer.progress_bar_metrics["train_loss"] == pytest.approx(float(losses[-1]))


def test_without_clipping_the_gradients_are_left_as_backward_made_them():
    workload = from_lightning(Tiny())
    model, optimizer, scheduler = built(workload)
    run_steps(workload, model, optimizer, scheduler, 1)
    assert max(float(p.grad.abs().max()) for p in model.parameters()) > 1.0


def test_norm_clipping_bounds_the_gradients_total_norm():
    workload = from_lightning(Tiny(), gradient_clip_val=0.5)
    model, optimizer, scheduler = built(workload)
    run_steps(workload, model, optimizer, scheduler, 1)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))
    assert float(total) == pytest.approx(0.5, rel=1e-4)


@pytest.mark.parametrize(("interval", "frequency", "steps", "halvings"), [("epoch", 1, 3, 0), ("step", 2, 3, 1)])
def test_schedulers_step_by_lightnings_interval_and_frequency(interval, frequency, steps, halvings):
    """An epoch's scheduler is not stepped within the steps; a step scheduler every `frequency` batches."""
    workload = from_lightning(Tiny(interval=interval, frequency=frequency))
    model, optimizer, scheduler = built(workload)
    run_steps(workload, model, optimizer, scheduler, steps)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**halvings)


def test_the_step_is_lightnings_fit_the_same_hooks_in_the_same_order_and_the_same_parameters(tmp_path):
    """Two optimizer steps of two micro-batches, clipped: by `Trainer.fit` and by the workload's step, from the same
    weights on the same batches."""
    torch.manual_seed(0)
    theirs = Recording()
    ours = copy.deepcopy(theirs)
    with warnings.catch_warnings():  # fit's advice (workers, devices, no validation) is about the reference run
        warnings.simplefilter("ignore")
        trainer = L.Trainer(
            max_steps=2,
            accumulate_grad_batches=2,
            gradient_clip_val=0.5,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path,
        )
        trainer.fit(theirs)
    workload = from_lightning(ours, accumulate_grad_batches=2, gradient_clip_val=0.5)
    model, optimizer, scheduler = built(workload)
    ours.calls.clear()
    run_steps(workload, model, optimizer, scheduler, 2)
    assert [c for c in ours.calls if c[0] in (*PER_BATCH_HOOKS, "training_step")] == [
        c for c in theirs.calls if c[0] in (*PER_BATCH_HOOKS, "training_step")
    ]
    assert ours.calls[:4] == [
        ("on_train_batch_start", 0),
        ("training_step", 0),
        ("on_before_zero_grad", None),
        ("optimizer_zero_grad", 0),
    ]
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), theirs.parameters(), strict=True))
    assert ours.global_step == theirs.global_step == 2
    assert optimizer.param_groups[0]["lr"] == pytest.approx(trainer.optimizers[0].param_groups[0]["lr"])


def test_with_the_fp16_configs_scaler_the_step_unscales_before_clipping():
    """The scaled loss's gradients, unscaled before they are clipped, are the unscaled step's own (a power-of-two
    scale divides back exactly): clipping the scaled ones would leave them 65536 times smaller."""
    torch.manual_seed(0)
    plain = Tiny()
    scaled = copy.deepcopy(plain)
    gradients = []
    for module, scaler in ((plain, None), (scaled, torch.amp.GradScaler("cpu"))):
        workload = from_lightning(module, gradient_clip_val=0.5)
        model, optimizer, scheduler = built(workload)
        run_steps(workload, model, optimizer, scheduler, 1, scaler=scaler)
        gradients.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(*gradients, strict=True))
    assert all(torch.allclose(a, b) for a, b in zip(plain.parameters(), scaled.parameters(), strict=True))


def test_the_compile_configs_wrapper_compiles_training_step_as_lightning_does():
    """Lightning runs `torch.compile(module)` by compiling training_step with the wrapper's dynamo context
    (`from_compiled`): the loss is in the compiled graph, not only forward, and later batches recompile nothing."""
    graphs = []

    def recording_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    workload = from_lightning(Tiny(log=False))  # self.log under dynamo warns from inside torch: not this test's
    model, optimizer, scheduler = built(workload)
    compiled = torch.compile(model, backend=recording_backend)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        run_steps(workload, compiled, optimizer, scheduler, 3)
    targets = {str(node.target) for graph in graphs for node in graph.graph.nodes}
    assert any("mse_loss" in target for target in targets), targets
    assert len(graphs) == 1
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    torch._dynamo.reset()


def test_a_data_parallel_model_runs_training_step_through_its_forward_and_syncs_the_last_micro_batch(tmp_path):
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        workload = from_lightning(Tiny(), accumulate_grad_batches=2)
        model, optimizer, scheduler = built(workload)
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
        forwards, syncs = [], []
        wrapped.register_forward_pre_hook(lambda module, args: forwards.append(len(args)))
        model.on_before_backward = lambda loss: syncs.append(wrapped.require_backward_grad_sync)
        run_steps(workload, wrapped, optimizer, scheduler, 2)
    finally:
        torch.distributed.destroy_process_group()
    assert forwards == [2, 2, 2, 2]  # (batch, batch_idx), each micro-batch through DDP's forward
    assert syncs == [False, True, False, True]  # no_sync() but for each step's last micro-batch
    assert "forward" not in model.__dict__  # the redirection is undone


def test_the_loss_is_one_batchs_training_step_loss():
    workload = from_lightning(Tiny())
    model, _, _ = built(workload)
    (batch,) = batches(workload, 1)
    x, y = batch
    loss = workload.loss(model, batch)
    assert loss.requires_grad and float(loss.detach()) == pytest.approx(float(F.mse_loss(model(x), y).detach()))


def test_a_list_of_the_wrong_number_of_micro_batches_is_a_one_line_error():
    workload = from_lightning(Tiny(), accumulate_grad_batches=2)
    model, optimizer, _ = built(workload)
    with pytest.raises(ValueError, match=r"takes a list of 2 micro-batches \(workload 'Tiny'\)$"):
        workload.step(model, batches(workload, 1), optimizer, StepState(accumulation=2))


# --- What cannot be measured -----------------------------------------------------------------------


class ReturnsNothing(Tiny):
    def training_step(self, batch, batch_idx):
        super().training_step(batch, batch_idx)


class TwoOptimizers(Tiny):
    def configure_optimizers(self):
        return [torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[2].parameters(), lr=0.1)]


class Manual(Tiny):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False


class NoData(Tiny):
    train_dataloader = L.LightningModule.train_dataloader


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter([])


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    return text


def test_a_training_step_that_returns_none_fails_the_first_step_in_one_line_naming_the_fix():
    workload = from_lightning(ReturnsNothing(), name="silent")
    model, optimizer, scheduler = built(workload)
    with pytest.raises(RuntimeError) as error:
        run_steps(workload, model, optimizer, scheduler, 1)
    assert one_line(error.value).startswith("training_step returned None (workload 'silent'); return the loss")


@pytest.mark.parametrize(
    ("module", "message", "hint"),
    [
        (TwoOptimizers(), "configure_optimizers returned 2 optimizers; several are not supported yet", "return one"),
        (Manual(), "manual optimization (automatic_optimization = False) is not supported yet", "automatic"),
        (NoData(), "no train DataLoader", "train_dataloader=DataLoader"),
        (torch.nn.Linear(2, 1), "from_lightning needs a LightningModule, got Linear", "L.LightningModule"),
    ],
    ids=["two-optimizers", "manual-optimization", "no-dataloader", "not-a-lightning-module"],
)
def test_what_cannot_be_measured_is_a_one_line_workload_error_at_build_time(module, message, hint):
    with pytest.raises(WorkloadError) as error:
        from_lightning(module)
    assert message in one_line(error.value) and hint in error.value.hint


def test_an_iterable_dataset_is_a_one_line_workload_error():
    with pytest.raises(WorkloadError) as error:
        from_lightning(Tiny(), train_dataloader=DataLoader(Stream(), batch_size=2))
    assert "dataset (Stream) is iterable-style" in one_line(error.value) and "map-style" in error.value.hint


def test_a_trainer_and_its_settings_given_together_is_a_one_line_workload_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(logger=False, enable_checkpointing=False)
    with pytest.raises(WorkloadError) as error:
        from_lightning(Tiny(), trainer=trainer, gradient_clip_val=1.0)
    assert "not both" in one_line(error.value)


# --- End to end ------------------------------------------------------------------------------------

# perf/workloads.py of the e2e repositories: the tiny MLP module, 2 + 10 steps of 16 points a trial.
WORKLOAD_SOURCE = """\
import lightning as L
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import perfgate

GRADIENT_CLIP_VAL = {clip}


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)  # plain SGD: clipping changes the update itself
        scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=100)
        return {{"optimizer": optimizer, "lr_scheduler": {{"scheduler": scheduler, "interval": "step"}}}}

    def train_dataloader(self):
        x = torch.randn(512, 16, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, 10 * x.sum(dim=1, keepdim=True)), batch_size=16)


def workload():
    return perfgate.from_lightning(
        Tiny, name="tiny-lightning", gradient_clip_val=GRADIENT_CLIP_VAL, steps=10, warmup_steps=2, threads=1
    )
"""


def workload_source(clip: float | None = None) -> str:
    return WORKLOAD_SOURCE.format(clip=clip)


@pytest.mark.e2e
def test_perfgate_runs_a_lightning_workload_in_fp32_bf16_and_bf16_compile(tmp_path):
    assert run_the_lab(tmp_path, workload_source())["name"] == "tiny-lightning"


PAIRED = ("--configs", "fp32", "--trials", "2", "--max-trials", "2", "--time-budget", "60")


@pytest.mark.e2e
def test_a_counts_only_paired_check_counts_the_clipping_the_head_added(tmp_path):
    """The norm clipping's operators (the norms, their total, the scale, the multiply) in every head step."""
    repo = repository(tmp_path / "repo", workload_source(clip=None), workload_source(clip=1.0))
    results = tmp_path / "results.json"
    check = ("check", "perf/workloads.py:workload", "--counts-only", "--against", "HEAD~1", "--configs", "fp32")
    result = run_in_process(*check, "--json", str(results), cwd=repo, env=scratch(tmp_path / "tmp"))
    assert result.returncode in (0, 1), result.stdout + result.stderr  # judged, whatever the verdict
    document = json.loads(results.read_text(encoding="utf-8"))
    sides = [run["workloads"][0]["configs"]["fp32"]["trials"][0] for run in (document["against"]["base"], document)]
    base_counts, head_counts = (trial["counts"] for trial in sides)
    assert head_counts["operators_per_step"] > base_counts["operators_per_step"]
    assert head_counts["parameters"] == base_counts["parameters"]
