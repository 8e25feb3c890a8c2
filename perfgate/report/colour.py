"""Verdicts in colour on a terminal; plain text everywhere else.

Colour is used only where the stream is a terminal and `NO_COLOR` (https://no-color.org) is unset or empty;
`FORCE_COLOR` set and non-empty asks for it anyway (CI logs that render ANSI). It only wraps words a report
already prints, so the plain text is the same report.
"""

from __future__ import annotations

import os
import re
from typing import Protocol

RED, YELLOW, GREEN, BOLD, RESET = "\033[31m", "\033[33m", "\033[32m", "\033[1m", "\033[0m"

# A verdict cell ends its table row; the build's verdict line starts with the command's name.
_CELL = re.compile(
    r"(?<=  )(REGRESSION|FAILED|NOT COMPARABLE|NO BASELINE|inconclusive|improvement|no change|accepted)$", re.M
)
_CELL_COLOURS = {
    "REGRESSION": RED,
    "FAILED": RED,
    "NOT COMPARABLE": RED,
    "NO BASELINE": RED,
    "inconclusive": YELLOW,
    "improvement": GREEN,
    "no change": GREEN,
    "accepted": YELLOW,
}
_EXIT = re.compile(r"(Exit \d+ \((?P<meaning>[^)]*)\)\.)")


class Stream(Protocol):
    def isatty(self) -> bool: ...


def wanted(stream: Stream, environ: dict[str, str] | None = None) -> bool:
    """Whether to colour what goes to `stream`."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def paint(text: str) -> str:
    """`text` with its verdict cells and the build's `Exit N (...)` coloured."""

    def cell(match: re.Match[str]) -> str:
        return f"{_CELL_COLOURS[match.group(1)]}{BOLD}{match.group(1)}{RESET}"

    def exit_code(match: re.Match[str]) -> str:
        colour = GREEN if match.group("meaning") == "pass" else RED
        return f"{colour}{BOLD}{match.group(1)}{RESET}"

    return _EXIT.sub(exit_code, _CELL.sub(cell, text))


def for_stream(text: str, stream: Stream) -> str:
    """`text` coloured when `stream` wants colour, else unchanged."""
    return paint(text) if wanted(stream) else text
