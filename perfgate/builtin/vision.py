"""An image classifier whose DataLoader workers decode stored samples and augment them on the CPU."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from perfgate._bytes import tensor_bytes
from perfgate.workload import Workload, world_size

CLASSES = 10
# Per-channel statistics of the generated images, used to normalise them.
MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)


@dataclass(frozen=True)
class VisionSize:
    stored: int  # side of the stored (encoded) image
    crop: int  # side of the training crop
    width: int  # channels of the first stage
    batch_size: int
    steps: int
    samples: int
    workers: int


VISION_SIZES = {
    "small": VisionSize(stored=40, crop=32, width=16, batch_size=32, steps=40, samples=2048, workers=2),
    "medium": VisionSize(stored=72, crop=64, width=32, batch_size=64, steps=30, samples=4096, workers=4),
    "large": VisionSize(stored=144, crop=128, width=64, batch_size=128, steps=50, samples=8192, workers=8),
}


def _generate_image(label: int, side: int, generator: torch.Generator) -> torch.Tensor:
    """A class-dependent grating with random phase, colour and noise, as uint8 HWC."""
    angle = math.pi * label / CLASSES + 0.2 * torch.rand(1, generator=generator).item()
    frequency = 2.0 + label % 5
    ys, xs = torch.meshgrid(torch.linspace(0, 1, side), torch.linspace(0, 1, side), indexing="ij")
    phase = 2 * math.pi * torch.rand(1, generator=generator).item()
    wave = torch.sin(2 * math.pi * frequency * (xs * math.cos(angle) + ys * math.sin(angle)) + phase)
    colour = 0.3 + 0.7 * torch.rand(3, 1, 1, generator=generator)
    image = 0.5 + 0.35 * wave * colour + 0.08 * torch.randn(3, side, side, generator=generator)
    return (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous()


class EncodedImages(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Images stored compressed, as a real dataset stores JPEG or PNG files.

    `__getitem__` does what a real input pipeline does in its workers: decode, random-resized crop,
    flip, colour jitter, convert and normalise. Augmentation is seeded per sample index, so the pinned
    data slice has the same content in every trial whatever the worker count.
    """

    def __init__(self, size: VisionSize, seed: int = 4321) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.size = size
        self.seed = seed
        self.labels = torch.randint(0, CLASSES, (size.samples,), generator=generator).tolist()
        images = (_generate_image(label, size.stored, generator) for label in self.labels)
        self.encoded = [zlib.compress(tensor_bytes(image), 6) for image in images]

    def __len__(self) -> int:
        return len(self.encoded)

    def decode(self, index: int) -> torch.Tensor:
        raw = bytearray(zlib.decompress(self.encoded[index]))
        side = self.size.stored
        return torch.frombuffer(raw, dtype=torch.uint8).view(side, side, 3).permute(2, 0, 1)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        image = self.decode(index).float().div_(255)
        image = _random_resized_crop(image, self.size.crop, generator)
        if torch.rand(1, generator=generator).item() < 0.5:
            image = image.flip(2)
        brightness, contrast = (0.8 + 0.4 * torch.rand(2, generator=generator)).tolist()
        mean = image.mean()
        image = ((image - mean) * contrast + mean * brightness).clamp_(0, 1)
        mean_t = torch.tensor(MEAN).view(3, 1, 1)
        std_t = torch.tensor(STD).view(3, 1, 1)
        return (image - mean_t) / std_t, self.labels[index]


def _random_resized_crop(image: torch.Tensor, out: int, generator: torch.Generator) -> torch.Tensor:
    side = image.shape[-1]
    scale = 0.6 + 0.4 * torch.rand(1, generator=generator).item()
    crop = max(8, int(side * math.sqrt(scale)))
    top, left = (torch.randint(0, side - crop + 1, (2,), generator=generator)).tolist()
    patch = image[:, top : top + crop, left : left + crop].unsqueeze(0)
    return F.interpolate(patch, size=(out, out), mode="bilinear", align_corners=False).squeeze(0)


def _stage(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
        nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class SmallConvNet(nn.Module):
    """Three conv stages, global pooling and a linear classifier."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.features = nn.Sequential(_stage(3, width, 1), _stage(width, 2 * width, 2), _stage(2 * width, 4 * width, 2))
        self.classifier = nn.Linear(4 * width, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images).mean(dim=(2, 3)))


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images).float(), labels)


def image_classifier(size: str = "small") -> Workload:
    """The built-in image classification workload at the given size (`small`, `medium`, `large`)."""
    spec = VISION_SIZES[size]
    return Workload(
        name=f"vision-{size}",
        model=lambda: SmallConvNet(spec.width),
        # every rank of a data-parallel trial reads a slice of its own
        dataset=lambda: EncodedImages(replace(spec, samples=spec.samples * world_size())),
        loss=classification_loss,
        batch_size=spec.batch_size,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        loader={"num_workers": spec.workers, "pin_memory": True, "persistent_workers": False},
        steps=spec.steps,
        warmup_steps=3,
    )
