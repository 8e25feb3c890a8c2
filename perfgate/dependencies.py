"""The packages perfgate imports, and the one-line error for one that is not installed.

Both front ends turn a `ModuleNotFoundError` from a dependency into `MissingDependencyError`, which names the
package to install and the command that installs it, instead of reporting an internal error.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from perfgate.errors import PerfgateError

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Dependency:
    """A package perfgate imports: its distribution name on PyPI and the command that installs it."""

    distribution: str
    install: str


def _pip(requirement: str) -> str:
    return f"python -m pip install {requirement}"


# Import name -> the package that provides it (pyproject.toml's dependencies and extras).
DEPENDENCIES = {
    "torch": Dependency(
        "torch",
        f"install the torch build for your machine, e.g. the CPU build: {_pip('torch')} --index-url {TORCH_CPU_INDEX}",
    ),
    "scipy": Dependency("scipy", _pip("scipy")),
    "yaml": Dependency("PyYAML", _pip("PyYAML")),
    "psutil": Dependency("psutil", _pip("psutil")),
    "jsonschema": Dependency("jsonschema", _pip("jsonschema")),
    "ruptures": Dependency("ruptures", _pip("ruptures")),
    "uv": Dependency("uv", _pip("uv")),  # optional at run time: pip installs the base's environment without it
    "matplotlib": Dependency("matplotlib", _pip("'perfgate[chart]'")),
    "pynvml": Dependency("nvidia-ml-py", _pip("'perfgate[gpu]'")),
}


class MissingDependencyError(PerfgateError):
    """A module perfgate imports is not installed (or its package is installed incompletely)."""


def missing_dependency(error: BaseException) -> MissingDependencyError | None:
    """The error to show for `error` when it is a ModuleNotFoundError for a module that is not perfgate's own;
    None otherwise (one of perfgate's modules missing is a broken install or a bug: an internal error)."""
    if not isinstance(error, ModuleNotFoundError) or not error.name:
        return None
    name = error.name
    top = name.partition(".")[0]
    if top == "perfgate":
        return None
    dependency = DEPENDENCIES.get(top)
    if dependency is not None and (top == name or not _installed(top)):
        named = dependency.distribution
        if named.lower() != top:
            named += f" (import name '{top}')"
        return MissingDependencyError(
            f"perfgate needs the package {named}, which is not installed", hint=dependency.install
        )
    if dependency is not None:  # the package is there, one of its own modules is not
        return MissingDependencyError(
            f"the package {dependency.distribution} is installed incompletely: it has no module '{name}'",
            hint=f"python -m pip install --force-reinstall {dependency.distribution}",
        )
    if top in sys.stdlib_module_names:
        return MissingDependencyError(
            f"this Python lacks the standard library's module '{name}'",
            hint="use a Python build that includes it (some distributions package it separately)",
        )
    return MissingDependencyError(
        f"perfgate could not import the module '{name}', which is not installed",
        hint="install the package that provides it; `python -m pip check` lists the requirements that are missing",
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails, or a module without a spec
        return False


@contextmanager
def dependencies_required() -> Iterator[None]:
    """Re-raise a ModuleNotFoundError for a dependency as `MissingDependencyError` (a PerfgateError), for
    front ends that report PerfgateErrors; also a decorator."""
    try:
        yield
    except ModuleNotFoundError as error:
        missing = missing_dependency(error)
        if missing is None:
            raise
        raise missing from error
