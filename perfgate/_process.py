"""How perfgate's own processes end: `leave`, for a process whose work is written (a trial, a fork server, the
`perfgate` command, each watched process through `perfgate.measure.watch`)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
from typing import NoReturn


def exit_status(code: object) -> int:
    """The status a process ends with for `sys.exit(code)`, as Python's own exit gives it: None is 0, an integer
    itself, anything else is printed to stderr and ends the process with 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def leave(code: int) -> NoReturn:
    """End this process with `code` now: the exit handlers run and the output is flushed, as at a normal exit,
    but the interpreter is not torn down. Where a process has imported torch, tearing its modules down (and
    torch._dynamo's, where imported) took 0.6 s here, on the clock of whoever waits for the process: a trial's
    parent, a check waiting for its fork servers, the user at the `perfgate` command. Call it only once the
    process's work is written and closed; non-daemon threads are not waited for."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: nothing more can reach it
            stream.flush()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)  # the C library's own buffers (a native library's prints)
    os._exit(code)
