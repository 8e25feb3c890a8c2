"""The `perfgate` command, three ways: in a subprocess as a user runs it, through the installed console
script, and in this process (`perfgate.cli.main`) for errors raised before any trial starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


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
    """`perfgate ARGS` in this process, through the CLI's own entry point: for commands that start no trial.

    `main` returns the exit code and prints its one-line errors itself; the test chooses the working folder
    (monkeypatch.chdir)."""
    from perfgate.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return CliResult(code, out.out, out.err)


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
