"""Each side's installed packages: the base of a paired check measured in its own environment.

A paired check runs the base commit's code from a worktree. Without more, both sides import the same installed
packages, the head's, and a pull request that changes only what is installed (a dependency bump, a lock file,
a rebuilt extension of the project) is measured as head-on-new-packages against base-on-new-packages: no change,
whatever the change did. So before the first pair:

- The two commits' declarations are compared (`read_declarations`): `pyproject.toml` (dependencies, optional
  groups, dependency groups, the build system), `requirements*.txt`, and lock files (`uv.lock`, `poetry.lock`,
  `pylock*.toml`).
- Where they differ, the base gets an overlay environment (`overlay`): a virtual environment that sees the
  head's installed packages behind its own, with the base's differing requirements installed into it, so
  only what differs is installed (one small package: seconds). The overlay is cached by what it holds.
- Where the project builds a compiled extension, the base's own project is built from the base's sources and
  installed, non-editable, into a folder first on the base's path (`install_project`).
- Where neither applies (`auto`), the sides share the head's environment at no cost.

The installer is uv where it can be found (installs from a shared cache with hard links), else pip, with the
user's pip settings (index, extra index, find-links, no-index: `pip config list`, which includes the PIP_*
variables) given to uv as its own flags. This module is the one door to the installers.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate._files import OWNER_FILE, mark_owned, owner_alive
from perfgate.errors import NothingToCompareError, UsageError
from perfgate.measure.lab import TrialPlace
from perfgate.naming import CLI, FrontEnd
from perfgate.records.results import Environments

MODES = ("auto", "shared", "per-side")
HARNESS = "perfgate"  # the harness that measures is the head's on both sides: never installed for the base
LOCK_FILES = ("uv.lock", "poetry.lock", "pylock.toml")
# Build backends that compile: a project built by one of them builds an extension.
COMPILING_BACKENDS = ("scikit_build_core", "mesonpy", "maturin", "setuptools_rust", "pdm.backend.hooks.cython")
EXTENSION_HINTS = re.compile(r"\b(ext_modules|Extension\s*\(|cythonize|CUDAExtension|CppExtension|Pybind11Extension)")
INSTALL_TIMEOUT_S = 1800.0
_SNIPPET = (  # each distribution as the interpreter imports it: the first found on sys.path wins
    "import importlib.metadata as m, json, re\n"
    "found = {}\n"
    "for d in m.distributions():\n"
    "    name = d.metadata['Name']\n"
    "    if name and re.sub(r'[-_.]+', '-', name).lower() not in found:\n"
    "        found[re.sub(r'[-_.]+', '-', name).lower()] = (name, d.version)\n"
    "print(json.dumps(dict(found.values())))\n"
)


def canonical(name: str) -> str:
    """A distribution name as the package index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Declarations:
    """What one commit declares it needs installed."""

    requirements: dict[str, str] = field(default_factory=dict)  # canonical name -> requirement text
    optional: frozenset[str] = frozenset()  # names only an optional or development group declares
    locked: dict[str, str] = field(default_factory=dict)  # canonical name -> version, from lock files
    build: tuple[str, ...] = ()  # the build system: its requirements and backend
    extension: bool = False  # the project compiles an extension when built
    project: str | None = None  # the project's own distribution name, where it declares one
    installable: bool = False  # a pyproject.toml build system or a setup.py: pip can build it
    files: dict[str, bytes] = field(default_factory=dict)  # the declaration files, by path under the root


def read_declarations(root: Path) -> Declarations:
    """The declarations of the checkout at `root` (missing files declare nothing)."""
    files: dict[str, bytes] = {}
    names = ["pyproject.toml", "setup.py", "setup.cfg", *LOCK_FILES]
    names += sorted(p.name for p in root.glob("pylock.*.toml"))
    names += sorted(
        str(p.relative_to(root)) for p in [*root.glob("requirements*.txt"), *root.glob("requirements/*.txt")]
    )
    for name in names:
        path = root / name
        if path.is_file():
            files[name] = path.read_bytes()
    requirements: dict[str, str] = {}
    optional: set[str] = set()
    pyproject = _toml(files.get("pyproject.toml"), "pyproject.toml")
    project = pyproject.get("project", {})
    for text in project.get("dependencies", []):
        _add(requirements, text)
    groups = [*project.get("optional-dependencies", {}).values(), *pyproject.get("dependency-groups", {}).values()]
    for group in groups:
        for text in group:
            if isinstance(text, str) and _add(requirements, text, keep=True):
                optional.add(_name(text) or text)
    for name, content in files.items():
        if name.endswith(".txt"):
            for text in _requirement_lines(content.decode("utf-8", "replace")):
                _add(requirements, text)
    locked: dict[str, str] = {}
    for name, content in files.items():
        if name in LOCK_FILES or (name.startswith("pylock.") and name.endswith(".toml")):
            document = _toml(content, name)
            for package in [*document.get("package", []), *document.get("packages", [])]:
                if isinstance(package, dict) and package.get("name") and package.get("version"):
                    locked[canonical(str(package["name"]))] = str(package["version"])
    system = pyproject.get("build-system", {})
    backend = str(system.get("build-backend", ""))
    build = (*sorted(str(r) for r in system.get("requires", [])), backend)
    setup = files.get("setup.py", b"").decode("utf-8", "replace")
    extension = bool(
        EXTENSION_HINTS.search(setup)
        or any(backend.startswith(b) for b in COMPILING_BACKENDS)
        or pyproject.get("tool", {}).get("setuptools", {}).get("ext-modules")
    )
    project_name = project.get("name") if isinstance(project.get("name"), str) else None
    return Declarations(
        requirements=requirements,
        optional=frozenset(optional - set(requirements_required(project, files))),
        locked=locked,
        build=build if system else (),
        extension=extension,
        project=canonical(project_name) if project_name else None,
        installable=bool(system) or "setup.py" in files,
        files=files,
    )


def requirements_required(project: Mapping[str, Any], files: Mapping[str, bytes]) -> set[str]:
    """The names that a required list (the project's dependencies, a requirements file) declares."""
    names = {_name(text) or text for text in project.get("dependencies", [])}
    for name, content in files.items():
        if name.endswith(".txt"):
            names |= {_name(text) or text for text in _requirement_lines(content.decode("utf-8", "replace"))}
    return names


@dataclass(frozen=True)
class Plan:
    """What the base needs beyond the head's environment, and why."""

    install: tuple[str, ...]  # the base's requirements to install over the head's packages
    project: bool  # build and install the base's own project (it compiles an extension)
    why: str  # in words
    files: tuple[str, ...] = ()  # the declaration files that differ

    @property
    def needed(self) -> bool:
        return bool(self.install or self.project)


def plan(base: Declarations, head: Declarations, installed: Mapping[str, str], mode: str = "auto") -> Plan:
    """What the base's environment needs: its requirements whose text (or locked version) differs from the
    head's, less those only an optional group declares that the head's environment does not have and the
    harness itself; its own project where it compiles an extension. `installed`: the head's packages, by
    canonical name."""
    differing = tuple(sorted(n for n in set(base.files) | set(head.files) if base.files.get(n) != head.files.get(n)))
    install: dict[str, str] = {}
    for name, text in base.requirements.items():
        if head.requirements.get(name) == text or name in (HARNESS, base.project):
            continue
        if name in base.optional and name not in installed:
            continue  # an optional group the head's environment was not installed with
        install[name] = text
    for name, version in base.locked.items():
        if head.locked.get(name) == version or name in (HARNESS, base.project) or name in install:
            continue
        if name in installed and installed[name] != version:
            install[name] = f"{name}=={version}"
    project = base.extension and base.installable
    reasons = []
    if install:
        verb = "differs" if len(differing) == 1 else "differ"
        reasons.append(f"{', '.join(differing)} {verb}: the base declares {', '.join(install.values())}")
    if project:
        reasons.append("the project builds an extension: the base's is built from the base's sources")
    if mode == "per-side" and not reasons:
        reasons.append(f"{CLI.option('environment')} per-side")
    if not reasons:
        why = "the two commits declare the same packages" + (
            " and the project builds no extension" * (not base.extension)
        )
        return Plan((), False, why, differing)
    return Plan(tuple(install.values()), project, "; ".join(reasons), differing)


def installed_packages(python: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The distributions an interpreter imports, name -> version (this one's where `python` is None)."""
    if python is None:
        found: dict[str, tuple[str, str]] = {}
        for dist in importlib.metadata.distributions():
            name = dist.metadata["Name"]
            if name and canonical(name) not in found:
                found[canonical(name)] = (name, dist.version)
        return dict(found.values())
    done = subprocess.run(
        [python, "-c", _SNIPPET], capture_output=True, text=True, env=dict(env or os.environ), timeout=120, check=False
    )
    if done.returncode != 0:
        raise NothingToCompareError(
            f"cannot list the base environment's packages: {_last_words(done.stderr)}",
            where=CLI.option("environment"),
        )
    return dict(json.loads(done.stdout))


def site_folders() -> list[str]:
    """The folders this interpreter's installed packages live in (its site-packages, the user's where enabled)."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        folders.append(site.getusersitepackages())
    return list(dict.fromkeys(folders))


class Installer:
    """uv where it can be found (PERFGATE_INSTALLER=pip forces pip), else pip; with the user's pip settings."""

    def __init__(self) -> None:
        self.uv = None if os.environ.get("PERFGATE_INSTALLER") == "pip" else _find_uv()
        self.name = "uv" if self.uv else "pip"
        self._options: list[str] | None = None

    def options(self) -> list[str]:
        """The user's pip settings as this installer's flags (pip reads its own: none)."""
        if self._options is None:
            self._options = [] if self.uv is None else _uv_flags(_pip_settings())
        return self._options

    def install(self, python: str, requirements: Sequence[str], head: Mapping[str, str], scratch: Path) -> None:
        """Install `requirements` into `python`'s environment, an overlay over the head's packages: only what
        the head's packages do not already satisfy. pip sees the head's packages through the overlay; uv does
        not, so it resolves against the head's versions as constraints, and installs the difference."""
        if not requirements:
            return
        if self.uv is None:
            self._run([python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", *requirements])
            return
        wanted = scratch / "base-requirements.in"
        wanted.write_text("\n".join(requirements) + "\n")
        names = {_name(text) for text in requirements}
        every, others = scratch / "head-versions.txt", scratch / "head-other-versions.txt"
        every.write_text("".join(f"{n}=={v}\n" for n, v in head.items()))
        others.write_text("".join(f"{n}=={v}\n" for n, v in head.items() if canonical(n) not in names))
        compile_ = [self.uv, "pip", "compile", "--python", python, "--no-header", "--no-annotate", "--quiet"]
        compile_ += [*self.options(), str(wanted)]
        # The head's versions where the base's requirements allow them (as pip, which sees them installed, keeps
        # them: `torch>=2.0` is the head's torch), else the head's versions of the others, else any.
        for constraints in ([str(every)], [str(others)], []):
            try:
                pinned = self._run([*compile_, *(a for c in constraints for a in ("--constraint", c))])
                break
            except _Failed:
                if not constraints:
                    raise
        versions = {canonical(n): _public(v) for n, v in head.items()}
        missing = []
        for line in pinned.splitlines():
            line = line.split("#", 1)[0].strip()
            name = _name(line)
            if not line or not name or name == HARNESS:
                continue
            pin = line.partition("==")[2].split(";", 1)[0].strip()
            if versions.get(name) != _public(pin) or "@" in line:  # 2.13.0 is the head's 2.13.0+cpu
                missing.append(line)
        if missing:
            self._run([self.uv, "pip", "install", "--python", python, "--no-deps", *self.options(), *missing])

    def install_project(self, python: str, source: Path, target: Path) -> None:
        """Build the project at `source` (non-editable, with the build tools the head's environment has) and
        install it alone into `target`."""
        if self.uv is None:
            command = [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
            self._run([*command, "--no-deps", "--no-build-isolation", "--target", str(target), str(source)])
            return
        command = [self.uv, "pip", "install", "--python", python, "--no-deps", "--no-build-isolation"]
        self._run([*command, *self.options(), "--target", str(target), str(source)])

    def _run(self, command: list[str]) -> str:
        env = {**os.environ, "PIP_REQUIRE_VIRTUALENV": "0"}
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise _Failed(f"{self.name} ran past {INSTALL_TIMEOUT_S:.0f} s") from exc
        if done.returncode != 0:
            raise _Failed(_last_words(done.stderr or done.stdout))
        return done.stdout


class _Failed(Exception):
    """An installer command failed; its last words."""


def cache_root() -> Path:
    """Where overlays are kept between checks: PERFGATE_ENVIRONMENT_CACHE, else the user's cache folder (the
    Action caches it)."""
    given = os.environ.get("PERFGATE_ENVIRONMENT_CACHE")
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perfgate" / "environments"


def overlay(requirements: Sequence[str], head: Mapping[str, str], installer: Installer) -> tuple[Path, bool]:
    """An environment that sees the head's packages behind the base's `requirements` (its python, and whether
    it was built now). Built in a temporary folder, renamed into the cache when complete: a failure leaves
    nothing."""
    folders = site_folders()
    key = hashlib.sha256(
        json.dumps([sorted(requirements), folders, sys.version, sorted(head.items())]).encode()
    ).hexdigest()[:20]
    root = cache_root()
    home = root / key
    python = home / "bin" / "python"
    if (home / "ready").is_file() and python.exists():
        return python, False
    root.mkdir(parents=True, exist_ok=True)
    for left in root.glob("*.building-*"):  # what a check that was killed while building left
        if owner_alive(left) is False:
            shutil.rmtree(left, ignore_errors=True)
    building = Path(tempfile.mkdtemp(prefix=f"{key}.building-", dir=root))
    try:
        mark_owned(building)
        done = subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(building)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise _Failed(f"python -m venv: {_last_words(done.stderr)}")
        own = Path(_own_site(building / "bin" / "python"))
        lines = "".join(f"import site; site.addsitedir({folder!r})\n" for folder in folders)
        (own / "_perfgate_head_packages.pth").write_text(lines)  # the head's packages, behind the base's own
        with tempfile.TemporaryDirectory(prefix="perfgate-install-") as scratch:
            installer.install(str(building / "bin" / "python"), requirements, head, Path(scratch))
        (building / OWNER_FILE).unlink()
        (building / "ready").write_text(json.dumps(list(requirements)) + "\n")
        if home.exists():
            shutil.rmtree(home, ignore_errors=True)
        building.rename(home)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return python, True


@dataclass(frozen=True)
class BaseEnvironment:
    """Where the base's trials run: the interpreter (None: the head's), a folder first on its path holding the
    base's own built project (None: none built), and the record of both sides' packages."""

    python: str | None
    project: Path | None
    record: Environments

    def place(self, place: TrialPlace) -> TrialPlace:
        """The base side's `place` in this environment: its interpreter, and its built project first on its path
        (the compiled parts are there, not in its sources); `place` itself where the base runs in the head's."""
        if not (self.python or self.project):
            return place
        built = (str(self.project),) if self.project else ()
        return replace(place, python=self.python, pythonpath=built + place.pythonpath)


@contextlib.contextmanager
def base_environment(
    mode: str,
    base_root: Path,
    head_root: Path,
    scratch: Path,
    *,
    front_end: FrontEnd = CLI,
    notify: Any = None,
    changed: Sequence[str] | None = None,
) -> Iterator[BaseEnvironment]:
    """The base's environment for a paired check (`mode`: one of MODES), built before the first pair. A base
    whose declarations cannot be installed is a NothingToCompareError (exit 3) naming the requirement and the
    installer's last words; what was half built is removed. `changed`: the files head changes against the base
    (None: not known), to record whether anything but the declarations changed."""
    if mode not in MODES:
        raise UsageError(
            f"{front_end.option('environment')} {mode!r} is not one of {', '.join(MODES)}",
            hint=f"give {front_end.option('environment')} auto (the default), shared or per-side",
        )
    started = time.monotonic()
    head_packages = installed_packages()
    base_declared, head_declared = read_declarations(base_root), read_declarations(head_root)
    wanted = plan(base_declared, head_declared, {canonical(n): v for n, v in head_packages.items()}, mode)
    declarations = set(base_declared.files) | set(head_declared.files)
    code_changed = None if changed is None else any(name not in declarations for name in changed)
    if mode == "shared" or not (wanted.needed or mode == "per-side"):
        why = f"{front_end.option('environment')} shared" if mode == "shared" else wanted.why
        declared = wanted.install if mode == "shared" else ()
        packages = {"base": head_packages, "head": head_packages}
        record = Environments("shared", why, packages, 0.0, tuple(declared), code_changed)
        yield BaseEnvironment(None, None, record)
        return
    installer = Installer()
    if notify:
        notify(f"building the base's environment with {installer.name}: {wanted.why}")
    python: str | None = None
    project: Path | None = None
    option = front_end.option("environment")
    try:
        built = False
        if wanted.install or mode == "per-side":
            path, built = overlay(wanted.install, head_packages, installer)
            python = str(path)
        if wanted.project:
            project = scratch / "base-project"
            installer.install_project(python or sys.executable, base_root, project)
            built = True
    except _Failed as exc:
        what = ", ".join(wanted.install) or "the base's own project"
        if project is not None:
            shutil.rmtree(project, ignore_errors=True)
        raise NothingToCompareError(
            f"cannot build the base's environment: {installer.name} could not install {what}: {exc}",
            where=option,
            hint=f"fix the base's declarations, or measure anyway with {option} shared (the base then runs in the "
            "head's packages)",
        ) from exc
    env = dict(os.environ)
    if project is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(project), env.get("PYTHONPATH", "")) if p)
    base_packages = installed_packages(python or sys.executable, env)
    seconds = time.monotonic() - started if built else 0.0
    packages = {"base": base_packages, "head": head_packages}
    record = Environments("per-side", wanted.why, packages, seconds, code_changed=code_changed)
    try:
        yield BaseEnvironment(python, project, record)
    finally:
        if project is not None:
            shutil.rmtree(project, ignore_errors=True)


def _own_site(python: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise _Failed(f"the new environment's python does not start: {_last_words(done.stderr)}")
    path = done.stdout.strip()
    os.makedirs(path, exist_ok=True)
    return path


def _find_uv() -> str | None:
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _pip_settings() -> dict[str, list[str]]:
    """pip's settings that choose where packages come from, from its configuration files and PIP_* variables
    (`pip config list`), by key: index-url, extra-index-url, find-links, no-index."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    settings: dict[str, list[str]] = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        key, _, value = line.partition("=")
        key = key.rpartition(".")[2]
        value = value.strip().strip("'\"")
        if key in ("index-url", "extra-index-url", "find-links", "no-index"):
            settings.setdefault(key, []).extend(value.split())
    return settings


def _uv_flags(settings: Mapping[str, list[str]]) -> list[str]:
    flags: list[str] = []
    for url in settings.get("index-url", [])[-1:]:
        flags += ["--index-url", url]
    for url in dict.fromkeys(settings.get("extra-index-url", [])):
        flags += ["--extra-index-url", url]
    if settings.get("extra-index-url"):  # pip takes the best match over every index; uv, the first that has it
        flags += ["--index-strategy", "unsafe-best-match"]
    for place in dict.fromkeys(settings.get("find-links", [])):
        flags += ["--find-links", place]
    if any(v.lower() in ("1", "true", "yes", "on") for v in settings.get("no-index", [])):
        flags.append("--no-index")
    return flags


def _toml(content: bytes | None, name: str) -> dict[str, Any]:
    if not content:
        return {}
    try:
        return tomllib.loads(content.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{name} cannot be read: {exc}", hint=f"fix {name}, or give --environment shared") from exc


def _requirement_lines(text: str) -> Iterator[str]:
    """The requirements of a requirements file: no comments, options, includes or editable installs."""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            yield line


def _public(version: str) -> str:
    """A version without its local label (`2.13.0+cpu` -> `2.13.0`)."""
    return version.partition("+")[0].strip()


def _name(text: str) -> str | None:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
    return canonical(match.group(1)) if match else None


def _add(requirements: dict[str, str], text: str, keep: bool = False) -> bool:
    """Add one requirement by its name (`keep`: an earlier one stays); whether it was new."""
    name = _name(text)
    if name is None or (keep and name in requirements):
        return False
    requirements[name] = " ".join(text.split())
    return True


def _last_words(text: str) -> str:
    """The line of an installer's output that says why: uv's cause ("Because there is no version of ..."),
    else the last error line, else the last line."""
    lines = [line.strip(" \t│╰─▶×") for line in (text or "").splitlines()]
    lines = [line.removeprefix("cause: ").strip() for line in lines if line]
    causes = [line for line in lines if line.startswith("Because ")]
    errors = [line for line in lines if line.lower().startswith("error")]
    return (causes or errors or lines or ["(no output)"])[-1][:300]
