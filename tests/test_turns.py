"""Interleaved pairs: two real processes take turns at their steps, the waiting one stopped with its workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from perfgate.measure.turns import TurnCoordinator

pytestmark = pytest.mark.e2e  # real processes taking turns, a few seconds a test

# A stand-in for a trial: a "DataLoader worker" child that ticks every millisecond, and steps that
# spin for `step_s`, each step's start and end on the monotonic clock (shared by every process).
SIDE = textwrap.dedent(
    """
    import json, multiprocessing, sys, time
    from perfgate.measure.turns import TurnTaker

    def worker(path):
        with open(path, "w") as out:
            while True:
                out.write(f"{time.monotonic()}\\n")
                out.flush()
                time.sleep(0.001)

    if __name__ == "__main__":
        prefix, out = sys.argv[1], sys.argv[2]
        steps, step_s, crash_at = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
        hang_at = int(sys.argv[6])  # -2: before it is ready; a step: there
        child = multiprocessing.get_context("fork").Process(target=worker, args=(out + ".ticks",), daemon=True)
        child.start()
        turns = TurnTaker(prefix, turn_s=0.05)
        if hang_at == -2:
            time.sleep(3600)
        turns.begin()
        spans = []
        for step in range(steps):
            if step == crash_at:
                raise SystemExit(3)
            if step == hang_at:
                time.sleep(3600)
            started = time.monotonic()
            while time.monotonic() - started < step_s:
                pass
            spans.append((started, time.monotonic()))
            turns.step_done()
        turns.finish()
        with open(out, "w") as handle:
            json.dump(spans, handle)
    """
)


def start(
    tmp_path: Path, coordinator: TurnCoordinator, side: str, steps: int, crash_at: int = -1, hang_at: int = -1
) -> subprocess.Popen:
    script = tmp_path / "side.py"
    script.write_text(SIDE, encoding="utf-8")
    out = tmp_path / f"{side}.json"
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            coordinator.prefix(side),
            str(out),
            str(steps),
            "0.01",
            str(crash_at),
            str(hang_at),
        ],
        start_new_session=True,  # as trials are: the coordinator stops the whole group
    )


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_two_sides_take_turns_and_the_waiting_side_is_stopped_with_its_workers(tmp_path):
    coordinator = TurnCoordinator(tmp_path / "turns", ["base", "head"])
    processes = {side: start(tmp_path, coordinator, side, steps=40) for side in ("base", "head")}
    coordinator.run(processes, "head", time.perf_counter() + 60)
    for process in processes.values():
        assert process.wait(timeout=30) == 0
    spans = {side: json.loads((tmp_path / f"{side}.json").read_text()) for side in processes}
    assert all(len(s) == 40 for s in spans.values())
    # Never a step of one side beside a step of the other.
    assert sum(overlap(a, b) for a in spans["base"] for b in spans["head"]) < 0.001
    # Turns of about 50 ms (5 steps): each side held the turn several times, head first.
    assert coordinator.turns["head"] >= 4 and coordinator.turns["base"] >= 4
    assert spans["head"][0][0] < spans["base"][0][0]
    # While one side steps, the other's worker is stopped: its ticks stay out of the stepping side's turn.
    for side, other in (("base", "head"), ("head", "base")):
        ticks = [float(line) for line in (tmp_path / f"{side}.json.ticks").read_text().split()]
        during = [t for t in ticks if any(start + 0.003 < t < end for start, end in spans[other])]
        assert len(ticks) > 100
        assert len(during) < 0.05 * len(ticks), f"{side}'s worker ticked {len(during)} times in {other}'s steps"


def test_a_side_that_dies_mid_pair_lets_the_other_finish_alone_and_nothing_stays_stopped(tmp_path):
    coordinator = TurnCoordinator(tmp_path / "turns", ["base", "head"])
    processes = {"base": start(tmp_path, coordinator, "base", steps=40, crash_at=12)}
    processes["head"] = start(tmp_path, coordinator, "head", steps=40)
    started = time.perf_counter()
    coordinator.run(processes, "base", started + 60)
    assert processes["base"].wait(timeout=30) == 3
    assert processes["head"].wait(timeout=30) == 0
    assert time.perf_counter() - started < 30
    assert len(json.loads((tmp_path / "head.json").read_text())) == 40
    for process in processes.values():  # no worker left behind in a stopped state
        for child in psutil.Process().children(recursive=True):
            assert child.status() != psutil.STATUS_STOPPED
        assert process.returncode is not None


def test_a_trial_whose_coordinator_is_gone_goes_on_alone(tmp_path):
    coordinator = TurnCoordinator(tmp_path / "turns", ["head"])
    process = start(tmp_path, coordinator, "head", steps=20)
    coordinator.close()  # end of file on its pipe: no more turns to wait for
    assert process.wait(timeout=30) == 0
    assert len(json.loads((tmp_path / "head.json").read_text())) == 20


@pytest.mark.parametrize("hang_at", [-2, 12], ids=["before it is ready", "in a step"])
def test_a_side_that_hangs_is_named_stalled_and_the_other_finishes_alone_once_freed(tmp_path, hang_at):
    coordinator = TurnCoordinator(tmp_path / "turns", ["base", "head"])
    processes = {"base": start(tmp_path, coordinator, "base", steps=40)}
    processes["head"] = start(tmp_path, coordinator, "head", steps=40, hang_at=hang_at)
    started = time.perf_counter()
    try:
        # Before it is ready: found from the base's time to get ready (hang_after); in a step: at the deadline.
        deadline = coordinator.run(processes, "base", started + 4, hang_after=lambda elapsed: 1.5)
        assert coordinator.stalled == {"head"}
        assert deadline <= time.perf_counter() < started + 6
        assert processes["base"].wait(timeout=30) == 0  # waited only for the head; freed, it finishes
        assert len(json.loads((tmp_path / "base.json").read_text())) == 40
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
