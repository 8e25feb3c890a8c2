"""git, run for real in a repository under a test's temporary folder."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(cwd: Path, *args: str) -> str:
    """Run git in a real repository under the test's temporary folder; its output, stripped."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()
