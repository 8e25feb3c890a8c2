"""The package's dependency order, held by reading every import (inside functions and under
TYPE_CHECKING too): base modules <- records <- measure, judge <- report <- check <- app <- front ends.

README.md ("How the code is laid out") says what each layer holds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import perfgate

PACKAGE = Path(perfgate.__file__).parent
BASE = {
    "perfgate",
    "errors",
    "dependencies",
    "naming",
    "variants",
    "workload",
    "formatting",
    "_bytes",
    "project",
    "references",
    "builtin",
    "frameworks",
    "outcome",
    "_files",
    "_process",
    "gitrepo",
}
FRONT_ENDS = {"cli", "pytest_plugin", "action", "__main__", "trial", "annotations", "scaffold", "demo"}
LAYERS = {"records": 1, "measure": 2, "judge": 2, "report": 3, "check": 4, "app": 5}
FRONT = 6
THIN = ("cli", "pytest_plugin")  # the front ends that only translate to and from the application layer
MOST_LINES = 900  # the two together
MOST_MODULES = 12  # each, counted as `graph` counts them


def layer_of(module: str) -> tuple[int, str]:
    """(rank, name) of a module of the package, `perfgate.judge.stats` -> (2, "judge")."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "perfgate"
    if top in BASE:
        return 0, "base"
    if top in LAYERS:
        return LAYERS[top], top
    if top in FRONT_ENDS:
        return FRONT, "front end"
    raise AssertionError(f"{module} belongs to no layer: add it to a layer's package or to tests/test_layers.py")


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """Every module of the package that `module` imports, wherever the import statement stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    root = module.split(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            # `from perfgate import builtin` imports a module; `from perfgate.x import name` imports x
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        else:
            continue
        for target in targets:
            if target == root or target.startswith(root + "."):
                while target not in known:  # `import perfgate.judge.stats.x` style: the longest known prefix
                    target = target.rpartition(".")[0]
                if target != module:
                    yield target, node.lineno


def graph(root: Path) -> dict[str, dict[str, int]]:
    found = modules(root)
    return {m: dict(imports(m, p, set(found))) for m, p in found.items()}


def violations(edges: dict[str, dict[str, int]]) -> list[str]:
    """Each import that points up the layers, or sideways between measure and judge."""
    problems = []
    for module, targets in edges.items():
        rank, name = layer_of(module)
        for target, line in targets.items():
            target_rank, target_name = layer_of(target)
            if target_rank > rank or (target_rank == rank and rank and target_name != name):
                problems.append(f"{module}:{line} ({name}) imports {target} ({target_name})")
    return problems


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles, each as the path that closes it."""
    found, state = [], dict.fromkeys(edges, 0)  # 0 unseen, 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in edges.get(module, {}):
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif state.get(target) == 0:
                visit(target, [*path, target])
        state[module] = 2

    for module in edges:
        if state[module] == 0:
            visit(module, [module])
    return found


def test_every_import_points_down_the_layers() -> None:
    assert violations(graph(PACKAGE)) == []


def test_no_import_cycles() -> None:
    assert cycles(graph(PACKAGE)) == []


def judge_imports_in_reports(edges: dict[str, dict[str, int]]) -> list[str]:
    """Each import of `perfgate.judge` (a function or a type) by a module under `perfgate.report`."""
    return [
        f"{module}:{line} imports {target}"
        for module, targets in edges.items()
        if module.startswith("perfgate.report")
        for target, line in targets.items()
        if target.startswith("perfgate.judge")
    ]


def test_no_renderer_imports_the_judge() -> None:
    """Judge once, render many: every report reads the judged bundle (`records.judgement`), whose shapes live in
    `records`, so no module under perfgate/report imports perfgate.judge, types included. A renderer that called a
    judge function would judge a second time and could disagree with the verdict."""
    assert judge_imports_in_reports(graph(PACKAGE)) == []


def test_the_renderer_check_finds_a_judge_import(tmp_path: Path) -> None:
    root = tmp_path / "perfgate"
    for name in ["__init__", "judge/__init__", "judge/reading", "records/__init__", "records/reading"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{name}.py").write_text("")
    (root / "report").mkdir()
    (root / "report/__init__.py").write_text("")
    (root / "report/text.py").write_text("from perfgate.records.reading import LabReading\n")
    assert judge_imports_in_reports(graph(root)) == []
    (root / "report/text.py").write_text("def f():\n    from perfgate.judge.reading import read_lab\n")
    assert judge_imports_in_reports(graph(root)) == ["perfgate.report.text:2 imports perfgate.judge.reading"]


def test_only_the_plugin_imports_pytest() -> None:
    users = []
    for module, path in modules(PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "pytest" or n.startswith(("pytest.", "_pytest")) for n in names):
                users.append(module)
    assert sorted(set(users)) == ["perfgate.pytest_plugin"]


GIT_ADAPTER = "perfgate.gitrepo"  # the one door to git (STYLE.md: each outside system behind one door)


def runs_git(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """Each place in `path` that imports GitPython (`import git`, `from git import ...`) or builds a command whose
    first element is the literal "git" (a list or tuple, as `subprocess.run(["git", ...])` takes it)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(n == "git" or n.startswith("git.") for n in names):
            found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} imports git")
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git":
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} runs git")
    return found


def test_only_the_git_adapter_runs_git() -> None:
    """Every git command goes through `perfgate.gitrepo`: no other module imports GitPython or runs `git`."""
    found = [hit for module, path in modules(PACKAGE).items() if module != GIT_ADAPTER for hit in runs_git(path)]
    assert found == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import git\n", "imports git"),
        ("from git import Repo\n", "imports git"),
        ("def f():\n    import git.exc\n", "imports git"),
        ('import subprocess\nsubprocess.run(["git", "status"], check=False)\n', "runs git"),
        ('import subprocess\nargs = ()\nsubprocess.run(("git", *args))\n', "runs git"),
    ],
)
def test_the_git_check_finds_one(tmp_path: Path, source: str, found: str) -> None:
    module = tmp_path / "perfgate" / "x.py"
    module.parent.mkdir()
    module.write_text(source)
    assert [hit.partition(" ")[2] for hit in runs_git(module, tmp_path)] == [found]
    module.write_text('import subprocess\nsubprocess.run(["python", "-c", "print(\'git\')"])\nWORD = "git"\n')
    assert runs_git(module, tmp_path) == []


@pytest.mark.parametrize(
    ("module", "line", "found"),
    [
        ("records/results.py", "from perfgate.judge.verdict import Status\n", "imports perfgate.judge.verdict"),
        ("judge/stats.py", "def f():\n    from perfgate.measure import lab\n", "imports perfgate.measure.lab"),
        ("measure/lab.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import perfgate.check.run\n", ""),
    ],
)
def test_the_checks_catch_an_import_up_the_layers(tmp_path: Path, module: str, line: str, found: str) -> None:
    """A copy of the layout with one bad import: the layer check names it (and a cycle closes)."""
    root = tmp_path / "perfgate"
    for name in [
        "__init__",
        "errors",
        "records/__init__",
        "records/results",
        "measure/__init__",
        "measure/lab",
        "judge/__init__",
        "judge/stats",
        "judge/verdict",
        "check/__init__",
        "check/run",
        "cli",
    ]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{name}.py").write_text("")
    (root / "judge/verdict.py").write_text("from perfgate.records.results import x\nfrom perfgate.judge import stats\n")
    (root / "check/run.py").write_text("from perfgate.measure.lab import y\nfrom perfgate.judge.verdict import z\n")
    (root / "cli.py").write_text("from perfgate.check.run import main\n")
    assert violations(graph(root)) == [] and cycles(graph(root)) == []
    (root / module).write_text(line)
    problems = violations(graph(root))
    assert len(problems) == 1 and (found or "imports perfgate.check.run") in problems[0], problems


def test_front_ends_stay_thin() -> None:
    """The CLI and the pytest plugin translate to and from `perfgate.app`; the gate itself lives there."""
    edges = graph(PACKAGE)
    lines = {name: len((PACKAGE / f"{name}.py").read_text(encoding="utf-8").splitlines()) for name in THIN}
    assert sum(lines.values()) <= MOST_LINES, lines
    imported = {name: sorted(edges[f"perfgate.{name}"]) for name in THIN}
    assert all(len(found) <= MOST_MODULES for found in imported.values()), imported


DECLARING = {"add_argument", "addoption", "addini"}


def literal_flags(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """Each `add_argument("--x")`, `addoption("--x")` or `addini(...)` call whose first argument is a literal
    that starts with "-" (addini: any literal name): an option declared outside the options module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in DECLARING or not node.args:
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        name = first.value
        if name.startswith("-") or node.func.attr == "addini":
            found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.func.attr}({name!r})")
    return found


def test_no_option_is_declared_with_a_literal_flag_outside_the_options_module() -> None:
    options_module = PACKAGE / "app" / "options.py"
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != options_module for hit in literal_flags(path)]
    assert found == []


def test_the_literal_flag_check_finds_one(tmp_path: Path) -> None:
    module = tmp_path / "perfgate" / "x.py"
    module.parent.mkdir()
    module.write_text('import argparse\nargparse.ArgumentParser().add_argument("--made-up", type=int)\n')
    assert literal_flags(module, tmp_path) == ["perfgate/x.py:2 add_argument('--made-up')"]
    module.write_text('import argparse\nargparse.ArgumentParser().add_argument("made_up")\n')  # a positional
    assert literal_flags(module, tmp_path) == []
