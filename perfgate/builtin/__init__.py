"""Built-in workloads: a small decoder-only language model and an image classifier with real data work.

Both are generated from a fixed seed (nothing is downloaded) and come in sizes: `small` runs a trial
in seconds on a 2-core CPU, `medium` suits a laptop GPU, `large` loads a datacenter GPU.
Reference them as `lm`, `vision`, `lm@large`, or `perfgate.builtin:transformer_lm`.
"""

from __future__ import annotations

from collections.abc import Callable

from perfgate.builtin.lm import transformer_lm
from perfgate.builtin.vision import image_classifier
from perfgate.errors import WorkloadReferenceError
from perfgate.workload import Workload

DEFAULT_SIZE = "small"
SIZES = ("small", "medium", "large")
BUILTINS: dict[str, Callable[[str], Workload]] = {"lm": transformer_lm, "vision": image_classifier}

__all__ = ["BUILTINS", "DEFAULT_SIZE", "SIZES", "check_name", "image_classifier", "load", "transformer_lm"]


def check_name(name: str, size: str, *, where: str) -> None:
    """Raise a WorkloadReferenceError unless `name@size` is a built-in workload."""
    if name not in BUILTINS:
        raise WorkloadReferenceError(
            f"unknown built-in workload {name!r}",
            where=where,
            hint=f"use one of {', '.join(BUILTINS)}, or write path/to/file.py:function",
        )
    if size not in SIZES:
        raise WorkloadReferenceError(
            f"unknown size {size!r} for built-in workload {name!r}",
            where=where,
            hint=f"use one of {', '.join(SIZES)}, for example {name}@large",
        )


def load(name: str, size: str) -> Workload:
    """Build the built-in workload `name` at `size`."""
    check_name(name, size, where=f"{name}@{size}")
    return BUILTINS[name](size)
