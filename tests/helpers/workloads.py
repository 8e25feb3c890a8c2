"""Where the test workloads are (tests/workloads/), and the references the tests pass to perfgate."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parent.parent.parent  # the repository
WORKLOADS = ROOT / "tests" / "workloads"
TINY_FILE = WORKLOADS / "tiny.py"  # a correct workload, and one function for each way a workload can be wrong
GATED = f"{WORKLOADS / 'gated.py'}:gated"  # the gate's end-to-end workload, faults planted by PERFGATE_TEST_PLANT
