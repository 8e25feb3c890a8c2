"""Helpers the test modules share (fixtures and hooks stay in tests/conftest.py).

- `workloads`: where the test workloads live, and references to them.
- `git`: running git in a test's own repository.
- `cli`: the `perfgate` command, in a subprocess (as a user runs it) or in this process (for errors
  raised before any trial), and child processes that see Ctrl-C as a terminal sends it.
- `results`: the results file's schema, and synthetic runs built by hand (no trials).
- `baselines`: baseline entries built by hand, for the store and for the gate's verdicts.
"""
