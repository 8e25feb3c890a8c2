"""The progress lines (a bound on the time left, extra trials that say why) and verdicts in colour on a
terminal only (NO_COLOR and other streams get plain text)."""

from __future__ import annotations

import io
import json
import re

from perfgate.measure.lab import PlannedTrial, TrialEvent
from perfgate.report.colour import RED, paint, wanted
from perfgate.report.progress import Progress
from tests.helpers.cli import run_main
from tests.helpers.results import BASE_MS, phased_trial, results_document


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_events(progress: Progress, pairs: int, total: int = 1) -> None:
    result = phased_trial(0, BASE_MS)
    for pair in range(pairs):
        for index in range(total):
            planned = PlannedTrial(index, "w", "fp32", pair)
            progress(TrialEvent(planned, total))
            progress(TrialEvent(planned, total, finished=result))


def test_a_checks_progress_bounds_the_time_left_by_its_budget():
    stream = io.StringIO()
    run_events(Progress(3, stream, most=20, budget_s=80, unit="pair"), 2)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[1/1] w fp32 pair 1/3: ")
    assert re.search(r"; \d+ s elapsed, at most (79|80) s left \(time budget 80 s\)$", lines[0]), lines[0]


def test_extra_pairs_say_why_they_run_and_how_many_there_can_be():
    stream = io.StringIO()
    run_events(Progress(3, stream, most=20, budget_s=80, unit="pair"), 5)
    lines = stream.getvalue().splitlines()
    assert lines[3].startswith("[1/1] w fp32 pair 4 of at most 20 (extra: the verdict is still open): "), lines[3]
    assert lines[4].startswith("[1/1] w fp32 pair 5 of at most 20 (extra: the verdict is still open): "), lines[4]


def test_a_lab_run_estimates_the_time_left_from_its_trials():
    stream = io.StringIO()
    run_events(Progress(1, stream), 1, total=3)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[1/3] w fp32 trial 1/1: ")
    assert re.search(r"elapsed, about \d+ s left$", lines[0]), lines[0]
    assert lines[-1].endswith("about 0 s left"), lines[-1]


def test_a_progress_line_on_a_terminal_is_redrawn_in_place():
    stream = Terminal()
    run_events(Progress(3, stream, most=8, budget_s=60), 1)
    assert "\r\033[K[1/1] w fp32 trial 1/3 running (0 s elapsed, at most 60 s left (time budget 60 s))" in (
        stream.getvalue()
    )


REPORT = """\
gate: w
  config  base s/s  head s/s   ratio  verdict
  fp32     1,000.0     800.0  0.800x  REGRESSION
  bf16     1,000.0     990.0  0.990x  no change

perfgate check: 1 regression (w fp32); 1 no change. Exit 1 (fail).
"""


def test_verdicts_are_coloured_and_the_plain_text_is_unchanged_beneath():
    painted = paint(REPORT)
    assert f"{RED}\033[1mREGRESSION\033[0m" in painted
    assert f"{RED}\033[1mExit 1 (fail).\033[0m" in painted
    assert re.sub(r"\033\[[0-9;]*m", "", painted) == REPORT


def test_colour_only_on_a_terminal_and_never_with_no_color():
    assert wanted(Terminal(), {})
    assert not wanted(io.StringIO(), {})
    assert not wanted(Terminal(), {"NO_COLOR": "1"})
    assert wanted(Terminal(), {"NO_COLOR": ""})  # no-color.org: set and not empty
    assert wanted(io.StringIO(), {"FORCE_COLOR": "1"})


def test_compares_verdict_is_coloured_only_where_colour_is_asked_for(tmp_path, monkeypatch, capsys):
    document = results_document()
    (tmp_path / "base.json").write_text(json.dumps(document))
    for trial in document["workloads"][0]["configs"]["fp32"]["trials"]:
        trial["samples_per_sec"] *= 0.7
    (tmp_path / "head.json").write_text(json.dumps(document))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")  # captured output is no terminal: ask for colour as a CI log may
    coloured = run_main(capsys, "compare", "base.json", "head.json")
    assert coloured.returncode == 1
    assert f"{RED}\033[1mREGRESSION\033[0m" in coloured.stdout
    assert coloured.stdout.rstrip().endswith(f"{RED}\033[1mExit 1 (fail).\033[0m")
    monkeypatch.setenv("NO_COLOR", "1")
    plain = run_main(capsys, "compare", "base.json", "head.json")
    assert "\033[" not in plain.stdout and plain.stdout == re.sub(r"\033\[[0-9;]*m", "", coloured.stdout)
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.delenv("FORCE_COLOR")
    assert "\033[" not in run_main(capsys, "compare", "base.json", "head.json").stdout  # not a terminal
    markdown = run_main(capsys, "compare", "base.json", "head.json", "--format", "markdown")
    assert "\033[" not in markdown.stdout
