"""The fork server of a paired check's trials: forked trials measure what fresh ones do, and die as they do."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from perfgate.measure.device import _status_kib
from perfgate.measure.lab import RunningTrial, TrialPlace, run_trial_process, start_trial_server
from perfgate.measure.trial import TrialSpec
from perfgate.measure.trialserver import (
    MADV_POPULATE_READ,
    PAGE_SIZE,
    ServerGone,
    TrialServer,
    map_pages,
    resident_file_pages,
)
from perfgate.references import resolve_references
from tests.helpers.workloads import WORKLOADS
from tests.workloads.tiny import tiny

pytestmark = pytest.mark.e2e  # real trials, forked from a real trial server


def spec(function: str, trial: int = 0) -> TrialSpec:
    (reference,) = resolve_references([f"{WORKLOADS / 'tiny.py'}:{function}"])
    return TrialSpec(reference.text, reference.target, "fp32", trial, "cpu", 1)


def test_a_forked_trial_computes_what_a_fresh_process_does_and_the_server_serves_the_next(tmp_path):
    place = TrialPlace(name="head")
    fresh = run_trial_process(spec("tiny"), tmp_path, 120.0, TrialPlace(name="fresh"))
    server = start_trial_server(1, place, tmp_path)
    try:
        forked = [RunningTrial(spec("tiny", trial), tmp_path, 120.0, place, server).wait() for trial in (1, 2)]
    finally:
        server.close()
    assert server.process.returncode == 0  # closing its requests ends it
    for record in forked:
        assert record.result.ok, record
        assert record.result.first_losses == fresh.result.first_losses  # seeded alike: the same numbers
        assert record.result.data_checksum == fresh.result.data_checksum
        assert record.result.threads == 1
    # The child imported nothing the server had not: torch was already there.
    assert forked[0].result.process_s < fresh.result.process_s


def test_a_forked_trial_past_its_timeout_dies_with_its_process_group_and_the_server_lives_on(tmp_path):
    place = TrialPlace(name="head")
    server = start_trial_server(1, place, tmp_path)
    try:
        hanging = RunningTrial(spec("hangs"), tmp_path, 3.0, place, server)
        pid = hanging.process.pid
        assert psutil.Process(pid).ppid() == server.process.pid  # forked by the server, not started by us
        record = hanging.wait()
        assert record.result.status == "failed" and record.failure_kind == "crash"
        assert str(record.result.failure).startswith("timed out after 3 s")
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        after = RunningTrial(spec("tiny"), tmp_path, 120.0, place, server).wait()
        assert after.result.ok, after
    finally:
        server.close()


IMPORT_RECORDING = """
import os
import sys

from tiny import tiny as _tiny

with open(os.environ["PERFGATE_TEST_IMPORTS"], "a") as imports:
    imports.write(f"{os.getpid()}\\n")  # the process that executed this module
    imports.write(f"dynamo {'torch._dynamo' in sys.modules}\\n")  # what the server had imported before it
print("a module that prints when imported")  # into the server's log, never into its replies


def tiny():
    return _tiny()
"""


def _spec_of(folder, name: str, source: str, trial: int = 0) -> TrialSpec:
    (folder / "tiny.py").write_text((WORKLOADS / "tiny.py").read_text())
    (folder / f"{name}.py").write_text(source)
    (reference,) = resolve_references([f"{folder / name}.py:tiny"])
    return TrialSpec(reference.text, reference.target, "fp32", trial, "cpu", 1)


def test_the_server_imports_a_workloads_module_once_and_each_child_builds_the_workload_from_it(tmp_path, monkeypatch):
    """A framework's import takes seconds: the server imports the workload's module before its first child, and
    every child starts with it imported, as it starts with torch. A module that raises is the child's failure, as
    a fresh trial's, and the server serves on; one whose import hangs is stopped at the trial's timeout, with the
    server."""
    imports = tmp_path / "imports.txt"
    monkeypatch.setenv("PERFGATE_TEST_IMPORTS", str(imports))
    place = TrialPlace(name="head")
    # tiny's written-out SGD, in fp32: no trial needs torch._dynamo, so the server does not import it
    server = start_trial_server(1, place, tmp_path, [tiny()], ["fp32"])
    try:
        children, finished = [], []
        for trial in (0, 1):  # one at a time, as a session runs them
            recorded = _spec_of(tmp_path, "recorded", IMPORT_RECORDING, trial)
            running = RunningTrial(recorded, tmp_path, 120.0, place, server)
            children.append(running.process.pid)
            finished.append(running.wait())
        raising = _spec_of(tmp_path, "raising", "raise RuntimeError('this module cannot be imported')\n")
        failed = RunningTrial(raising, tmp_path, 120.0, place, server).wait()
        hanging = _spec_of(tmp_path, "hanging", "import time\n\ntime.sleep(60)\n")
        with pytest.raises(ServerGone, match="^the trial server did not start a trial within 2 s importing its"):
            RunningTrial(hanging, tmp_path, 2.0, place, server)
    finally:
        server.close()
    assert all(record.result.ok for record in finished), finished
    # once, by the server, not by the children; and with no torch._dynamo imported
    assert imports.read_text().splitlines() == [str(server.process.pid), "dynamo False"]
    assert server.process.pid not in children and "a module that prints when imported" in server.log_path.read_text()
    assert failed.failure_kind == "workload" and "this module cannot be imported" in str(failed.result.failure)
    assert server.process.returncode is not None  # stopped at the hanging import's timeout


def test_a_server_that_cannot_start_is_a_one_line_error_naming_its_last_words(tmp_path):
    log = tmp_path / "server.log"
    server = TrialServer([sys.executable, "-c", "raise SystemExit('no torch here')"], dict(os.environ), None, log)
    server.process.wait()
    with pytest.raises(ServerGone, match="^the trial server has exited: no torch here$"):
        server.wait_ready()  # what a paired check waits for before its first trial, both sides' servers started
    with pytest.raises(ServerGone, match="^the trial server (has exited|did not start a trial): no torch here$"):
        server.fork(tmp_path / "spec.json", tmp_path / "out.json", tmp_path / "trial.log", None)
    server.close()


def _rss_file() -> int:
    """Resident pages of mapped files in this process, in bytes (/proc/self/status)."""
    value = _status_kib("RssFile")
    assert value is not None, "no RssFile in /proc/self/status"
    return value


def _forked_rss_file(runs: list[tuple[int, int]] | None, advice: int = MADV_POPULATE_READ) -> int:
    """RssFile of a child forked from this process, after `map_pages(runs, advice)` (None: without it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            if runs is not None:
                map_pages(runs, advice)
            os.write(write, str(_rss_file()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        value = int(answer.read())
    os.waitpid(pid, 0)
    return value


@pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="needs Linux's /proc/self/pagemap")
def test_a_forked_child_maps_the_library_pages_the_server_had_before_it_measures(tmp_path):
    """A fresh trial process has torch's library pages in its resident set before setup; a forked child
    would fault them in during its steps and count them as growth, unless it maps them first."""
    import torch  # noqa: F401 - the pages the server's imports touch

    runs = resident_file_pages()
    assert runs and all(length > 0 and address % PAGE_SIZE == 0 for address, length in runs)
    parent = _rss_file()
    bare, mapped = _forked_rss_file(None), _forked_rss_file(runs)
    assert bare < 0.8 * parent  # fork leaves the file mappings' pages out of the child's page table
    assert mapped >= 0.95 * parent  # map_pages puts them back, as the server had them
    # A kernel without MADV_POPULATE_READ answers EINVAL, as it does to an advice it does not know: then
    # each page is read instead.
    assert _forked_rss_file(runs, advice=-1) >= 0.95 * parent
