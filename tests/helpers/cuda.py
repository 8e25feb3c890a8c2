"""The tests that need a CUDA device: marked `gpu` (`pytest -m gpu` on a card runs them, in under five minutes) and
skipped where there is none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import torch

Test = TypeVar("Test", bound=Callable[..., Any])


def needs_cuda(test: Test) -> Test:
    """Mark `test` `gpu` and skip it without a CUDA device."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    return pytest.mark.gpu(skip(test))
