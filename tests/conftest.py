from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

WORKLOADS = Path(__file__).parent / "workloads"
SCHEMA = Path(__file__).parent.parent / "perfgate" / "schema" / "results-v2.schema.json"


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


def git(cwd: Path, *args: str) -> str:
    """Run git in a real repository under the test's temporary folder; its output, stripped."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def tiny_ref() -> str:
    return f"{WORKLOADS / 'tiny.py'}:tiny"


def validate_results(document: dict) -> None:
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(document)


GATED = f"{WORKLOADS / 'gated.py'}:gated"


@pytest.fixture(scope="session")
def gated_project(tmp_path_factory):
    """A project folder whose baselines/ holds the gated workload measured on this machine (read-only)."""
    folder = tmp_path_factory.mktemp("project")
    result = run_cli("update", GATED, "--configs", "fp32", "--trials", "3", "--threads", "1", "--quiet", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "baselines/gated.yaml: new baseline for gated on " in result.stdout
    return folder
