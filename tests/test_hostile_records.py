"""Hostile records (issue 32): a history record, results file or baseline holding a number no figure can be
(400 digits) is named and skipped by the history, and is a one-line error in a results or baseline file, never
an "internal error" and never the end of a command that has other records to read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from perfgate.records.baselines import render_baseline
from perfgate.records.history import HistoryStore
from tests.helpers.cli import CliResult, run_main
from tests.helpers.history import recorded
from tests.helpers.results import BASELINE, results_document

HUGE = 10**399  # 400 digits: json and YAML read it as an int; math.isfinite and float() overflow on it


def assert_one_line_error(result: CliResult, *parts: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: "), line
    assert "internal error" not in line, line
    for part in parts:
        assert part in line, line


def _history_with_a_huge_figure(folder: Path) -> tuple[Path, Path]:
    """A history folder holding one good record and one whose first trial's samples/s has 400 digits."""
    store = HistoryStore(folder)
    good = store.append(recorded())
    document = json.loads(good.read_text(encoding="utf-8"))
    document["entries"][0]["configs"]["fp32"]["trials"][0]["samples_per_sec"] = HUGE
    bad = folder / "20261124T100000-bbbbbbbbbbbb-00000000.json"
    bad.write_text(json.dumps(document), encoding="utf-8")
    assert str(HUGE) in bad.read_text(encoding="utf-8")
    return good, bad


def test_a_history_record_with_a_400_digit_figure_is_named_and_skipped_and_the_good_one_loads(tmp_path):
    good, bad = _history_with_a_huge_figure(tmp_path)
    history = HistoryStore(tmp_path).load()
    assert [record.source for record in history.records] == [str(good)]
    (warning,) = history.skipped
    assert warning.startswith(f"skipped {bad}: "), warning
    assert "400 digits" in warning and "samples_per_sec" in warning, warning


def _spoilt(folder: Path, spoil) -> tuple[Path, Path]:
    """A history folder holding one good record and a copy of it that `spoil` changed (in its JSON)."""
    store = HistoryStore(folder)
    good = store.append(recorded())
    document = json.loads(good.read_text(encoding="utf-8"))
    spoil(document)
    bad = folder / "20261124T100000-cccccccccccc-00000000.json"
    bad.write_text(json.dumps(document), encoding="utf-8")
    return good, bad


def _odd_environment(document: dict) -> None:
    # the reader looks for the CPU's instruction set in an entry's environment when the fingerprint lacks it
    entry = document["entries"][0]
    entry["fingerprint"].pop("cpu_capability", None)
    entry["environment"] = {"cpu": "not a table"}


def _unknown_status(document: dict) -> None:
    document["verdicts"]["w/fp32"]["status"] = "slower"


def _text_ratio(document: dict) -> None:
    document["verdicts"]["w/fp32"]["ratio"] = "0.5"


@pytest.mark.parametrize("spoil", [_odd_environment, _unknown_status, _text_ratio])
def test_a_record_that_breaks_the_reader_in_any_way_is_named_and_skipped(tmp_path, spoil):
    good, bad = _spoilt(tmp_path, spoil)
    history = HistoryStore(tmp_path).load()
    assert [record.source for record in history.records] == [str(good)]
    (warning,) = history.skipped
    assert warning.startswith(f"skipped {bad}: "), warning


def test_an_unknown_verdict_status_is_named(tmp_path):
    _, bad = _spoilt(tmp_path, _unknown_status)
    (warning,) = HistoryStore(tmp_path).load().skipped
    assert warning.startswith(f"skipped {bad}: verdicts['w/fp32'].status is 'slower', not one of regression, "), warning


def test_history_html_skips_a_record_with_a_huge_number_and_writes_the_page(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "history"
    _, bad = _history_with_a_huge_figure(folder)
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "history", "--history-dir", str(folder), "--html", "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("w fp32  (") and "1 run)" in result.stdout
    (warning,) = result.stderr.splitlines()
    assert warning.startswith(f"warning: skipped {bad}: "), warning
    page = tmp_path / "site" / "index.html"
    assert page.is_file() and "dashboard written to" in result.stdout


def test_a_huge_number_in_a_results_file_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    document = results_document()
    document["workloads"][0]["configs"]["fp32"]["trials"][1]["memory"]["peak_bytes"] = HUGE
    (tmp_path / "r.json").write_text(json.dumps(document), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for command in ("report", "compare"):
        result = run_main(capsys, command, "r.json")
        assert_one_line_error(result, "r.json", "400 digits", "trials[1].memory.peak_bytes")
        assert result.stdout == ""


def _hostile_baseline(folder: Path, workload: str, entry) -> Path:
    """The baseline file of `workload` whose first fp32 trial's samples/s has 400 digits."""
    document = yaml.safe_load(render_baseline(workload, [entry]))
    (machine,) = document["machines"].values()
    machine["configs"]["fp32"]["trials"][0]["samples_per_sec"] = HUGE
    path = folder / "baselines" / f"{workload}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    assert str(HUGE) in path.read_text(encoding="utf-8")
    return path


def test_a_huge_number_in_a_baseline_file_makes_compare_a_one_line_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "r.json").write_text(json.dumps(results_document()), encoding="utf-8")
    path = _hostile_baseline(tmp_path, "w", BASELINE["w"])
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "compare", "r.json")
    assert_one_line_error(result, str(Path("baselines") / "w.yaml"), "'samples_per_sec'", "400 digits")
    assert path.name in result.stderr and result.stdout == ""


WATCHED = """\
import pathlib

import torch
from torch.nn import functional as F

import perfgate

TRAINED = pathlib.Path({mark!r})  # written by the first training step: a trial ran


class Points(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, index):
        x = torch.randn(8, generator=torch.Generator().manual_seed(index))
        return x, x.sum(dim=0, keepdim=True)


def loss(model, batch):
    TRAINED.touch()
    x, y = batch
    return F.mse_loss(model(x), y)


def watched():
    model = lambda: torch.nn.Linear(8, 1)  # noqa: E731
    return perfgate.Workload(name="watched", model=model, dataset=Points, loss=loss, batch_size=8, steps=2)
"""


def test_a_huge_number_in_a_baseline_file_stops_check_before_measuring(tmp_path, monkeypatch, capsys):
    mark = tmp_path / "trained"
    (tmp_path / "watched.py").write_text(WATCHED.format(mark=str(mark)), encoding="utf-8")
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "watched.yaml").write_text(
        "schema_version: 1\nworkload: watched\nmachines:\n  m:\n    fingerprint: {}\n    configs:\n      fp32:\n"
        f"        trials:\n        - samples_per_sec: {HUGE}\n          peak_bytes: 1\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    result = run_main(
        capsys, "check", "watched.py:watched", "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet"
    )
    assert_one_line_error(result, str(Path("baselines") / "watched.yaml"), "'samples_per_sec'", "400 digits")
    assert not mark.exists()  # no trial ran


@pytest.mark.e2e
def test_a_hostile_record_on_the_history_branch_does_not_cancel_the_checks_verdict(tmp_path):
    """Anyone who can push to the history branch can leave a record there with a 400-digit figure: a check that
    charts the history (`--markdown`) fetches it, names it as skipped, and still ends with its own verdict and
    its report. A real origin, a real branch and a real check of a tiny workload (no baseline: exit 3)."""
    from perfgate.records.history_branch import DEFAULT_HISTORY_BRANCH, push_record
    from tests.helpers.cli import run_in_process
    from tests.helpers.git import commit, git, new_repository
    from tests.helpers.workloads import TINY_FILE

    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(origin))
    repo = new_repository(tmp_path / "repo")
    commit(repo, {"perf/tiny.py": TINY_FILE.read_text(encoding="utf-8"), ".gitignore": ".perfgate/\n"}, "tiny")
    git(repo, "remote", "add", "origin", str(origin))
    _, bad = _history_with_a_huge_figure(tmp_path / "made")
    push_record(repo, bad.name, bad.read_text(encoding="utf-8"))

    checked = run_in_process(
        "check",
        "perf/tiny.py:tiny",
        *("--configs", "fp32", "--trials", "1", "--max-trials", "1", "--threads", "1", "--quiet"),
        *("--markdown", "report.md", "--history-branch", DEFAULT_HISTORY_BRANCH),
        cwd=repo,
    )
    assert checked.returncode == 3, checked.stdout + checked.stderr  # the verdict's: no baseline
    assert "internal error" not in checked.stderr and "Traceback" not in checked.stderr, checked.stderr
    skipped = [line for line in checked.stderr.splitlines() if bad.name in line]
    assert len(skipped) == 1 and skipped[0].startswith("warning: skipped "), checked.stderr
    assert (repo / "report.md").read_text(encoding="utf-8").count("no baseline") >= 1
