"""Interleaved pairs: a pair's two trials take turns at their training steps.

Both trial processes of a pair start together and import at the same time (none of it is timed). From
the setup on only one of them runs (model, DataLoader workers, warm-up: two setups at once on shared cores
thrashed each other's threads): a trial runs its setup and then steps for about `TURN_S`, then hands
the turn over at a step boundary and waits; after its last step it keeps the turn through its checksum
pass, then finishes. The `TurnCoordinator`, in the
perfgate process, stops the waiting side's whole process group (`SIGSTOP`: its DataLoader workers
too, so they cannot prefetch in the other side's time and hide a slow data pipeline) and resumes the
other side. A busy neighbour or a drifting machine then hits both sides of a pair alike on any
timescale longer than a turn, where a pair run one trial after the other shares only drift slower
than a whole trial.

A trial's step times never include the wait: the clock reads that time a step sit inside it, and the
hand-over happens between steps. The trial and the coordinator talk over two named pipes a side (a
fork-server child has no file descriptor of the coordinator's to inherit): the trial writes one byte
to `<side>.turn` (`r` ready before its setup, `y` yielding, `f` finished its steps and checksum) and reads one
from `<side>.go`. End of file on `<side>.go` means there are no more turns (the coordinator is done,
or gone): the trial goes on alone.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

TURN_S = 0.5  # steps a trial runs before it hands the turn over; a step longer than this is one turn

READY, YIELD, FINISHED, GO = b"r", b"y", b"f", b"g"


class TurnTaker:
    """The trial's end: `begin` before the setup, `step_done` after each step, `finish` after the checksum pass."""

    def __init__(self, prefix: str, turn_s: float = TURN_S) -> None:
        self.turn_s = turn_s
        self.alone = False
        self._turn_started = 0.0
        self._go = self._turn = -1
        try:  # opened without waiting for the other end: a coordinator already gone means no turns
            self._go = os.open(f"{prefix}.go", os.O_RDONLY | os.O_NONBLOCK)
            self._turn = os.open(f"{prefix}.turn", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody reads our turns
            self._close()
            return
        os.set_blocking(self._go, True)
        os.set_blocking(self._turn, True)

    def begin(self) -> None:
        self._hand_over(READY)

    def step_done(self) -> None:
        if not self.alone and time.perf_counter() - self._turn_started >= self.turn_s:
            self._hand_over(YIELD)

    def finish(self) -> None:
        """After the last step and the checksum pass: wait until the other side has finished too, so that
        nothing this trial does afterwards runs beside the other side's steps."""
        self._hand_over(FINISHED)
        self._close()

    def _close(self) -> None:
        for fd in (self._go, self._turn):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._go = self._turn = -1
        self.alone = True

    def _hand_over(self, token: bytes) -> None:
        if self.alone:
            return
        try:
            os.write(self._turn, token)
            got = os.read(self._go, 1)
        except OSError:  # the coordinator is gone
            got = b""
        if not got:
            self.alone = True
        self._turn_started = time.perf_counter()


class _Process(Protocol):
    pid: int

    def poll(self) -> int | None: ...


class TurnCoordinator:
    """The perfgate process's end: makes the pipes of a pair and runs the turns until both sides finish."""

    def __init__(self, folder: Path, sides: Sequence[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.sides = list(sides)
        self.prefixes = {side: str(folder / side) for side in self.sides}
        self._go: dict[str, int] = {}
        self._turn: dict[str, int] = {}
        for side, prefix in self.prefixes.items():
            for suffix, fds in (("go", self._go), ("turn", self._turn)):
                path = Path(f"{prefix}.{suffix}")
                path.unlink(missing_ok=True)
                os.mkfifo(path, 0o600)
                # Read and write: neither the trial's open nor a read here ever waits for the other end.
                fds[side] = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self.turns = {side: 0 for side in self.sides}
        self.stalled: set[str] = set()  # after `run`: the sides that held the pair up when its deadline passed

    def prefix(self, side: str) -> str:
        return self.prefixes[side]

    def run(
        self,
        processes: Mapping[str, _Process],
        first: str,
        deadline: float,
        hang_after: Callable[[float], float] | None = None,
    ) -> float:
        """Give the turns until both sides have finished their steps, one has exited, or `deadline`
        (`time.perf_counter()`) passes; then let both run free. `first` takes the first turn. With `hang_after`, a
        hang is found from the other side's time: once a side is done after `elapsed` seconds the others must be
        done within `hang_after(elapsed)` more, and once a side is ready (its imports done) the others must be ready
        within `hang_after` of its time to get there. Returns the deadline that held at the end; `stalled` then
        names the sides that held the pair up when it passed (never ready, or holding the turn), whose pair's
        other trial only waited for them."""
        ready: set[str] = set()
        done: set[str] = set()  # finished their steps, or exited
        active: str | None = None
        started = time.perf_counter()
        self.stalled = set()
        waiting_for_ready: float | None = None  # the deadline for the sides not yet ready, once one is
        try:
            while len(done) < len(self.sides):
                now = time.perf_counter()
                if done and hang_after is not None:
                    deadline = min(deadline, now + hang_after(now - started))
                    hang_after = None
                live = [side for side in self.sides if side not in done]
                if hang_after is not None and waiting_for_ready is None and ready and not all(s in ready for s in live):
                    waiting_for_ready = now + hang_after(now - started)
                if now >= deadline or (
                    waiting_for_ready is not None and now >= waiting_for_ready and not all(s in ready for s in live)
                ):
                    unready = {side for side in live if side not in ready}
                    self.stalled = unready or ({active} if active is not None else set(live))
                    deadline = min(deadline, now)
                    break
                for side, process in processes.items():
                    if side not in done and process.poll() is not None:
                        done.add(side)
                        if active == side:
                            active = None
                live = [side for side in self.sides if side not in done]
                if active is None and live and all(side in ready for side in live):
                    active = first if first in live else live[0]
                    for side in live:
                        if side != active:
                            _signal(processes[side], signal.SIGSTOP)
                    self._go_to(processes[active], active)
                    continue
                fds = {self._turn[side]: side for side in live}
                readable, _, _ = select.select(list(fds), [], [], 0.2)
                for fd in readable:
                    side = fds[fd]
                    for token in _read_tokens(fd):
                        if token == READY:
                            ready.add(side)
                        elif token in (YIELD, FINISHED):
                            if token == FINISHED:
                                done.add(side)
                            others = [s for s in self.sides if s != side and s not in done]
                            if others:
                                _signal(processes[side], signal.SIGSTOP)
                                active = others[0]
                                self._go_to(processes[active], active)
                            elif token == YIELD:
                                self._go_to(processes[side], side)  # the other side is done: go on alone
                            else:
                                active = None
        finally:
            self.close(processes)
        return deadline

    def _go_to(self, process: _Process, side: str) -> None:
        _signal(process, signal.SIGCONT)
        self.turns[side] += 1
        with contextlib.suppress(OSError):
            os.write(self._go[side], GO)

    def close(self, processes: Mapping[str, _Process] | None = None) -> None:
        """Resume every side and end the turns: each trial reads end of file and goes on alone."""
        for process in (processes or {}).values():
            _signal(process, signal.SIGCONT)
        for fds in (self._go, self._turn):
            for fd in fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            fds.clear()


def _read_tokens(fd: int) -> list[bytes]:
    try:
        data = os.read(fd, 64)
    except BlockingIOError:
        return []
    return [data[i : i + 1] for i in range(len(data))]


def _signal(process: _Process, signum: int) -> None:
    """`signum` to the trial's process group (the trial and its DataLoader workers)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
