"""Packaging: pyproject.toml's metadata, and the sdist and wheel built from the checkout (`twine check`ed)."""

from __future__ import annotations

import ast
import configparser
import email.message
import email.parser
import email.policy
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
REPOSITORY = "https://github.com/perfgate/perfgate"
SCHEMAS = sorted(path.name for path in (ROOT / "perfgate" / "records" / "schema").glob("*.json"))


def source_version() -> str:
    """`perfgate.__version__` as written in perfgate/__init__.py: a plain string literal, so setuptools reads it
    without importing perfgate (and torch) at build time."""
    tree = ast.parse((ROOT / "perfgate" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
            assert isinstance(node.value, ast.Constant) and isinstance(node.value.value, str), "not a string literal"
            return node.value.value
    raise AssertionError("perfgate/__init__.py assigns no __version__")


# --- pyproject.toml, parsed -------------------------------------------------------------------------------


def test_the_build_floor_supports_the_license_metadata():
    """An SPDX `license = "..."` string (and `license-files`) needs setuptools 77; an older one rejects the file."""
    requirements = [Requirement(text) for text in PYPROJECT["build-system"]["requires"]]
    setuptools = next(req for req in requirements if req.name == "setuptools")
    assert PYPROJECT["build-system"]["build-backend"] == "setuptools.build_meta"
    if isinstance(PROJECT["license"], str) or "license-files" in PROJECT:
        assert not setuptools.specifier.contains("76.1.0"), f"setuptools{setuptools.specifier} admits < 77"
        assert setuptools.specifier.contains("77.0.0") or setuptools.specifier.contains("77.0.3")
        # With a license expression, setuptools rejects `License ::` classifiers.
        assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    for pattern in PROJECT.get("license-files", []):
        assert list(ROOT.glob(pattern)), f"license-files entry {pattern!r} matches nothing"


def test_the_license_file_is_the_apache_license_the_metadata_names():
    assert PROJECT["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_classifiers_list_the_pytest_plugin_and_match_requires_python():
    classifiers = PROJECT["classifiers"]
    assert "Framework :: Pytest" in classifiers  # what lists a plugin among pytest's plugins
    assert len(set(classifiers)) == len(classifiers)
    assert classifiers == sorted(classifiers)
    requires_python = SpecifierSet(PROJECT["requires-python"])
    versions = [c.rsplit(" :: ", 1)[1] for c in classifiers if c.startswith("Programming Language :: Python :: 3.")]
    assert versions, "no Python version classifiers"
    for version in versions:
        assert requires_python.contains(version), f"Python {version} is outside requires-python {requires_python}"
    # The trove list PyPI accepts, where it is installed (PyPI rejects an upload with an unknown classifier).
    try:
        from trove_classifiers import classifiers as known
    except ImportError:
        return
    assert [c for c in classifiers if c not in known] == []


def test_the_version_is_written_once_in_perfgate_init():
    assert "version" not in PROJECT
    assert "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "perfgate.__version__"}
    version = source_version()
    assert str(Version(version)) == version  # PEP 440, normalised
    import perfgate

    assert perfgate.__version__ == version


def test_urls_extras_and_entry_points():
    urls = PROJECT["urls"]
    assert set(urls) >= {"Homepage", "Documentation", "Issues", "Changelog"}
    for name, url in urls.items():
        assert url == REPOSITORY or url.startswith((f"{REPOSITORY}/", f"{REPOSITORY}#")), (name, url)
    extras = {
        name: [Requirement(text).name for text in reqs] for name, reqs in PROJECT["optional-dependencies"].items()
    }
    assert extras["chart"] == ["matplotlib"]
    assert extras["gpu"] == ["nvidia-ml-py"]  # `import pynvml`, optional, in perfgate/measure/
    assert {"build", "twine", "pytest"} <= set(extras["dev"])
    assert PROJECT["scripts"] == {"perfgate": "perfgate.cli:entry"}
    assert PROJECT["entry-points"]["pytest11"] == {"perfgate": "perfgate.pytest_plugin"}
    package_data = PYPROJECT["tool"]["setuptools"]["package-data"]["perfgate"]
    assert {"py.typed", "records/schema/*.json"} <= set(package_data)
    assert (ROOT / "perfgate" / "py.typed").is_file() and SCHEMAS


# --- the sdist and the wheel, built -----------------------------------------------------------------------


def metadata(text: str) -> email.message.Message:
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text)


@pytest.mark.e2e
def test_the_wheel_holds_the_package_data_entry_points_and_metadata(built):
    _, wheel, source = built
    version = source_version()
    assert wheel.name == f"perfgate-{version}-py3-none-any.whl"
    info = f"perfgate-{version}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        meta = metadata(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
    assert license_text == (source / "LICENSE").read_text(encoding="utf-8")
    assert "perfgate/py.typed" in names
    assert {f"perfgate/records/schema/{name}" for name in SCHEMAS} <= names
    assert {"perfgate/__init__.py", "perfgate/cli.py", "perfgate/pytest_plugin.py"} <= names
    assert [n for n in names if not n.startswith(("perfgate/", f"{info}/"))] == []  # no tests/, benchmarks/
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]

    parser = configparser.ConfigParser()
    parser.read_string(entry_points)
    assert dict(parser["console_scripts"]) == {"perfgate": "perfgate.cli:entry"}
    assert dict(parser["pytest11"]) == {"perfgate": "perfgate.pytest_plugin"}

    assert meta["Name"] == "perfgate"
    assert meta["Version"] == version
    assert Version(meta["Metadata-Version"]) >= Version("2.4")  # License-Expression
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == PROJECT["requires-python"]
    assert meta.get_all("Classifier") == PROJECT["classifiers"]
    urls = dict(url.split(", ", 1) for url in meta.get_all("Project-URL"))
    assert urls == PROJECT["urls"]
    assert set(meta.get_all("Provides-Extra")) == set(PROJECT["optional-dependencies"])
    requires = [Requirement(text) for text in meta.get_all("Requires-Dist")]
    assert any(r.name == "nvidia-ml-py" and r.marker and r.marker.evaluate({"extra": "gpu"}) for r in requires)
    torch = next(r for r in requires if r.name == "torch")
    declared = next(Requirement(text) for text in PROJECT["dependencies"] if Requirement(text).name == "torch")
    assert torch.marker is None and torch.specifier == declared.specifier
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().strip() == (source / "README.md").read_text(encoding="utf-8").strip()


@pytest.mark.e2e
def test_the_sdist_holds_the_license_readme_and_package_data(built):
    sdist, _, _ = built
    version = source_version()
    assert sdist.name == f"perfgate-{version}.tar.gz"
    top = f"perfgate-{version}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
        pkg_info = metadata(archive.extractfile(f"{top}/PKG-INFO").read().decode())
    expected = {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO", "perfgate/py.typed", "perfgate/__init__.py"}
    expected |= {"tests/conftest.py", "tests/helpers/cli.py", "tests/workloads/tiny.py"}  # MANIFEST.in: runnable tests
    assert {f"{top}/{name}" for name in expected} <= names
    assert {f"{top}/perfgate/records/schema/{name}" for name in SCHEMAS} <= names
    assert pkg_info["Version"] == version and pkg_info["License-Expression"] == "Apache-2.0"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/.git/" in n]


@pytest.mark.e2e
def test_the_installed_wheel_imports_and_finds_its_schemas(built, tmp_path):
    """The wheel unpacked on its own (no dependencies installed with it: they come from this environment)
    imports from there, reports its version and reads the results schema it ships."""
    _, wheel, _ = built
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)]
    result = subprocess.run(install, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    probe = (
        "import json, perfgate, sys; from perfgate.records.results import SCHEMA_PATH; "
        "assert perfgate.__file__.startswith(sys.argv[1]), perfgate.__file__; "
        "json.loads(SCHEMA_PATH.read_text()); print(perfgate.__version__)"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", probe, str(target)], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == source_version()
