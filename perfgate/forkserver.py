"""A fork server for trial processes: torch is imported once per lab, not once per trial.

Every trial runs in a process of its own, so that no trial inherits another's allocator, caches or
threads. Starting Python and importing torch costs about 1.5-2 s a process, often more than the timed
steps of a small workload. The server is a process started with the trials' environment that imports
torch and perfgate's trial module, then waits; for each trial it forks a child, which starts a session
of its own (so a timeout or Ctrl-C takes down the child and its DataLoader workers as one group), sends
its output to the trial's log and runs the trial. The parent never talks to a trial directly: it asks
the server for one and is told the child's pid, then its exit status.

The server touches no device and starts no threads before forking, which is what makes a fork safe:
CUDA is initialised in the child, never in the server. It is used on Linux only (macOS frameworks are
not fork-safe; Windows has no fork); elsewhere, or if the server cannot start, each trial is a fresh
`python -m perfgate.trial` process, as before. `PERFGATE_FORK_SERVER=0` turns it off.

Protocol, one JSON object a line: the client sends `{"spec", "out", "log"}`; the server answers
`{"pid"}` once the child is running and `{"pid", "returncode"}` once it has exited (a negative
returncode is the signal that ended it, as with subprocess).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from typing import IO, Any

READY = "ready"


class ForkServerError(Exception):
    """The server stopped answering; the caller falls back to a fresh process per trial."""


def available() -> bool:
    return sys.platform.startswith("linux") and os.environ.get("PERFGATE_FORK_SERVER", "1") != "0"


class ForkServer:
    """The client side: start the server, run trials through it, close it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._process: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "perfgate.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches perfgate, which then stops the server
        )
        if self._read(process, 120.0) != {READY: True}:
            _stop(process)
            raise ForkServerError("the fork server did not start")
        return process

    def run(self, spec_path: str, out_path: str, log_path: str, timeout_s: float) -> int | None:
        """Run one trial; its returncode, or None when it was killed for running past `timeout_s`."""
        if self._process is None:
            self._process = self._start()
        process = self._process
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps({"spec": spec_path, "out": out_path, "log": log_path}) + "\n")
            process.stdin.flush()
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone: {exc}") from exc
        started = self._read(process, 60.0)
        pid = int(started["pid"])
        try:
            finished = self._read(process, timeout_s)
        except TimeoutError:
            _kill_group(pid)
            self._read(process, 60.0)  # the server reaps the child and reports it
            return None
        except BaseException:
            _kill_group(pid)  # Ctrl-C: take the trial and its DataLoader workers down too
            raise
        return int(finished["returncode"])

    def close(self) -> None:
        if self._process is not None:
            _stop(self._process)
            self._process = None

    @staticmethod
    def _read(process: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        if not ready:
            raise TimeoutError
        line = process.stdout.readline()
        if not line:
            raise ForkServerError("the fork server exited")
        message: dict[str, Any] = json.loads(line)
        return message


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, signal.SIGKILL)


def _stop(process: subprocess.Popen[str]) -> None:
    try:
        if process.stdin is not None:
            process.stdin.close()  # end of input: the server exits
        process.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def serve(requests: IO[str], replies: IO[str]) -> None:
    """The server's loop: import once, then fork a child per request."""
    import torch  # noqa: F401 - the import is the point: children inherit it

    from perfgate import trial

    _reply(replies, {READY: True})
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: a trial process of its own
            code = 1
            try:
                os.setsid()
                log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.close(log)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                code = trial.main([request["spec"], request["out"]])
            except BaseException:  # the trial module reports its own failures; this is the last resort
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _reply(replies, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _reply(replies, {"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _reply(replies: IO[str], message: dict[str, Any]) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the client stops the server by closing its input
    serve(sys.stdin, sys.stdout)
