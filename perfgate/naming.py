"""How each front end spells perfgate's options and commands, for the messages the core writes.

The core never patches a message for a front end: it takes one `FrontEnd` and asks it for the
option (`--allow-dirty` or `--perfgate-allow-dirty`) or the command (`perfgate update` or
`pytest --perfgate-update`) to tell the user.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FrontEnd:
    prefix: str  # what the option names start with
    update_command: str  # what rewrites the baselines

    def option(self, name: str) -> str:
        """`max-trials` as this front end spells it."""
        return f"{self.prefix}{name}"


CLI = FrontEnd("--", "perfgate update")
PYTEST = FrontEnd("--perfgate-", "pytest --perfgate-update")
