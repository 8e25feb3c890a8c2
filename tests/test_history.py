"""The history store and `perfgate history`: records written whole, read strictly, bad files skipped by name."""

from __future__ import annotations

import json
import multiprocessing
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from perfgate.app.judging import judge
from perfgate.judge.trends import series_of
from perfgate.judge.verdict import Status
from perfgate.records.history import HistoryStore
from perfgate.report.history import format_history
from tests.helpers.cli import run_in_process, run_main
from tests.helpers.git import commit, new_repository
from tests.helpers.history import recorded
from tests.helpers.workloads import GATED, TINY_FILE

TINY = "perf/tiny.py:tiny"
ONE_TRIAL = ("--configs", "fp32", "--trials", "1", "--max-trials", "1", "--threads", "1", "--quiet")


def test_a_record_reads_back_as_written_with_its_verdicts_and_commit(tmp_path):
    store = HistoryStore(tmp_path / "history")
    path = store.append(recorded())
    assert path.parent == tmp_path / "history" and path.name.startswith("20261123T100000-aaaaaaaaaaaa-")
    (record,) = store.load().records
    assert record.commit == "a" * 40 and record.mode == "stored baselines" and record.source == str(path)
    assert record.verdicts["w/fp32"].status in ("no change", "inconclusive", "improvement")
    written = recorded().entries[0].configs["fp32"].samples_per_sec
    assert record.entries[0].configs["fp32"].samples_per_sec == pytest.approx(written, rel=1e-6)  # 6 digits kept
    assert json.loads(path.read_text())["perfgate_history"] == 1


def test_two_records_of_one_commit_at_one_second_are_two_files(tmp_path):
    store = HistoryStore(tmp_path)
    first, second = store.append(recorded()), store.append(recorded())
    assert first != second and len(store.load().records) == 2


def _append_many(folder: str, count: int) -> None:
    store = HistoryStore(Path(folder))
    for _ in range(count):
        store.append(recorded())


def test_concurrent_writers_lose_no_record(tmp_path):
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_append_many, args=(str(tmp_path), 10)) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    history = HistoryStore(tmp_path).load()
    assert len(history.records) == 20 and history.skipped == []
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith(".json")]  # no temporary file left


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("truncated.json", '{"perfgate_history": 1, "recorded_at": ', "not a readable JSON record"),
        ("list.json", "[1, 2]", "the record must be a mapping, got list"),
        ("newer.json", '{"perfgate_history": 9}', "perfgate_history is 9, this perfgate reads 1: written by a newer"),
        ("other.json", '{"name": "package.json"}', "perfgate_history is None, this perfgate reads 1: not a perfgate"),
        (
            "code.json",
            '{"perfgate_history": 1, "recorded_at": "x", "mode": "m", "entries": [{"workload": "w", '
            '"fingerprint": {}, "configs": {"fp32": {"trials": "__import__(\'os\').system(\'touch pwned\')"}}}]}',
            "entries[0].configs.fp32.trials must be a non-empty list",
        ),
        ("binary.json", b"\xff\xfe\x00garbage", "not a readable JSON record"),
    ],
)
def test_a_corrupt_or_hostile_record_is_named_and_skipped_and_the_rest_loads(tmp_path, name, content, reason):
    store = HistoryStore(tmp_path)
    store.append(recorded())
    bad = tmp_path / name
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    history = store.load()
    assert len(history.records) == 1
    (warning,) = history.skipped
    assert warning.startswith(f"skipped {bad}: {reason}"), warning
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_a_huge_file_and_a_link_are_skipped_unread(tmp_path):
    store = HistoryStore(tmp_path)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(9 << 20)
    os.symlink("/etc/passwd", tmp_path / "link.json")
    history = store.load()
    assert history.records == []
    assert sorted(history.skipped) == [
        f"skipped {huge}: larger than 8 MiB: not a run's record",
        f"skipped {tmp_path / 'link.json'}: not a regular file",
    ]


def test_history_shows_each_series_and_names_the_change_point(tmp_path):
    store = HistoryStore(tmp_path)
    for index in range(12):
        slower = 0.9 if index >= 7 else 1.0  # the eighth commit made the workload 10% slower
        day = f"2026-11-{index + 1:02d}T10:00:00+00:00"
        store.append(recorded(commit=f"{index:02d}" * 20, at=day, scale=slower * (1 + 0.004 * (index % 3 - 1))))
    (series,) = series_of(store.load())
    assert (series.workload, series.config, len(series.runs)) == ("w", "fp32", 12)
    (point,) = series.change_points
    assert point.index == 7 and point.change == pytest.approx(-0.10, abs=0.02)
    text = format_history([series], limit=5)
    assert text.startswith("w fp32  (cpu Test CPU, 2 threads, torch None; 12 runs)\n")  # the hand-made machine
    assert len([line for line in text.splitlines() if line.startswith("  0") or line.startswith("  1")]) == 5
    assert "  change point: samples/s -" in text and " at 070707070707 (2026-11-08)" in text


def test_history_of_an_empty_folder_exits_3_and_says_how_to_record(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "history", "--html", "site")
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr == (
        f"error: no recorded run in {Path('.perfgate/history')}; record runs with perfgate check --record, "
        "or give --history-dir or --history-branch\n"
    )
    assert not (tmp_path / "site").exists()  # no dashboard of nothing


def test_export_of_an_empty_history_exits_3_and_says_how_to_record(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "export", "--to", "bencher", "--output", "bmf.json")
    assert result.returncode == 3 and result.stdout == "" and not (tmp_path / "bmf.json").exists()
    assert result.stderr.startswith(f"error: no recorded run in {Path('.perfgate/history')}; record runs with ")


def test_a_bad_history_setting_is_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\nhistory = 3\n")
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "history")
    assert result.returncode == 2
    assert result.stderr.startswith("error: history must be a folder path, got 3 (")


@pytest.mark.e2e
def test_check_record_appends_a_run_that_history_reads(gated_project, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "history"
    one_trial = ("--configs", "fp32", "--trials", "1", "--max-trials", "1", "--threads", "1", "--quiet")
    result = run_in_process("check", GATED, *one_trial, "--record", "--history-dir", str(folder), cwd=gated_project)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    (path,) = folder.iterdir()
    assert f"recorded in the history: {path}\n" in result.stdout
    monkeypatch.chdir(gated_project)
    shown = run_main(capsys, "history", "--history-dir", str(folder))
    assert shown.returncode == 0 and shown.stdout.startswith("gated fp32  (") and "1 run)" in shown.stdout
    (record,) = HistoryStore(folder).load().records
    assert record.entries[0].workload == "gated" and record.recorded_at[:4] == str(datetime.now(UTC).year)


def tiny_repository(path: Path) -> tuple[Path, str]:
    """A git repository with one commit, the tiny workload (perf/tiny.py) and no baselines; its SHA."""
    repo = new_repository(path)
    files = {"perf/tiny.py": TINY_FILE.read_text(encoding="utf-8"), ".gitignore": ".perfgate/\nsite/\n"}
    return repo, commit(repo, files, "the first commit")


@pytest.mark.e2e
def test_recorded_checks_without_baselines_fill_the_history_and_the_dashboard_from_the_first_commit(
    tmp_path, monkeypatch, capsys
):
    repo, first = tiny_repository(tmp_path / "repo")
    checked = run_in_process("check", TINY, *ONE_TRIAL, "--record", cwd=repo)
    assert checked.returncode == 3, checked.stdout + checked.stderr  # nothing compared: exit 3, as before
    assert "no stored baseline: recorded without a verdict\n" in checked.stdout
    assert "samples/s" in checked.stdout  # the run's table: it measured
    second = commit(repo, {"README.md": "tiny\n"}, "the second commit")
    assert run_in_process("check", TINY, *ONE_TRIAL, "--record", cwd=repo).returncode == 3
    unrecorded = run_in_process("check", TINY, *ONE_TRIAL, cwd=repo)  # no --record: nothing measured, as before
    assert unrecorded.returncode == 3 and "samples/s" not in unrecorded.stdout
    records = HistoryStore(repo / ".perfgate" / "history").load().records
    assert [r.commit for r in records] == [first, second]
    assert [(r.mode, r.verdicts, r.exit_code, r.base_commit) for r in records] == [
        ("no stored baseline", {}, 3, None)
    ] * 2
    monkeypatch.chdir(repo)
    shown = run_main(capsys, "history", "--html", "site")
    assert shown.returncode == 0 and shown.stdout.startswith("tiny fp32  (") and "; 2 runs)\n" in shown.stdout
    assert f"  {first[:12]}  " in shown.stdout and f"  {second[:12]}  " in shown.stdout
    page = (repo / "site" / "index.html").read_text(encoding="utf-8")
    assert page.count('<section class="series" data-workload="tiny" data-config="fp32">') == 1
    for sha in (first, second):  # one trial each, a point on each chart (samples/s, peak memory)
        assert page.count(f"<title>{sha[:12]} at ") == 2 and f">{sha[:7]}</text>" in page


@pytest.mark.e2e
def test_a_check_against_the_parent_records_the_head_run_with_its_paired_verdict(tmp_path):
    repo, base = tiny_repository(tmp_path / "repo")
    head = commit(repo, {"README.md": "tiny\n"}, "the second commit")
    checked = run_in_process("check", TINY, *ONE_TRIAL, "--against", "HEAD~1", "--record", cwd=repo)
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr
    assert "recorded without a verdict" not in checked.stdout
    history = HistoryStore(repo / ".perfgate" / "history").load()
    (record,) = history.records
    assert (record.commit, record.base_commit, record.base_ref) == (head, base, "HEAD~1")
    assert record.mode.startswith(f"paired: the working tree ({head[:10]}) against HEAD~1 ({base[:10]})")
    (verdict,) = record.verdicts.values()
    assert list(record.verdicts) == ["tiny/fp32"] and verdict.status in {s.value for s in Status}
    assert record.exit_code == checked.returncode
    for side in (record.entries, record.base_entries):  # the head's trial is the series', the base's kept beside it
        assert [(e.workload, len(e.configs["fp32"].trials)) for e in side] == [("tiny", 1)]
    (series,) = series_of(history)
    assert [(run.commit, run.verdict) for run in series.runs] == [(head, verdict.status)]


def test_export_writes_the_latest_run_in_bencher_and_github_action_benchmark_formats(tmp_path, monkeypatch, capsys):
    store = HistoryStore(tmp_path / "history")
    store.append(recorded(commit="1" * 40, at="2026-11-01T10:00:00+00:00"))
    store.append(recorded(commit="2" * 40, at="2026-11-02T10:00:00+00:00", scale=0.5))
    monkeypatch.chdir(tmp_path)
    bencher = json.loads(run_main(capsys, "export", "--to", "bencher", "--history-dir", "history").stdout)
    (name,) = bencher
    assert name == "w fp32" and set(bencher[name]) == {"throughput", "peak-memory"}
    latest = bencher[name]["throughput"]
    assert latest["lower_value"] <= latest["value"] <= latest["upper_value"]
    older = run_main(capsys, "export", "--to", "bencher", "--history-dir", "history", "--commit", "1111")
    assert json.loads(older.stdout)[name]["throughput"]["value"] == pytest.approx(2 * latest["value"], rel=0.02)
    (row,) = json.loads(
        run_main(capsys, "export", "--to", "github-action-benchmark", "--history-dir", "history").stdout
    )
    assert (row["name"], row["unit"]) == ("w fp32", "samples/s") and row["value"] == latest["value"]
    assert row["extra"].startswith("commit 222222222222; 3 trials; stored baselines")
    missing = run_main(capsys, "export", "--to", "bencher", "--history-dir", "history", "--commit", "abc")
    assert missing.returncode == 3 and missing.stderr.startswith("error: no recorded run of commit abc in history;")
    written = run_main(capsys, "export", "--to", "bencher", "--history-dir", "history", "--output", "bmf.json")
    assert written.returncode == 0 and json.loads((tmp_path / "bmf.json").read_text()) == json.loads(written.stdout)
    renamed = run_main(capsys, "export", "--format", "bencher", "--history-dir", "history")
    assert renamed.returncode == 2 and renamed.stderr.startswith("error: --format is not an option here: ")
    assert renamed.stderr.rstrip().endswith("; use --to")


def test_the_markdown_report_charts_each_gated_config_beside_its_recorded_runs(tmp_path):
    from perfgate.judge.verdict import compare_run
    from perfgate.records.series import trends_of
    from perfgate.report.markdown import format_markdown
    from tests.helpers.history import SETTINGS
    from tests.helpers.results import BASE_MS, BASELINE, phased_run

    store = HistoryStore(tmp_path)
    for index in range(3):
        store.append(recorded(commit=f"{index}" * 40, at=f"2026-11-0{index + 1}T10:00:00+00:00"))
    result = compare_run(phased_run({**BASE_MS, "forward": 8.0}), BASELINE, SETTINGS)  # this run: slower
    (trend,) = trends_of(result, store.load())
    assert (trend.workload, trend.config, trend.labels) == ("w", "fp32", ["0000000", "1111111", "2222222", "this"])
    assert trend.values[-1] < 0.8 * trend.values[0]
    text = format_markdown(judge(result, diagnosed=False, trends=[trend]))
    assert "#### Trend: w fp32\n\n```mermaid\nxychart-beta\n" in text
    assert '    x-axis ["0000000", "1111111", "2222222", "this"]\n' in text
    assert trends_of(result, HistoryStore(tmp_path / "none").load()) == []  # nothing recorded: no chart
