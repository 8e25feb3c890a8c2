"""Workloads built from a model library the team did not write (Hugging Face transformers, random weights from
a config, nothing downloaded), for the benchmarks that must hold beyond perfgate's own models.

- `gpt2`: a tiny GPT-2 language model on token sequences, 2 DataLoader workers.
- `images` / `images_no_workers`: a real image pipeline: PNG bytes decoded with Pillow, randomly cropped and
  flipped per sample, into a tiny transformers ResNet; with 2 DataLoader workers, and the same pipeline with
  `num_workers=0` (the change whose verdict depends on the thread count, docs/performance.md).

Reference them as `benchmarks/outside_workloads.py:gpt2` (from the repository root). Needs
`pip install transformers pillow`.
"""

from __future__ import annotations

import io

import torch
from torch.nn import functional as F

import perfgate

VOCAB, SEQ = 2048, 64


class Tokens(torch.utils.data.Dataset):
    """Fixed random token sequences."""

    def __init__(self, length: int = 2048) -> None:
        generator = torch.Generator().manual_seed(0)
        self.rows = torch.randint(0, VOCAB, (length, SEQ), generator=generator)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]


def gpt2_model() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def gpt2_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def gpt2() -> perfgate.Workload:
    return perfgate.Workload(
        name="gpt2-tiny",
        model=gpt2_model,
        dataset=Tokens,
        loss=gpt2_loss,
        batch_size=16,
        loader={"num_workers": 2},
        steps=20,
        warmup_steps=3,
    )


class PngImages(torch.utils.data.Dataset):
    """48x48 RGB images stored as PNG bytes, decoded with Pillow per sample, cropped to 40x40 and flipped."""

    def __init__(self, length: int = 1024) -> None:
        from PIL import Image

        generator = torch.Generator().manual_seed(0)
        pixels = torch.randint(0, 256, (length, 48, 48, 3), dtype=torch.uint8, generator=generator)
        self.labels = torch.randint(0, 10, (length,), generator=generator)
        self.png: list[bytes] = []
        for image in pixels.numpy():
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, format="PNG")
            self.png.append(buffer.getvalue())

    def __len__(self) -> int:
        return len(self.png)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        from PIL import Image

        image = Image.open(io.BytesIO(self.png[index])).convert("RGB")
        generator = torch.Generator().manual_seed(index)
        top, left = (int(v) for v in torch.randint(0, 9, (2,), generator=generator))
        image = image.crop((left, top, left + 40, top + 40))
        if index % 2:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        tensor = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).view(40, 40, 3)
        return (tensor.permute(2, 0, 1).float() / 255.0 - 0.5) / 0.25, self.labels[index]


def resnet_model() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", num_labels=10)
    return ResNetForImageClassification(config)


def resnet_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(pixel_values=images).logits.float(), labels)


def _images(workers: int) -> perfgate.Workload:
    return perfgate.Workload(
        name="resnet-png",
        model=resnet_model,
        dataset=PngImages,
        loss=resnet_loss,
        batch_size=32,
        loader={"num_workers": workers},
        steps=20,
        warmup_steps=3,
    )


def images() -> perfgate.Workload:
    return _images(2)


def images_no_workers() -> perfgate.Workload:
    return _images(0)
