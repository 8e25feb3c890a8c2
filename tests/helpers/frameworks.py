"""What the framework adapters' end-to-end tests share: a repository with one commit per version of the workload
file, and a scratch folder for temporary files (the base worktree, the frameworks' output folders)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.cli import run_in_process
from tests.helpers.git import commit, new_repository


def repository(path: Path, *versions: str) -> Path:
    """A git repository with one commit of perf/workloads.py per version."""
    new_repository(path)
    for n, source in enumerate(versions, 1):
        commit(path, {"perf/workloads.py": source}, f"version {n}")
    return path


def scratch(folder: Path) -> dict[str, str]:
    """Temporary files under the test's folder (TMPDIR for the perfgate process)."""
    folder.mkdir(exist_ok=True)
    return {"TMPDIR": str(folder)}


def run_the_lab(tmp_path: Path, source: str) -> dict[str, Any]:
    """`perfgate run` of the workload file `source` in fp32, bf16 and bf16-compile, one trial each: the results
    file's one workload, after checking that every config's trial ran. The trials are forked from one server
    (`--fork-trials`), which imports the framework once, not in each of the three (seconds each); the init
    templates' labs (tests/test_init.py) run the frameworks' trials in fresh processes."""
    repo = repository(tmp_path / "repo", source)
    out = tmp_path / "out.json"
    configs = ("--configs", "fp32,bf16,bf16-compile", "--trials", "1", "--fork-trials", "--json", str(out))
    result = run_in_process("run", "perf/workloads.py:workload", *configs, cwd=repo, env=scratch(tmp_path / "tmp"))
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["environment"]["trials"] == "forked"
    (workload,) = document["workloads"]
    assert set(workload["configs"]) == {"fp32", "bf16", "bf16-compile"}
    for config in workload["configs"].values():
        (trial,) = config["trials"]
        assert trial["status"] == "ok", trial["failure"]
        assert trial["samples_per_sec"] > 0
    return workload
