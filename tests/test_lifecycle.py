"""A check's life, safe end to end: what a killed check leaves, one workload's failure, names, huge numbers.

Real processes throughout: a paired check (`python -m perfgate check --against`) in a real git repository,
killed with SIGKILL or SIGHUP while its trials run; the next check in the same repository and temporary
folder; a lab whose second workload's DataLoader raises in its worker; the watch launcher
(`perfgate.measure.watch`) under a parent that is killed. Each check runs with TMPDIR in the test's folder,
so the base worktree and the scratch folders perfgate makes are found there. The lab runs through
`perfgate.cli.main` in the test's process (`run_in_process`), its trials real processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from perfgate import _files, naming
from perfgate.errors import UsageError
from perfgate.project import parse_count, parse_fraction
from perfgate.records.acceptance import AcceptanceError, parse_acceptance
from tests.helpers.cli import CliResult, run_in_process, run_main
from tests.helpers.git import commit, git, new_repository
from tests.helpers.workloads import PLAIN_SGD, TINY_FILE

SCHEMA = Path(__file__).parent.parent / "perfgate" / "records" / "schema" / "results-v2.schema.json"
WORKLOAD = "perf/bench.py:bench"
# Two pairs, each pair's trials one after the other: a trial that outlived its check would run on by itself
# (a pair taking turns waits on perfgate to hand it the next one).
FAST = ("--configs", "fp32", "--threads", "1", "--trials", "2", "--max-trials", "2", "--time-budget", "60")
ONE_AFTER_THE_OTHER = "--no-interleaved-pairs"

# An MLP whose every step sleeps SLEEP_S (from the environment): slow enough that the trials of a check
# killed while they run would outlive the test's 15 s by far, were nothing to end them.
BENCH = f"""\
import os
import time

import torch
from torch.nn import functional as F

import perfgate

SLEEP_S = float(os.environ.get("LIFECYCLE_SLEEP_S", "0"))


class Points(torch.utils.data.Dataset):
    def __len__(self):
        return 16 * 12

    def __getitem__(self, index):
        x = torch.randn(8, generator=torch.Generator().manual_seed(index))
        return x, x.sum(dim=0, keepdim=True)


def loss(model, batch):
    time.sleep(SLEEP_S)
    x, y = batch
    return F.mse_loss(model(x), y)


{PLAIN_SGD}

def bench():
    model = lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))  # noqa: E731
    return perfgate.Workload(
        name="bench", model=model, dataset=Points, loss=loss, optimizer=PlainSGD, batch_size=16, steps=10,
        warmup_steps=1,
    )
"""


def make_repo(path: Path) -> Path:
    """Two commits of the workload (the second changes a comment): `--against HEAD~1` has a base to check out."""
    new_repository(path)
    commit(path, {"perf/bench.py": BENCH}, "one")
    commit(path, {"perf/bench.py": BENCH + "# two\n"}, "two")
    return path


def worktrees(repo: Path) -> list[Path]:
    listing = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [Path(line.removeprefix("worktree ")) for line in listing if line.startswith("worktree ")]


def left_behind(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("perfgate-"))


def restore_signals() -> None:
    """preexec_fn: the signals the test sends back to their defaults, whatever this process ignores (nohup)."""
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def start_check(repo: Path, tmp: Path, sleep_s: float, *extra: str) -> subprocess.Popen[str]:
    """`perfgate check --against HEAD~1` in a process of its own, FAST and ONE_AFTER_THE_OTHER, then `extra`."""
    env = {**os.environ, "TMPDIR": str(tmp), "LIFECYCLE_SLEEP_S": str(sleep_s)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfgate",
            "check",
            WORKLOAD,
            "--against",
            "HEAD~1",
            *FAST,
            ONE_AFTER_THE_OTHER,
            *extra,
        ],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=restore_signals,
    )


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # exited meanwhile
        return ""


def running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running: not ended, and not a zombie waiting for a parent (PID 1 in a container may never
    reap one) to collect it."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.Error:
            continue
    return alive


def kill_while_trials_run(repo: Path, tmp: Path, signum: int) -> list[psutil.Process]:
    """Start a paired check, wait until its base worktree exists and a trial runs in it, send `signum`; every
    process the check had started by then (its trials among them)."""
    process = start_check(repo, tmp, sleep_s=3.0)  # 11 steps of 3 s: a trial would run on for half a minute
    try:
        deadline = time.monotonic() + 180
        trials: list[psutil.Process] = []
        while not trials and time.monotonic() < deadline and process.poll() is None:
            if len(worktrees(repo)) == 2:
                trials = [p for p in descendants(process.pid) if "perfgate.measure.trial" in command_line(p)]
            time.sleep(0.05)
        assert trials, "no trial started: " + (process.stderr.read() if process.poll() is not None else "")
        time.sleep(0.5)  # the trials are past their start-up (the watch's checks) and measuring
        started = descendants(process.pid)
        process.send_signal(signum)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return started


def stop_leftovers(processes: list[psutil.Process]) -> None:
    """Kill what a failing test would otherwise leave running: only the processes this test started."""
    for leftover in running(processes):
        try:
            leftover.kill()
        except psutil.Error:
            continue


# --- A killed check leaves no trial running -------------------------------------------------------------


@pytest.fixture(scope="module")
def killed_checks(tmp_path_factory):
    """`killed(signum)`: (repo, its TMPDIR, the processes the check had started) of a paired check killed with
    `signum` while its trials ran, in a repository of its own; one kill per signal for the module, so that the
    SIGKILL case and the next check after a SIGKILL read the same killed check. Whatever the kills started and
    a failing test left running is stopped at the module's end."""
    done: dict[int, tuple[Path, Path, list[psutil.Process]]] = {}

    def killed(signum: int) -> tuple[Path, Path, list[psutil.Process]]:
        if signum not in done:
            folder = tmp_path_factory.mktemp(f"killed-{signal.Signals(signum).name}")
            repo = make_repo(folder / "repo")
            tmp = folder / "tmp"
            tmp.mkdir()
            done[signum] = (repo, tmp, kill_while_trials_run(repo, tmp, signum))
        return done[signum]

    yield killed
    for _, _, started in done.values():
        stop_leftovers(started)


@pytest.mark.e2e
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP], ids=["SIGKILL", "SIGHUP"])
def test_a_killed_paired_check_leaves_no_trial_running(killed_checks, signum):
    """Trials run in sessions of their own (Ctrl-C reaches perfgate alone): before the watch, a check killed
    outright left its trials running under PID 1 until they finished."""
    _, _, started = killed_checks(signum)
    try:
        deadline = time.monotonic() + 15
        while running(started) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = running(started)
        assert not left, [command_line(p) for p in left]
    finally:
        stop_leftovers(started)


@pytest.mark.e2e
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")
def test_the_next_check_removes_a_killed_checks_worktree_and_folders(killed_checks):
    repo, tmp, started = killed_checks(signal.SIGKILL)  # the SIGKILL case's killed check, when it ran first
    try:
        deadline = time.monotonic() + 15
        while running(started) and time.monotonic() < deadline:
            time.sleep(0.1)
        # What the killed check left: its base worktree, still registered, and its scratch folders.
        (left_worktree,) = [w for w in worktrees(repo) if w != repo.resolve()]
        assert left_worktree.parent.parent == tmp.resolve()
        assert len(left_behind(tmp)) >= 2, left_behind(tmp)  # perfgate-base-* and the session's perfgate-*
        # The subject is what the next check removes before it measures, not its pairs: one pair, its trials
        # forked from one server a side.
        next_check = start_check(repo, tmp, 0.0, "--trials", "1", "--max-trials", "1", "--fork-trials")
        stdout, stderr = next_check.communicate(timeout=300)
        assert next_check.returncode in (0, 1), stdout + stderr  # a verdict (the code is the same on both sides)
        assert worktrees(repo) == [repo.resolve()]
        assert left_behind(tmp) == []
        assert not left_worktree.exists()
        assert f"removed the worktree {left_worktree}" in stderr + stdout
    finally:
        stop_leftovers(started)


# --- The watch launcher on its own ----------------------------------------------------------------------

SLEEPER = """\
import os, sys, time
with open("started.tmp", "w") as note:
    note.write(" ".join(sys.argv[1:]))
os.replace("started.tmp", "started")
time.sleep(float(sys.argv[1]))
"""
PARENT = """\
import os, subprocess, sys, time
from perfgate.measure.watch import watched, watched_environment

env, fds = watched_environment(os.environ)
child = subprocess.Popen(
    [sys.executable, *watched("sleeper"), "60"], env=env, pass_fds=fds, start_new_session=True, cwd=sys.argv[1]
)
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("stopped", [False, True], ids=["running", "stopped"])
def test_a_watched_process_dies_with_its_parent_even_when_stopped(tmp_path, stopped):
    """`python -m perfgate.measure.watch MODULE ARGS` runs MODULE as `python -m` would, and ends when the
    process that started it dies: by the pipe, and on Linux by the parent-death signal, which reaches a
    process stopped for the other side's turn (SIGSTOP) too."""
    if stopped and not sys.platform.startswith("linux"):
        pytest.skip("a stopped process ends with its parent by PR_SET_PDEATHSIG, which only Linux has")
    (tmp_path / "sleeper.py").write_text(SLEEPER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), str(tmp_path)])}
    child = None
    with subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    ) as parent:
        try:
            assert parent.stdout is not None
            child = psutil.Process(int(parent.stdout.readline()))
            deadline = time.monotonic() + 30
            while not (tmp_path / "started").is_file() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (tmp_path / "started").read_text(encoding="utf-8") == "60"  # the module ran, with its arguments
            if stopped:
                os.killpg(child.pid, signal.SIGSTOP)
            parent.kill()
            parent.wait()
            deadline = time.monotonic() + 10
            while running([child]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not running([child])
        finally:
            if parent.poll() is None:
                parent.kill()
            if child is not None:
                stop_leftovers([child])


# --- One workload's failure keeps the others' results ---------------------------------------------------

TWO_WORKLOADS = """\
import torch

import perfgate

from tiny import Points, PlainSGD, mlp, mse


class BrokenInWorkers(Points):
    def __getitem__(self, index):
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("the shard is missing")
        return super().__getitem__(index)


def good():
    return perfgate.Workload(
        name="good", model=mlp, dataset=Points, loss=mse, optimizer=PlainSGD, batch_size=8, steps=4, warmup_steps=1
    )


def bad():
    return perfgate.Workload(
        name="bad", model=mlp, dataset=BrokenInWorkers, loss=mse, optimizer=PlainSGD, batch_size=8, steps=4,
        warmup_steps=1, loader={"num_workers": 1},
    )
"""


@pytest.mark.e2e
def test_one_failing_workload_keeps_the_others_results(tmp_path, monkeypatch):
    (tmp_path / "two.py").write_text(TWO_WORKLOADS, encoding="utf-8")
    results = tmp_path / "r.json"
    env = {"PYTHONPATH": os.pathsep.join([str(TINY_FILE.parent), os.environ.get("PYTHONPATH", "")])}
    # In this process (the trials are real processes either way, with `tiny` on their PYTHONPATH): `tiny` is
    # importable here too, as PYTHONPATH makes it for a fresh `perfgate` process.
    monkeypatch.syspath_prepend(str(TINY_FILE.parent))
    result = run_in_process(
        "run",
        "--quiet",
        *("--configs", "fp32", "--threads", "1", "--trials", "2"),
        *("--json", str(results)),
        "two.py:good",
        "two.py:bad",
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 4, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    # The worker's error reaches the trial as DataLoader's RuntimeError ("Caught RuntimeError in DataLoader worker
    # process 0."): the workload's own failure, reported once, naming it.
    assert any("the DataLoader raised RuntimeError" in line and "workload 'bad'" in line for line in errors), errors
    assert not any("'good'" in line for line in errors), errors
    document = json.loads(results.read_text(encoding="utf-8"))
    workloads = {w["name"]: w for w in document["workloads"]}
    good_trials = workloads["good"]["configs"]["fp32"]["trials"]
    assert len(good_trials) == 2 and all(t["status"] == "ok" for t in good_trials)
    if "bad" in workloads:  # reported as failed, with nothing measured
        bad = workloads["bad"]["configs"]["fp32"]
        assert not any(t["status"] == "ok" for t in bad["trials"])
        assert "DataLoader" in (bad["failure"] or " ".join(t["failure"] or "" for t in bad["trials"]))


# --- Names: the schema's own rule, before anything is measured ------------------------------------------

NAMED = """\
import perfgate

from tiny import Points, PlainSGD, mlp, mse


def named():
    return perfgate.Workload(name={name!r}, model=mlp, dataset=Points, loss=mse, optimizer=PlainSGD, batch_size=8)
"""


def run_named(name: str, tmp_path: Path, monkeypatch, capsys) -> CliResult:
    (tmp_path / "named.py").write_text(NAMED.format(name=name), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(TINY_FILE.parent))
    return run_main(capsys, "run", "--quiet", "--configs", "fp32", "named.py:named")


def assert_one_line_workload_error(result: CliResult, *fragments: str) -> None:
    assert result.returncode == 4, result.stdout + result.stderr  # a WorkloadError, as a name with a space is
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "internal error" not in lines[0] and "Traceback" not in result.stderr
    assert len(lines[0]) < 400, lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "trial" not in result.stdout  # refused when the workload loads, before any trial


def test_a_5000_character_workload_name_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    result = run_named("a" * 5000, tmp_path, monkeypatch, capsys)
    assert_one_line_workload_error(result, "5000 characters long", f"at most {naming.MAX_NAME_CHARS} characters")


def test_a_unicode_name_is_refused_by_the_schemas_own_rule(tmp_path, monkeypatch, capsys):
    """`isalnum` says yes to "modèle"; the results schema's pattern does not, so a run measured minutes for a
    results file it then could not write."""
    result = run_named("modèle", tmp_path, monkeypatch, capsys)
    assert_one_line_workload_error(result, "workload name 'modèle' contains 'è'")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    name = schema["$defs"]["workload"]["properties"]["name"]
    assert naming.WORKLOAD_NAME.pattern == name["pattern"]
    assert name["maxLength"] == naming.MAX_NAME_CHARS


@pytest.mark.parametrize("target", ["modèle", "a" * 5000])
def test_an_accepted_slowdown_names_a_workload_by_the_same_rule(target):
    with pytest.raises(AcceptanceError) as caught:
        parse_acceptance(f"{target} 5%", "option", "--accept")
    assert "is not a workload name" in caught.value.what and len(caught.value.one_line()) < 400


def test_the_name_rule_is_the_schemas_and_has_no_loophole():
    assert naming.WORKLOAD_NAME.fullmatch("gpt-small_v2.1")
    for name in ("modèle", "a b", "a/b", "tiny\n", "", "ｇｐｔ"):
        assert naming.name_problem(name) is not None, name
    assert naming.name_problem("a" * naming.MAX_NAME_CHARS) is None
    assert "101 characters" in str(naming.name_problem("a" * (naming.MAX_NAME_CHARS + 1)))


# --- Huge numbers are one-line errors -------------------------------------------------------------------


@pytest.mark.parametrize("key", ["threshold", "memory_threshold", "alpha"])
def test_a_400_digit_number_in_pyproject_is_a_one_line_error(tmp_path, monkeypatch, capsys, key):
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\n{key} = {'9' * 400}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    # Refused while the settings are read, before any trial (the few options keep a wrong order short).
    result = run_main(capsys, "run", "--quiet", "--configs", "fp32", "--trials", "1", f"{TINY_FILE}:tiny")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "internal error" not in lines[0] and "[tool.perfgate]" in lines[0] and len(lines[0]) < 400, lines[0]


@pytest.mark.parametrize("value", [10**400, "9" * 400, "9" * 5000, 1e308 * 10])
def test_the_number_parsers_turn_huge_numbers_into_one_line_errors(value):
    for parse in (parse_fraction, parse_count):
        with pytest.raises(UsageError) as caught:
            parse(value, "[tool.perfgate] x")
        assert len(caught.value.one_line()) < 300 and "\n" not in caught.value.one_line()


# --- The files a check writes and reads -----------------------------------------------------------------


def test_write_atomic_keeps_the_mode_and_never_overwrites_when_exclusive(tmp_path):
    path = tmp_path / "results.json"
    _files.write_atomic(path, "old")
    path.chmod(0o640)
    _files.write_atomic(path, b"new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o640
    with pytest.raises(FileExistsError):
        _files.write_atomic(path, "other", exclusive=True)
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": 1, "a": 2}', "appears twice"),
        ("[NaN]", "NaN is not a number JSON allows"),
        ("[1e400]", "beyond what a float holds"),
        ("[" + "9" * 400 + "]", "400 digits"),
        ("[" + "9" * 5000 + "]", "5000 digits"),
        ("[1,", "not valid JSON"),
    ],
)
def test_read_json_refuses_what_strict_json_does_not_allow(text, problem):
    with pytest.raises(ValueError, match="^r.json is not valid JSON: ") as caught:
        _files.read_json(text, source="r.json")
    assert problem in str(caught.value)


def test_read_json_reads_what_perfgate_writes():
    assert _files.read_json('{"a": [1, 2.5, null, "x"], "b": -12345678901234567890}', source="r.json") == {
        "a": [1, 2.5, None, "x"],
        "b": -12345678901234567890,
    }


def test_check_writable_probes_by_writing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match=re.escape(f"cannot write in {blocker / 'baselines'}: {blocker} is not a")):
        _files.check_writable_folder(blocker / "baselines", "--baseline-dir")
    with pytest.raises(UsageError, match="is not a writable folder"):
        _files.check_writable(blocker / "r.json", "--json")
    _files.check_writable_folder(tmp_path / "new" / "deeper", "--baseline-dir")  # made later: its parent is fine
    _files.check_writable(tmp_path / "r.json", "--json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probes left nothing


def test_sweep_removes_only_marked_folders_of_dead_owners(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(ended.stdout)
    dead = tmp_path / "perfgate-dead"
    dead.mkdir()
    (dead / _files.OWNER_FILE).write_text(json.dumps({"pid": dead_pid, "started": 1.0}))
    reused = tmp_path / "perfgate-reused"  # a live pid, but it started at another time: the owner is gone
    reused.mkdir()
    (reused / _files.OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "started": 12.0}))
    unmarked = tmp_path / "perfgate-unmarked"
    unmarked.mkdir()
    other = tmp_path / "other-dead"
    other.mkdir()
    (other / _files.OWNER_FILE).write_text(json.dumps({"pid": dead_pid, "started": 1.0}))
    with _files.owned_tempdir("perfgate-") as live:
        removed = _files.sweep_tempdirs("perfgate-")
        assert live.is_dir()
    assert sorted(removed) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists() and unmarked.is_dir() and other.is_dir() and not live.exists()


def test_a_scratch_folder_is_marked_with_its_owner(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with _files.owned_tempdir("perfgate-") as folder:
        owner = json.loads((folder / _files.OWNER_FILE).read_text())
        assert owner["pid"] == os.getpid() and _files.owner_alive(folder) is True
    assert not folder.exists()


def test_a_sweep_outside_git_only_touches_marked_folders(tmp_path, monkeypatch):
    import tempfile

    from perfgate.measure.paired import sweep_leftovers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    assert sweep_leftovers(plain) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


WATCHED_MODULE = textwrap.dedent(
    """\
    import sys
    print(__name__, sys.argv[1:])
    sys.exit(3)
    """
)


def run_watched(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m perfgate.measure.watch job ARGS`, with `source` as job.py in `tmp_path`."""
    (tmp_path / "job.py").write_text(source, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), str(tmp_path)])}
    command = [sys.executable, "-m", "perfgate.measure.watch", "job", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)


def test_the_watch_runs_a_module_as_python_m_does(tmp_path):
    done = run_watched(tmp_path, WATCHED_MODULE, "a", "--b")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "__main__ ['a', '--b']\n"


LEAVING_MODULE = textwrap.dedent(
    """\
    import atexit
    import sys

    from perfgate._process import leave


    class Held:
        def __del__(self):
            print("torn down")  # where the interpreter tears this module down, as a normal exit does


    held = Held()
    atexit.register(print, "exit handler")
    sys.stdout.write("no newline, still buffered")  # stdout is a pipe: block-buffered
    {ending}
    """
)


@pytest.mark.parametrize("ending", ["leave(5)", "sys.exit(5)"])
def test_a_watched_process_ends_with_its_code_exit_handlers_and_output_but_no_teardown(tmp_path, ending):
    """How a trial's process, a fork server and the `perfgate` command end once their work is written
    (`perfgate._process.leave`): the first two exit as Python programs do, and the watch they run under leaves."""
    done = run_watched(tmp_path, LEAVING_MODULE.format(ending=ending))
    assert done.returncode == 5, done.stderr
    assert done.stdout == "no newline, still bufferedexit handler\n"  # flushed, the exit handler ran, no teardown
    if ending == "sys.exit(5)":  # outside the watch, the same module is torn down, which the line above would see
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
        plain = subprocess.run([sys.executable, "job.py"], capture_output=True, text=True, cwd=tmp_path, env=env)
        assert (plain.returncode, plain.stdout) == (5, "no newline, still bufferedexit handler\ntorn down\n")


def test_a_watched_exit_with_a_message_prints_it_and_ends_with_1(tmp_path):
    done = run_watched(tmp_path, "import sys\nsys.exit('the record could not be written')\n")
    assert (done.returncode, done.stderr) == (1, "the record could not be written\n")
