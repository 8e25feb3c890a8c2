"""`perfgate demo`: the gate at work on any machine, with nothing but an install.

It makes a throwaway git repository holding a small image classifier (the `main` branch), then two pull
requests as a team might open them: one adds a hidden layer (slower, as a real change to the model is),
one changes nothing but a comment. Each is checked against `main` with `perfgate check --against main`,
in a process of its own, exactly as the pull-request workflow runs it, so what it prints is what CI
prints. Then it sums up both verdicts, where the pull-request comments were written and what to do next.

Nothing is downloaded and no baseline is needed: the base side of each pair is measured on this machine.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import perfgate
from perfgate.app.options import DEMO_BUDGET_S
from perfgate.errors import EXIT_INTERRUPTED, PerfgateError, UsageError
from perfgate.gitrepo import GitFailed, GitNotRun, Throwaway

# Both checks together stay within 3 minutes of trials on a 2-core CPU: the first check may take about half
# of DEFAULT_BUDGET_S, the second what the first left (a check's budget stops it adding pairs to a verdict
# that is still open; docs/performance.md, "perfgate demo").
DEFAULT_BUDGET_S = DEMO_BUDGET_S  # 160 s: with each check's own start and end, the two stay under 180 s
FIRST_SHARE = 0.47
# A check whose slow pairs fall on head's side measures on past its budget, by pairs (an intermittent slowdown's
# signature; a steady one on a noisy machine can show it too): the demo's are held to this many, so the tour
# stays near its budget on a slow machine.
MAX_PAIRS = 8
CONFIGS = "fp32"  # the bf16 configs need a GPU or a CPU with bfloat16 instructions to be quick
WIDTH = 512
BASE_DEPTH = 3
DEEPER = 4  # one more hidden layer: measured on a 2-core CPU, about 20% less samples/s (docs/performance.md)
GIT_IDENTITY = ("perfgate demo", "demo@perfgate.invalid")  # the throwaway repository commits as

PYPROJECT = """\
[project]
name = "demo-classifier"
version = "0.1.0"

[tool.perfgate]
workloads = ["perf/workloads.py:classifier"]
"""

WORKLOAD = '''\
"""The training step perfgate measures: a small image classifier on generated images."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import perfgate

WIDTH = @WIDTH@  # the hidden layers' width
DEPTH = @DEPTH@  # how many hidden layers


class Images(torch.utils.data.Dataset):
    """Generated 3x16x16 images with labels, made once from a fixed seed."""

    def __init__(self, length: int = 16384) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.rand(length, 3, 16, 16, generator=generator)
        self.labels = torch.randint(0, 10, (length,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


def model() -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(3 * 16 * 16, WIDTH), nn.ReLU()]
    for _ in range(DEPTH - 1):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def cross_entropy(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels)


def classifier() -> perfgate.Workload:
    return perfgate.Workload(
        name="classifier",
        model=model,
        dataset=Images,
        loss=cross_entropy,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.01),
        batch_size=64,
        steps=200,
        warmup_steps=3,
    )
'''


@dataclass(frozen=True)
class PullRequest:
    """One demo pull request: its branch, its commit message and what it does to the workload file."""

    branch: str
    title: str
    expected: str  # what a working gate says of it: "fail" or "pass"
    old: str
    new: str

    @property
    def expected_verdict(self) -> str:
        return "a regression" if self.expected == "fail" else "no change"


PULL_REQUESTS = (
    PullRequest(
        "deeper-model",
        f"Add a hidden layer ({BASE_DEPTH} -> {DEEPER})",
        "fail",
        f"DEPTH = {BASE_DEPTH}  # how many hidden layers",
        f"DEPTH = {DEEPER}  # how many hidden layers",
    ),
    PullRequest(
        "comment-only",
        "Say where the images come from",
        "pass",
        '    """Generated 3x16x16 images with labels, made once from a fixed seed."""',
        '    """Generated 3x16x16 images with labels, made once from a fixed seed.\n\n'
        '    Real training reads files; generated data keeps the demo free of downloads."""',
    ),
)


@dataclass(frozen=True)
class Outcome:
    """What one pull request's check decided."""

    pull_request: PullRequest
    exit_code: int
    status: str  # the config's verdict, e.g. "regression", "no change", "inconclusive"
    ratio: float | None  # head/base samples/s
    suspect: str | None  # the diagnosis's first suspect, when it named one
    markdown: Path
    seconds: float

    @property
    def as_expected(self) -> bool:
        return (self.exit_code == 1) if self.pull_request.expected == "fail" else (self.status == "no change")


@contextlib.contextmanager
def _git_errors(repo: Path) -> Iterator[None]:
    """git that is missing or fails, as a one-line error."""
    try:
        yield
    except GitNotRun as exc:
        if not isinstance(exc.error, FileNotFoundError):
            raise exc.error from None
        raise UsageError(
            "perfgate demo needs git, which is not installed", hint="install git and run it again"
        ) from None
    except GitFailed as exc:
        done = exc.done
        raise UsageError(
            f"git {' '.join(done.args)} failed in {repo}: {done.error_text}", hint="run it again"
        ) from None


def make_repository(repo: Path) -> None:
    """The demo's repository: `main` with the classifier, and one branch per pull request."""
    (repo / "perf").mkdir(parents=True)
    git = Throwaway(repo, *GIT_IDENTITY)
    with _git_errors(repo):
        git.create("main")
        (repo / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
        workload = repo / "perf" / "workloads.py"
        workload.write_text(
            WORKLOAD.replace("@WIDTH@", str(WIDTH)).replace("@DEPTH@", str(BASE_DEPTH)), encoding="utf-8"
        )
        (repo / ".gitignore").write_text("__pycache__/\n", encoding="utf-8")
        git.commit_all("A small image classifier, measured by perfgate")
        base = workload.read_text(encoding="utf-8")
        for pull_request in PULL_REQUESTS:
            git.checkout(pull_request.branch, new_from="main")
            assert pull_request.old in base, pull_request.old  # the templates and the edits agree
            workload.write_text(base.replace(pull_request.old, pull_request.new), encoding="utf-8")
            git.commit_all(pull_request.title, tracked_only=True)
        git.checkout("main")


def _checkout(repo: Path, branch: str) -> None:
    with _git_errors(repo):
        Throwaway(repo, *GIT_IDENTITY).checkout(branch)


def _environment() -> dict[str, str]:
    """The checks' environment: this perfgate importable (also when it runs from a source folder)."""
    env = dict(os.environ)
    source = Path(perfgate.__file__).resolve().parent.parent
    if source.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    return env


def check_command(results: Path, markdown: Path, budget_s: float) -> list[str]:
    """The check a pull-request workflow runs, as `python -m perfgate` of this interpreter."""
    return [
        sys.executable,
        "-m",
        "perfgate",
        "check",
        "--against",
        "main",
        "--configs",
        CONFIGS,
        "--time-budget",
        f"{budget_s:g}",
        "--max-trials",
        str(MAX_PAIRS),
        "--json",
        str(results),
        "--markdown",
        str(markdown),
    ]


def run_check(repo: Path, pull_request: PullRequest, folder: Path, budget_s: float, out: TextIO) -> Outcome:
    """Check out the pull request's branch and check it against main in a process of its own."""
    _checkout(repo, pull_request.branch)
    results = folder / f"{pull_request.branch}.json"
    markdown = folder / f"{pull_request.branch}.md"
    command = check_command(results, markdown, budget_s)
    shown = (
        f"perfgate check --against main --configs {CONFIGS} --time-budget {budget_s:g} --max-trials {MAX_PAIRS} "
        f"--markdown {markdown.name}"
    )
    out.write(f"\n=== pull request {pull_request.branch!r}: {pull_request.title}\n$ {shown}\n")
    out.flush()
    started = time.monotonic()
    done = subprocess.run(command, cwd=repo, env=_environment(), check=False, stdout=out, stderr=sys.stderr)
    seconds = time.monotonic() - started
    status, ratio, suspect = _read_verdict(results)
    return Outcome(pull_request, done.returncode, status, ratio, suspect, markdown, seconds)


def _read_verdict(results: Path) -> tuple[str, float | None, str | None]:
    """(status, ratio, first suspect) of the one config the check judged, from its results file."""
    from perfgate.app.judging import judge_file
    from perfgate.project import ProjectConfig
    from perfgate.records.results import load_results

    if not results.is_file():
        return "not measured", None, None
    judgement = judge_file(load_results(results), ProjectConfig())
    verdicts = list(judgement.result.verdicts)
    if not verdicts:
        return "not measured", None, None
    verdict = verdicts[0]
    ratio = verdict.throughput.ratio if verdict.throughput is not None else None
    suspects = [f.suspect for d in judgement.diagnoses for f in d.findings if not f.standing]
    return verdict.status.value, ratio, (suspects[0] if suspects else None)


def _describe(outcome: Outcome) -> str:
    ratio = f", {outcome.ratio:.2f}x samples/s" if outcome.ratio is not None else ""
    suspect = f", suspect: {outcome.suspect}" if outcome.suspect else ""
    answer = {0: "passes (exit 0)", 1: "fails the build (exit 1)"}.get(outcome.exit_code, f"exit {outcome.exit_code}")
    return f"{outcome.status.upper() if outcome.status == 'regression' else outcome.status}{ratio}{suspect}: {answer}"


def summary(outcomes: Sequence[Outcome], repo: Path) -> str:
    """What the demo showed, where its reports are, and what to do next."""
    lines = ["", "=== perfgate demo: what the two checks decided"]
    for outcome in outcomes:
        lines.append(f"  {outcome.pull_request.title!r}: {_describe(outcome)} ({outcome.seconds:.0f} s)")
    lines.append("  pull-request comments (Markdown, as the Action posts them):")
    lines.extend(f"    {outcome.markdown}" for outcome in outcomes if outcome.markdown.is_file())
    lines.append(f"  the demo's repository: {repo} (yours to look at; delete it when done)")
    undecided = [o for o in outcomes if not o.as_expected and o.status == "inconclusive"]
    wrong = [o for o in outcomes if not o.as_expected and o.status != "inconclusive"]
    if undecided:
        lines.append("")
        for outcome in undecided:
            lines.append(
                f"  This machine was too noisy to decide {outcome.pull_request.title!r} within the time budget: "
                f"it expected {outcome.pull_request.expected_verdict}, the check said {outcome.status}."
            )
        lines.append(
            "  perfgate said so instead of guessing. A quieter machine, or a longer --time-budget, decides; "
            "perfgate calibrate measures what a runner can see."
        )
    if wrong:
        lines.append("")
        for outcome in wrong:
            lines.append(
                f"  The check of {outcome.pull_request.title!r} said {outcome.status} where the demo expected "
                f"{outcome.pull_request.expected_verdict}: this machine's trials misled it (perfgate calibrate "
                "measures what it can see)."
            )
    lines += [
        "",
        "Next, on your own project:",
        "  perfgate init                                  # [tool.perfgate], perf/workloads.py, a PR workflow",
        "  perfgate run --configs fp32                    # the lab on the workload: does it run, what does it show?",
        "  perfgate calibrate                             # can this runner see 5%? its A/A noise, a planted slowdown",
        "  perfgate check --against main --configs fp32   # your working tree against main, measured side by side",
        '  (on a GPU, drop --configs fp32 to run all three configs; README.md, "Your own model")',
        "",
    ]
    return "\n".join(lines)


def run_demo(folder: Path | None = None, *, budget_s: float = DEFAULT_BUDGET_S, out: TextIO | None = None) -> int:
    """Make the repository, check both pull requests, print the summary; exit 0 once both checks ran."""
    out = out or sys.stdout
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="perfgate-demo-"))
    elif folder.exists() and any(folder.iterdir()):
        raise UsageError(f"{folder} is not empty", where="--dir", hint="give a new or empty folder")
    folder = folder.resolve()
    repo = folder / "repo"
    out.write(
        textwrap.dedent(f"""\
        perfgate demo: a small image classifier in a new git repository ({repo}),
        and two pull requests against its main branch: one adds a hidden layer, one changes a comment.
        Each is checked as CI would check it: its commit and main measured in pairs of trials, side by side,
        each trial a fresh process, until the data decide (about {budget_s:g} s for both).
        """)
    )
    make_repository(repo)
    outcomes: list[Outcome] = []
    for pull_request in PULL_REQUESTS:
        # The regression is usually decided in a few pairs; the unchanged commit needs more to rule one out.
        share_s = budget_s * FIRST_SHARE if not outcomes else max(budget_s - outcomes[0].seconds, budget_s / 3)
        outcome = run_check(repo, pull_request, folder, max(1, round(share_s)), out)
        if outcome.exit_code not in (0, 1):  # the check itself failed: its error is above, and its code stands
            error = PerfgateError(
                f"the check of {pull_request.branch!r} exited {outcome.exit_code}",
                where=str(repo),
                hint="see its error above",
            )
            # A check ended by a signal (a negative code) was interrupted, as far as the table of codes goes.
            error.exit_code = outcome.exit_code if outcome.exit_code > 0 else EXIT_INTERRUPTED
            raise error
        outcomes.append(outcome)
    _checkout(repo, "main")
    out.write(summary(outcomes, repo))
    out.flush()
    return 0
