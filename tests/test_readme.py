"""The README as a newcomer reads it: its length and order, and every command it shows run by a test or by
.ci/run (which runs its two marked blocks, the first run and the test command)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci/run").read_text(encoding="utf-8")

# Commands that need what this machine has not: PyTorch's own package index. What they install is what
# .ci/run installs from the registry (`torch==2.13.0`, the CPU build).
NEEDS_THE_NETWORK = {
    "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
    "python -m pip install torch",
}


def shown_commands(text: str) -> list[str]:
    """Each command line of the README's `sh` blocks, comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command:
                commands.append(command)
    return commands


def argument_runs(folder: Path) -> list[tuple[str, ...]]:
    """Every run of string constants that a test passes as a call's arguments or writes as a tuple or list."""
    runs = []
    for path in folder.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            items = node.args if isinstance(node, ast.Call) else getattr(node, "elts", None)
            if not isinstance(node, ast.Call | ast.Tuple | ast.List) or not items:
                continue
            run: list[str] = []
            for item in [*items, None]:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    run.append(item.value)
                elif run:
                    runs.append(tuple(run))
                    run = []
    return runs


def marked(marker: str) -> str:
    """The one command of the block README marks with `marker`, as .ci/run reads it."""
    block = README.split(marker, 1)[1]
    return re.search(r"```sh\n(.+?)\n```", block, re.S).group(1).strip()


def run_by_a_test(command: str, runs: list[tuple[str, ...]]) -> bool:
    """`perfgate WORDS...`: some test runs the command with these arguments first (any after them only bound
    the test's time, such as --trials or --time-budget)."""
    words = tuple(command.split()[1:])
    return any(run[: len(words)] == words for run in runs)


def test_every_command_the_readme_shows_is_run_by_a_test_or_by_ci():
    runs = argument_runs(ROOT / "tests")
    commands = shown_commands(README)
    assert "python -m pip install -e . && perfgate demo" in commands
    run_by_ci = {marked(m) for m in ("<!-- first-run -->", "<!-- test-command -->") if m in CI}
    unrun = []
    for command in commands:
        if command in NEEDS_THE_NETWORK or command in run_by_ci:
            continue
        if command.startswith("perfgate "):
            if not run_by_a_test(command, runs):
                unrun.append(command)
        elif command not in CI and not any(part.strip() in CI for part in command.split("&&")):
            unrun.append(command)
    assert unrun == []


def test_the_readmes_first_run_is_the_install_and_the_demo():
    assert marked("<!-- first-run -->") == "python -m pip install -e . && perfgate demo"


def test_ci_runs_both_marked_blocks():
    assert "<!-- first-run -->" in CI and "<!-- test-command -->" in CI


def test_the_readme_reads_top_to_bottom_in_at_most_about_2500_words():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings == [
        "Install",
        "The first run",
        "Your own model",
        "The CI recipe",
        "Reading the report",
        "How verdicts are decided",
        "Reference",
        "Development",
    ]
    assert len(README.split()) <= 2600
    # The first command comes early: no more than the pitch and the install before it.
    assert len(README.split("<!-- first-run -->")[0].split()) <= 450


def test_every_link_into_the_reference_lands_on_a_heading():
    reference = (ROOT / "docs/reference.md").read_text(encoding="utf-8")

    def anchor(heading: str) -> str:
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

    anchors = {anchor(h) for h in re.findall(r"^#+ (.+)$", reference, re.M)}
    anchors |= set(re.findall(r'<a name="([^"]+)"', reference))
    links = re.findall(r"\]\(docs/reference\.md#([^)]+)\)", README)
    assert links and sorted(set(links) - anchors) == []
