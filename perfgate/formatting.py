"""How numbers read in reports and messages: bytes, p-values, signed percentages."""

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


def format_signed_pct(fraction: float) -> str:
    return f"{100 * fraction:+.1f}%"
