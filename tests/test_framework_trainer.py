"""`from_trainer`: a Workload read from a Hugging Face `transformers.Trainer`, whose step is the Trainer's.

The unit tests build real Trainers around a tiny GPT-2 (random weights from a config, nothing downloaded) and call
the workload's factories and its step by hand, as a trial does; one checks the step against `Trainer.train()`
itself. The e2e tests run `perfgate run` and a paired `perfgate check` on a workload file that builds a Trainer.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import perfgate
from perfgate.errors import WorkloadError
from perfgate.workload import StepState
from tests.helpers.cli import run_in_process
from tests.helpers.frameworks import repository, run_the_lab, scratch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from perfgate.frameworks.huggingface import from_trainer  # noqa: E402 - after the skips: it needs transformers

VOCAB, SEQ = 64, 16


class Tokens(torch.utils.data.Dataset):
    """Fixed random token sequences, each its own labels (the first few masked), and a column GPT-2's forward does
    not take."""

    def __init__(self, length: int = 64) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(index))
        labels = ids.clone()
        labels[: index % 7] = -100  # unequal label counts: the micro-batches of a step weigh differently
        return {"input_ids": ids, "labels": labels, "sample_id": torch.tensor(index)}


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter([])


def gpt2() -> torch.nn.Module:
    """A 1-layer GPT-2 without dropout: two runs of a step on the same weights and data agree."""
    config = transformers.GPT2Config(
        n_layer=1,
        n_embd=32,
        n_head=2,
        vocab_size=VOCAB,
        n_positions=SEQ,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config)


def arguments(output_dir: Path, **overrides: object) -> transformers.TrainingArguments:
    settings: dict[str, object] = {
        "output_dir": str(output_dir),
        "report_to": [],
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "max_steps": 8,
        "learning_rate": 1e-3,
        "dataloader_pin_memory": False,  # the CPU has nothing to pin for; torch warns
        "save_strategy": "no",
        "disable_tqdm": True,
        **overrides,
    }
    return transformers.TrainingArguments(**settings)


def make_trainer(tmp_path: Path, model: torch.nn.Module | None = None, **overrides: object) -> transformers.Trainer:
    optimizers = overrides.pop("optimizers", (None, None))
    dataset = overrides.pop("train_dataset", Tokens())
    return transformers.Trainer(
        model=model if model is not None else gpt2(),
        args=arguments(tmp_path, **overrides),
        train_dataset=dataset,
        optimizers=optimizers,
    )


def first_step_batches(workload, count: int) -> list:
    """The dataset's first `count` batches, in order, through the workload's collator: what a step is handed."""
    loader = torch.utils.data.DataLoader(
        workload.dataset(), batch_size=workload.batch_size, collate_fn=workload.loader["collate_fn"]
    )
    batches = iter(loader)
    return [next(batches) for _ in range(count)]


def built(workload):
    """The model, optimizer and scheduler as a trial builds them from the workload's factories."""
    model = workload.model().train()
    optimizer = workload.optimizer(model.parameters())
    return model, optimizer, workload.scheduler(optimizer)


def update_norm(model: torch.nn.Module, before: list[torch.Tensor]) -> float:
    """The total norm of what the step changed in the parameters."""
    changes = [p.detach().double() - b.double() for p, b in zip(model.parameters(), before, strict=True)]
    return math.sqrt(sum(float(c.pow(2).sum()) for c in changes))


ORIGIN_OUTPUT = Path(tempfile.gettempdir())  # the test points it at its own folder


def trainer_workload():
    """A module-level function without arguments, as a user's perf/workloads.py has it."""
    return perfgate.from_trainer(make_trainer(ORIGIN_OUTPUT), name="origin-test")


# --- What the Trainer knows ------------------------------------------------------------------------


def test_the_workload_reads_batch_size_accumulation_clipping_seed_and_loader_from_the_trainer(tmp_path):
    trainer = make_trainer(tmp_path, max_grad_norm=0.5, seed=7, dataloader_num_workers=0)
    workload = from_trainer(trainer, steps=5, warmup_steps=2, threads=1)
    assert workload.name == "GPT2LMHeadModel"
    assert (workload.batch_size, workload.accumulation, workload.max_grad_norm) == (4, 2, 0.5)
    assert (workload.seed, workload.steps, workload.warmup_steps, workload.threads) == (7, 5, 2, 1)
    assert workload.loader["num_workers"] == 0 and workload.loader["pin_memory"] is False
    assert workload.loader["persistent_workers"] is False
    assert workload.step is not None and workload.scheduler is not None


def test_the_collator_is_the_trainers_with_the_columns_the_model_does_not_take_removed(tmp_path):
    trainer = make_trainer(tmp_path)
    workload = from_trainer(trainer)
    collate = workload.loader["collate_fn"]
    assert isinstance(collate, transformers.trainer_utils.RemoveColumnsCollator)
    assert collate.data_collator is trainer.data_collator
    (batch,) = first_step_batches(workload, 1)
    assert set(batch) == {"input_ids", "labels"}  # sample_id is not an argument of GPT-2's forward
    assert batch["input_ids"].shape == (4, SEQ)


def test_a_given_seed_and_name_win_over_the_trainers(tmp_path):
    workload = from_trainer(make_trainer(tmp_path, seed=7), name="my-gpt", seed=3)
    assert (workload.name, workload.seed) == ("my-gpt", 3)


def test_max_grad_norm_zero_means_no_clipping(tmp_path):
    assert from_trainer(make_trainer(tmp_path, max_grad_norm=0.0)).max_grad_norm is None


def test_the_optimizer_is_the_trainers_own_with_its_weight_decay_groups(tmp_path):
    trainer = make_trainer(tmp_path, learning_rate=3e-4, weight_decay=0.1)
    model, optimizer, _ = built(from_trainer(trainer))
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [group["lr"] for group in optimizer.param_groups] == [3e-4, 3e-4]
    decays = sorted(group["weight_decay"] for group in optimizer.param_groups)
    assert decays == [0.0, 0.1]  # biases and LayerNorms have none, as the Trainer's create_optimizer groups them
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}


def test_a_trial_builds_a_fresh_optimizer_each_time(tmp_path):
    workload = from_trainer(make_trainer(tmp_path))
    model = workload.model()
    assert workload.optimizer(model.parameters()) is not workload.optimizer(model.parameters())


def test_an_optimizer_handed_to_the_trainer_is_used_as_it_is(tmp_path):
    model = gpt2()
    sgd = torch.optim.SGD(model.parameters(), lr=0.5)
    workload = from_trainer(make_trainer(tmp_path, model=model, optimizers=(sgd, None)))
    _, optimizer, scheduler = built(workload)
    assert optimizer is sgd
    assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR) and scheduler.optimizer is sgd


def test_an_optimizer_over_another_models_parameters_is_a_one_line_error(tmp_path):
    workload = from_trainer(make_trainer(tmp_path))
    with pytest.raises(WorkloadError) as error:
        workload.optimizer(gpt2().parameters())
    assert str(error.value) == (
        "the Trainer's optimizer holds parameters that are not the model's perfgate trains "
        "(workload 'GPT2LMHeadModel'); give the Trainer the model it trains (trainer.model), not a copy"
    )


@pytest.mark.parametrize(("max_steps", "expected_steps"), [(8, 8), (-1, 5 + 3)])
def test_the_scheduler_is_the_trainers_over_max_steps_or_the_trials_steps(tmp_path, max_steps, expected_steps):
    """Linear decay without warm-up: one step takes lr down by lr / num_training_steps."""
    trainer = make_trainer(tmp_path, max_steps=max_steps, lr_scheduler_type="linear", warmup_steps=0)
    _, optimizer, scheduler = built(from_trainer(trainer, steps=5, warmup_steps=3))
    assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR)
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(1e-3 * (1 - 1 / expected_steps))


def test_the_model_is_prepared_as_train_prepares_it(tmp_path):
    trainer = make_trainer(tmp_path, activation_checkpointing=True)
    model = from_trainer(trainer).model()
    assert model is trainer.model
    assert model.is_activation_checkpointing


def test_a_model_init_trainer_builds_its_model_after_perfgate_seeds(tmp_path):
    trainer = transformers.Trainer(model_init=gpt2, args=arguments(tmp_path), train_dataset=Tokens())
    workload = from_trainer(trainer)
    torch.manual_seed(5)
    model = workload.model()
    torch.manual_seed(5)
    expected = gpt2()
    assert model is trainer.model
    torch.testing.assert_close(model.state_dict(), expected.state_dict())


def test_the_workload_is_rebuilt_by_the_function_that_called_perfgate_from_trainer(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ORIGIN_OUTPUT", tmp_path)
    assert perfgate.from_trainer is from_trainer
    assert trainer_workload().origin == (__file__, "trainer_workload")


def test_the_loss_is_the_trainers_compute_loss_on_one_micro_batch(tmp_path):
    workload = from_trainer(make_trainer(tmp_path))
    model = workload.model().train()
    (batch,) = first_step_batches(workload, 1)
    loss = workload.loss(model, batch)
    assert loss.requires_grad and loss.numel() == 1
    assert float(loss.detach()) == pytest.approx(float(model(**batch).loss.detach()))
    assert set(batch) == {"input_ids", "labels"}  # the batch perfgate holds is left as it was


# --- The step ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("optim", "max_grad_norm"), [("sgd", 0.0), ("adamw_torch_fused", 0.05)], ids=["sgd-unclipped", "adamw-clipped"]
)
def test_the_step_matches_one_optimizer_step_of_trainer_train(tmp_path, optim, max_grad_norm):
    """The same model, the same two micro-batches (their label counts differ: the loss is normalised over the whole
    step's), the Trainer's optimizer, clipping and scheduler: the workload's step and `Trainer.train()` for one
    step leave the same parameters. Plain SGD shows any change of the loss's scale; AdamW's weight decay groups."""
    settings = {"optim": optim, "learning_rate": 0.1, "weight_decay": 0.1, "max_grad_norm": max_grad_norm}
    settings.update(train_sampling_strategy="sequential", max_steps=1)
    ours = gpt2()
    theirs = copy.deepcopy(ours)
    workload = from_trainer(make_trainer(tmp_path / "ours", model=ours, **settings))
    model, optimizer, scheduler = built(workload)
    state = StepState(scheduler=scheduler, max_grad_norm=workload.max_grad_norm, accumulation=2)
    loss = workload.step(model, first_step_batches(workload, 2), optimizer, state)
    trained = make_trainer(tmp_path / "theirs", model=theirs, **settings).train()
    torch.testing.assert_close(dict(ours.named_parameters()), dict(theirs.named_parameters()))
    assert float(loss) == pytest.approx(trained.training_loss, rel=1e-5)  # the loss the Trainer logs


def test_the_step_changes_the_parameters_steps_the_scheduler_and_zeroes_the_gradients(tmp_path):
    workload = from_trainer(make_trainer(tmp_path))
    model, optimizer, scheduler = built(workload)
    before = [p.detach().clone() for p in model.parameters()]
    state = StepState(scheduler=scheduler, max_grad_norm=workload.max_grad_norm, accumulation=2)
    workload.step(model, first_step_batches(workload, 2), optimizer, state)
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert scheduler.last_epoch == 1
    assert all(p.grad is None for p in model.parameters())


def test_the_step_clips_the_gradients_to_the_trainers_max_grad_norm(tmp_path):
    """Plain SGD at lr 1: the update is the gradient itself, so its norm is the clipped gradient's."""
    update_norms = {}
    for max_grad_norm in (1e-3, 0.0):
        model = gpt2()
        sgd = torch.optim.SGD(model.parameters(), lr=1.0)
        workload = from_trainer(
            make_trainer(tmp_path, model=model, optimizers=(sgd, None), max_grad_norm=max_grad_norm)
        )
        model, optimizer, scheduler = built(workload)
        before = [p.detach().clone() for p in model.parameters()]
        state = StepState(scheduler=scheduler, max_grad_norm=workload.max_grad_norm, accumulation=2)
        workload.step(model, first_step_batches(workload, 2), optimizer, state)
        update_norms[max_grad_norm] = update_norm(model, before)
    assert update_norms[1e-3] == pytest.approx(1e-3, rel=1e-3)
    assert update_norms[0.0] > 100 * update_norms[1e-3]  # unclipped: the gradient's own norm


def test_with_the_fp16_configs_scaler_the_step_unscales_before_clipping_and_restores_the_accelerators(tmp_path):
    """The scaled loss (x 65536) backpropagates through the Trainer's accelerator.backward; the gradients are
    unscaled before they are clipped, so the update's norm is max_grad_norm, not 65536 times smaller."""
    model = gpt2()
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer = make_trainer(tmp_path, model=model, optimizers=(sgd, None), max_grad_norm=1e-3)
    workload = from_trainer(trainer)
    model, optimizer, scheduler = built(workload)
    before = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu")
    state = StepState(scaler=scaler, scheduler=scheduler, max_grad_norm=workload.max_grad_norm, accumulation=2)
    workload.step(model, first_step_batches(workload, 2), optimizer, state)
    assert update_norm(model, before) == pytest.approx(1e-3, rel=1e-3)
    assert scaler.get_scale() == 65536.0  # no overflow: the step was taken
    assert scheduler.last_epoch == 1
    assert trainer.accelerator.scaler is None  # the Trainer's own (none: fp32) is back


def test_one_micro_batch_a_step_takes_the_batch_itself(tmp_path):
    workload = from_trainer(make_trainer(tmp_path, gradient_accumulation_steps=1))
    model, optimizer, scheduler = built(workload)
    (batch,) = first_step_batches(workload, 1)
    state = StepState(scheduler=scheduler, max_grad_norm=workload.max_grad_norm)
    loss = workload.step(model, batch, optimizer, state)
    assert float(loss) == pytest.approx(math.log(VOCAB), rel=0.1)  # an untrained model: about uniform


class Wrapper(torch.nn.Module):
    """A module around the model, as torch.compile's or DistributedDataParallel's is, counting its forwards."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.forwards = 0

    def forward(self, **inputs):
        self.forwards += 1
        return self.inner(**inputs)


def test_the_step_trains_the_model_it_is_handed_under_the_configs_autocast(tmp_path):
    """perfgate hands the step a wrapper of the model in some configs (torch.compile's), inside bf16's autocast."""
    workload = from_trainer(make_trainer(tmp_path))
    model, optimizer, scheduler = built(workload)
    wrapper = Wrapper(model)
    before = [p.detach().clone() for p in model.parameters()]
    state = StepState(scheduler=scheduler, max_grad_norm=workload.max_grad_norm, accumulation=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = workload.step(wrapper, first_step_batches(workload, 2), optimizer, state)
    assert wrapper.forwards == 2  # one forward a micro-batch, through the wrapper
    assert math.isfinite(float(loss))
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


# --- Bad input ---------------------------------------------------------------------------------------


def test_something_other_than_a_trainer_is_a_one_line_error():
    with pytest.raises(WorkloadError) as error:
        from_trainer(gpt2(), name="gpt")
    assert str(error.value) == (
        "from_trainer takes a transformers.Trainer, got GPT2LMHeadModel (workload 'gpt'); pass the Trainer you "
        "train with: from_trainer(Trainer(model=..., args=..., train_dataset=...))"
    )


def test_a_trainer_without_a_train_dataset_is_a_one_line_error(tmp_path):
    trainer = transformers.Trainer(model=gpt2(), args=arguments(tmp_path))
    with pytest.raises(WorkloadError) as error:
        from_trainer(trainer)
    assert str(error.value) == (
        "the Trainer has no train_dataset (workload 'GPT2LMHeadModel'); pass train_dataset= to the Trainer you measure"
    )


def test_a_dataset_without_a_length_is_a_one_line_error(tmp_path):
    trainer = make_trainer(tmp_path, train_dataset=Stream())
    with pytest.raises(WorkloadError) as error:
        from_trainer(trainer, name="stream")
    assert str(error.value) == (
        "the Trainer's train_dataset (Stream) has no length, and perfgate pins a slice of a map-style dataset "
        "(workload 'stream'); pass a Dataset with __len__ and __getitem__ (a datasets.Dataset, not an "
        "IterableDataset)"
    )


# --- End to end --------------------------------------------------------------------------------------

# perf/workloads.py of the e2e repositories: a Trainer around a small regression model (torch.compile traces an MLP
# in seconds; dynamo alone took about three minutes over the 1-layer GPT-2 and its loss on a busy 2-core CPU), 2 + 10
# steps of 16 samples a trial.
WORKLOAD_SOURCE = """\
import tempfile

import torch
from torch.nn import functional as F
from transformers import Trainer, TrainingArguments

import perfgate

ACCUMULATION = {accumulation}
MAX_GRAD_NORM = {max_grad_norm}


class Points(torch.utils.data.Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, index):
        x = torch.randn(16, generator=torch.Generator().manual_seed(index))
        return {{"x": x, "labels": x.sum(dim=0, keepdim=True)}}


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def forward(self, x, labels):
        return {{"loss": F.mse_loss(self.net(x), labels)}}


def workload():
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf-output-"),
        report_to=[],
        save_strategy="no",
        per_device_train_batch_size=16,
        gradient_accumulation_steps=ACCUMULATION,
        max_grad_norm=MAX_GRAD_NORM,
        optim="sgd",  # plain SGD: clipping changes the update itself (AdamW's hardly sees a uniform scale)
        learning_rate=0.05,
        dataloader_pin_memory=False,
    )
    trainer = Trainer(model=Regressor(), args=args, train_dataset=Points())
    return perfgate.from_trainer(trainer, name="regressor-trainer", steps=10, warmup_steps=2, threads=1)
"""


def workload_source(accumulation: int = 1, max_grad_norm: float = 1.0) -> str:
    return WORKLOAD_SOURCE.format(accumulation=accumulation, max_grad_norm=max_grad_norm)


@pytest.mark.e2e
def test_perfgate_runs_a_trainer_workload_in_fp32_bf16_and_bf16_compile(tmp_path):
    assert run_the_lab(tmp_path, workload_source())["name"] == "regressor-trainer"


PAIRED = (
    "--configs",
    "fp32",
    "--trials",
    "2",
    "--max-trials",
    "2",
    "--time-budget",
    "60",
    "--rounds",
    "1",
    "--fork-trials",
)


@pytest.mark.e2e
def test_a_paired_check_judges_a_changed_gradient_accumulation_and_names_it(tmp_path):
    """Two micro-batches a step in place of one: twice the samples a step (samples/s counts them all), another
    slice of the data by design; judged, with the change named beside the verdict."""
    repo = repository(tmp_path / "repo", workload_source(accumulation=1), workload_source(accumulation=2))
    results = tmp_path / "results.json"
    check = ("check", "perf/workloads.py:workload", "--against", "HEAD~1", *PAIRED, "--json", str(results))
    result = run_in_process(*check, cwd=repo, env=scratch(tmp_path / "tmp"))
    assert result.returncode in (0, 1), result.stdout + result.stderr  # judged, not "not comparable"
    assert "gradient accumulation changed: 1 -> 2 micro-batches per optimizer step" in result.stdout
    document = json.loads(results.read_text(encoding="utf-8"))
    (base,), (head,) = document["against"]["base"]["workloads"], document["workloads"]
    assert base["settings"].get("accumulation", 1) == 1 and head["settings"]["accumulation"] == 2
