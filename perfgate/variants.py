"""The configurations of the lab: fp32, bf16 autocast, and bf16 autocast plus torch.compile (the default three),
and fp16 autocast with a GradScaler (asked for by name: `--configs fp16`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.errors import UsageError


@dataclass(frozen=True)
class Config:
    """One lab configuration: an autocast dtype (or none), whether the model is compiled and whether the loss is
    scaled (a `torch.amp.GradScaler`, as fp16 training needs)."""

    name: str
    autocast_dtype: str | None
    compile: bool
    scaled: bool = False


CONFIGS: dict[str, Config] = {
    "fp32": Config("fp32", None, False),
    "bf16": Config("bf16", "bfloat16", False),
    "bf16-compile": Config("bf16-compile", "bfloat16", True),
    "fp16": Config("fp16", "float16", False, scaled=True),
}
CONFIG_NAMES: tuple[str, ...] = tuple(CONFIGS)  # every config, in lab order
DEFAULT_CONFIGS: tuple[str, ...] = ("fp32", "bf16", "bf16-compile")  # the three-run lab: what runs unless asked


def parse_configs(text: str | Sequence[str], where: str = "--configs") -> tuple[str, ...]:
    """Parse `fp32,bf16` (or a list) into config names in lab order, rejecting unknown names; an error names
    `where` the text came from (`--configs`, `--perfgate-configs`, `ini perfgate_configs`)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [item.strip() for item in items if item.strip()]
    if not names:
        raise UsageError("no configs given", where=where, hint=f"choose from {', '.join(CONFIG_NAMES)}")
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        raise UsageError(
            f"unknown config {', '.join(repr(n) for n in unknown)}",
            where=where,
            hint=f"choose from {', '.join(CONFIG_NAMES)}",
        )
    return tuple(name for name in CONFIG_NAMES if name in names)
