"""The GitHub Action's shell steps, run here as a runner would: real perfgate, temporary GITHUB_* files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfgate.markdown import MARKER
from tests.conftest import GATED

ACTION = yaml.safe_load((Path(__file__).parent.parent / "action.yml").read_text())
STEPS = ACTION["runs"]["steps"]
GATE = next(step for step in STEPS if step.get("id") == "gate")
FINISH = STEPS[-1]
INPUT = re.compile(r"^\$\{\{ inputs\.([\w-]+) \}\}$")
CHECK_ARGS = f"{GATED} --threads 1 --max-trials 3 --quiet"


def test_no_value_reaches_a_shell_through_an_expression_and_actions_are_pinned():
    for step in STEPS:
        assert "${{" not in step.get("run", ""), step.get("name")
        uses = step.get("uses")
        if uses:
            assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", uses), uses


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
    step_env = dict(base)
    for name, value in GATE["env"].items():
        key = INPUT.match(value).group(1)
        step_env[name] = inputs.get(key, ACTION["inputs"][key]["default"])
    gate = subprocess.run(
        ["bash", "-c", GATE["run"]], cwd=cwd, env=step_env, capture_output=True, text=True, timeout=600
    )
    assert gate.returncode == 0, gate.stderr  # the gate step always succeeds; the last step carries the verdict
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    finish = subprocess.run(
        ["bash", "-c", FINISH["run"]], env=dict(base, PERFGATE_EXIT_CODE=outputs["exit-code"]), timeout=60
    )
    return finish.returncode, summary.read_text(), outputs, gate.stdout


def commands(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("::")]


def test_a_pass(gated_project, tmp_path):
    inputs = {"args": CHECK_ARGS + " --alpha 0.001", "configs": "fp32", "trials": "2"}
    code, summary, outputs, stdout = run_action(gated_project, tmp_path, inputs)
    assert code == 0, summary
    assert summary.startswith(MARKER + "\n### perfgate: pass")
    assert outputs["verdict"] == "pass" and outputs["exit-code"] == "0"
    assert Path(outputs["results-json"]).is_file() and Path(outputs["report-markdown"]).read_text() == summary
    assert not [c for c in commands(stdout) if c.startswith("::error")]
    assert (Path(outputs["folder"]) / "chart.png").read_bytes()[:4] == b"\x89PNG"  # uploaded with the results


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


def test_a_perfgate_error_still_writes_the_summary(gated_project, tmp_path):
    code, summary, outputs, stdout = run_action(gated_project, tmp_path, {"args": CHECK_ARGS, "threshold": "5"})
    assert code == 2
    assert summary.startswith("### perfgate check: exit 2")
    assert "'5' is ambiguous: a fraction must be below 1" in summary
    assert outputs["verdict"] == "error" and outputs["results-json"] == ""
    (error,) = commands(stdout)
    assert error.startswith("::error title=perfgate check failed (exit 2)::error: argument --threshold: '5' is")


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
