"""Resolve workload references: `path/to/file.py:function`, `package.module:function`, built-in names."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from perfgate.errors import WorkloadError, WorkloadReferenceError
from perfgate.naming import CLI, FrontEnd
from perfgate.workload import Workload

DEFAULT_REFERENCES: tuple[str, ...] = ("lm", "vision")


@dataclass(frozen=True)
class Reference:
    """A workload reference as the user wrote it, and the normalised form a trial process loads."""

    text: str
    target: str  # "file:<abs path>:<function>", "module:<module>:<function>" or "builtin:<name>@<size>"

    def import_module(self, front_end: FrontEnd = CLI) -> ModuleType:
        """Import the module that holds the target's function (what it imports with it), without calling it; a
        built-in's is perfgate's."""
        kind, _, rest = self.target.partition(":")
        if kind == "builtin":
            from perfgate import builtin

            return builtin
        location = rest.rpartition(":")[0]
        return _import_file(location, front_end) if kind == "file" else _import_module(location, front_end)

    def defined(self) -> bool | None:
        """Whether the file this reference points into defines its function, read without running it (a paired
        check asks it of the base's copy): False where the file is missing, or names the function nowhere and
        star-imports nothing; True where it names it; None where only importing can tell (a module reference, a
        built-in, a file that does not tokenize)."""
        kind, _, rest = self.target.partition(":")
        if kind != "file":
            return None
        location, _, function_name = rest.rpartition(":")
        path = Path(location)
        if not path.is_file():
            return False
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline))
        except (OSError, UnicodeDecodeError, SyntaxError, tokenize.TokenError):
            return None
        names = {token.string for token in tokens if token.type == tokenize.NAME}
        if function_name in names:
            return True
        star = any(a.string == "import" and b.string == "*" for a, b in zip(tokens, tokens[1:], strict=False))
        return None if star else False

    def load(self, front_end: FrontEnd = CLI) -> Workload:
        """Import the target and call its function; the result must be a Workload. `front_end`: how the
        messages spell the option that shows tracebacks."""
        kind, _, rest = self.target.partition(":")
        if kind == "builtin":
            from perfgate import builtin

            name, _, size = rest.partition("@")
            return builtin.load(name, size)
        location, _, function_name = rest.rpartition(":")
        module = self.import_module(front_end)
        function = getattr(module, function_name, None)
        if function is None:
            available = sorted(
                name
                for name, value in vars(module).items()
                if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
            )
            raise WorkloadReferenceError(
                f"no function {function_name!r} in {location}",
                where=self.text,
                hint=f"define it or pick one of: {', '.join(available) or '(none)'}",
            )
        if not callable(function):
            raise WorkloadReferenceError(
                f"{function_name!r} in {location} is a {type(function).__name__}, not a function",
                where=self.text,
                hint="point at a function that returns perfgate.Workload",
            )
        try:
            workload = function()
        except WorkloadError:
            raise
        except Exception as exc:
            raise WorkloadError(
                f"{function_name}() raised {type(exc).__name__}: {exc}",
                where=self.text,
                hint=f"fix the workload function{front_end.traceback_note()}",
            ) from exc
        if not isinstance(workload, Workload):  # the reference names some other function: a bad argument
            raise WorkloadReferenceError(
                f"{function_name}() returned {type(workload).__name__}, not perfgate.Workload",
                where=self.text,
                hint="return perfgate.Workload(name=..., model=..., dataset=..., loss=..., batch_size=...)",
            )
        return workload


def parse_reference(text: str, *, base_dir: Path | None = None) -> Reference:
    """Turn what the user wrote into a Reference, checking that a referenced file exists."""
    text = text.strip()
    if not text:
        raise WorkloadReferenceError(
            "empty workload reference", hint="write path/to/file.py:function or package.module:function"
        )
    if ":" not in text:
        from perfgate import builtin

        name, _, size = text.partition("@")
        builtin.check_name(name, size or builtin.DEFAULT_SIZE, where=text)
        return Reference(text, f"builtin:{name}@{size or builtin.DEFAULT_SIZE}")
    location, _, function_name = text.rpartition(":")
    if not function_name.isidentifier():
        raise WorkloadReferenceError(
            f"{function_name!r} is not a function name",
            where=text,
            hint="write path/to/file.py:function or package.module:function",
        )
    if location.endswith(".py") or "/" in location or "\\" in location:
        path = Path(location)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        if not path.is_file():
            raise WorkloadReferenceError(
                f"file {location} not found",
                where=text,
                hint=f"check the path (relative paths start at {base_dir or Path.cwd()})",
            )
        return Reference(text, f"file:{path.resolve()}:{function_name}")
    if not all(part.isidentifier() for part in location.split(".")):
        raise WorkloadReferenceError(
            f"{location!r} is neither a .py file nor a module name",
            where=text,
            hint="write path/to/file.py:function or package.module:function",
        )
    return Reference(text, f"module:{location}:{function_name}")


def reference_for(target: object, *, base_dir: Path | None = None) -> Reference:
    """A Reference from what a test hands over: a reference string, a workload function, or a Workload it built."""
    if isinstance(target, str):
        return parse_reference(target, base_dir=base_dir)
    how = "pass the function itself, e.g. perfgate.check(gpt_small), or a reference string such as 'lm'"
    if isinstance(target, Workload):
        if target.origin is None:
            raise WorkloadReferenceError(
                f"cannot tell which function built workload {target.name!r}: trial processes must rebuild it",
                hint=f"build it in a module-level function that takes no arguments and {how}",
            )
        location, name = target.origin
    elif inspect.isfunction(target):
        location = inspect.getsourcefile(target) or ""
        name = target.__name__
        if target.__qualname__ != name or not location:
            raise WorkloadReferenceError(
                f"{target.__qualname__} is not a module-level function in a file: trial processes cannot import it",
                hint="define the workload function at the top level of a .py file",
            )
    else:
        raise WorkloadReferenceError(
            f"cannot measure a {type(target).__name__}", hint=f"{how}, or a Workload built by such a function"
        )
    path = Path(location).resolve()
    try:
        shown = path.relative_to((base_dir or Path.cwd()).resolve()).as_posix()
    except ValueError:
        shown = str(path)
    return Reference(f"{shown}:{name}", f"file:{path}:{name}")


def configured_references(project_dir: Path | None = None) -> tuple[list[str], Path] | None:
    """`workloads` from the project configuration (`[tool.perfgate]` or perfgate.yaml), if it lists any."""
    from perfgate.project import load_project_config

    project = load_project_config(project_dir)
    if project.workloads is None:
        return None
    return project.workloads, project.base_dir


def resolve_references(texts: list[str]) -> list[Reference]:
    """References given on the command line, else from pyproject.toml, else the built-in default."""
    if texts:
        references = [parse_reference(text) for text in texts]
    else:
        configured = configured_references()
        if configured is None:
            references = [parse_reference(text) for text in DEFAULT_REFERENCES]
        else:
            workloads, directory = configured
            references = [parse_reference(text, base_dir=directory) for text in workloads]
    seen: set[str] = set()
    unique = []
    for reference in references:
        if reference.target not in seen:
            seen.add(reference.target)
            unique.append(reference)
    return unique


def _import_file(location: str, front_end: FrontEnd = CLI) -> ModuleType:
    path = Path(location)
    module_name = f"_perfgate_workload_{abs(hash(str(path)))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadReferenceError(f"cannot import {path}", hint="point at a Python source file")
    module = importlib.util.module_from_spec(spec)
    # The file's own folder is importable, as it would be for `python file.py`.
    sys.path.insert(0, str(path.parent))
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise WorkloadError(
            f"importing {path.name} raised {type(exc).__name__}: {exc}",
            where=str(path),
            hint=f"fix the file{front_end.traceback_note()}",
        ) from exc
    return module


def _import_module(name: str, front_end: FrontEnd = CLI) -> ModuleType:
    # Like `python -m`, the current directory is importable.
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise WorkloadReferenceError(
                f"module {name} not found",
                hint="check the module name, or install the package / run from its project folder",
            ) from exc
        raise WorkloadError(
            f"importing {name} raised ModuleNotFoundError: {exc}", hint="install the missing package"
        ) from exc
    except Exception as exc:
        raise WorkloadError(
            f"importing {name} raised {type(exc).__name__}: {exc}",
            hint=f"fix the module{front_end.traceback_note()}",
        ) from exc
