"""The environment fingerprint and git state, against real git repositories."""

from __future__ import annotations

import pytest

from perfgate.measure.environment import collect_environment, git_state
from perfgate.records.shapes import GitState
from tests.helpers.git import commit, git, new_repository

pytestmark = pytest.mark.e2e  # real git repositories: git runs in subprocesses


@pytest.fixture
def repo(tmp_path):
    """The repository at tmp_path, one commit on main; the commit's sha."""
    new_repository(tmp_path)
    return commit(tmp_path, {"train.py": "print('v1')\n"}, "first")


def test_clean_checkout_records_sha_and_branch(repo, tmp_path):
    state = git_state(tmp_path)
    assert state == GitState(sha=repo, branch="main", dirty=False, shallow=False)
    assert state.to_dict() == {"sha": repo, "branch": "main", "dirty": False, "shallow": False}


def test_edits_make_the_tree_dirty_and_subfolders_find_the_repository(repo, tmp_path):
    (tmp_path / "train.py").write_text("print('v2')\n")
    (tmp_path / "sub").mkdir()
    assert git_state(tmp_path / "sub").dirty is True


def test_detached_head_has_no_branch(repo, tmp_path):
    git(tmp_path, "checkout", "--quiet", repo)
    state = git_state(tmp_path)
    assert state.branch is None
    assert state.sha == repo


def test_repository_without_commits(tmp_path):
    new_repository(tmp_path)
    assert git_state(tmp_path).sha is None


def test_outside_a_repository_there_is_no_git_state(tmp_path):
    assert git_state(tmp_path) is None


def test_fingerprint_names_versions_device_and_threads(repo, tmp_path):
    import torch

    environment = collect_environment("cpu", 2, cwd=tmp_path)
    assert environment.torch == torch.__version__
    assert environment.device.type == "cpu"
    assert environment.cpu.available_cores >= 1
    assert environment.threads == 2
    assert environment.git.sha == repo
    assert list(environment.to_dict()) == [  # the keys the files keep, in their order
        "python",
        "platform",
        "torch",
        "cuda",
        "cudnn",
        "device",
        "cpu",
        "threads",
        "float32_matmul_precision",
        "git",
    ]
