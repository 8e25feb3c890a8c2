"""Numerics: a config that failed with a NaN or infinite loss gets this finding, with the verdict's reason as
its evidence, and no other (`diagnose` reads nothing else of a failed config).
"""

from __future__ import annotations

from perfgate.records.diagnoses import Finding


def _numerics(reason: str) -> Finding | None:
    text = reason.lower()
    if "loss is nan" not in text and "loss is inf" not in text and "loss is -inf" not in text:
        return None
    return Finding("numerics", "numerics: the loss was not finite", (reason,))
