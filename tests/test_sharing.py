"""The suite's machine lock under pytest-xdist (tests/helpers/sharing.py), held by real processes: a test that runs
alone excludes every other, shared tests run together, and a waiting test that runs alone goes before shared ones
that come after it."""

from __future__ import annotations

import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.sharing import MachineLock, runs_alone

HOLDER = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.helpers.sharing import MachineLock
lock = MachineLock(Path({folder!r}), "run")
lock.acquire(alone={alone})
print("held", flush=True)
sys.stdin.readline()
lock.release()
"""


class Holder:
    """A process that takes the lock, says so, and lets it go when told."""

    def __init__(self, folder: Path, *, alone: bool) -> None:
        source = HOLDER.format(root=str(Path(__file__).parent.parent), folder=str(folder), alone=alone)
        self.process = subprocess.Popen(
            [sys.executable, "-c", source], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def holds_within(self, seconds: float) -> bool:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], seconds)
        return bool(ready) and self.process.stdout.readline() == "held\n"

    def release(self) -> None:
        self.process.communicate("\n", timeout=30)  # closes its pipes too
        assert self.process.returncode == 0


@pytest.mark.e2e
@pytest.mark.shares_machine
def test_a_test_that_runs_alone_waits_for_shared_ones_and_goes_before_later_ones(tmp_path):
    first, second = Holder(tmp_path, alone=False), Holder(tmp_path, alone=False)
    assert first.holds_within(30) and second.holds_within(30)  # shared holders together
    alone = Holder(tmp_path, alone=True)
    assert not alone.holds_within(1.0)  # waits for both
    later = Holder(tmp_path, alone=False)
    assert not later.holds_within(1.0)  # does not overtake the waiting one
    first.release()
    assert not alone.holds_within(1.0)
    second.release()
    assert alone.holds_within(30)
    assert not later.holds_within(1.0)  # nothing beside a test that runs alone
    alone.release()
    assert later.holds_within(30)
    later.release()


def test_a_worker_cannot_take_the_lock_twice(tmp_path):
    lock = MachineLock(tmp_path, "run")
    lock.acquire(alone=False)
    with pytest.raises(RuntimeError, match="already held"):
        lock.acquire(alone=True)
    lock.release()
    lock.acquire(alone=True)
    lock.release()


def test_end_to_end_tests_run_alone_unless_marked_as_sharing_the_machine(pytester):
    pytester.makepyfile(
        """
        import pytest

        def test_unit(): pass

        @pytest.mark.e2e
        def test_timed(): pass

        @pytest.mark.e2e
        @pytest.mark.shares_machine
        def test_counted(): pass
        """
    )
    pytester.makeini("[pytest]\nmarkers =\n    e2e: e\n    shares_machine: s\n")
    items, _ = pytester.inline_genitems()
    assert {item.name: runs_alone(item) for item in items} == {
        "test_unit": False,
        "test_timed": True,
        "test_counted": False,
    }
