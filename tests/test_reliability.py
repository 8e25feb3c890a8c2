"""Faults around a run: concurrent and failing writes, Ctrl-C, crashing trials, git states, hostile
files. Each test makes the fault happen for real (processes, signals, git repositories, file limits)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import yaml

from perfgate.errors import ResultsError, UsageError
from perfgate.measure.environment import git_state
from perfgate.records.baselines import BaselineError, BaselineStore, parse_baseline
from perfgate.records.locking import LockTimeout, locked_folder
from perfgate.records.results import parse_results
from perfgate.records.shapes import GitState
from tests.helpers.baselines import store_entry
from tests.helpers.cli import run_in_process, run_main, start_perfgate
from tests.helpers.git import git
from tests.helpers.results import results_document
from tests.helpers.workloads import ROOT, TINY_FILE


def writer(directory: Path, cpu_model: str, rounds: int = 1, preamble: str = "") -> subprocess.Popen[str]:
    """Another process storing a baseline entry for `cpu_model` in `directory`, `rounds` times."""
    code = (
        f"{preamble}\n"
        "import sys\nfrom pathlib import Path\nfrom perfgate.records.baselines import BaselineStore\n"
        "from perfgate.errors import PerfgateError\nfrom tests.helpers.baselines import store_entry\n"
        "try:\n"
        f"    for _ in range({rounds}):\n"
        "        BaselineStore(Path(sys.argv[1])).write(store_entry(cpu_model=sys.argv[2]))\n"
        "except PerfgateError as exc:\n"
        "    sys.exit(f'error: {exc.one_line()}')\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(directory), cpu_model],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def cpu_models(directory: Path) -> set[str]:
    return {e.fingerprint.cpu_model for e in BaselineStore(directory).load("gpt-small").values()}


@pytest.mark.e2e
def test_a_second_update_waits_for_the_first_to_finish_writing(tmp_path):
    BaselineStore(tmp_path).write(store_entry(cpu_model="first"))
    with locked_folder(tmp_path):  # as an update in the middle of its write holds it
        process = writer(tmp_path, "second")
        time.sleep(1.5)
        assert process.poll() is None, process.communicate()  # still waiting
        assert cpu_models(tmp_path) == {"first"}
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert cpu_models(tmp_path) == {"first", "second"}


@pytest.mark.e2e
def test_concurrent_writers_of_one_file_never_lose_an_entry(tmp_path):
    processes = [writer(tmp_path, f"machine-{i}", rounds=10) for i in range(4)]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
    assert cpu_models(tmp_path) == {f"machine-{i}" for i in range(4)}
    assert [p.name for p in tmp_path.iterdir()] == ["gpt-small.yaml"]  # no lock file or temporary left


def test_a_lock_held_too_long_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFGATE_LOCK_TIMEOUT", "0.3")
    with locked_folder(tmp_path), pytest.raises(LockTimeout) as raised:
        BaselineStore(tmp_path).write(store_entry())
    assert raised.value.one_line() == (
        f"another process has been writing the baselines in {tmp_path} for over 0.3 s; wait for the other "
        "perfgate update to finish, or stop it, then run again"
    )


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf", ""])
def test_a_bad_lock_timeout_is_a_one_line_error_and_nothing_is_written(tmp_path, monkeypatch, value):
    monkeypatch.setenv("PERFGATE_LOCK_TIMEOUT", value)
    with pytest.raises(UsageError) as raised:
        BaselineStore(tmp_path).write(store_entry())
    assert raised.value.one_line() == (
        f"PERFGATE_LOCK_TIMEOUT must be a number of seconds above 0, not {value!r}; set it to, say, 120, "
        "or unset it for that default"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_a_full_disk_on_write_leaves_the_old_file_intact(tmp_path):
    BaselineStore(tmp_path).write(store_entry(cpu_model="first"))
    old = (tmp_path / "gpt-small.yaml").read_bytes()
    # A file-size limit smaller than the new file: the kernel fails the write (EFBIG) as a full disk does.
    limit = "import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    limit += f"resource.setrlimit(resource.RLIMIT_FSIZE, ({len(old) // 2}, {len(old) // 2}))"
    process = writer(tmp_path, "second", preamble=limit)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert stderr.startswith(f"error: cannot write {tmp_path / 'gpt-small.yaml'}: File too large; the previous file")
    assert len(stderr.strip().splitlines()) == 1
    assert (tmp_path / "gpt-small.yaml").read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["gpt-small.yaml"]


def trial_processes(parent: psutil.Process) -> list[psutil.Process]:
    """The running `python -m perfgate.measure.trial` processes under `parent`."""
    found = []
    for child in parent.children(recursive=True):
        try:
            if "perfgate.measure.trial" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # exited meanwhile
            continue
    return found


@pytest.mark.e2e
def test_ctrl_c_during_update_keeps_the_old_baseline_and_stops_the_trial(tmp_path):
    baselines = tmp_path / "baselines"
    committed = replace(store_entry(cpu_model="another machine"), workload="tiny")  # committed before
    BaselineStore(baselines).write(committed)
    before = (baselines / "tiny.yaml").read_bytes()
    # Ctrl-C handled as in a terminal, even where this run's shell started it with SIGINT ignored.
    process = start_perfgate(
        "update", f"{TINY_FILE}:tiny", "--trials", "3", "--configs", "fp32", "--threads", "1", cwd=tmp_path
    )
    parent = psutil.Process(process.pid)
    deadline = time.monotonic() + 60
    trials: list[psutil.Process] = []
    while not trials and time.monotonic() < deadline:  # wait for the first trial process
        trials = trial_processes(parent)
        time.sleep(0.1)
    assert trials, "no trial process started"
    helpers = parent.children(recursive=True)  # the trial and anything it started
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted: trials stopped;")
    assert "Traceback" not in stderr
    assert (baselines / "tiny.yaml").read_bytes() == before
    assert [p.name for p in baselines.iterdir()] == ["tiny.yaml"]
    gone, alive = psutil.wait_procs(helpers, timeout=10)
    assert not alive  # the trial (and its workers) went down with it


@pytest.mark.e2e
def test_a_trial_that_crashes_or_is_killed_is_failed_with_the_reason(tmp_path):
    """os._exit, a segfault, and the out-of-memory killer's SIGKILL: each trial fails with its reason, the
    run goes on to the next workload, and with nothing measured the run exits 4."""
    crashes = [f"{TINY_FILE}:{name}" for name in ("crashes", "segfaults", "killed")]
    result = run_in_process(
        "run", *crashes, "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet", cwd=tmp_path
    )
    assert result.returncode == 4, result.stdout + result.stderr
    assert "trial process exited with code 3 without a result" in result.stdout
    assert "trial process was killed by SIGSEGV; last output:" in result.stdout
    assert "trial process was killed by SIGKILL (the out-of-memory killer does this" in result.stdout
    assert result.stderr.strip() == "error: no trial produced a measurement; see the failures above"


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "ci@example.com")
    git(path, "config", "user.name", "CI")
    for n in (1, 2):
        (path / "train.py").write_text(f"# version {n}\n")
        git(path, "add", "train.py")
        git(path, "commit", "-q", "-m", f"version {n}")
    return path


@pytest.mark.e2e
def test_a_shallow_clone_is_recorded_as_such(repo, tmp_path):
    """(Not a repository, no commits, a detached HEAD and a dirty tree: tests/test_environment.py.)"""
    assert git_state(repo).shallow is False
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", repo.as_uri(), str(clone))
    state = git_state(clone)
    assert state == GitState(sha=git(repo, "rev-parse", "HEAD"), branch="main", dirty=False, shallow=True)


@pytest.mark.e2e
def test_update_runs_in_a_shallow_clone_on_a_detached_head(repo, tmp_path):
    """The usual GitHub Actions checkout: depth 1, detached. Update records the commit and goes on."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", repo.as_uri(), str(clone))
    git(clone, "checkout", "-q", "--detach")
    result = run_in_process(
        "update", f"{TINY_FILE}:tiny", "--configs", "fp32", "--trials", "1", "--threads", "1", "--quiet", cwd=clone
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (stored,) = yaml.safe_load((clone / "baselines" / "tiny.yaml").read_text())["machines"].values()
    assert stored["git"] == {"sha": git(clone, "rev-parse", "HEAD"), "branch": None, "dirty": False, "shallow": True}


BASE = "schema_version: 1\nworkload: gpt-small\nmachines: {}\n"
NEWER = "unsupported schema_version 2 (this perfgate reads 1) (f.yaml); it was written by a newer perfgate"
OLDER = "unsupported schema_version 0 (this perfgate reads 1) (f.yaml); perfgate has only ever written"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("schema_version: 1\n" + BASE, "found the key 'schema_version' twice"),
        (BASE.replace("1", "2"), NEWER),
        (BASE.replace("1", "0"), OLDER),
        (BASE.replace("1", '"1"'), "unsupported schema_version '1'"),
        (BASE.replace("{}", "{m: {trials: [1, 2"), "invalid YAML at line 4"),  # truncated mid-file
        ("\x00\x01", "invalid YAML"),
        ("machines: &a [*a, *a]\n", "unsupported schema_version None"),  # a self-referencing alias
        (BASE.replace("gpt-small", "!!python/name:os.system"), "could not determine a constructor"),
    ],
)
def test_hostile_or_broken_baseline_files_are_one_line_errors(text, message):
    with pytest.raises(BaselineError) as raised:
        parse_baseline(text, source="f.yaml", workload="gpt-small")
    assert message in raised.value.one_line()
    assert "\n" not in raised.value.one_line()


def test_nan_or_wrong_types_in_a_trial_are_refused_with_their_place(tmp_path):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    text = store.path_for("gpt-small").read_text()
    for bad, message in (
        ("samples_per_sec: .nan", "samples_per_sec must be finite and not negative, got nan"),
        ("samples_per_sec: '100'", "samples_per_sec must be a number, got str"),
        ("peak_bytes: -5", "peak_bytes must be finite and not negative, got -5"),
    ):
        field = bad.split(":")[0]
        broken = re.sub(rf"{field}: [^,}}\n]+", bad, text, count=1)
        assert broken != text
        store.path_for("gpt-small").write_text(broken)
        with pytest.raises(BaselineError, match=re.escape(message)):
            store.load("gpt-small")


RESULTS = {
    "schema_version": 1,
    "perfgate_version": "0.1.0",
    "created_at": "2026-11-22T10:00:00+00:00",
}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"schema_version": 1, "schema_version": 1}', "the key 'schema_version' appears twice in one object"),
        ('{"schema_version": NaN}', "NaN is not a number JSON allows"),
        ('{"schema_version": 3}', "has schema_version 3; this perfgate reads 1 and 2; upgrade perfgate to read it"),
        ('{"schema_version": 1', "is not valid JSON"),
        ("", "is not valid JSON"),
        (json.dumps({**RESULTS, "workloads": []}), "is not a valid results file: the document: 'environment' is a"),
    ],
)
def test_broken_results_files_are_one_line_errors(text, message):
    with pytest.raises(ResultsError) as raised:
        parse_results(text, source="r.json")
    assert message in raised.value.one_line()


def test_report_and_compare_refuse_a_results_file_with_a_wrong_type(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    document = results_document()  # as perfgate writes one; validated against the schema
    (tmp_path / "r.json").write_text(json.dumps(document))
    document["workloads"][0]["configs"]["fp32"]["trials"][0]["samples_per_sec"] = "fast"
    (tmp_path / "bad.json").write_text(json.dumps(document))
    for command in (("report", "bad.json"), ("compare", "r.json", "bad.json")):
        result = run_main(capsys, *command)
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.strip().splitlines() == [
            "error: bad.json is not a valid results file: workloads[0].configs.fp32.trials[0].samples_per_sec: "
            "'fast' is not of type 'number'; give a results file written by perfgate --json"
        ]


def test_nothing_perfgate_loads_is_unpickled_or_loaded_unsafely():
    """A source scan: no pickle, no torch.load, no yaml loader but the safe one, no eval of file content."""
    forbidden = re.compile(
        r"\bpickle\b|torch\.load\(|yaml\.(unsafe_load|full_load|load_all)\(|Loader=yaml\.(Full|Unsafe)?Loader|\beval\(|\bexec\("
    )
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "perfgate").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if forbidden.search(line)
    ]
    assert hits == []
    loads = [
        line
        for path in (ROOT / "perfgate").rglob("*.py")
        for line in path.read_text().splitlines()
        if "yaml.load(" in line
    ]
    assert loads == [
        "        return yaml.load(text, Loader=_StrictSafeLoader)  # a SafeLoader subclass: plain types only"
    ]


def test_failed_trials_are_named_in_the_verdict_and_a_config_with_none_left_fails():
    """Missing data is never a silent pass: the verdict rests on the trials that ran and says how many
    failed; a config that ran before and now has no trial left fails the check."""
    from perfgate.judge.verdict import Status, compare_run
    from perfgate.records.results import ConfigResult, TrialResult
    from perfgate.records.verdicts import GateSettings
    from tests.helpers.results import BASE_MS, BASELINE, phased_run

    def with_failures(failed: int):
        current = phased_run(BASE_MS)
        (workload,) = current.workloads
        trials = list(workload.configs["fp32"].trials)
        for i in range(failed):
            trials[i] = TrialResult("fp32", i, "failed", failure="trial process was killed by SIGSEGV")
        configs = {"fp32": ConfigResult("fp32", trials)}
        return replace(current, workloads=[replace(workload, configs=configs)])

    settings = GateSettings(first_n=3, max_n=3)
    (verdict,) = compare_run(with_failures(1), BASELINE, settings).verdicts
    assert verdict.trials_failed == 1 and verdict.reason.endswith("(1 trial failed and not counted)")
    assert verdict.throughput is not None and verdict.throughput.n_candidate == 2
    result = compare_run(with_failures(3), BASELINE, settings)
    assert result.verdicts[0].status == Status.FAILED and result.exit_code == 4  # the workload failed
