"""The GitHub Action's shell steps, run here as a runner would: real perfgate, temporary GITHUB_* files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfgate.report.markdown import MARKER
from tests.helpers.git import git
from tests.helpers.workloads import GATED

ACTION = yaml.safe_load((Path(__file__).parent.parent / "action.yml").read_text())
STEPS = ACTION["runs"]["steps"]
GATE = next(step for step in STEPS if step.get("id") == "gate")
MERGE_BASE = next(step for step in STEPS if step.get("id") == "merge-base")
FINISH = STEPS[-1]
EXPRESSION = re.compile(r"^\$\{\{ ([\w.-]+) \}\}$")
CHECK_ARGS = f"{GATED} --threads 1 --max-trials 3 --quiet"


def test_no_value_reaches_a_shell_through_an_expression_and_actions_are_pinned():
    for step in STEPS:
        assert "${{" not in step.get("run", ""), step.get("name")
        uses = step.get("uses")
        if uses:
            assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", uses), uses


def step_env(step: dict, base: dict[str, str], inputs: dict[str, str], context: dict[str, str]) -> dict[str, str]:
    """`base` plus the step's `env:`, its expressions resolved as the runner would: `inputs.NAME` from
    `inputs` (else the input's default), anything else (`github.…`, `steps.…`) from `context` (else empty)."""
    resolved = dict(base)
    for name, value in step["env"].items():
        expression = EXPRESSION.match(value).group(1)
        key = expression.removeprefix("inputs.")
        if key != expression:
            resolved[name] = inputs.get(key, ACTION["inputs"][key]["default"])
        else:
            resolved[name] = context.get(expression, "")
    return resolved


def run_action(cwd: Path, tmp_path: Path, inputs: dict[str, str], env: dict[str, str] | None = None):
    """The gate step, then the final step, with inputs resolved as the runner resolves `env:` expressions."""
    summary, output, event = tmp_path / "summary.md", tmp_path / "output.txt", tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    base = dict(os.environ, **(env or {}))
    base["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), base.get("PATH", "")])
    base.update(
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_OUTPUT=str(output),
        GITHUB_EVENT_PATH=str(event),
        RUNNER_TEMP=str(tmp_path / "runner"),
    )
    gate = subprocess.run(
        ["bash", "-c", GATE["run"]],
        cwd=cwd,
        env=step_env(GATE, base, inputs, {}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert gate.returncode == 0, gate.stderr  # the gate step always succeeds; the last step carries the verdict
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    finish = subprocess.run(
        ["bash", "-c", FINISH["run"]], env=dict(base, PERFGATE_EXIT_CODE=outputs["exit-code"]), timeout=60
    )
    return finish.returncode, summary.read_text(), outputs, gate.stdout


def commands(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("::")]


@pytest.mark.e2e
def test_a_pass_recorded_on_the_history_branch(gated_project, tmp_path):
    """A push to main with `record: true`: the run passes and lands on the repository's history branch."""
    remote, repo = tmp_path / "remote.git", tmp_path / "repo"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(tmp_path, "clone", "-q", str(remote), str(repo))
    shutil.copytree(gated_project / "baselines", repo / "baselines")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "baselines")
    inputs = {"args": CHECK_ARGS + " --alpha 0.001", "configs": "fp32", "trials": "2", "record": "true"}
    code, summary, outputs, stdout = run_action(repo, tmp_path, inputs)
    assert code == 0, summary
    assert summary.startswith(MARKER + "\n### perfgate: pass")
    assert outputs["verdict"] == "pass" and outputs["exit-code"] == "0"
    assert Path(outputs["results-json"]).is_file() and Path(outputs["report-markdown"]).read_text() == summary
    assert not [c for c in commands(stdout) if c.startswith("::error")]
    assert (Path(outputs["folder"]) / "chart.png").read_bytes()[:4] == b"\x89PNG"  # uploaded with the results
    assert "pushed to the history branch perfgate-history as " in stdout
    (record,) = git(remote, "ls-tree", "--name-only", "perfgate-history", "history/").splitlines()
    assert json.loads(git(remote, "show", f"perfgate-history:{record}"))["entries"][0]["workload"] == "gated"


@pytest.mark.e2e
def test_a_regression_with_its_diagnosis_and_profiler_trace(gated_project, tmp_path):
    inputs = {"args": CHECK_ARGS, "configs": "fp32", "trials": "2", "profile": "true"}
    code, summary, outputs, stdout = run_action(gated_project, tmp_path, inputs, {"PERFGATE_TEST_PLANT": "slow"})
    assert code == 1
    assert "### perfgate: fail" in summary and "| **regression** |" in summary
    assert outputs["verdict"] == "fail"
    assert any(c.startswith("::error title=perfgate%3A gated fp32 regression::samples/s -") for c in commands(stdout))
    trace = Path(outputs["folder"]) / "traces" / "gated-fp32.trace.json"  # uploaded with the artifact
    assert "traceEvents" in json.loads(trace.read_text())
    assert "#### Diagnosis: gated fp32" in summary and f"trace: {trace}" in summary


@pytest.mark.e2e
def test_a_perfgate_error_still_writes_the_summary(gated_project, tmp_path):
    code, summary, outputs, stdout = run_action(gated_project, tmp_path, {"args": CHECK_ARGS, "threshold": "5"})
    assert code == 2
    assert summary.startswith("### perfgate check: exit 2")
    assert "'5' is ambiguous: a fraction must be below 1" in summary
    assert outputs["verdict"] == "error" and outputs["results-json"] == ""
    (error,) = commands(stdout)
    assert error.startswith("::error title=perfgate check failed (exit 2)::error: argument --threshold: '5' is")


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("inputs", "literal"),
    [
        ({"args": 'lm "$(touch pwned1)" `touch pwned2`\n; touch pwned3'}, '"$(touch'),
        ({"threshold": '5%"; touch pwned4; echo "\n::error::injected'}, "touch pwned4"),
    ],
)
def test_hostile_input_values_are_passed_through_literally(gated_project, tmp_path, inputs, literal):
    code, summary, outputs, stdout = run_action(gated_project, tmp_path, inputs)
    assert code == 2 and outputs["verdict"] == "error"
    assert literal in summary  # perfgate got the text as it was written, and said what was wrong with it
    assert not list(gated_project.glob("pwned*")) and not list(tmp_path.glob("pwned*"))
    assert "::error::injected" not in stdout.splitlines()  # a newline in a value cannot start a command


@pytest.mark.e2e
def test_an_against_ref_reaches_perfgate_check_and_update_refuses_it(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    inputs = {"args": CHECK_ARGS, "configs": "fp32", "against": "--help"}
    code, summary, outputs, _ = run_action(repo, tmp_path, inputs)
    assert code == 2 and "error: '--help' is not a git ref (--against)" in summary  # the option's value, not a flag
    code, summary, outputs, _ = run_action(repo, tmp_path, {"mode": "update", "against": "main"})
    assert code == 2 and "error: the against input needs mode check;" in summary


def find_merge_base(clone: Path, tmp_path: Path, base_sha: str) -> tuple[int, str, str]:
    """The merge-base step in `clone` on a pull_request event whose base commit is `base_sha` (empty: an
    event without a pull request)."""
    output = tmp_path / "merge-base-output.txt"
    output.write_text("")
    env = step_env(
        MERGE_BASE,
        dict(os.environ, GITHUB_OUTPUT=str(output)),
        {"against": "merge-base"},
        {"github.event.pull_request.base.sha": base_sha},
    )
    step = subprocess.run(
        ["bash", "-c", MERGE_BASE["run"]], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    return step.returncode, step.stdout, output.read_text()


@pytest.fixture
def pull_request(tmp_path) -> tuple[Path, str, str]:
    """An origin whose main moved on 60 commits after `feature` branched off, and a clone of `feature`
    as actions/checkout makes it (one commit deep); returns (clone, main's tip, the fork point)."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    git(origin, "config", "user.email", "ci@example.com")
    git(origin, "config", "user.name", "CI")
    git(origin, "commit", "-q", "--allow-empty", "-m", "start")
    fork_point = git(origin, "rev-parse", "HEAD")
    git(origin, "checkout", "-q", "-b", "feature")
    git(origin, "commit", "-q", "--allow-empty", "-m", "the pull request")
    git(origin, "checkout", "-q", "main")
    for n in range(60):  # more than the first fetch's 50: the step has to deepen again
        git(origin, "commit", "-q", "--allow-empty", "-m", f"main {n}")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "feature", origin.as_uri(), str(clone))
    return clone, git(origin, "rev-parse", "main"), fork_point


@pytest.mark.e2e
def test_merge_base_deepens_a_shallow_clone_until_the_branches_meet(pull_request, tmp_path):
    clone, base_sha, fork_point = pull_request
    code, stdout, output = find_merge_base(clone, tmp_path, base_sha)
    assert code == 0, stdout
    assert output == f"commit={fork_point}\n"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            "pull_request",
            "::error title=perfgate::no merge base of HEAD and the pull request's base commit {sha} in this clone, "
            "and fetching their history failed; give actions/checkout fetch-depth: 0",
        ),
        (
            "push",
            "::error title=perfgate::against: merge-base needs a pull_request event (it measures against the pull "
            "request's base); on other events give a branch, tag or commit",
        ),
    ],
    ids=["origin-unreachable", "not-a-pull-request"],
)
def test_merge_base_fails_in_one_line_when_it_cannot_be_found(pull_request, tmp_path, event, message):
    clone, base_sha, _ = pull_request
    git(clone, "remote", "set-url", "origin", (tmp_path / "gone").as_uri())  # e.g. a private repo, no credentials
    code, stdout, output = find_merge_base(clone, tmp_path, base_sha if event == "pull_request" else "")
    assert code == 1 and output == ""
    assert commands(stdout) == [message.format(sha=base_sha)]
