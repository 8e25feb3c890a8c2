"""The `lightning` mode of benchmarks/framework_fidelity.py: Lightning's own `Trainer.fit` against perfgate's
`from_lightning` workload, on the same module and data. Its two pieces, in the shape of that file's `Mode`:

(b) `lightning_source(settings)`: the workload file both sides import. A small Transformer-encoder LM as a
    `LightningModule` (AdamW, a linear warm-up scheduled every step, `self.log` of the loss every batch, its own
    `train_dataloader()` over seeded random tokens), `build_module()` (threads set, torch seeded, the module built)
    and `workload()`, which returns `perfgate.from_lightning(LM, ...)` with the settings' accumulation, norm clipping
    at 1.0, steps, warm-up and threads: perfgate's side (`perfgate run FILE:workload --configs CONFIG`).
(a) `lightning_framework(module)`: the framework's own run over that file's module, `lightning.Trainer(
    max_steps=N, limit_train_batches=N x accumulation, enable_checkpointing=False, logger=False,
    enable_progress_bar=False, enable_model_summary=False, accelerator="cpu" or "gpu", devices=1,
    precision="32-true" or "bf16-mixed", accumulate_grad_batches=..., gradient_clip_val=1.0).fit(module)`, N the
    warm-up + timed optimizer steps. A `StepClock` callback reads `time.perf_counter()` at each batch's
    `on_train_batch_start` and `on_train_batch_end`, synchronising CUDA only at the two edges of the timed steps
    (the end of the last warm-up step's last micro-batch and of the last step's). samples/s: the timed steps'
    samples over the wall time between those two edges (the whole loop: fetching the micro-batches, Lightning's
    bookkeeping, the hooks), as the `trainer` mode's figure; `inside_steps_samples_per_sec`: over the time from
    each timed step's first `on_train_batch_start` to its last `on_train_batch_end` (the fetch of its first
    micro-batch left out).

How the lead plugs it into framework_fidelity.py (nothing here runs at import; `benchmarks/` is on sys.path there):

    from _lightning_fidelity import lightning_framework, lightning_source  # noqa: E402

    MODES = {..., "lightning": Mode(lightning_framework, lightning_source)}

and, in its docstring, the mode: `lightning`, needs `pip install lightning`. The settings are that file's
`Settings` (steps, warmup, accumulation, threads, device, config "fp32"/"bf16", workers, small), read through
`dataclasses.asdict`, as `trainer_source` reads them.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from dataclasses import asdict
from types import ModuleType
from typing import Any

# perfgate's configs as Lightning's precision plugins run them.
PRECISIONS = {"fp32": "32-true", "bf16": "bf16-mixed"}
CLIP = 1.0  # both sides clip the gradients' norm to this

LIGHTNING_SOURCE = '''"""A Transformer-encoder LM trained by Lightning; perfgate's side: from_lightning."""
import lightning as L
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import perfgate

SETTINGS = {settings!r}
CLIP = {clip!r}
STEPS, WARMUP_STEPS, THREADS = SETTINGS["steps"], SETTINGS["warmup"], SETTINGS["threads"]
ACCUMULATION = SETTINGS["accumulation"]
# layers, width, heads, vocabulary, sequence, batch
LAYERS, WIDTH, HEADS, VOCAB, SEQ, BATCH = (2, 128, 4, 1024, 64, 8) if SETTINGS["small"] else (4, 256, 4, 8192, 128, 8)
SAMPLES = (STEPS + WARMUP_STEPS) * BATCH * ACCUMULATION


class Tokens(Dataset):
    def __init__(self):
        self.tokens = torch.randint(0, VOCAB, (SAMPLES, SEQ + 1), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        row = self.tokens[index]
        return row[:-1], row[1:]


class LM(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        layer = torch.nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)))

    def training_step(self, batch, batch_idx):
        ids, targets = batch
        loss = F.cross_entropy(self(ids).flatten(0, 1), targets.flatten())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=3e-4)
        scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=10)
        return {{"optimizer": optimizer, "lr_scheduler": {{"scheduler": scheduler, "interval": "step"}}}}

    def train_dataloader(self):
        return DataLoader(Tokens(), batch_size=BATCH, num_workers=SETTINGS["workers"])


def build_module():
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)  # as from_lightning(LM) seeds before it builds the module
    return LM()


def workload():
    return perfgate.from_lightning(
        LM,
        name="encoder-lightning",
        accumulate_grad_batches=ACCUMULATION,
        gradient_clip_val=CLIP,
        steps=STEPS,
        warmup_steps=WARMUP_STEPS,
        threads=THREADS,
    )
'''


def lightning_source(settings: Any) -> str:
    """(b) The workload file for `settings` (framework_fidelity.py's `Settings`)."""
    return LIGHTNING_SOURCE.format(settings=asdict(settings), clip=CLIP)


def lightning_framework(module: ModuleType, clock: Any = None) -> dict[str, float]:
    """(a) `Trainer.fit` over the workload file's module for warm-up + timed optimizer steps; the timed steps
    clocked by a callback at each batch's two ends, CUDA synchronised at the timed steps' two edges only."""
    import lightning as L
    import torch

    settings = module.SETTINGS
    accumulation, warmup, steps = module.ACCUMULATION, module.WARMUP_STEPS, module.STEPS
    cuda = settings["device"] == "cuda"
    first_edge = warmup * accumulation - 1  # the batch whose end starts the clock: the last warm-up micro-batch
    last_edge = (warmup + steps) * accumulation - 1

    class StepClock(L.Callback):
        """perf_counter at each batch's start and end, from the last warm-up micro-batch on."""

        def __init__(self) -> None:
            self.starts: dict[int, float] = {}
            self.ends: dict[int, float] = {}

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self.starts[batch_idx] = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if cuda and batch_idx in (first_edge, last_edge):
                torch.cuda.synchronize()
            self.ends[batch_idx] = time.perf_counter()
            if clock is not None and (batch_idx + 1) % accumulation == 0 and batch_idx >= first_edge:
                clock.step_end("first" if batch_idx == first_edge else "last" if batch_idx == last_edge else None)

    lightning_module = module.build_module()
    step_clock = StepClock()
    with tempfile.TemporaryDirectory(prefix="fidelity-lightning-") as root:
        trainer = L.Trainer(
            max_steps=warmup + steps,
            limit_train_batches=(warmup + steps) * accumulation,
            accumulate_grad_batches=accumulation,
            gradient_clip_val=module.CLIP,
            precision=PRECISIONS[settings["config"]],
            enable_checkpointing=False,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            accelerator="gpu" if cuda else "cpu",
            devices=1,
            callbacks=[step_clock],
            default_root_dir=root,
        )
        trainer.fit(lightning_module)
    ends = step_clock.ends
    if trainer.global_step != warmup + steps or last_edge not in ends:
        raise SystemExit(f"Lightning ran {trainer.global_step} optimizer steps, not {warmup + steps}")
    samples = steps * module.BATCH * accumulation
    inside_s = 0.0
    for step in range(warmup, warmup + steps):  # each timed step: its first micro-batch's start to its last's end
        inside_s += ends[(step + 1) * accumulation - 1] - step_clock.starts[step * accumulation]
    boundaries = [ends[(step + 1) * accumulation - 1] for step in range(warmup - 1, warmup + steps)]
    step_s = clock.steps if clock is not None else [b - a for a, b in itertools.pairwise(boundaries)]
    return {
        "samples_per_sec": samples / (clock.own_s if clock is not None else ends[last_edge] - ends[first_edge]),
        "inside_steps_samples_per_sec": samples / inside_s,
        "median_step_s": statistics.median(step_s),
    }
