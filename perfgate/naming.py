"""How each front end spells perfgate's options and commands, for the messages the core writes.

The core never patches a message for a front end: it takes one `FrontEnd` and asks it for the
option (`--allow-dirty` or `--perfgate-allow-dirty`) or the command (`perfgate update` or
`pytest --perfgate-update`) to tell the user.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A workload's name, as the results schema (records/schema/results-v2.schema.json, `workload.name`) allows it:
# ASCII letters, digits, '.', '_' and '-' (its `pattern`), at most MAX_NAME_CHARS characters (its `maxLength`).
# It names files (baselines, traces), so it must be short and plain. Match with `fullmatch`.
WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_NAME_CHARS = 100


def name_problem(name: str) -> str | None:
    """What is wrong with `name` as a workload's name (the schema's rule), or None."""
    if len(name) > MAX_NAME_CHARS:
        return f"is {len(name)} characters long, more than {MAX_NAME_CHARS}"
    bad = sorted({c for c in name if not WORKLOAD_NAME.fullmatch(c)})
    if bad or not name:
        return f"contains {''.join(bad)!r}" if bad else "is empty"
    return None


@dataclass(frozen=True)
class FrontEnd:
    prefix: str  # what the option names start with
    update_command: str  # what rewrites the baselines
    debug: str | None = "debug"  # the option that shows tracebacks (None: this front end has none)

    def option(self, name: str) -> str:
        """`max-trials` as this front end spells it."""
        return f"{self.prefix}{name}"

    def traceback_note(self, *, trial: bool = False) -> str:
        """` (run with --debug for the traceback)` (`trial`: the trial process's traceback), or nothing where
        this front end has no such option."""
        if self.debug is None:
            return ""
        if trial:
            return f" ({self.option(self.debug)} shows the trial's traceback)"
        return f" (run with {self.option(self.debug)} for the traceback)"


CLI = FrontEnd("--", "perfgate update")
PYTEST = FrontEnd("--perfgate-", "pytest --perfgate-update", debug=None)
