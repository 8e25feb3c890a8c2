"""The system sampler on real processes: the CPU seconds a trial's children (its DataLoader workers) use."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from perfgate.measure.sampler import SystemSampler

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end:\n    pass\n"


def burn(seconds: float) -> subprocess.Popen[bytes]:
    """A child process that uses `seconds` of CPU, then exits."""
    return subprocess.Popen([sys.executable, "-c", BURN.format(s=seconds)])


def used_by(process: subprocess.Popen[bytes], *, at_least: float) -> None:
    """Wait until `process` has used `at_least` seconds of CPU: on a busy machine wall time says little."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        times = psutil.Process(process.pid).cpu_times()
        if times.user + times.system >= at_least:
            return
        time.sleep(0.01)
    raise AssertionError(f"the child used less than {at_least} s of CPU in 60 s")


def test_children_that_exit_inside_the_window_and_one_still_running_at_its_end_are_counted():
    with SystemSampler(interval_s=0.01) as sampler:
        finished = burn(0.3)
        finished.wait()  # exited and waited for inside the window: counted by os.times
        running = burn(10.0)
        used_by(running, at_least=0.35)  # still running at the end of the window: counted by psutil
    running.kill()
    running.wait()
    used = sampler.samples.summary().loader_cpu_s
    assert used is not None and 0.6 <= used <= 1.5


def test_a_child_that_ran_before_the_window_is_not_counted():
    before = burn(0.3)
    before.wait()
    with SystemSampler(interval_s=0.01) as sampler:
        time.sleep(0.1)
    summary = sampler.samples.summary()
    assert summary.loader_cpu_s is not None and summary.loader_cpu_s < 0.05
    assert summary.to_dict()["loader_cpu_s"] == summary.loader_cpu_s
