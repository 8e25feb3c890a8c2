"""Who may use the machine at once when the suite runs under pytest-xdist (`pytest -n 2`).

Most end-to-end tests read a verdict, a diagnosis or a figure from real timings: another test's load beside them
would change what they measure. They run alone, holding the machine exclusively from their setup (module and
session fixtures included) to their teardown. Unit tests, and end-to-end tests marked `shares_machine` (they assert
nothing that another process's load can change: exact counts, records, errors, a lab's tables), hold it shared
and run beside each other.

The lock is a readers-writer lock on two files, with the writer preferred so that a test that must run alone is
not starved by a stream of shared ones: every test first takes the turnstile exclusively, then the machine
(shared or exclusive), then lets the turnstile go. A test waiting to run alone keeps the turnstile while it waits,
so no new shared holder gets past it."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

import pytest

MARKER = "shares_machine"


def runs_alone(item: pytest.Item) -> bool:
    """An end-to-end test runs alone unless it is marked as sharing the machine."""
    return item.get_closest_marker("e2e") is not None and item.get_closest_marker(MARKER) is None


class MachineLock:
    """The suite's readers-writer lock, in files that every xdist worker of one run opens."""

    def __init__(self, folder: Path, run: str) -> None:
        self.turnstile_path = folder / f"pytest-machine-{run}.turnstile"
        self.machine_path = folder / f"pytest-machine-{run}.lock"
        self._machine: IO[bytes] | None = None

    def acquire(self, *, alone: bool) -> None:
        if self._machine is not None:
            raise RuntimeError("the machine lock is already held by this worker")
        with open(self.turnstile_path, "ab") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            machine = open(self.machine_path, "ab")  # noqa: SIM115 (held until release)
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            self._machine = machine
        # closing the turnstile's file released it

    def release(self) -> None:
        if self._machine is not None:
            self._machine.close()  # closing releases the flock
            self._machine = None


def shared_files_first(items: list[pytest.Item]) -> None:
    """Order the files so that those whose tests all share the machine come first (their tests run beside each
    other on every worker), then the rest in their own order: stable, the same in every worker."""
    alone_in = {item.path for item in items if runs_alone(item)}
    items.sort(key=lambda item: item.path in alone_in)
