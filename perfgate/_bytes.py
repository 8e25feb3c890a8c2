"""Zero-copy access to a CPU tensor's bytes, without numpy (torch does not depend on it)."""

from __future__ import annotations

import ctypes
from typing import Any


def tensor_bytes(tensor: Any) -> Any:
    """A buffer over the raw bytes of `tensor` (made contiguous and on the CPU first).

    `bytes(tensor.untyped_storage())` works too but reads element by element, thousands of times slower.
    The caller keeps the returned buffer only while the tensor is alive.
    """
    tensor = tensor.detach().cpu().contiguous()
    buffer = (ctypes.c_char * (tensor.numel() * tensor.element_size())).from_address(tensor.data_ptr())
    buffer._tensor = tensor  # keep the memory alive as long as the buffer
    return buffer
