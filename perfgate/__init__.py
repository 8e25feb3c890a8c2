"""perfgate: a CI performance-regression gate for PyTorch training code."""

from __future__ import annotations

from perfgate.errors import PerfgateError, UsageError, WorkloadError, WorkloadReferenceError
from perfgate.variants import CONFIG_NAMES, Config
from perfgate.workload import Workload, world_size

__version__ = "0.1.0"

__all__ = [
    "CONFIG_NAMES",
    "Config",
    "PerfgateError",
    "UsageError",
    "Workload",
    "WorkloadError",
    "WorkloadReferenceError",
    "__version__",
    "world_size",
]
