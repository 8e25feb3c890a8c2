"""A judged check's outputs, written one way for every front end that checks (`perfgate check`, `pytest
--perfgate`): the results file, then the Markdown report of the one judgement (`records.judgement`) to its file
and, where asked, to the GitHub Actions job summary.

The front ends differ only in what a step that fails becomes, each step being after the measurement: `perfgate
check` warns naming the step (and exits 2 where a report asked for is missing, `app.gate`), a pytest session fails
on it (`app.suite`). The Action and the demo read the results file back and judge it the same way
(`app.judging.judge_file`).
"""

from __future__ import annotations

from pathlib import Path

from perfgate.app.request import Outputs
from perfgate.app.sink import Sink
from perfgate.records.judgement import Judgement
from perfgate.records.results import RunResult


def write_results(run: RunResult, path: Path | None, sink: Sink | None = None) -> None:
    """The results file at `path` (None: not asked for); with a `sink`, the line that says where it went."""
    if path is not None:
        run.write_json(path)
        if sink is not None:
            sink.info(f"results written to {path}\n")


def write_report(judgement: Judgement, outputs: Outputs, written: list[Path], *, job_summary: bool = False) -> None:
    """The Markdown report of a judged check, naming the results file (`outputs.json`) for the full data: to
    `outputs.markdown`, each file added to `written` as it is written, and with `job_summary` appended to the GitHub
    Actions job summary (as the Action does with the report of `perfgate check --markdown`)."""
    if outputs.markdown is None and not job_summary:
        return
    from perfgate.records.results import write_text_atomic
    from perfgate.report.markdown import append_job_summary, format_markdown

    text = format_markdown(judgement, details=None if outputs.json is None else str(outputs.json))
    if outputs.markdown is not None:
        write_text_atomic(outputs.markdown, text)
        written.append(outputs.markdown)
    if job_summary:
        append_job_summary(text)
