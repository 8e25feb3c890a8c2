"""`perfgate init`: the three files that put a project under the gate, planned first and written all at once.

- `[tool.perfgate]` in pyproject.toml (a new file, or a table appended to the user's file, which otherwise
  stays byte for byte what it was), naming the workload and, commented out, the most useful settings;
- the workload file (`perf/workloads.py`): the user's model, data and loss go in marked places; until then a
  stand-in (a small MLP on generated data, fixed seed, nothing downloaded) makes it run at once;
- `.github/workflows/perfgate.yml`: each pull request checked in pairs against its base commit.

It asks nothing it can detect: the project's root (the git repository's top level, else the current folder),
the branch pull requests go into, the Python version, how the project installs, the workload's name.
It overwrites nothing: when any file it would create exists, or the project already configures perfgate,
it writes nothing at all; and a write that fails half-way removes what it had written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import perfgate
from perfgate._files import write_atomic
from perfgate.errors import UsageError
from perfgate.gitrepo import Repository, find_repository

DEFAULT_WORKLOAD_FILE = Path("perf/workloads.py")
WORKLOAD_FUNCTION = "workload"
WORKFLOW_FILE = Path(".github/workflows/perfgate.yml")
DEFAULT_BRANCH = "main"

# The action the workflow uses, pinned by commit. `perfgate init` pins the commit perfgate was installed from
# when pip recorded one (`pip install git+https://github.com/...@SHA`); otherwise the latest release's: its
# commit, tagged v<version> (CHANGELOG.md, "Releases"), which the README's recipe pins too.
ACTION_REPOSITORY = "perfgate/perfgate"
ACTION_COMMIT = "87277a3b32ab5ea3a1bd0addd318643de34d9456"
ACTION_VERSION = "0.2.0"  # the release ACTION_COMMIT is
# Third-party actions, pinned as in this repository's own workflows (.github/workflows/perfgate.yml).
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2"
SETUP_PYTHON = "actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065 # v5.6.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class PlannedFile:
    """One file `perfgate init` writes: `text` is the whole new file, or what it appends to `path`."""

    path: Path  # absolute
    text: str
    append: bool = False


@dataclass(frozen=True)
class Plan:
    """What `perfgate init` found and what it will write."""

    root: Path
    in_git: bool
    branch: str
    files: tuple[PlannedFile, ...]  # the new files first, the pyproject.toml last

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


# --- Detection -------------------------------------------------------------------------------------------


def project_root(cwd: Path) -> tuple[Path, bool]:
    """The git repository's top level, else `cwd`; and whether it is a git repository."""
    repo = find_repository(cwd)
    return (repo.root, True) if repo else (cwd.resolve(), False)


def default_branch(root: Path) -> str:
    """The branch pull requests go into: origin's HEAD when set, else the current branch, else main."""
    repo = Repository(root)
    return repo.remote_default_branch("origin") or repo.branch() or DEFAULT_BRANCH


def action_pin(direct_url: dict[str, Any] | None) -> tuple[str, str]:
    """(owner/repository, commit) of the action: where pip installed perfgate from, when that was a GitHub
    repository at a recorded commit, else the release's pin."""
    vcs = (direct_url or {}).get("vcs_info") or {}
    url = str((direct_url or {}).get("url", ""))
    commit = str(vcs.get("commit_id", ""))
    match = re.fullmatch(r"(?:git\+)?(?:https://|ssh://git@)github\.com[/:]([\w.-]+/[\w.-]+?)(?:\.git)?/?", url)
    if vcs.get("vcs") == "git" and match and re.fullmatch(r"[0-9a-f]{40}", commit):
        return match.group(1), commit
    return ACTION_REPOSITORY, ACTION_COMMIT


def _installed_from() -> dict[str, Any] | None:
    """pip's record of where perfgate was installed from (PEP 610 direct_url.json), if any."""
    from importlib import metadata

    try:
        text = metadata.distribution("perfgate").read_text("direct_url.json")
        found = json.loads(text) if text else None
    except (metadata.PackageNotFoundError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _read_pyproject(path: Path) -> tuple[bytes, dict[str, Any]] | None:
    """The pyproject.toml's bytes and contents; None when there is none."""
    if not path.exists():
        return None
    try:
        raw = path.read_bytes()
        return raw, tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(
            f"cannot read pyproject.toml: {exc}",
            where=str(path),
            hint="fix it (perfgate init appends a [tool.perfgate] table to it), then run perfgate init again",
        ) from exc


def workload_name(root: Path, pyproject: dict[str, Any] | None) -> str:
    """The project's name ([project] name, else its folder's), spelt as a workload name may be."""
    project = (pyproject or {}).get("project")
    name = project.get("name") if isinstance(project, dict) else None
    text = name if isinstance(name, str) and name.strip() else root.name
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")
    return cleaned or "workload"


def install_commands(root: Path, pyproject: dict[str, Any] | None) -> list[str]:
    """How CI installs what the workload imports: the project itself, else its requirements file."""
    if "project" in (pyproject or {}) or any((root / name).is_file() for name in ("setup.py", "setup.cfg")):
        return ["python -m pip install -e ."]
    if (root / "requirements.txt").is_file():
        return ["python -m pip install -r requirements.txt"]
    return []


# --- The plan --------------------------------------------------------------------------------------------


def plan_init(cwd: Path, *, workload_file: Path | None = None, gpu: bool = False) -> Plan:
    """Detect the project and plan the files; a UsageError, before anything is written, when any exists. `gpu`:
    the workflow of a self-hosted GPU runner (`workflow_text`)."""
    root, in_git = project_root(cwd)
    # A --workload-file is relative to the current folder, as the shell completed it.
    workload_path = (
        Path(os.path.abspath(cwd.resolve() / workload_file)) if workload_file else root / DEFAULT_WORKLOAD_FILE
    )
    if workload_path.suffix != ".py" or workload_path.is_dir():
        raise UsageError(
            f"the workload file must be a .py file, got {workload_file}",
            where="--workload-file",
            hint="e.g. --workload-file perf/workloads.py",
        )
    try:
        workload_relative = workload_path.relative_to(root).as_posix()
    except ValueError:
        raise UsageError(
            f"{workload_path} is outside the project {root}",
            where="--workload-file",
            hint="give a path inside the project, e.g. perf/workloads.py",
        ) from None
    pyproject_path = root / "pyproject.toml"
    existing = _read_pyproject(pyproject_path)
    pyproject = existing[1] if existing else None

    problems = []
    tool = (pyproject or {}).get("tool")
    if isinstance(tool, dict) and "perfgate" in tool:
        problems.append("pyproject.toml already has a [tool.perfgate] table")
    if (root / "perfgate.yaml").exists():
        problems.append("perfgate.yaml already configures perfgate")
    configured = bool(problems)
    present = [p for p in (workload_path, root / WORKFLOW_FILE) if p.exists() or p.is_symlink()]
    if present:
        names = " and ".join(p.relative_to(root).as_posix() for p in present)
        problems.append(f"{names} already exist{'s' if len(present) == 1 else ''}")
    if problems:
        hints = ["perfgate init overwrites nothing, and wrote nothing"]
        if configured:
            hints.append("this project is set up for perfgate already: edit its settings instead")
        if present:
            them = "it" if len(present) == 1 else "them"
            other = ", or give --workload-file another path" if workload_path in present else ""
            hints.append(f"move {them} away{other}")
        raise UsageError(", ".join(problems), where=str(root), hint="; ".join(hints))

    reference = f"{workload_relative}:{WORKLOAD_FUNCTION}"
    branch = default_branch(root) if in_git else DEFAULT_BRANCH
    table = perfgate_table(reference)
    if existing is None:
        pyproject_file = PlannedFile(pyproject_path, table)
    else:
        raw = existing[0].decode("utf-8")
        addition = _separated(raw, table)
        try:  # the table must read back: e.g. not after a `tool = {...}` inline table
            tomllib.loads(raw + addition)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(
                f"appending [tool.perfgate] to pyproject.toml would not parse: {exc}",
                where=str(pyproject_path),
                hint=f"add the table by hand: workloads = [{json.dumps(reference)}]",
            ) from exc
        pyproject_file = PlannedFile(pyproject_path, addition, append=True)
    repository, commit = action_pin(_installed_from())
    release = commit == ACTION_COMMIT and repository == ACTION_REPOSITORY
    comment = f"v{ACTION_VERSION}" if release else f"perfgate {perfgate.__version__}, the commit pip installed"
    workflow = workflow_text(
        branch=branch,
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        install=install_commands(root, pyproject),
        action=f"{repository}@{commit} # {comment}",
        gpu=gpu,
    )
    name = workload_name(root, pyproject)
    return Plan(
        root=root,
        in_git=in_git,
        branch=branch,
        files=(
            PlannedFile(workload_path, workload_text(name, detect_framework(root, pyproject))),
            PlannedFile(root / WORKFLOW_FILE, workflow),
            pyproject_file,
        ),
    )


def _separated(existing: str, table: str) -> str:
    """What to append to `existing` so that `table` follows it after one blank line, in its line endings."""
    newline = "\r\n" if "\r\n" in existing else "\n"
    lead = ""
    if existing and not existing.endswith("\n"):
        lead = newline
    if existing.strip():
        lead += newline
    return lead + table.replace("\n", newline)


# --- Writing: all or nothing -----------------------------------------------------------------------------


def write_plan(plan: Plan) -> None:
    """Create the new files (never over an existing one), then append to or create the pyproject.toml; when
    a write fails or is interrupted, remove what this call had written (the pyproject.toml, last, is unchanged)."""
    written: list[Path] = []
    folders: list[Path] = []
    current = plan.root
    try:
        for planned in plan.files:
            current = planned.path
            folders.extend(_make_folders(planned.path.parent))
            if planned.append:
                _replace(planned.path.resolve(), planned.path.read_bytes() + planned.text.encode("utf-8"))
            else:
                _create(planned.path, planned.text.encode("utf-8"))
            written.append(planned.path)
    except BaseException as exc:
        for path in written:
            path.unlink(missing_ok=True)
        for folder in reversed(folders):
            with contextlib.suppress(OSError):  # not empty: something else wrote there meanwhile
                folder.rmdir()
        if not isinstance(exc, OSError):
            raise
        raise UsageError(
            f"cannot write {plan.relative(current) if current != plan.root else current}: {exc.strerror or exc}",
            where=str(plan.root),
            hint="nothing was written (perfgate init removed what it had); check the permissions and free space",
        ) from exc


def _make_folders(folder: Path) -> list[Path]:
    """mkdir -p; the folders it created, outermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


def _create(path: Path, data: bytes) -> None:
    """A new file, whole: linked into place, which fails when `path` appeared meanwhile."""
    write_atomic(path, data, exclusive=True)


def _replace(path: Path, data: bytes) -> None:
    """`path`'s new contents, renamed over it, with its permissions."""
    write_atomic(path, data)


# --- What it says ----------------------------------------------------------------------------------------


def format_dry_run(plan: Plan) -> str:
    """Every file `perfgate init` would write, whole (for the pyproject.toml: what it would append)."""
    lines = [f"perfgate init --dry-run: nothing written; in {plan.root} it would write:", ""]
    for planned in plan.files:
        what = "appended to the existing file" if planned.append else "new file"
        lines += [f"--- {plan.relative(planned.path)} ({what})", planned.text.rstrip("\r\n").replace("\r\n", "\n"), ""]
    return "\n".join(lines)


def format_written(plan: Plan, cwd: Path) -> str:
    """The files written and the next steps, in four lines."""
    names = [plan.relative(p.path) + (" ([tool.perfgate] appended)" if p.append else "") for p in plan.files]
    there = "" if cwd.resolve() == plan.root else f"cd {shlex.quote(str(plan.root))} && "
    workload = plan.relative(plan.files[0].path)
    paths = " ".join(shlex.quote(plan.relative(p.path)) for p in plan.files)
    commit = f'git add {paths} && git commit -m "Check pull requests with perfgate"'
    if not plan.in_git:
        commit = f"git init && {commit}, and push to GitHub"
    return (
        f"perfgate init: wrote {', '.join(names)} in {plan.root}\n"
        f"next: {there}perfgate run --configs fp32  (the lab on the stand-in workload; then put your own model, "
        f"data and loss where {workload} says)\n"
        f"then: {commit}; from then on each pull request into {plan.branch} is checked against its base branch\n"
        f"before that, by hand: {there}perfgate calibrate  (can this runner see 5%?), then, on a branch, "
        f"perfgate check --against {shlex.quote(plan.branch)} --configs fp32  "
        f"(your working tree against {plan.branch}, side by side)\n"
    )


# --- The templates ---------------------------------------------------------------------------------------


def perfgate_table(reference: str) -> str:
    return f"""\
[tool.perfgate]
# perfgate (written by `perfgate init`): `perfgate run` measures these workloads and
# `perfgate check` gates them. Each is FILE:FUNCTION, relative to this file's folder.
workloads = [{json.dumps(reference)}]
# threshold = "5%"         # a slowdown beyond this that the data support fails the check
# memory_threshold = "5%"  # as does peak memory beyond this much more
# alpha = 0.01             # the significance level of a check
# history = ".perfgate/history"  # where `perfgate check --record` keeps the recorded runs
#
# [tool.perfgate.thresholds]  # per workload, per config, or both; the most specific wins
# "my-model/bf16-compile" = {{ throughput = "10%" }}
"""


def workflow_text(*, branch: str, python: str, install: list[str], action: str, gpu: bool = False) -> str:
    """The pull-request workflow: on a GitHub-hosted CPU runner (fp32), or with `gpu` on a self-hosted GPU runner
    (torch's CUDA build, all three configs, pull requests from forks skipped: their code never runs there)."""
    if install:
        project = "".join(f"\n          {command}" for command in install)
    else:
        project = "\n          # and what your workload imports, e.g.: python -m pip install -e ."
    runner = _GPU_RUNNER if gpu else _CPU_RUNNER
    return f"""\
{runner.header}
name: perfgate

on:
  pull_request:
    branches: [{json.dumps(branch)}]

permissions:
  contents: read

concurrency:
  group: perfgate-${{{{ github.event.pull_request.number }}}}
  cancel-in-progress: true

jobs:
  gate:
    name: perfgate check
{runner.placement}
    timeout-minutes: {runner.timeout_minutes}
    permissions:
      contents: read
      pull-requests: write # the one report comment
    steps:
      - uses: {CHECKOUT}
        with:
          persist-credentials: false
          fetch-depth: 0 # the base commit too: perfgate measures it beside the pull request
      - uses: {SETUP_PYTHON}
        with:
          python-version: {json.dumps(python)}
      - name: {runner.install_name}
        run: |
          {runner.install_torch}{project}
      - name: perfgate
        uses: {action}
        with:
          against: merge-base # the commit the pull request branched from, measured side by side
          # The base runs in these packages, or in its own environment (cached) where the two commits
          # declare different ones or the project compiles an extension: a dependency bump is measured.
          environment: auto
{runner.inputs}"""


@dataclass(frozen=True)
class _Runner:
    """What the workflow `perfgate init` writes says of its runner: the header, where the job runs (and which pull
    requests it skips), its time limit, how torch is installed, and the inputs that depend on the device."""

    header: str
    placement: str
    timeout_minutes: int
    install_name: str
    install_torch: str
    inputs: str


_CPU_RUNNER = _Runner(
    header="""\
# perfgate: each pull request's training speed, measured against its base branch on the
# same runner. Written by `perfgate init`. perfgate checks out the base commit beside the
# pull request and runs the workloads of pyproject.toml's [tool.perfgate] on both, in pairs
# of trials side by side; a slowdown beyond the threshold (5%) that the data support fails
# the job. The report goes to the job summary and to one pull-request comment.""",
    placement="""\
    # A GitHub-hosted CPU runner. `perfgate init --gpu` writes the workflow of a self-hosted
    # GPU runner instead: torch's CUDA build, all three configs, pull requests from forks skipped.
    runs-on: ubuntu-latest""",
    timeout_minutes=60,
    install_name="Install torch (the CPU build) and the project",
    install_torch=f"python -m pip install torch --index-url {TORCH_CPU_INDEX}",
    inputs="""\
          configs: fp32 # on a CPU; the bf16 configs need a GPU or a CPU with bfloat16 instructions
          # A fork's token is read-only: its pull requests get the job summary, not a comment.
          comment: ${{ github.event.pull_request.head.repo.full_name == github.repository }}
""",
)
_GPU_RUNNER = _Runner(
    header="""\
# perfgate: each pull request's training speed on your GPU runner, measured against its base
# branch on the same card. Written by `perfgate init --gpu`. perfgate checks out the base commit
# beside the pull request and runs the workloads of pyproject.toml's [tool.perfgate] on both, in
# pairs of trials, in all three configs (fp32, bf16, bf16-compile); a slowdown beyond the
# threshold (5%) that the data support fails the job. The report goes to the job summary and to
# one pull-request comment. The compile cache is kept between runs by the action.""",
    placement="""\
    # Code from a fork must never run on a self-hosted runner: such pull requests are skipped.
    if: github.event.pull_request.head.repo.full_name == github.repository
    # Your GPU runner's labels (declare `gpu` in .github/actionlint.yaml for actionlint).
    runs-on: [self-hosted, gpu]""",
    timeout_minutes=90,
    install_name="Install torch (its CUDA build, from PyPI) and the project",
    install_torch="python -m pip install torch",
    inputs="",
)


# The training frameworks `perfgate init` knows by the distributions a project declares, and the template each gets.
FRAMEWORKS = {"lightning": "lightning", "pytorch-lightning": "lightning", "transformers": "trainer"}


def detect_framework(root: Path, pyproject: dict[str, Any] | None) -> str | None:
    """ "lightning" or "trainer" where the project declares Lightning or transformers (pyproject.toml's dependencies,
    optional dependencies and dependency groups, requirements*.txt); None otherwise. Lightning first: a Lightning
    project may train a transformers model in its module."""
    declared: list[str] = []
    project = (pyproject or {}).get("project")
    if isinstance(project, dict):
        declared += [d for d in project.get("dependencies") or [] if isinstance(d, str)]
        for group in (project.get("optional-dependencies") or {}).values():
            declared += [d for d in group or [] if isinstance(d, str)]
    for group in ((pyproject or {}).get("dependency-groups") or {}).values():
        declared += [d for d in group or [] if isinstance(d, str)]
    for path in sorted(root.glob("requirements*.txt")):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            declared += path.read_text(encoding="utf-8").splitlines()
    names = set()
    for requirement in declared:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement.split("#", 1)[0])
        if match:
            names.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    found = {FRAMEWORKS[name] for name in names if name in FRAMEWORKS}
    return "lightning" if "lightning" in found else "trainer" if "trainer" in found else None


def workload_text(name: str, framework: str | None = None) -> str:
    """The workload file: the stand-in Workload, or, for a project that trains with Lightning or a Hugging Face
    Trainer, a stand-in module or Trainer handed to perfgate's adapter."""
    template = {"lightning": LIGHTNING_TEMPLATE, "trainer": TRAINER_TEMPLATE}.get(framework or "", WORKLOAD_TEMPLATE)
    return template.replace("@NAME@", json.dumps(name))


WORKLOAD_TEMPLATE = '''\
"""The workload perfgate measures: your model's training step, repeated.

`perfgate init` wrote this file. As it stands it trains a small stand-in model on generated
data, so that `perfgate run --configs fp32` works at once (a trial takes seconds on a CPU).
Replace the parts marked YOUR MODEL, YOUR DATA and YOUR LOSS with your own. perfgate
measures speed, not accuracy: a few hundred samples are enough.

How perfgate runs it (README: "The workload contract"):
- Each trial is a fresh process that imports this file, calls `workload()`, seeds torch
  with `seed` and builds the model and the dataset from their factories.
- It runs `warmup_steps` untimed steps, then times `steps` steps, each `loss(model, batch)`,
  `loss.backward()`, `optimizer.step()` and `optimizer.zero_grad()`: your loss function does
  the forward pass and the loss, nothing else.
- The data slice is (warmup_steps + steps) x batch_size samples, picked by `seed`: the
  same samples in every trial, on both sides of a paired check.
- `perfgate check --against main` measures the base commit from a git worktree, which holds
  only the files git tracks: generate the data, as here, or read files the repository tracks.
"""

from __future__ import annotations

import perfgate
import torch
from torch import nn
from torch.nn import functional as F

# YOUR MODEL, YOUR DATA, YOUR LOSS: import them here, from your project installed in
# development mode (`pip install -e .`) or from packages at the repository's root, e.g.
#
#     from mypackage.data import MyDataset
#     from mypackage.model import MyModel
#     from mypackage.train import compute_loss


# --- The stand-ins, so that this file runs as it is: replace them, then delete them. ---


class SyntheticData(torch.utils.data.Dataset):
    """Generated regression samples; sample i is the same in every trial (seeded by i)."""

    def __init__(self, samples: int = 1024, features: int = 64) -> None:
        self.samples = samples
        self.features = features

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(self.features, generator=torch.Generator().manual_seed(index))
        return x, x.sin().sum(dim=0, keepdim=True)


def stand_in_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
    )


def compute_loss(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    # YOUR LOSS: `batch` is what the DataLoader yields, already on the device.
    inputs, targets = batch
    # .float(): the bf16 configs run the forward pass under bfloat16 autocast
    return F.mse_loss(model(inputs).float(), targets)


def workload() -> perfgate.Workload:
    return perfgate.Workload(
        name=@NAME@,  # names this workload in reports and baselines
        # YOUR MODEL: a factory taking no arguments, e.g. `model=lambda: MyModel(layers=12)`
        model=stand_in_model,
        # YOUR DATA: a factory of a map-style Dataset, e.g. `dataset=lambda: MyDataset("data/")`
        dataset=SyntheticData,
        loss=compute_loss,  # YOUR LOSS
        batch_size=32,
        # Your optimizer, as you train with it (the default: AdamW, lr=1e-4)
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3),
        # DataLoader arguments: num_workers, pin_memory, collate_fn, ...
        loader={"num_workers": 0},
        steps=20,  # timed steps per trial
        warmup_steps=3,  # untimed steps first; torch.compile compiles here
        seed=0,  # seeds the model and picks the data slice
    )
'''


TRAINER_TEMPLATE = '''\
"""The workload perfgate measures: your Hugging Face Trainer's training step, repeated.

`perfgate init` wrote this file because the project declares transformers. As it stands it builds
a Trainer around a small stand-in (a 2-layer GPT-2 with random weights on generated tokens:
nothing is downloaded), so that `perfgate run --configs fp32` works at once. Build your own
Trainer in `build_trainer()` as your training script does: YOUR MODEL, YOUR DATA and YOUR
TRAINING ARGUMENTS. perfgate measures speed, not accuracy: a few hundred samples are enough.

`perfgate.from_trainer` reads what the Trainer knows (README: "The workload contract"): the model
(rebuilt after seeding when you pass `model_init`), the train dataset and collator, the batch
size, gradient accumulation, max_grad_norm, the optimizer and scheduler, and times one optimizer
step of the Trainer's own loop (its `training_step` and `compute_loss`). perfgate's configs set the
precision (fp32, bf16 autocast, bf16 + torch.compile; fp16 with --configs fp16): the Trainer's own
bf16/fp16 flags are not used. `perfgate check --against main` runs the base commit from a git
worktree, which holds only the files git tracks: generate the data, as here, or read tracked files.
"""

from __future__ import annotations

import tempfile

import perfgate
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    """Generated token sequences; sample i is the same in every trial (seeded by i)."""

    def __init__(self, samples: int = 1024, length: int = 64, vocab: int = 1000) -> None:
        self.samples, self.length, self.vocab = samples, length, vocab

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(self.vocab, (self.length,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids.clone()}


def stand_in_model() -> GPT2LMHeadModel:
    return GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=2))


def build_trainer() -> Trainer:
    args = TrainingArguments(  # YOUR TRAINING ARGUMENTS, as your training script sets them
        output_dir=tempfile.mkdtemp(prefix="perfgate-trainer-"),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        max_grad_norm=1.0,
        learning_rate=1e-4,
        report_to=[],
        save_strategy="no",
        dataloader_pin_memory=False,
    )
    # YOUR MODEL (model_init: built again after perfgate seeds, the same weights in every trial)
    # and YOUR DATA (a map-style dataset; your data_collator too, if you use one)
    return Trainer(model_init=stand_in_model, args=args, train_dataset=RandomTokens())


def workload() -> perfgate.Workload:
    return perfgate.from_trainer(
        build_trainer(),
        name=@NAME@,  # names this workload in reports and baselines
        steps=20,  # timed optimizer steps per trial
        warmup_steps=3,  # untimed steps first; torch.compile compiles here
    )
'''


LIGHTNING_TEMPLATE = '''\
"""The workload perfgate measures: your LightningModule's training step, repeated.

`perfgate init` wrote this file because the project declares Lightning. As it stands it trains a
small stand-in module on generated data, so that `perfgate run --configs fp32` works at once.
Replace `StandIn` with your own LightningModule (and pass your LightningDataModule, if you use
one): YOUR MODULE and YOUR DATA. perfgate measures speed, not accuracy: a few hundred samples
are enough.

`perfgate.from_lightning` reads what the module knows (README: "The workload contract"): its
training DataLoader (dataset, batch size, workers, collate_fn), `configure_optimizers` (the
optimizer and scheduler), and times one optimizer step of Lightning's automatic optimization
(`training_step`, its hooks, clipping and accumulation as given here). Pass the module's class (or
a function that builds it): perfgate builds it after seeding, the same weights in every trial.
perfgate's configs set the precision (fp32, bf16 autocast, bf16 + torch.compile; fp16 with
--configs fp16). `perfgate check --against main` runs the base commit from a git worktree, which
holds only the files git tracks: generate the data, as here, or read tracked files.
"""

from __future__ import annotations

import lightning as L
import perfgate
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class StandIn(L.LightningModule):
    """YOUR MODULE: a small MLP learning a sum of generated features."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = F.mse_loss(self.net(inputs).float(), targets)  # .float(): the bf16 configs run under autocast
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader:  # YOUR DATA (or a LightningDataModule passed below)
        inputs = torch.randn(1024, 64, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(inputs, inputs.sin().sum(dim=1, keepdim=True)), batch_size=32)


def workload() -> perfgate.Workload:
    return perfgate.from_lightning(
        StandIn,  # YOUR MODULE's class; then your datamodule, e.g. from_lightning(MyModule, MyDataModule(), ...)
        name=@NAME@,  # names this workload in reports and baselines
        accumulate_grad_batches=1,  # as your lightning.Trainer sets them
        gradient_clip_val=None,
        steps=20,  # timed optimizer steps per trial
        warmup_steps=3,  # untimed steps first; torch.compile compiles here
    )
'''
