"""A lock that serialises the processes writing one baseline folder.

Each write of a baseline file reads the file, merges this machine's entry into it and renames a new
file over it. Two `perfgate update`s (or `pytest --perfgate-update`s) finishing at once on one folder
would each merge into the file as they read it, and the later rename would drop the other's entry.
Holding an exclusive lock on the folder across the read, merge and rename makes the second wait for
the first. The lock is `flock` on the folder itself, so no lock file is left to commit; the operating
system releases it when the holder exits, crashes or is killed. Where `fcntl` is missing (Windows)
writes are not serialised.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

from perfgate.errors import PerfgateError, UsageError

LOCK_TIMEOUT_S = 120.0  # longer than any write takes: a holder this slow is stuck
_POLL_S = 0.05


class LockTimeout(PerfgateError):
    """Another process held the folder's lock for longer than the timeout."""


@contextlib.contextmanager
def locked_folder(directory: Path, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the exclusive lock of `directory` (created if missing) for the `with` block.

    Waits up to `timeout_s` (default LOCK_TIMEOUT_S, or $PERFGATE_LOCK_TIMEOUT) for another holder."""
    if timeout_s is None:
        timeout_s = _timeout_from_environment()
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        raise PerfgateError(f"cannot open {directory}: {exc.strerror}", hint="check the path and permissions") from exc
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"another process has been writing the baselines in {directory} for over {timeout_s:g} s",
                    hint="wait for the other perfgate update to finish, or stop it, then run again",
                )
            time.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _timeout_from_environment() -> float:
    text = os.environ.get("PERFGATE_LOCK_TIMEOUT")
    if text is None:
        return LOCK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise UsageError(
            f"PERFGATE_LOCK_TIMEOUT must be a number of seconds above 0, not {text!r}",
            hint=f"set it to, say, {LOCK_TIMEOUT_S:g}, or unset it for that default",
        )
    return value
