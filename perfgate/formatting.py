"""How numbers read in reports and messages: bytes, p-values, signed percentages, a step's exact counts (and long
lists of names).

A change that rounds to zero prints as `+0.0%` (`+0.00` ms), never `-0.0%`: every signed figure goes
through `format_signed`, every unsigned percentage of a value that can be negative through `format_pct`.
"""

from __future__ import annotations


def format_bytes(count: int | None) -> str:
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_p_value(value: float) -> str:
    return f"{value:.2g}" if value >= 0.001 else f"{value:.1e}"


def format_signed(value: float, digits: int = 1, suffix: str = "") -> str:
    """`value` with its sign and `digits` decimals (`+1.5`, `-0.3`); one that rounds to zero is `+0.0`."""
    text = f"{value:+.{digits}f}"
    if text.startswith("-") and float(text) == 0:
        text = "+" + text[1:]
    return text + suffix


def format_signed_pct(fraction: float, digits: int = 1) -> str:
    """A relative change as a signed percentage: 0.052 -> `+5.2%`; -0.0004 -> `+0.0%`, not `-0.0%`."""
    return format_signed(100 * fraction, digits, "%")


def format_pct(fraction: float, digits: int = 0) -> str:
    """A fraction as an unsigned percentage (`0.25` -> `25%`); one that rounds to zero is `0%`, not `-0%`."""
    text = f"{100 * fraction:.{digits}f}"
    if text.startswith("-") and float(text) == 0:
        text = text[1:]
    return text + "%"


def format_names(names: list[str], shown: int = 4) -> str:
    """The first `shown` of `names` and how many more: `a, b, c, d and 9 more`."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


def format_count(name: str, value: int | float | None) -> str:
    """A count as the reports show it: FLOPs in engineering notation (`1.76e8`), bytes in binary units, the
    others whole (`124,416`)."""
    if value is None:
        return "-"
    if name == "allocated_peak_bytes":
        return format_bytes(int(value))
    if name == "flops_per_sample":
        if abs(value) < 1000:
            return f"{value:.3g}"
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{int(value):,}"


# Characters a terminal or a CI log acts on: C0 controls but the line break and the tab, DEL, C1 controls,
# and the bidirectional overrides and isolates that reorder what a reader sees.
_UNPRINTABLE = {
    **dict.fromkeys([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]),
    **dict.fromkeys([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]),
}
_COMMAND_STARTS = ("::", "##[")  # a GitHub Actions workflow command (and its older form) at a line's start


def printable(text: str) -> str:
    """`text` safe to print where it came from someone else (a history record, a workload's name): controls
    dropped (but the line break and the tab), and a line that would start a workflow command (`::error::`,
    `##[error]`, after any spaces) prefixed with "> " (a runner trims spaces), so no text can move the
    cursor, retitle the terminal or annotate the job. perfgate's own text never holds either, and is unchanged."""
    text = text.translate(_UNPRINTABLE)
    if "::" not in text and "##[" not in text:
        return text
    return "\n".join(
        "> " + line if line.lstrip(" \t").startswith(_COMMAND_STARTS) else line for line in text.split("\n")
    )
