"""A package perfgate needs that is not installed: one line naming it and the command that installs it, from
the CLI and from the pytest plugin, not an internal error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perfgate.dependencies import DEPENDENCIES, MissingDependencyError, missing_dependency
from tests.helpers.cli import UNUSED_PYTEST_PLUGINS, run_cli
from tests.helpers.git import commit, new_repository
from tests.helpers.workloads import WORKLOADS

TORCH_MISSING = (
    "error: perfgate needs the package torch, which is not installed; install the torch build for your machine, "
    "e.g. the CPU build: python -m pip install torch --index-url https://download.pytorch.org/whl/cpu\n"
)

SCIPY_MISSING = "error: perfgate needs the package scipy, which is not installed; python -m pip install scipy\n"
SAVED_RESULTS = Path(__file__).parent / "data" / "results-v2.json"


def not_found(name: str) -> ModuleNotFoundError:
    """The error `import NAME` raises when NAME is not installed."""
    return ModuleNotFoundError(f"No module named {name!r}", name=name)


def without(module: str, folder: Path) -> dict[str, str]:
    """Environment variables under which a new Python process cannot import `module`, as if it were not
    installed: a sitecustomize in `folder` sets `sys.modules[module] = None` (so `import module` raises
    ModuleNotFoundError with that name) before anything else is imported."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(f"import sys\n\nsys.modules[{module!r}] = None\n", encoding="utf-8")
    return {"PYTHONPATH": str(folder)}


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (
            "yaml",
            "perfgate needs the package PyYAML (import name 'yaml'), which is not installed; "
            "python -m pip install PyYAML",
        ),
        ("scipy", "perfgate needs the package scipy, which is not installed; python -m pip install scipy"),
        ("psutil", "perfgate needs the package psutil, which is not installed; python -m pip install psutil"),
        (
            "jsonschema",
            "perfgate needs the package jsonschema, which is not installed; python -m pip install jsonschema",
        ),
        ("ruptures", "perfgate needs the package ruptures, which is not installed; python -m pip install ruptures"),
        (
            "matplotlib",
            "perfgate needs the package matplotlib, which is not installed; python -m pip install 'perfgate[chart]'",
        ),
        (
            "pynvml",
            "perfgate needs the package nvidia-ml-py (import name 'pynvml'), which is not installed; "
            "python -m pip install 'perfgate[gpu]'",
        ),
        ("torch", TORCH_MISSING.removeprefix("error: ").rstrip("\n")),
    ],
)
def test_a_missing_dependency_names_its_package_and_the_command_that_installs_it(module, message):
    error = missing_dependency(not_found(module))
    assert isinstance(error, MissingDependencyError)
    assert error.one_line() == message
    assert error.exit_code == 2


def test_every_runtime_dependency_and_extra_in_pyproject_has_an_entry():
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    required = [*project["dependencies"], *extras["chart"], *extras["gpu"]]
    names = {requirement.split(">")[0].split("=")[0].split("[")[0].strip().lower() for requirement in required}
    assert names == {dependency.distribution.lower() for dependency in DEPENDENCIES.values()}


def test_a_missing_module_of_an_installed_dependency_asks_for_a_reinstall():
    error = missing_dependency(not_found("scipy._no_such_extension"))
    assert error is not None
    assert error.one_line() == (
        "the package scipy is installed incompletely: it has no module 'scipy._no_such_extension'; "
        "python -m pip install --force-reinstall scipy"
    )


def test_a_missing_module_that_perfgate_does_not_list_points_to_pip_check():
    error = missing_dependency(not_found("gitdb"))  # a package perfgate does not depend on
    assert error is not None
    assert error.one_line() == (
        "perfgate could not import the module 'gitdb', which is not installed; install the package that "
        "provides it; `python -m pip check` lists the requirements that are missing"
    )


def test_a_missing_module_of_perfgate_itself_stays_an_internal_error():
    assert missing_dependency(not_found("perfgate.no_such_module")) is None
    assert missing_dependency(ModuleNotFoundError("no name given")) is None
    assert missing_dependency(ImportError("cannot import name 'x'", name="yaml")) is None
    assert missing_dependency(ValueError("not an import")) is None


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        ("torch", ("run", "lm", "--configs", "fp32"), TORCH_MISSING),
        ("scipy", ("compare", str(SAVED_RESULTS), str(SAVED_RESULTS)), SCIPY_MISSING),  # the statistics
    ],
)
def test_the_cli_says_which_package_is_missing_in_one_line_and_exits_2(tmp_path, module, args, expected):
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli(*args, cwd=work, env=without(module, tmp_path / "hide"), timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", expected)
    assert list(work.iterdir()) == []


@pytest.mark.e2e
def test_the_pytest_plugin_fails_a_check_that_needs_a_missing_package_with_the_clis_line(
    pytester, monkeypatch, tmp_path_factory
):
    """The statistics import scipy when a check judges its pairs: the test fails with the line the CLI prints."""
    monkeypatch.setenv("PYTEST_ADDOPTS", UNUSED_PYTEST_PLUGINS)  # after pytester's setup, which clears it
    for name, value in without("scipy", tmp_path_factory.mktemp("hide")).items():
        monkeypatch.setenv(name, value)
    shutil.copy(WORKLOADS / "tiny.py", pytester.path / "tiny.py")
    pytester.makepyfile(
        test_perf="""
        from tiny import tiny


        def test_fixture_style(perfgate):
            perfgate.check(tiny, configs="fp32")
        """
    )
    commit(new_repository(pytester.path), {}, "the workload")  # the base the paired check measures
    quick = ("--perfgate-trials", "2", "--perfgate-max-trials", "2")
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-against", "HEAD", *quick, "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([SCIPY_MISSING.removeprefix("error: ").rstrip()])
