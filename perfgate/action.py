"""GitHub Actions annotations for a perfgate run: `python -m perfgate.action MODE CODE RESULTS LOG`
(also `python -m perfgate.annotations`, its earlier name).

Prints `::error` for each regression, failure or missing baseline, `::warning` for each inconclusive
verdict, a `::notice` after an update, and an `::error` with the last line of the log when perfgate
itself failed. Text from the run is escaped, so it can never start a workflow command of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from perfgate.errors import PerfgateError


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, title: str, message: str) -> str:
    return f"::{kind} title={escape_property(title)}::{escape_data(message)}"


def workflow_commands(mode: str, code: int, results: Path, log: Path) -> list[str]:
    """The workflow commands for one run of the action's gate step."""
    if mode == "update" and code == 0:
        return [command("notice", "perfgate", "baselines written: review and commit them")]
    lines: list[str] = []
    if mode == "check" and code in (0, 1, 3) and results.is_file():
        from perfgate.judge.verdict import Status, fails_build, judge_saved
        from perfgate.project import load_project_config
        from perfgate.records.results import load_results

        try:
            judged = judge_saved(load_results(results), load_project_config())
        except PerfgateError as error:
            return [command("error", "perfgate", error.one_line())]
        for workload in judged.workloads:
            if workload.problem:
                lines.append(command("error", f"perfgate: {workload.workload}", workload.problem))
            for v in workload.configs:
                kind = "error" if fails_build(v.status) else "warning" if v.status == Status.INCONCLUSIVE else ""
                if kind:
                    lines.append(command(kind, f"perfgate: {v.workload} {v.config} {v.status.value}", v.reason))
        return lines
    last = next((line for line in reversed(_lines(log)) if line.strip()), f"perfgate {mode} exited {code}")
    return [command("error", f"perfgate {mode} failed (exit {code})", last)]


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def main(argv: list[str]) -> int:
    mode, code, results, log = argv
    print("\n".join(workflow_commands(mode, int(code), Path(results), Path(log))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
