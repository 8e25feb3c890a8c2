"""Trials end when perfgate dies: `python -m perfgate.measure.watch MODULE ARGS...` runs MODULE as `python -m
MODULE ARGS...` would, in a process that cannot outlive the perfgate process that started it.

A trial runs in a session of its own (so that Ctrl-C in a terminal reaches perfgate alone, which then stops
its trials), and so nothing took it down when perfgate itself was killed (SIGKILL, or SIGHUP where nothing
handles it): its trials ran on under PID 1. Two things end them now:

- on Linux, the kernel: `prctl(PR_SET_PDEATHSIG, SIGKILL)` kills this process when its parent dies, even when
  `perfgate.measure.turns` has stopped it (SIGSTOP) for the other side's turn. Set after the exec, then
  `os.getppid()` is compared with the parent's pid that perfgate put in `PERFGATE_PARENT_PID`: a parent that
  died before the prctl is caught there. Its DataLoader workers, in its process group, are sent SIGHUP by the
  kernel when a stopped group is orphaned, and otherwise end when they see their parent gone (or by the pipe);
- everywhere, a pipe: perfgate keeps the write end of a pipe open for its whole life (`lifeline`) and every
  trial inherits the read end (`PERFGATE_PARENT_FD`); a daemon thread blocks reading it, and at end of file
  (perfgate has died, however) kills this process's whole group: the trial with its DataLoader workers.

The environment this process hands on names it as the parent (a launcher it runs, torchrun, starts its ranks
under this module too) and no longer names the pipe, which a launcher does not pass on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import signal
import stat
import sys
import threading
from collections.abc import Mapping

from perfgate._process import exit_status, leave

MODULE = "perfgate.measure.watch"
PARENT_PID = "PERFGATE_PARENT_PID"
PARENT_FD = "PERFGATE_PARENT_FD"
PR_SET_PDEATHSIG = 1

_lifeline: tuple[int, int] | None = None  # (read end, write end), made once per perfgate process


def watched(module: str) -> list[str]:
    """The interpreter's arguments that run `module` under the watch: `-m perfgate.measure.watch MODULE`."""
    return ["-m", MODULE, module]


def lifeline() -> int:
    """The read end of this process's lifeline, made on first use: perfgate holds the write end open until it
    exits, so a watched trial that inherited the read end sees end of file exactly when perfgate has died."""
    global _lifeline
    if _lifeline is None:
        _lifeline = os.pipe()  # neither end is inherited by an exec'd child unless passed (pass_fds)
    return _lifeline[0]


def watched_environment(env: Mapping[str, str]) -> tuple[dict[str, str], tuple[int, ...]]:
    """`env` for a watched child of this process, and the `pass_fds` to start it with (`subprocess.Popen`)."""
    if os.name != "posix":  # no pass_fds (nor sessions): the trial runs as it always did there
        return dict(env), ()
    fd = lifeline()
    return {**env, PARENT_PID: str(os.getpid()), PARENT_FD: str(fd)}, (fd,)


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when the thread that started it (or forked it) ends.
    A no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def kill_own_group() -> None:
    """SIGKILL this process with its group when it leads the group (a trial's session), else itself alone."""
    if hasattr(os, "killpg") and os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _watch_pipe(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return  # not a pipe of ours after all: nothing to watch
        if not data:
            kill_own_group()
            return


def watch() -> None:
    """In the child, before the trial's own code: die with the parent, and watch the lifeline."""
    expected = os.environ.pop(PARENT_PID, None)
    fd_text = os.environ.pop(PARENT_FD, None)
    die_with_parent()
    if expected is not None:
        with contextlib.suppress(ValueError):
            if os.getppid() != int(expected):  # the parent died before the prctl above took effect
                kill_own_group()
    if fd_text is not None:
        try:
            fd = int(fd_text)
            is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
        except (ValueError, OSError):
            is_pipe = False  # not passed on (a launcher closed it): the prctl is what ends this process
        if is_pipe:
            os.set_inheritable(fd, False)
            threading.Thread(target=_watch_pipe, args=(fd,), name="perfgate-watch", daemon=True).start()
    os.environ[PARENT_PID] = str(os.getpid())  # for a watched process this one starts (torchrun's ranks)


def main(argv: list[str] | None = None) -> None:
    """`python -m perfgate.measure.watch MODULE ARGS...`: watch, then run MODULE as `python -m` would."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.exit("usage: python -m perfgate.measure.watch MODULE [ARGS...]")
    module, *rest = args
    watch()
    sys.argv = [module, *rest]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # a trial's or a fork server's `sys.exit(code)`: its record and replies are written
        leave(exit_status(exc.code))
    # Run to its end (torchrun's launcher, its ranks done), or exited: no interpreter teardown on perfgate's clock.
    # An error propagates as it always did (its traceback, exit 1).
    leave(0)


if __name__ == "__main__":
    main()
