"""A fork server for a session's trials (`--fork-trials`): one per side, torch imported once, a child per trial.

A fresh trial process spends about 3 s importing torch (and `torch._dynamo`, which creating a torch
optimizer imports) before it measures anything; a paired check runs twice the trials of a lab. The
server is started like a trial process (the side's folder, source folders and thread settings),
imports what every trial imports (torch._dynamo only where a trial may need it: `lab.needs_dynamo`),
and then forks one child per trial, which runs exactly what
`python -m perfgate.measure.trial` runs. Before a workload's first trial it imports that workload's module
too (`import_workload`: a framework such as Lightning takes seconds to import, in every fresh trial). A child
is a fresh trial in everything it builds (workload, model, data, RNG state); what it shares with its siblings
is the imported code.

A fork copies the server's heap into the child, but not the page-table entries of its mapped files:
left alone, the child faults torch's library pages back in during its steps, and peak memory above
setup counts them as growth. So the server notes which pages of its mapped files are resident
(`resident_file_pages`) and each child maps those (`map_pages`) before it runs the trial, as a fresh
process has them after its imports: peak memory above setup, against a fresh process's, went from
+3.5-33% to +1-11% on the built-ins (`benchmarks/fork_memory.py`, docs/performance.md). Not close
enough for baselines measured in fresh processes: the stored-baseline lab keeps fresh processes.
CPU only: CUDA is set up in each child, never in the server, but that path has not been measured.

Protocol, one JSON line each way per step: the server says `{"ready"}` once it has imported everything;
then the client sends `{"spec", "out", "log", "cpus"}`, and the server answers `{"pid"}` once the child runs
and `{"returncode"}` when it has ended. Waiting for `ready` apart from the first fork (`wait_ready`) lets a
paired check start both sides' servers at once and have both ready before any trial runs. The child is its
own process group (`os.setsid`), so the client kills it and its DataLoader workers with `os.killpg`, as it
does a fresh trial process.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import mmap
import os
import select
import signal
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import IO, Any

from perfgate.measure.watch import die_with_parent, watched, watched_environment

# Set by the client (`perfgate.measure.lab.start_trial_server`) where no trial needs torch._dynamo.
SKIP_DYNAMO = "PERFGATE_SERVER_SKIPS_DYNAMO"


class ServerGone(RuntimeError):
    """The fork server exited or stopped answering."""


class TrialServer:
    """The client side: start the server process, ask it for children, stop it."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path | None, log_path: Path) -> None:
        self.log_path = log_path
        # Under the watch (`perfgate.measure.watch`): the server dies with perfgate, and its children with it.
        env, lifeline = watched_environment(env)
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [*command, *watched("perfgate.measure.trialserver")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                cwd=cwd,
                start_new_session=True,  # Ctrl-C in the terminal reaches perfgate, which stops the server
                pass_fds=lifeline,
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin: IO[bytes] = self.process.stdin
        self._stdout: IO[bytes] = self.process.stdout
        self._buffer = b""
        self._ready = False

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self) -> None:
        """Return once the server has imported what every trial imports; ServerGone if it exited first."""
        if self._ready:
            return
        reply = self.read_reply(None)
        if reply is None or not reply.get("ready"):
            raise ServerGone(f"the trial server did not start: {self._last_log_line()}")
        self._ready = True

    def fork(
        self, spec_path: Path, out_path: Path, log_path: Path, cpus: frozenset[int] | None, timeout: float | None = None
    ) -> ForkedProcess:
        """Start one trial as a forked child; the returned object waits and is killed like a `Popen`. `timeout`:
        how long the server may take to start it (importing the trial's workload module first, once): past it
        the server is stopped and ServerGone raised."""
        self.wait_ready()
        request = {"spec": str(spec_path), "out": str(out_path), "log": str(log_path), "cpus": sorted(cpus or ())}
        try:
            self._stdin.write(json.dumps(request).encode() + b"\n")
            self._stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ServerGone(f"the trial server has exited: {self._last_log_line()}") from exc
        reply = self.read_reply(timeout)
        if reply is None:
            self.process.kill()
            raise ServerGone(f"the trial server did not start a trial within {timeout:g} s importing its workload")
        if "pid" not in reply:
            raise ServerGone(f"the trial server did not start a trial: {self._last_log_line()}")
        return ForkedProcess(self, int(reply["pid"]))

    def read_reply(self, timeout: float | None) -> dict[str, Any] | None:
        """The next reply line; None when `timeout` passes first. Raises ServerGone at end of file."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._stdout], [], [], wait)
            if not ready:
                return None
            chunk = os.read(self._stdout.fileno(), 65536)
            if not chunk:
                raise ServerGone(f"the trial server has exited: {self._last_log_line()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        """Stop the server (a child still running is the caller's to kill first)."""
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            self._stdout.close()

    def _last_log_line(self) -> str:
        try:
            lines = [x for x in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
        except OSError:
            return "(no output)"
        return lines[-1][:300] if lines else "(no output)"


class ForkedProcess:
    """A forked trial as `lab.RunningTrial` uses a `Popen`: `pid`, `wait(timeout)`, `poll()`."""

    def __init__(self, server: TrialServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                reply = self.server.read_reply(timeout)
            except ServerGone:
                reply = {"returncode": -9}  # the server died with its child: report it as killed
            if reply is None:
                raise subprocess.TimeoutExpired(f"trial {self.pid}", timeout or 0.0)
            self.returncode = int(reply["returncode"])
        return self.returncode

    def poll(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.wait(0.0)
        return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


def serve(requests: IO[str], replies: IO[str]) -> int:
    """The server's loop: import what every trial imports, then fork a child per request. torch._dynamo is one of
    them unless the client knows no trial needs it (`SKIP_DYNAMO`: no compiled config, no torch optimizer); a
    child that imports it anyway does so in its setup, as a fresh trial does."""
    import torch
    import torch.optim  # noqa: F401

    if os.environ.pop(SKIP_DYNAMO, "") != "1":  # popped: the children's environment is a fresh trial's
        import torch._dynamo  # noqa: F401 - creating a torch optimizer imports it: 1.1-1.4 s a trial otherwise

    import perfgate.measure.trial  # noqa: F401 - the harness: configs, device, probe, sampler, references

    del torch
    resident = resident_file_pages()  # the library pages these imports touched: each child maps them first
    server = os.getpid()
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    imported: set[str] = set()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        if import_workload(request["spec"], imported):
            resident = resident_file_pages()  # the workload's libraries' pages too
        with warnings.catch_warnings():  # the watch's thread waits on a pipe and holds no lock the child needs
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: never returns into the loop
            code = 70
            try:
                with contextlib.suppress(OSError):
                    os.close(replies.fileno())  # the server's end: the client sees it close when the server ends
                code = _child(request, resident, server)
            except BaseException:
                traceback.print_exc()  # into the trial's log, where the client reads its last line
            finally:
                os._exit(code)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()
    return 0


def import_workload(spec_path: str, imported: set[str]) -> bool:
    """Import the module of the workload a trial runs, once a workload, before its first trial is forked: every
    child then starts with the workload's imports done (a framework such as Lightning takes seconds to import),
    as it starts with torch's. Only the module is imported; its function runs in each child, which builds the
    workload afresh from the module as imported. A module that fails to import is left to the child, which
    reports it as a fresh trial would. True when it imported anything new."""
    from perfgate.references import Reference

    try:
        spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
        reference = Reference(spec["reference_text"], spec["reference_target"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if reference.target in imported:
        return False
    imported.add(reference.target)
    before = len(sys.modules)
    with contextlib.suppress(Exception, SystemExit):
        reference.import_module()
    return len(sys.modules) > before


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MADV_POPULATE_READ = 22  # Linux 5.14: fill the page table for a range, reading pages that are not yet mapped
_PRESENT = 1 << 63  # /proc/PID/pagemap: the page is mapped in this process


def resident_file_pages() -> list[tuple[int, int]]:
    """Runs of pages of mapped files (libraries) present in this process's page table, as (address, bytes).

    A fresh trial process has these in its resident set before setup: importing torch touched them. A
    forked child inherits the server's heap but not its file mappings' page-table entries, so without
    help those pages would be faulted in during the steps and counted as growth above setup. Empty
    where /proc cannot say (not Linux).
    """
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace").splitlines()
        pagemap = open("/proc/self/pagemap", "rb", buffering=0)  # noqa: SIM115 - closed below
    except OSError:
        return []
    runs: list[tuple[int, int]] = []
    with pagemap:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or fields[4] == "0" or fields[5].startswith(("[", "/dev/")) or fields[1][0] != "r":
                continue  # anonymous memory (inherited as it is), devices, or pages that cannot be read
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                pagemap.seek(start // PAGE_SIZE * 8)
                data = pagemap.read((end - start) // PAGE_SIZE * 8)
            except OSError:
                continue
            run_start = None
            for index, entry in enumerate(memoryview(data).cast("Q")):
                address = start + index * PAGE_SIZE
                if entry & _PRESENT:
                    if run_start is None:
                        run_start = address
                elif run_start is not None:
                    runs.append((run_start, address - run_start))
                    run_start = None
            if run_start is not None:
                runs.append((run_start, start + len(data) // 8 * PAGE_SIZE - run_start))
    return runs


def map_pages(runs: list[tuple[int, int]], advice: int = MADV_POPULATE_READ) -> None:
    """Map `runs` (from `resident_file_pages`) into this process's page table, as the server had them.

    One `madvise(advice)` a run; where the kernel does not know `advice` (before Linux 5.14 for
    MADV_POPULATE_READ), a read of each page instead. A run the kernel refuses otherwise is left to
    fault in during the trial, as it did before."""
    if not runs:
        return
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if _knows(madvise, advice):
        for address, length in runs:
            madvise(address, length, advice)
        return
    for address, length in runs:
        for page in range(address, address + length, PAGE_SIZE):
            ctypes.c_char.from_address(page).value  # noqa: B018 - the read maps the page


def _knows(madvise: Any, advice: int) -> bool:
    """Whether the kernel takes `advice`: tried on one page of anonymous memory of our own."""
    with mmap.mmap(-1, PAGE_SIZE) as page:
        first = ctypes.c_char.from_buffer(page)
        known = madvise(ctypes.addressof(first), PAGE_SIZE, advice) == 0 or ctypes.get_errno() != errno.EINVAL
        del first  # the mmap closes only once nothing points into it
    return known


def _child(request: dict[str, Any], resident: list[tuple[int, int]], server: int | None = None) -> int:
    os.setsid()  # its own process group: killed with its DataLoader workers, as a fresh trial is
    die_with_parent()  # the server (which dies with perfgate): a stopped child too (`perfgate.measure.turns`)
    if server is not None and os.getppid() != server:  # the server died before the line above
        return 70
    if request.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(request["cpus"]))  # before any DataLoader worker starts
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    map_pages(resident)
    from perfgate.measure.trial import main

    try:
        return main([request["spec"], request["out"]])
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()


if __name__ == "__main__":
    # The replies get a descriptor of their own; what the imports print goes to the log (stderr), not into them.
    _replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.exit(serve(sys.stdin, _replies))  # under the watch, every reply flushed and no teardown while perfgate waits
