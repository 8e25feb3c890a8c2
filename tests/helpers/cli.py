"""The `perfgate` command, three ways: in a subprocess as a user runs it, through the installed console
script, and in this process (`perfgate.cli.main`): for errors raised before any trial starts, and for commands
whose trials (real processes either way) are all that the test needs measured."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


# Installed beside perfgate's dev tools, used by no pytest session that a test starts, and about a second of
# each such session's start (hypothesis's plugin imports all of hypothesis): left out of those sessions through
# PYTEST_ADDOPTS, which the paired pytest-benchmark sessions that `--perfgate-against` starts inherit too.
UNUSED_PYTEST_PLUGINS = "-p no:hypothesispytest -p no:anyio"


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> CliResult:
    """Run `python -m perfgate ARGS` in a real subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    process = subprocess.run(
        [sys.executable, "-m", "perfgate", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(process.returncode, process.stdout, process.stderr)


def console_script() -> Path:
    """The `perfgate` executable that installing the package put beside this interpreter."""
    return Path(sysconfig.get_path("scripts")) / "perfgate"


def run_console_script(*args: str, cwd: Path, timeout: float = 120) -> CliResult:
    """Run the installed `perfgate` console script (the [project.scripts] entry point) with ARGS."""
    process = subprocess.run([str(console_script()), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return CliResult(process.returncode, process.stdout, process.stderr)


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    """`perfgate ARGS` in this process, through the CLI's own entry point: for errors, whether found before any
    trial starts or by a trial (a real process either way), and for commands that start no trial.

    `main` returns the exit code and prints its one-line errors itself; the test chooses the working folder
    (monkeypatch.chdir)."""
    from perfgate.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return CliResult(code, out.out, out.err)


def run_in_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> CliResult:
    """`perfgate ARGS` as `run_cli` runs it, but through `perfgate.cli.main` in this process: in `cwd`, with
    `env` added to the environment (the trial processes it starts inherit both), its output captured.

    The trials are real processes either way; this saves only the process that would import torch and
    perfgate to start them. What a fresh process would not carry over is undone afterwards: the working
    folder, the environment, `sys.path`, and the modules imported from outside the installed packages
    (workload files and what they import), so that a later call imports them afresh under its own
    environment (tests/workloads/builtin_plants.py reads PERFGATE_TEST_STEPS when imported)."""
    import pytest

    import perfgate
    from perfgate.cli import main

    where_installed = [sys.prefix, sys.base_prefix, site.getusersitepackages(), *sysconfig.get_paths().values()]
    installed = tuple(str(Path(p).resolve()) for p in [*where_installed, Path(perfgate.__file__).parent])
    modules, path = set(sys.modules), list(sys.path)
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        if env and "TMPDIR" in env:
            patch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again, as a fresh process would
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(list(args))
        finally:
            sys.path[:] = path
            for name in set(sys.modules) - modules:
                file = getattr(sys.modules[name], "__file__", None)
                if file is not None and not str(Path(file).resolve()).startswith(installed):
                    del sys.modules[name]
    return CliResult(code, out.getvalue(), err.getvalue())


# A shell without job control (a script, `cmd &` in CI) starts a background command with SIGINT and SIGQUIT
# ignored, and an ignored signal stays ignored across fork and exec; Python then installs no KeyboardInterrupt
# handler. A child that a test sends Ctrl-C to must start with the default handling, as a terminal's job has it.
SIGNALS_TO_RESTORE = (signal.SIGINT, signal.SIGQUIT)


def default_signal_handling() -> None:
    """preexec_fn for a child that a test will send signals to: SIGINT and SIGQUIT back to SIG_DFL."""
    for signum in SIGNALS_TO_RESTORE:
        signal.signal(signum, signal.SIG_DFL)


def start_perfgate(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `python -m perfgate ARGS` with its output piped and Ctrl-C handled as in a terminal, whatever
    this process ignores: for tests that signal it."""
    return subprocess.Popen(
        [sys.executable, "-m", "perfgate", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signal_handling,
    )
