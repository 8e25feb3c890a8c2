"""perfgate: a CI performance-regression gate for PyTorch training code."""

from __future__ import annotations

from typing import Any

from perfgate.errors import PerfgateError, UsageError, WorkloadError, WorkloadReferenceError
from perfgate.variants import CONFIG_NAMES, DEFAULT_CONFIGS, Config
from perfgate.workload import StepState, Workload, world_size

__version__ = "0.2.0"

__all__ = [
    "CONFIG_NAMES",
    "DEFAULT_CONFIGS",
    "Config",
    "PerfgateError",
    "StepState",
    "UsageError",
    "Workload",
    "WorkloadError",
    "WorkloadReferenceError",
    "__version__",
    "from_lightning",
    "from_trainer",
    "world_size",
]

# The framework adapters, imported when first used: neither framework is a dependency of the core. A module-level
# __getattr__ (not a wrapper function) so that the adapter's caller stays the function that built the workload.
_ADAPTERS = {"from_trainer": "perfgate.frameworks.huggingface", "from_lightning": "perfgate.frameworks.lightning"}


def __getattr__(name: str) -> Any:
    if name in _ADAPTERS:
        import importlib

        return getattr(importlib.import_module(_ADAPTERS[name]), name)
    raise AttributeError(f"module 'perfgate' has no attribute {name!r}")
