"""The application layer: one place that owns a check's whole life, for every front end.

Between the core (`check`, `judge`, `measure`, `records`, `report`) and the front ends (`cli`,
`pytest_plugin`, `action`), the way pytest-benchmark's `BenchmarkSession` or pyperf's `Runner` own a session:
`options` declares every option once; `request` resolves them into one typed request and refuses, before
anything is measured, what would fail later; `gate` runs a check from its first trial to its exit code;
`commands` holds the other commands' bodies; `sink` is where their text goes. A front end translates to and
from these, and decides nothing itself.
"""
