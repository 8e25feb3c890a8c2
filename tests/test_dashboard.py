"""The history dashboard: its page's charts, and the page loaded in a real browser (headless Chromium)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from perfgate.judge.trends import series_of
from perfgate.records.history import HistoryStore
from tests.helpers.cli import run_main
from tests.helpers.history import recorded


class Page(HTMLParser):
    """What a test reads off the page: its series, their charts, the points and change points of each."""

    def __init__(self) -> None:
        super().__init__()
        self.series: list[dict[str, str]] = []
        self.charts: list[dict[str, object]] = []
        self.scripts = 0
        self.fetched: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "section":
            self.series.append({k: v or "" for k, v in attributes.items()})
        elif tag == "svg":
            self.charts.append({"metric": attributes.get("data-metric"), "points": 0, "changes": 0})
        elif tag == "circle":
            self.charts[-1]["points"] += 1  # type: ignore[operator]
        elif tag == "line" and attributes.get("class") == "change":
            self.charts[-1]["changes"] += 1  # type: ignore[operator]
        elif tag == "script":
            self.scripts += 1
        for name in ("src", "href"):
            if attributes.get(name):
                self.fetched.append(attributes[name] or "")


def history_with_a_step(folder: Path) -> HistoryStore:
    """Twelve runs of `w` fp32, the eighth 10% slower (and regressed), three trials each."""
    store = HistoryStore(folder)
    for index in range(12):
        slower = 0.9 if index >= 7 else 1.0
        store.append(
            recorded(
                commit=f"{index:02d}" * 20,
                at=f"2026-11-{index + 1:02d}T10:00:00+00:00",
                scale=slower * (1 + 0.004 * (index % 3 - 1)),
            )
        )
    return store


def test_the_page_has_a_chart_per_metric_with_every_trial_and_the_change_point(tmp_path, monkeypatch, capsys):
    history_with_a_step(tmp_path / "history")
    (tmp_path / "history" / "broken.json").write_text("{")
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "history", "--history-dir", "history", "--html", "site")
    assert result.returncode == 0 and "dashboard written to site/index.html" in result.stdout
    page = Page()
    page.feed((tmp_path / "site" / "index.html").read_text(encoding="utf-8"))
    assert page.series == [{"class": "series", "data-workload": "w", "data-config": "fp32"}]
    assert page.charts == [
        {"metric": "samples/s", "points": 36, "changes": 1},
        {"metric": "peak memory", "points": 36, "changes": 0},
    ]
    assert page.scripts == 0 and page.fetched == []  # nothing to run, nothing to fetch: opens from a file
    assert "skipped " in (tmp_path / "site" / "index.html").read_text() and "broken.json" in result.stderr


def test_a_series_of_one_recorded_run_is_drawn_with_its_commit(tmp_path, monkeypatch, capsys):
    """The first push's record is a series of one run: drawn (its trials, its commit), not left out."""
    HistoryStore(tmp_path / "history").append(recorded(commit="f" * 40))
    monkeypatch.chdir(tmp_path)
    result = run_main(capsys, "history", "--history-dir", "history", "--html", "site")
    assert result.returncode == 0 and "; 1 run)\n" in result.stdout
    text = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    page = Page()
    page.feed(text)
    assert page.series == [{"class": "series", "data-workload": "w", "data-config": "fp32"}]
    assert page.charts == [
        {"metric": "samples/s", "points": 3, "changes": 0},
        {"metric": "peak memory", "points": 3, "changes": 0},
    ]
    assert text.count(">fffffff</text>") == 2  # the commit under each chart's one run
    assert "1 run</p>" in text and "(no verdict)" not in text  # a stored-baseline record: its verdict shows


@pytest.mark.e2e
def test_the_dashboard_is_drawn_without_torch(tmp_path):
    """The history workflow's dashboard job installs perfgate without torch (it measures nothing): `perfgate
    history --html` must not import it. A fresh process where importing torch fails draws the page."""
    HistoryStore(tmp_path / "history").append(recorded(commit="f" * 40))
    script = (
        "import sys; sys.modules['torch'] = None\n"  # `import torch` now raises ImportError
        "from perfgate.cli import main\n"
        "code = main(['history', '--history-dir', 'history', '--html', 'site'])\n"
        "assert 'torch' not in [name.split('.')[0] for name, module in sys.modules.items() if module is not None]\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dashboard written to site/index.html" in done.stdout and (tmp_path / "site" / "index.html").is_file()
    workflow = (Path(__file__).parent.parent / ".github/workflows/perfgate-history.yml").read_text(encoding="utf-8")
    assert "--no-deps" in workflow and "download.pytorch.org" not in workflow


def _chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None)


@pytest.mark.e2e
@pytest.mark.skipif(_chromium() is None, reason="needs Chromium (.ci/run installs Debian's chromium)")
def test_the_page_loads_in_a_real_browser_without_errors_and_draws_every_series(tmp_path):
    store = history_with_a_step(tmp_path / "history")
    page_path = tmp_path / "site" / "index.html"
    from perfgate.records.results import write_text_atomic
    from perfgate.report.dashboard import render_dashboard

    write_text_atomic(page_path, render_dashboard(series_of(store.load())))
    browser = [_chromium() or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr"]
    browser += ["--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*browser, "--dump-dom", page_path.as_uri()], capture_output=True, text=True, timeout=120, check=True
    )
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    drawn = Page()
    drawn.feed(dom.stdout)  # the DOM as the browser built it
    assert [c["metric"] for c in drawn.charts] == ["samples/s", "peak memory"]
    assert all(c["points"] == 36 for c in drawn.charts)
    shot = tmp_path / "dashboard.png"
    subprocess.run(
        [*browser, "--hide-scrollbars", "--window-size=1400,700", f"--screenshot={shot}", page_path.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
