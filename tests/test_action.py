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

from perfgate.action import accept_label_options, may_post_new_comment
from perfgate.measure.packages import cache_root
from perfgate.records.baselines import BaselineStore
from perfgate.records.results import load_results
from perfgate.records.verdicts import GateSettings
from perfgate.report.markdown import MARKER
from tests.helpers.git import commit, git, new_repository
from tests.helpers.results import results_document
from tests.helpers.workloads import GATED, TINY_FILE

ROOT = Path(__file__).parent.parent
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
STEPS = ACTION["runs"]["steps"]
PREPARE = next(step for step in STEPS if step.get("id") == "prepare")
INSTALL = next(step for step in STEPS if step.get("id") == "install")
GATE = next(step for step in STEPS if step.get("id") == "gate")
MERGE_BASE = next(step for step in STEPS if step.get("id") == "merge-base")
COMMENT = next(step for step in STEPS if step.get("uses", "").startswith("actions/github-script@"))
FINISH = STEPS[-1]
EXPRESSION = re.compile(r"\$\{\{ (.+?) \}\}")
CHECK_ARGS = f"{GATED} --threads 1 --max-trials 3 --quiet"
NODE = shutil.which("node")


def test_no_value_reaches_a_shell_through_an_expression_and_actions_are_pinned():
    for step in STEPS:
        assert "${{" not in step.get("run", ""), step.get("name")
        uses = step.get("uses")
        if uses:
            assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", uses), uses


def test_the_verdict_step_runs_always_and_ends_with_the_jobs_code(tmp_path):
    """A failed comment step (a read-only token) or upload must not hide the verdict: the last step runs
    whatever happened before it, and ends with the code the gate step chose (2 when it never ran)."""
    assert FINISH["name"] == "Finish with perfgate's exit code"
    assert re.fullmatch(r"\$\{\{ always\(\) \}\}", FINISH["if"])
    assert FINISH["env"] == {"PERFGATE_EXIT_CODE": "${{ steps.gate.outputs.job-exit-code }}"}
    for step in STEPS:  # everything after the gate that reports runs even when an earlier step failed
        if step.get("uses", "").startswith(("actions/upload-artifact@", "actions/github-script@")):
            assert "always()" in step["if"], step["name"]
    for code, expected in [("0", 0), ("1", 1), ("3", 3), ("", 2)]:
        env = dict(os.environ, PERFGATE_EXIT_CODE=code)
        assert subprocess.run(["bash", "-c", FINISH["run"]], env=env, timeout=60).returncode == expected


def test_the_project_steps_run_in_the_working_directory():
    assert ACTION["inputs"]["working-directory"]["default"] == "."
    for step in (GATE, MERGE_BASE):
        assert step["working-directory"] == "${{ inputs.working-directory }}", step["name"]


def step_env(step: dict, base: dict[str, str], inputs: dict[str, str], context: dict[str, str]) -> dict[str, str]:
    """`base` plus the step's `env:`, its expressions resolved as the runner would: `inputs.NAME` from
    `inputs` (else the input's default), anything else (`github.…`, `steps.…`, `toJSON(matrix)`) from
    `context` (else empty)."""

    def value(match: re.Match[str]) -> str:
        expression = match.group(1)
        key = expression.removeprefix("inputs.")
        if key != expression:
            return inputs.get(key, ACTION["inputs"][key]["default"])
        return context.get(expression, "")

    resolved = dict(base)
    for name, text in step["env"].items():
        resolved[name] = EXPRESSION.sub(value, text)
    return resolved


def runner_env(tmp_path: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a runner gives each step: this Python first on PATH, temporary GITHUB_* files."""
    base = dict(os.environ, **(env or {}))
    base.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the suite's own (tests/conftest.py), which a runner has not
    base["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), base.get("PATH", "")])
    for name, file in [("GITHUB_STEP_SUMMARY", "summary.md"), ("GITHUB_OUTPUT", "output.txt")]:
        base[name] = str(tmp_path / file)
        (tmp_path / file).touch()
    base["RUNNER_TEMP"] = str(tmp_path / "runner")
    (tmp_path / "runner").mkdir(exist_ok=True)
    return base


def outputs_of(file: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in file.read_text().splitlines() if "=" in line)


def run_action(
    cwd: Path,
    tmp_path: Path,
    inputs: dict[str, str],
    env: dict[str, str] | None = None,
    context: dict[str, str] | None = None,
):
    """The gate step, then the final step, with inputs resolved as the runner resolves `env:` expressions."""
    base = runner_env(tmp_path, env)
    summary, output = Path(base["GITHUB_STEP_SUMMARY"]), Path(base["GITHUB_OUTPUT"])
    summary.write_text("")
    output.write_text("")
    context = {"github.job": "gate", "github.workflow": "perfgate", "github.run_attempt": "1", **(context or {})}
    gate = subprocess.run(
        ["bash", "-c", GATE["run"]],
        cwd=cwd / inputs.get("working-directory", "."),
        env=step_env(GATE, base, inputs, context),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert gate.returncode == 0, gate.stderr  # the gate step always succeeds; the last step carries the verdict
    outputs = outputs_of(output)
    finish_context = {"steps.gate.outputs.job-exit-code": outputs["job-exit-code"]}
    finish = subprocess.run(
        ["bash", "-c", FINISH["run"]], env=step_env(FINISH, base, inputs, finish_context), timeout=60
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
    # A pass needs no more than two trials (any verdict but a regression passes): one look, at alpha 0.001. The
    # history branch is the subject, not the verdict: a 50% threshold keeps a whole session of this shared machine
    # running slower than the fixture's (0.76x once, every phase alike, the probe at 0.99x) from failing it.
    args = CHECK_ARGS.replace("--max-trials 3", "--max-trials 2") + " --alpha 0.001"
    inputs = {"args": args, "configs": "fp32", "trials": "2", "record": "true", "threshold": "50%"}
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
def test_a_workload_that_raises_is_the_workload_failed_verdict(tmp_path):
    """Exit 4 (the workload failed) has its own verdict output, apart from a usage error's `error`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "broken.py").write_text("def broken():\n    raise RuntimeError('the dataset is not downloaded')\n")
    code, summary, outputs, stdout = run_action(project, tmp_path, {"args": "broken.py:broken --quiet"})
    assert code == 4 and outputs["verdict"] == "workload-failed" and outputs["exit-code"] == "4"
    assert summary.startswith("### perfgate check: exit 4")
    (error,) = commands(stdout)
    assert error.startswith(
        "::error title=perfgate check failed (exit 4)::error: broken() raised RuntimeError: the dataset is not"
    )


@pytest.mark.e2e
def test_the_nproc_input_reaches_perfgate(gated_project, tmp_path):
    code, summary, outputs, _ = run_action(gated_project, tmp_path, {"args": CHECK_ARGS, "nproc": "0"})
    assert code == 2 and outputs["verdict"] == "error"
    assert "error: argument --nproc: must be at least 1, got 0" in summary


@pytest.mark.e2e
def test_the_counts_only_input_judges_by_the_baselines_counts(gated_project, tmp_path):
    inputs = {"args": CHECK_ARGS, "configs": "fp32", "counts-only": "true"}
    code, summary, outputs, _ = run_action(gated_project, tmp_path, inputs)
    assert code == 0 and outputs["verdict"] == "pass", summary
    assert "Judged by the exact counts alone (`--counts-only`)" in summary
    (row,) = [line for line in summary.splitlines() if line.startswith("| fp32 |")]  # the counts table's
    assert "->" not in row  # every count as the baseline's
    assert "Note: stored baselines" not in summary  # counts have no session noise to warn of


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


@pytest.mark.e2e
@pytest.mark.parametrize(("policy", "code", "kind"), [("fail", 3, "error"), ("warn", 0, "warning")])
def test_no_baseline_for_the_runner_fails_or_warns(gated_project, tmp_path, policy, code, kind):
    """Stored baselines, none for this runner: `no-baseline: fail` is red, `warn` passes with a warning that
    names the runner's fingerprint and says how to record its baselines in CI (not `run perfgate update`)."""
    inputs = {"args": CHECK_ARGS, "configs": "fp32", "trials": "2", "baseline-dir": "elsewhere", "no-baseline": policy}
    finished, summary, outputs, stdout = run_action(gated_project, tmp_path, inputs)
    assert finished == code, summary
    assert outputs["verdict"] == "no-baseline" and outputs["exit-code"] == "3"  # perfgate's own code is kept
    assert outputs["job-exit-code"] == str(code)
    (missing,) = [c for c in commands(stdout) if "no baseline for" in c]
    assert missing.startswith(
        f"::{kind} title=perfgate%3A gated no baseline::no baseline for gated on this runner (cpu "
    )
    assert " in elsewhere/" in missing and "mode: update" in missing and "perfgate-baselines.yml" in missing
    assert "run perfgate update" not in missing
    assert f"(no-baseline: {policy})" in missing
    passed = "::notice title=perfgate::no baselines for this runner: passed (no-baseline: warn)"
    assert (passed in commands(stdout)) == (policy == "warn")


PARENT = next(step for step in STEPS if step.get("id") == "parent")
TINY_ARGS = "perf/tiny.py:tiny --threads 1 --max-trials 1 --quiet"


def pushed(tmp_path: Path, commits: int) -> tuple[Path, list[str]]:
    """A push to main of `commits` commits (the tiny workload, no baselines) to a bare origin, and the clone
    actions/checkout makes of it (one commit deep); returns (clone, the commits' SHAs, oldest first)."""
    work = new_repository(tmp_path / "work")
    files = {"perf/tiny.py": TINY_FILE.read_text(encoding="utf-8"), ".gitignore": ".perfgate/\n"}
    shas = [commit(work, files if n == 0 else {"README.md": f"{n}\n"}, f"commit {n}") for n in range(commits)]
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(work, "push", "-q", str(origin), "main")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "main", origin.as_uri(), str(clone))
    return clone, shas


def find_parent(clone: Path, tmp_path: Path) -> tuple[int, str, dict[str, str]]:
    """The parent step in `clone` (a push with `record: true`): its code, stdout and outputs."""
    output = tmp_path / "parent-output.txt"
    output.write_text("")
    env = dict(os.environ, GITHUB_OUTPUT=str(output))
    step = subprocess.run(
        ["bash", "-c", PARENT["run"]], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    return step.returncode, step.stdout, outputs_of(output)


def recorded_on_the_branch(clone: Path) -> dict:
    """The one record the run pushed to the history branch of the clone's origin."""
    origin = Path(git(clone, "remote", "get-url", "origin").removeprefix("file://"))
    (record,) = git(origin, "ls-tree", "--name-only", "perfgate-history", "history/").splitlines()
    return json.loads(git(origin, "show", f"perfgate-history:{record}"))


def test_the_parent_step_runs_only_for_a_recorded_check_on_a_push_with_against_auto():
    condition = " ".join(PARENT["if"].split())
    assert condition == (
        "${{ inputs.mode == 'check' && inputs.against == 'auto' && inputs.record == 'true' "
        "&& github.event_name == 'push' }}"
    )
    assert PARENT["working-directory"] == "${{ inputs.working-directory }}"
    assert GATE["env"]["PERFGATE_PARENT"] == "${{ steps.parent.outputs.commit }}"
    assert GATE["env"]["PERFGATE_FIRST_COMMIT"] == "${{ steps.parent.outputs.first }}"


@pytest.mark.e2e
def test_a_recorded_push_is_measured_against_its_parent_fetched_into_a_shallow_clone(tmp_path):
    clone, (parent, head) = pushed(tmp_path, 2)
    code, stdout, found = find_parent(clone, tmp_path)
    assert code == 0, stdout
    assert found == {"commit": parent} and f"measuring against {parent}, the parent of {head}" in stdout
    inputs = {"args": TINY_ARGS, "configs": "fp32", "trials": "1", "record": "true"}
    finished, summary, outputs, stdout = run_action(
        clone, tmp_path, inputs, context={"steps.parent.outputs.commit": parent}
    )
    assert finished in (0, 1) and outputs["exit-code"] == str(finished), summary
    assert f"against {parent[:10]}" in summary  # the report names the paired mode and its base
    record = recorded_on_the_branch(clone)
    assert (record["commit"], record["base"]) == (head, {"ref": parent, "commit": parent})
    assert list(record["verdicts"]) == ["tiny/fp32"] and record["mode"].startswith("paired: ")


@pytest.mark.e2e
def test_the_first_commit_is_recorded_without_a_verdict_and_passes(tmp_path):
    clone, (first,) = pushed(tmp_path, 1)
    code, stdout, found = find_parent(clone, tmp_path)
    assert code == 0, stdout
    assert found == {"first": "true"} and f"{first} is the first commit: " in stdout
    inputs = {"args": TINY_ARGS, "configs": "fp32", "trials": "1", "record": "true"}
    finished, summary, outputs, stdout = run_action(
        clone, tmp_path, inputs, context={"steps.parent.outputs.first": "true"}
    )
    assert finished == 0, summary
    assert (outputs["exit-code"], outputs["job-exit-code"], outputs["verdict"]) == ("3", "0", "no-baseline")
    assert not [c for c in commands(stdout) if c.startswith(("::error", "::warning"))], stdout
    (notice,) = [c for c in commands(stdout) if c.startswith("::notice")]
    assert notice.startswith("::notice title=perfgate::the first commit has no parent to measure against and no ")
    assert "recorded in the history without a verdict" in notice
    record = recorded_on_the_branch(clone)
    assert (record["commit"], record["base"], record["verdicts"], record["mode"]) == (
        first,
        None,
        {},
        "no stored baseline",
    )


@pytest.mark.e2e
def test_the_parent_step_fails_in_one_line_when_the_parent_cannot_be_fetched(tmp_path):
    clone, (_, head) = pushed(tmp_path, 2)
    git(clone, "remote", "set-url", "origin", (tmp_path / "gone").as_uri())
    code, stdout, found = find_parent(clone, tmp_path)
    assert code == 1 and found == {}
    assert commands(stdout) == [
        f"::error title=perfgate::cannot fetch the parent of {head} to measure it against; give actions/checkout "
        "fetch-depth: 2"
    ]


def run_prepare(tmp_path: Path, inputs: dict[str, str], cwd: Path | None = None) -> tuple[int, str, dict[str, str]]:
    base = runner_env(tmp_path)
    context = {"github.action_path": str(ROOT), "runner.os": "Linux", "runner.arch": "X64"}
    step = subprocess.run(
        ["bash", "-c", PREPARE["run"]],
        cwd=cwd or tmp_path,
        env=step_env(PREPARE, base, inputs, context),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return step.returncode, step.stdout, outputs_of(Path(base["GITHUB_OUTPUT"]))


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"no-baseline": "ignore"}, "::error title=perfgate::no-baseline must be fail or warn, got 'ignore'"),
        (
            {"no-baseline": "warn\n::error::x"},
            "::error title=perfgate::no-baseline must be fail or warn, got 'warn ::error::x'",
        ),
        (
            {"working-directory": "nowhere"},
            "::error title=perfgate::working-directory 'nowhere' is not a folder of the workspace",
        ),
        ({"comment": "sometimes"}, "::error title=perfgate::comment must be true, false or on-change, got 'sometimes'"),
        (
            {"environment": "sideways"},
            "::error title=perfgate::environment must be auto, shared or per-side, got 'sideways'",
        ),
    ],
    ids=["unknown", "newline", "missing-folder", "comment", "environment"],
)
def test_bad_inputs_stop_the_action_first_in_one_line(tmp_path, inputs, message):
    code, stdout, outputs = run_prepare(tmp_path, inputs)
    assert code == 1 and outputs == {}
    assert stdout.splitlines() == [message]


@pytest.mark.e2e
def test_the_caches_are_keyed_by_runner_python_and_what_pip_would_fetch(tmp_path):
    code, stdout, outputs = run_prepare(tmp_path, {"no-baseline": "warn"})
    assert code == 0, stdout
    python = "{}.{}".format(*sys.version_info[:2])
    assert outputs["pip-restore-key"] == f"perfgate-pip-Linux-X64-py{python}-"
    assert re.fullmatch(rf"perfgate-pip-Linux-X64-py{re.escape(python)}-[0-9a-f]{{16}}", outputs["pip-key"])
    assert "pip-cache" in outputs
    for step in STEPS:
        if step.get("uses", "").startswith("actions/cache@"):
            assert step["if"].startswith("${{ inputs.cache == 'true'"), step["name"]
    inductor = next(s for s in STEPS if s.get("uses", "").startswith("actions/cache@") and "inductor" in s["name"])
    assert inductor["with"]["path"] == "${{ steps.install.outputs.inductor-cache }}"
    assert GATE["env"]["PERFGATE_INDUCTOR_CACHE"] == "${{ steps.install.outputs.inductor-cache }}"
    assert STEPS.index(inductor) < STEPS.index(GATE) and STEPS.index(INSTALL) < STEPS.index(inductor)
    assert outputs["environments"] == str(cache_root())  # the folder perfgate keeps the base's environments in
    assert outputs["environments-key"] == f"perfgate-environments-Linux-X64-py{python}"


def test_a_paired_checks_base_environments_are_cached_by_what_the_workspace_declares():
    caches = [step for step in STEPS if step.get("uses", "").startswith("actions/cache@")]
    environments = next(step for step in caches if "environments" in step["name"])
    assert len({step["uses"] for step in caches}) == 1  # the one pinned actions/cache
    condition = " ".join(environments["if"].split())
    assert condition == (
        "${{ inputs.cache == 'true' && inputs.mode == 'check' && inputs.against != '' "
        "&& inputs.environment != 'shared' }}"
    )
    assert environments["with"]["path"] == "${{ steps.prepare.outputs.environments }}"
    key = " ".join(environments["with"]["key"].split())
    assert key == (
        "${{ steps.prepare.outputs.environments-key }}-${{ hashFiles('**/pyproject.toml', '**/requirements*.txt', "
        "'**/uv.lock', '**/poetry.lock', '**/pylock*.toml') }}"
    )
    assert environments["with"]["restore-keys"] == "${{ steps.prepare.outputs.environments-key }}-"
    assert STEPS.index(PREPARE) < STEPS.index(environments) < STEPS.index(GATE)
    assert GATE["env"]["BASE_ENVIRONMENTS_FOLDER"] == "${{ steps.prepare.outputs.environments }}"
    assert 'export PERFGATE_ENVIRONMENT_CACHE="$BASE_ENVIRONMENTS_FOLDER"' in GATE["run"]


def test_the_environment_input_reaches_paired_checks_only():
    assert ACTION["inputs"]["environment"]["default"] == "auto"
    assert PREPARE["env"]["INPUT_ENVIRONMENT"] == GATE["env"]["INPUT_ENVIRONMENT"] == "${{ inputs.environment }}"
    run = GATE["run"]
    passed = run.index('options+=("--environment=$INPUT_ENVIRONMENT")')
    condition = run.rindex('if [ "$paired" = true ]; then', 0, passed)
    assert run.rindex("paired=true", 0, condition) > run.index('options+=("--against=$INPUT_AGAINST")')


FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the job's Python: logs each pip command; `import torch` works when FAKE_TORCH is set.
if [ "$1" = -c ]; then
  case "$2" in
    *torch*)
      torch="${FAKE_TORCH:-}"
      if [ -z "$torch" ] && [ -f "$FAKE_STATE" ]; then torch=$(cat "$FAKE_STATE"); fi
      [ -n "$torch" ] || exit 1
      echo "$torch"
      ;;
    *) echo 3.11 ;;
  esac
  exit 0
fi
echo "$*" >> "$FAKE_LOG"
if [ "$*" != "${*/--constraint/}" ]; then cat "${@: -2:1}" >> "$FAKE_LOG"; fi
case "$*" in
  *"torch --index-url"*) echo 2.13.0+cpu > "$FAKE_STATE" ;;
  # without torch, installing perfgate brings it from PyPI
  *--constraint*) [ -n "${FAKE_TORCH:-}" ] || [ -f "$FAKE_STATE" ] || echo 2.13.0 > "$FAKE_STATE" ;;
esac
"""


@pytest.mark.parametrize(
    ("installed", "index", "expected", "measured"),
    [
        (
            "2.5.1+cu121",
            "https://download.pytorch.org/whl/cpu",
            ["-m pip install --quiet --constraint {c} {a}", "torch==2.5.1+cu121"],
            "2.5.1+cu121",
        ),
        (
            "",
            "https://download.pytorch.org/whl/cpu",
            [
                "-m pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu",
                "-m pip install --quiet --constraint {c} {a}",
            ],
            "2.13.0+cpu",
        ),
        ("", "", ["-m pip install --quiet --constraint {c} {a}"], "2.13.0"),
    ],
    ids=["torch-kept", "torch-from-the-index", "torch-from-pypi"],
)
def test_install_never_replaces_the_jobs_torch(tmp_path, installed, index, expected, measured):
    """An installed torch is pinned by a constraint, so installing perfgate cannot upgrade it; only a job
    without torch gets one, from `torch-index-url` when given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    base = runner_env(
        tmp_path, {"FAKE_TORCH": installed, "FAKE_LOG": str(tmp_path / "log"), "FAKE_STATE": str(tmp_path / "state")}
    )
    base["PATH"] = os.pathsep.join([str(bin_dir), base["PATH"]])
    context = {"github.action_path": "/the/action", "runner.os": "Linux", "runner.arch": "X64"}
    step = subprocess.run(
        ["bash", "-c", INSTALL["run"]],
        env=step_env(INSTALL, base, {"torch-index-url": index}, context),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert step.returncode == 0, step.stderr
    constraints = str(tmp_path / "runner" / "perfgate-constraints.txt")
    assert (tmp_path / "log").read_text().splitlines() == [e.format(c=constraints, a="/the/action") for e in expected]
    outputs = outputs_of(Path(base["GITHUB_OUTPUT"]))
    assert outputs["inductor-cache"] == str(tmp_path / "runner" / "perfgate-inductor")
    # keyed by what compiles (torch, Python, the device, the project's Python sources), never by the run
    prefix = outputs["inductor-restore-key"]
    assert re.fullmatch(rf"perfgate-inductor-Linux-X64-py3\.11-torch{re.escape(measured)}-[A-Za-z0-9-]+-", prefix)
    assert re.fullmatch(rf"{re.escape(prefix)}[0-9a-f]{{16}}", outputs["inductor-key"])
    if installed:  # a second run of the workflow, nothing changed: the same entry
        Path(base["GITHUB_OUTPUT"]).write_text("")
        again = subprocess.run(
            ["bash", "-c", INSTALL["run"]],
            env=dict(step_env(INSTALL, base, {"torch-index-url": index}, context), GITHUB_RUN_ID="987654321"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
        assert outputs_of(Path(base["GITHUB_OUTPUT"]))["inductor-key"] == outputs["inductor-key"]


def leg_names(tmp_path: Path, matrix: object, attempt: str = "1", given: str = "", job: str = "gate") -> dict[str, str]:
    """What the gate step computes for one leg before it runs perfgate: its opening lines, up to the names."""
    script = GATE["run"]
    opening = script[: script.index("\n", script.index("marker=$("))] + '\nprintf "%s\\n" "$names"\n'
    context = {
        "github.job": job,
        "toJSON(matrix)": json.dumps(matrix, indent=2) if matrix is not None else "null",
        "github.workflow": "perfgate",
        "github.run_attempt": attempt,
    }
    env = step_env(GATE, runner_env(tmp_path), {"id": given}, context)
    step = subprocess.run(["bash", "-c", opening], env=env, capture_output=True, text=True, timeout=60)
    assert step.returncode == 0, step.stderr
    return outputs_of_text(step.stdout)


def outputs_of_text(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


NODE_HARNESS = """
// Runs an actions/github-script script against a fake GitHub: STATE holds the comments, the pull
// requests and the token's user; every call is recorded in state.calls.
const fs = require("fs");
const [scriptFile, stateFile] = process.argv.slice(2);
const state = JSON.parse(fs.readFileSync(stateFile, "utf8"));
state.calls = [];
const refuse = (status) => { const e = new Error(`HttpError ${status}`); e.status = status; throw e; };
const github = {
  paginate: async (method, { issue_number }) => state.comments.filter((c) => c.issue === issue_number),
  rest: {
    issues: {
      listComments: () => undefined,
      updateComment: async ({ comment_id, body }) => {
        if (state.readOnly) refuse(403);
        state.calls.push(["update", comment_id]);
        state.comments.find((c) => c.id === comment_id).body = body;
      },
      createComment: async ({ issue_number, body }) => {
        if (state.readOnly) refuse(403);
        const id = 100 + state.comments.length;
        state.calls.push(["create", id]);
        state.comments.push({ id, issue: issue_number, user: { login: state.writer }, body });
      },
    },
    users: { getAuthenticated: async () => (state.login ? { data: { login: state.login } } : refuse(403)) },
    pulls: { get: async ({ pull_number }) => ({ data: state.pulls[String(pull_number)] }) },
  },
};
const context = { repo: { owner: "o", repo: "r" }, issue: { number: state.issue } };
const core = { warning: (m) => state.calls.push(["warning", m]), info: (m) => state.calls.push(["info", m]) };
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
const script = new AsyncFunction("require", "github", "context", "core", fs.readFileSync(scriptFile, "utf8"));
script(require, github, context, core)
  .then(() => fs.writeFileSync(stateFile, JSON.stringify(state)))
  .catch((error) => { console.error(error); process.exit(1); });
"""


def run_script(tmp_path: Path, script: str, state: dict, env: dict[str, str]) -> dict:
    """One github-script step under node, against the fake GitHub in `state`; returns the state after."""
    harness, script_file, state_file = tmp_path / "harness.js", tmp_path / "script.js", tmp_path / "state.json"
    harness.write_text(NODE_HARNESS)
    script_file.write_text(script)
    state_file.write_text(json.dumps(state))
    step = subprocess.run(
        [NODE, str(harness), str(script_file), str(state_file)],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert step.returncode == 0, step.stderr
    return json.loads(state_file.read_text())


def write_comment(marker: str, folder: Path) -> None:
    """`python -m perfgate.action comment`: FOLDER/report.md under MARKER, for pull request 7, as the gate step
    writes it (comment.md and comment.json in FOLDER)."""
    command = [sys.executable, "-m", "perfgate.action", "comment", marker, str(folder / "report.md"), str(folder), "7"]
    subprocess.run(command, check=True, timeout=60)


def comment_as_the_action(tmp_path: Path, names: dict[str, str], report: str, state: dict) -> dict:
    """What the gate step writes for the comment (`python -m perfgate.action comment`), then the comment step."""
    folder = tmp_path / names["leg"]
    folder.mkdir(exist_ok=True)
    (folder / "report.md").write_text(report)
    write_comment(names["marker"], folder)
    env = {"PERFGATE_COMMENT": str(folder / "comment.md"), "PERFGATE_MARKER": names["marker"]}
    return run_script(tmp_path, COMMENT["with"]["script"], state, env)


ARTIFACT_NAME = re.compile(r"[A-Za-z0-9._-]+")  # upload-artifact refuses " : < > | * ? \r \n \\ /


@pytest.mark.e2e
@pytest.mark.skipif(NODE is None, reason="node runs the comment step's script (actions/github-script)")
def test_two_matrix_legs_keep_their_own_artifacts_and_comments(tmp_path):
    legs = [{"os": "ubuntu-latest", "torch": "2.5"}, {"os": "ubuntu-latest", "torch": "2.6"}]
    first, second = (leg_names(tmp_path, matrix) for matrix in legs)
    assert first["artifact"] != second["artifact"] and first["marker"] != second["marker"]
    assert first["artifact"].startswith("perfgate-gate-ubuntu-latest-2.5-") and first["artifact"].endswith("-1")
    for names in (first, second, leg_names(tmp_path, None), leg_names(tmp_path, {"x": 'a/b:"c"*?'})):
        assert ARTIFACT_NAME.fullmatch(names["artifact"]), names
        assert re.fullmatch(r"<!-- perfgate-report [\w.-]+/[\w.-]+ -->", names["marker"]), names
    assert leg_names(tmp_path, None)["artifact"] == "perfgate-gate-1"  # no matrix: the job's id
    assert leg_names(tmp_path, legs[0], attempt="2") == dict(first, artifact=first["artifact"][:-1] + "2")
    assert leg_names(tmp_path, legs[0], job="other")["marker"] != first["marker"]  # another job of the workflow
    assert leg_names(tmp_path, legs[0], given="gpu a100")["artifact"] == "perfgate-gpu-a100-1"  # the id input

    # Someone else's comment that starts with the first leg's marker (quoted, or planted) is never edited.
    planted = {"id": 1, "issue": 7, "user": {"login": "mallory"}, "body": first["marker"] + "\nplanted"}
    state = {"comments": [planted], "issue": 7, "writer": "github-actions[bot]", "login": None, "pulls": {}}
    state = comment_as_the_action(tmp_path, first, "### perfgate: pass (leg 1)\n", state)
    state = comment_as_the_action(tmp_path, second, "### perfgate: fail (leg 2)\n", state)
    assert [c["id"] for c in state["comments"]] == [1, 101, 102]
    assert state["comments"][0]["body"] == first["marker"] + "\nplanted"
    state = comment_as_the_action(tmp_path, first, "### perfgate: pass again (leg 1)\n", state)  # the next push
    assert state["calls"] == [["update", 101]]
    bodies = [c["body"] for c in state["comments"]]
    assert bodies[1:] == [
        f"{first['marker']}\n### perfgate: pass again (leg 1)\n",
        f"{second['marker']}\n### perfgate: fail (leg 2)\n",
    ]

    # With a personal token, its user's own comments are found again; with a read-only token, a warning.
    state = {"comments": [], "issue": 7, "writer": "perf-bot", "login": "perf-bot", "pulls": {}}
    state = comment_as_the_action(tmp_path, first, "one\n", state)
    state = comment_as_the_action(tmp_path, first, "two\n", state)
    assert state["calls"] == [["update", 100]] and len(state["comments"]) == 1
    state = comment_as_the_action(tmp_path, second, "three\n", dict(state, readOnly=True))
    ((kind, message),) = state["calls"]
    assert kind == "warning" and message.startswith("could not comment on the pull request (HttpError 403)")


RELAY = yaml.safe_load((ROOT / ".github" / "workflows" / "perfgate-comment.yml").read_text())


def relay(tmp_path: Path, artifacts: dict[str, dict[str, str]], state: dict, head_sha: str = "a" * 40) -> dict:
    reports = tmp_path / "reports"
    for name, files in artifacts.items():
        (reports / name).mkdir(parents=True)
        for file, text in files.items():
            (reports / name / file).write_text(text)
    (script_step,) = [
        s for s in RELAY["jobs"]["comment"]["steps"] if s.get("uses", "").startswith("actions/github-script@")
    ]
    env = {"PERFGATE_REPORTS": str(reports), "PERFGATE_HEAD_SHA": head_sha, "PERFGATE_ATTEMPT": "1"}
    return run_script(tmp_path, script_step["with"]["script"], state, env)


@pytest.mark.e2e
@pytest.mark.skipif(NODE is None, reason="node runs the relay's script (actions/github-script)")
def test_the_fork_relay_posts_only_what_the_run_measured(tmp_path):
    """perfgate-comment.yml (on workflow_run) posts the reports a fork's run uploaded, as text: only on the
    pull request whose head the run measured, never editing someone else's comment."""
    trigger = RELAY[True]["workflow_run"]  # YAML 1.1 reads the key `on` as true
    assert trigger == {"workflows": ["perfgate"], "types": ["completed"]}
    steps = RELAY["jobs"]["comment"]["steps"]
    assert not [s for s in steps if "run" in s or s.get("uses", "").startswith("actions/checkout@")]  # nothing runs
    names = leg_names(tmp_path, None)
    folder = tmp_path / "made"
    folder.mkdir()
    (folder / "report.md").write_text("### perfgate: pass\n")
    write_comment(names["marker"], folder)
    made = {file: (folder / file).read_text() for file in ("comment.md", "comment.json")}
    assert json.loads(made["comment.json"]) == {"pull_request": 7, "marker": names["marker"]}
    planted = {"id": 1, "issue": 7, "user": {"login": "mallory"}, "body": made["comment.md"]}
    pulls = {"7": {"head": {"sha": "a" * 40}}, "8": {"head": {"sha": "b" * 40}}}
    state = {"comments": [planted], "writer": "github-actions[bot]", "pulls": pulls}
    forged = dict(made, **{"comment.json": json.dumps({"pull_request": 8, "marker": names["marker"]})})
    hostile = dict(made, **{"comment.json": json.dumps({"pull_request": 7, "marker": "<!-- x --> @everyone"})})
    after = relay(
        tmp_path,
        {"perfgate-gate-1": made, "perfgate-other-1": forged, "perfgate-odd-1": hostile, "perfgate-gate-0": made},
        state,
    )
    assert after["calls"] == [
        ["create", 101],
        ["info", "perfgate-gate-1: posted on #7"],
        ["warning", "perfgate-odd-1: not a perfgate report; nothing posted"],
        ["warning", "perfgate-other-1: pull request #8 is not the one this run measured"],
    ]  # perfgate-gate-0: an earlier attempt's, left alone
    assert after["comments"][0] == planted and after["comments"][1]["body"] == made["comment.md"]


# --- Accepting a slowdown on purpose: labels, the pull request's head commit; comment: on-change --------


def test_perf_accept_labels_become_accept_label_options_and_other_labels_are_left_alone():
    labels = [
        {"name": "perf-accept: lm-small/fp32 15%", "color": "ededed"},
        {"name": "bug"},
        {"name": "Perf-Accept: vision 10%"},
        {"name": "perf-acceptance-needed"},  # another word: not an acceptance
        {"name": "perf-accept"},  # malformed: passed on, so perfgate refuses it in one line
    ]
    assert accept_label_options(json.dumps(labels)) == [
        "--accept-label=perf-accept: lm-small/fp32 15%",
        "--accept-label=Perf-Accept: vision 10%",
        "--accept-label=perf-accept",
    ]
    for outside_a_pull_request in ("null", "", "{}", "not json"):
        assert accept_label_options(outside_a_pull_request) == []
    # The gate step reads them as NUL-separated words: a label's spaces (or a newline) never split one.
    printed = subprocess.run(
        [sys.executable, "-m", "perfgate.action", "accept-labels", json.dumps([{"name": "perf-accept: a\nb 5%"}])],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert printed == b"--accept-label=perf-accept: a\nb 5%\0"


def saved_check(folder: Path, slower: float, *, warn_only: bool = False) -> Path:
    """A check's results file of workload w against stored baselines of the same trials, its head's samples/s
    divided by `slower` (1: no change), judged in warn-only mode where asked."""
    folder.mkdir()
    document = results_document()
    (folder / "measured.json").write_text(json.dumps(document))
    BaselineStore(folder / "baselines").write_run(load_results(folder / "measured.json"))
    for trial in document["workloads"][0]["configs"]["fp32"]["trials"]:
        trial["samples_per_sec"] /= slower
    document["gate"] = json.loads(
        json.dumps(GateSettings(first_n=4, max_n=4, warn_only=warn_only).to_record(folder / "baselines").to_dict())
    )
    (folder / "results.json").write_text(json.dumps(document))
    return folder / "results.json"


@pytest.mark.skipif(NODE is None, reason="node runs the comment step's script (actions/github-script)")
def test_comment_on_change_posts_only_news_but_keeps_an_earlier_comment_fresh(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no [tool.perfgate] here: the default thresholds
    calm, slower = saved_check(tmp_path / "calm", 1.0), saved_check(tmp_path / "slower", 1.5)
    assert [may_post_new_comment("on-change", r) for r in (calm, slower)] == [False, True]
    assert [may_post_new_comment("true", r) for r in (calm, slower)] == [True, True]
    assert may_post_new_comment("on-change", tmp_path / "missing.json")  # perfgate failed: that is news
    assert COMMENT["if"].count("inputs.comment == 'on-change'") == 1
    assert COMMENT["env"]["PERFGATE_COMMENT_NEW"] == "${{ steps.gate.outputs.comment-new }}"

    names = {"leg": "gate", "marker": "<!-- perfgate-report perfgate/gate -->"}
    folder = tmp_path / "gate"
    folder.mkdir()
    (folder / "report.md").write_text("### perfgate: pass\n")
    write_comment(names["marker"], folder)
    env = {"PERFGATE_COMMENT": str(folder / "comment.md"), "PERFGATE_MARKER": names["marker"]}
    script = COMMENT["with"]["script"]
    state = {"comments": [], "issue": 7, "writer": "github-actions[bot]", "login": None, "pulls": {}}
    quiet = run_script(tmp_path, script, state, dict(env, PERFGATE_COMMENT_NEW="false"))
    assert quiet["comments"] == [] and quiet["calls"] == [
        ["info", "every verdict is no change: no new comment (comment: on-change)"]
    ]
    posted = run_script(tmp_path, script, state, dict(env, PERFGATE_COMMENT_NEW="true"))  # a regression, say
    assert posted["calls"] == [["create", 100]]
    fresh = run_script(tmp_path, script, posted, dict(env, PERFGATE_COMMENT_NEW="false"))  # back to no change
    assert fresh["calls"] == [["update", 100]] and len(fresh["comments"]) == 1


@pytest.mark.e2e
def test_a_malformed_label_or_head_trailer_fails_the_check_in_one_line(tmp_path):
    """On a pull request the gate step passes the perf-accept labels (accept-labels: true) and the head
    commit (github.event.pull_request.head.sha, under the merge commit actions/checkout makes) to perfgate."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "start")
    git(repo, "checkout", "-q", "-b", "feature")
    trailer = "Slower\n\nPerf-Accept: gated/fp64 15%"
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", trailer)
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "merge", "-q", "--no-ff", "-m", "merge", head)
    inputs = {"args": CHECK_ARGS, "configs": "fp32", "against": "", "accept-labels": "true"}
    labels = json.dumps([{"name": "perf-accept: gated"}, {"name": "documentation"}])
    context = {"toJSON(github.event.pull_request.labels)": labels}
    code, summary, outputs, stdout = run_action(repo, tmp_path, inputs, context=context)
    assert code == 2 and outputs["verdict"] == "error"
    assert "error: argument --accept-label: malformed perf-accept label 'perf-accept: gated': expected a " in summary
    code, summary, outputs, stdout = run_action(
        repo, tmp_path, dict(inputs, **{"accept-labels": "false"}), context={"github.event.pull_request.head.sha": head}
    )
    assert code == 2
    assert "error: malformed Perf-Accept trailer 'Perf-Accept: gated/fp64 15%': unknown config 'fp64'" in summary
    assert f"(commit {head[:7]})" in summary


def artifact(legs: Path, name: str, code: int | None, report: str, verdict: int | None = None) -> None:
    """One leg's downloaded artifact, as the gate step of `mode: check` leaves its folder."""
    folder = legs / f"perfgate-{name}-1"
    folder.mkdir(parents=True)
    (folder / "report.md").write_text(report)
    (folder / "perfgate.log").write_text("perfgate check: ...\n")
    if code is not None:
        (folder / "job-exit-code").write_text(f"{code}\n")
        (folder / "verdict-code").write_text(f"{code if verdict is None else verdict}\n")


@pytest.mark.e2e
def test_a_summary_of_three_legs_one_failed_writes_one_report_and_comment_and_fails(tmp_path):
    """`mode: summarize`, in a job after a matrix: the legs' artifacts (downloaded to RUNNER_TEMP/perfgate-legs)
    become one report (the job summary, one comment under the summary job's marker) that lists every leg, and the
    job fails because one leg failed. The summary job installs nothing: its helpers run from the action's folder."""
    download = next(s for s in STEPS if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["if"] == "${{ inputs.mode == 'summarize' }}"
    assert download["with"]["pattern"] == "perfgate-*-${{ github.run_attempt }}"
    assert STEPS.index(download) < STEPS.index(GATE)
    assert INSTALL["if"] == "${{ inputs.mode != 'summarize' }}"
    legs = tmp_path / "runner" / "perfgate-legs"
    artifact(legs, "gate-fp32-aaaa1111", 0, "### perfgate: pass\n\n1 no change.\n")
    artifact(legs, "gate-bf16-bbbb2222", 1, "### perfgate: fail\n\n1 regression (lm-small bf16).\n")
    artifact(legs, "gate-bf16-compile-cccc3333", 0, "### perfgate: fail (warn-only: not failing the build)\n", 1)
    context = {"runner.temp": str(tmp_path / "runner"), "github.action_path": str(ROOT), "github.job": "summary"}
    code, summary, outputs, stdout = run_action(tmp_path, tmp_path, {"mode": "summarize"}, None, context)
    assert code == 1 and outputs["verdict"] == "fail" and outputs["job-exit-code"] == "1"
    headline = "perfgate: fail, 3 legs, 1 failed (gate-bf16-bbbb2222)"
    assert summary.startswith(f"### {headline}")
    assert "| `gate-fp32-aaaa1111` | pass | passed |" in summary
    assert "| `gate-bf16-bbbb2222` | fail | failed (exit 1) |" in summary
    assert "| `gate-bf16-compile-cccc3333` | fail | passed |" in summary  # warn-only: its verdict, its job passed
    assert "<details open><summary>gate-bf16-bbbb2222</summary>" in summary
    assert "1 regression (lm-small bf16)." in summary
    comment = Path(outputs["comment"]).read_text()
    assert comment.startswith(f"<!-- perfgate-report perfgate/summary -->\n### {headline}")
    assert commands(stdout) == [f"::error title=perfgate%3A the matrix::{headline}"]

    # a leg that never finished (no exit code) fails the summary too, as an error
    artifact(legs, "gate-fp16-dddd4444", None, "")
    code, summary, outputs, _ = run_action(tmp_path, tmp_path, {"mode": "summarize"}, None, context)
    assert code == 2 and outputs["verdict"] == "error"
    assert "| `gate-fp16-dddd4444` | no exit code: the leg did not finish | - |" in summary
