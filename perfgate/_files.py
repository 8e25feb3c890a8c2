"""Files and folders, written and read safely: the one atomic writer, the writability probes, the strict JSON
reader and the scratch folders that a later check can tell from its own and remove once their owner is dead.

A base module: it imports nothing of perfgate but `errors`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfgate.errors import UsageError

OWNER_FILE = ".perfgate-owner"  # in every scratch folder perfgate makes: who made it, to tell a dead owner's
MAX_INTEGER_DIGITS = 20  # beyond what any figure perfgate writes can hold, and short of what float() overflows


# --- Writing ---------------------------------------------------------------------------------------------


def write_atomic(path: Path | str, data: str | bytes, *, mode: int | None = None, exclusive: bool = False) -> None:
    """Write `data` (text as UTF-8) to `path`, whole or not at all: into a new file beside it, flushed to
    disk, then renamed over `path` (a link of that name is replaced, never followed).

    `mode`: the new file's permissions; by default those of the file it replaces, else 0o666 under the umask.
    `exclusive`: never replace an existing file (FileExistsError instead): the new file is linked into place.
    Failures are OSError (the caller says what to do) and leave no temporary file; the previous file is then
    unchanged. Ctrl-C at any point leaves either the old file or the new one."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if mode is None and not exclusive:
        with contextlib.suppress(OSError):
            existing = os.lstat(path)
            if stat.S_ISREG(existing.st_mode):
                mode = stat.S_IMODE(existing.st_mode)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        if exclusive:
            try:
                os.link(temporary, path)
            except FileExistsError:
                raise
            except OSError:  # a file system without hard links: an exclusive create
                with open(path, "xb") as handle:
                    handle.write(payload)
        else:
            os.replace(temporary, path)
        _sync_folder(path.parent)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the rename) to disk, where the platform can."""
    if sys.platform == "win32":
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --- Can it be written? ----------------------------------------------------------------------------------


def check_writable(path: Path | str, where: str) -> None:
    """A UsageError now, before minutes of measuring, when the file `path` could not be written: it is a
    folder, or the folder it would go in (or the nearest existing one above it) cannot take a new file.

    Probed by creating and removing a file there: `os.access` says yes to root on a read-only mount."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path} is a directory", where=where, hint="give a file name, e.g. results.json")
    ancestor = _existing_ancestor(path.absolute().parent)
    if not ancestor.is_dir() or not _can_create_in(ancestor):
        raise UsageError(f"cannot write {path}: {ancestor} is not a writable folder", where=where)


def check_writable_folder(path: Path | str, where: str) -> None:
    """A UsageError now when files could not be written in the folder `path` (made if missing): it is a
    file, or it (or the nearest existing folder above it) cannot take a new file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is not a folder", where=where, hint="give a folder to write in")
    ancestor = _existing_ancestor(path.absolute())
    if not ancestor.is_dir() or not _can_create_in(ancestor):
        raise UsageError(
            f"cannot write in {path}: {ancestor} is not a writable folder",
            where=where,
            hint="give a folder you can write to",
        )


def _existing_ancestor(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        if folder.is_symlink():  # a dangling link: what is above it decides
            break
        folder = folder.parent
    return folder


def _can_create_in(folder: Path) -> bool:
    try:
        fd, name = tempfile.mkstemp(prefix=".perfgate-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return True


# --- Reading ---------------------------------------------------------------------------------------------


class JsonError(ValueError):
    """Text that is not the strict JSON perfgate reads: its message says what and where (`source`)."""

    def __init__(self, problem: str, *, source: str) -> None:
        super().__init__(f"{source} is not valid JSON: {problem}")
        self.problem = problem
        self.source = source


def read_json(text: str | bytes, *, source: str) -> Any:
    """Parse strict JSON: no NaN or Infinity, no key repeated in one object, no integer of more than
    `MAX_INTEGER_DIGITS` digits, no number that overflows a float. Anything else is a JsonError (a
    ValueError) whose message starts `{source} is not valid JSON: `; nothing is executed."""
    try:
        return json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            object_pairs_hook=_refuse_repeated_keys,
        )
    except JsonError as exc:
        raise JsonError(exc.problem, source=source) from None
    except (ValueError, RecursionError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        raise JsonError(str(exc) or type(exc).__name__, source=source) from None


def _refuse_constant(name: str) -> Any:
    raise JsonError(f"{name} is not a number JSON allows", source="")


def _bounded_int(digits: str) -> int:
    count = len(digits.lstrip("-"))
    if count > MAX_INTEGER_DIGITS:
        raise JsonError(f"an integer of {count} digits is beyond any figure perfgate reads", source="")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonError(f"the number {text[:40]} is beyond what a float holds", source="")
    return value


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise JsonError(f"the key {key[:80]!r} appears twice in one object", source="")
        document[key] = value
    return document


# --- Scratch folders that outlive a killed owner ---------------------------------------------------------


def owner_text(pid: int | None = None) -> str:
    """What `.perfgate-owner` holds: this process's (or `pid`'s) id and the time it started."""
    pid = os.getpid() if pid is None else pid
    return json.dumps({"pid": pid, "started": process_started(pid)}) + "\n"


def mark_owned(folder: Path | str) -> None:
    """Mark `folder` (made by the caller) as this process's, for `sweep_tempdirs` and `owner_alive`."""
    write_atomic(Path(folder) / OWNER_FILE, owner_text())


class OwnedTempDir:
    """A new folder in the temporary folder, `prefix` starting its name, marked with this process's id and start
    time (`mark_owned`): `tempfile.TemporaryDirectory`'s shape (`name`, `cleanup()`, a context manager giving
    the folder's Path). A check killed before `cleanup` leaves it marked, and the next check's
    `sweep_tempdirs(prefix)` removes it."""

    def __init__(self, prefix: str) -> None:
        self.name = tempfile.mkdtemp(prefix=prefix)
        try:
            mark_owned(self.name)
        except BaseException:
            shutil.rmtree(self.name, ignore_errors=True)
            raise

    def cleanup(self) -> None:
        shutil.rmtree(self.name, ignore_errors=True)

    def __enter__(self) -> Path:
        return Path(self.name)

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


@contextlib.contextmanager
def owned_tempdir(prefix: str) -> Iterator[Path]:
    """`OwnedTempDir(prefix)` as a context manager: the folder, removed on leaving (whatever happened)."""
    with OwnedTempDir(prefix) as folder:
        yield folder


def sweep_tempdirs(prefix: str) -> list[Path]:
    """Remove the folders in the temporary folder whose name starts with `prefix`, that `owned_tempdir` (or
    `mark_owned`) marked, and whose owner process has ended; the folders removed. Unmarked folders, and those
    of a live owner, are left alone."""
    removed = []
    root = Path(tempfile.gettempdir())
    try:
        candidates = sorted(root.glob(f"{_glob_escape(prefix)}*"))
    except OSError:
        return []
    for folder in candidates:
        try:
            if folder.is_symlink() or not folder.is_dir():
                continue
        except OSError:
            continue
        if owner_alive(folder) is not False:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    return removed


def owner_alive(folder: Path | str) -> bool | None:
    """Whether the process that marked `folder` still runs: None when it carries no readable mark (not
    perfgate's to judge), False when that process has ended (its id unused, or reused by a later process)."""
    try:
        owner = json.loads((Path(folder) / OWNER_FILE).read_text(encoding="utf-8"))
        pid = owner["pid"]
        started = owner.get("started")
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    return process_alive(pid, started if isinstance(started, int | float) else None)


def process_alive(pid: int, started: float | None = None) -> bool:
    """Whether process `pid` runs and, where `started` is given, is the one that started then (a reused
    id belongs to a later process)."""
    if pid == os.getpid():
        return started is None or _same_start(process_started(pid), started)
    try:
        import psutil

        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
    except ImportError:
        return _pid_exists(pid) and (started is None or _same_start(process_started(pid), started))
    except Exception:  # psutil.NoSuchProcess, AccessDenied on some platforms
        return _pid_exists(pid) and (started is None or _same_start(process_started(pid), started))
    return started is None or _same_start(process_started(pid), started)


def process_started(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch, as psutil gives it; else the kernel's clock ticks
    since boot from /proc), or None when that cannot be read."""
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except ImportError:
        pass
    except Exception:
        return None
    try:
        stat_text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return float(stat_text.rpartition(")")[2].split()[19])  # field 22: starttime
    except (OSError, IndexError, ValueError):
        return None


def _same_start(found: float | None, recorded: float) -> bool:
    return found is None or abs(found - recorded) < 1.0


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _glob_escape(text: str) -> str:
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in text)
