"""The machine fingerprint: which stored measurements a run may be compared with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FINGERPRINT_FIELDS = (
    "device_type",
    "device_name",
    "device_count",
    "cuda",
    "torch",
    "cpu_model",
    "cpu_capability",
    "threads",
)


def machine_fingerprint(environment: Mapping[str, Any]) -> dict[str, Any]:
    """The stable fields that decide which baseline a run may be compared with.

    Device model and count, CUDA and torch versions; for CPU runs the CPU model, the instruction set
    torch uses on it (`AVX2`, `AVX512`: one model name can cover both, and bf16 runs about 20x slower
    without the newer one) and the thread count. Never clock speeds, hostnames or anything else that
    changes between two runs on one machine type.
    """
    device = environment.get("device") or {}
    on_cpu = device.get("type", "cpu") == "cpu"
    return {
        "device_type": device.get("type", "cpu"),
        "device_name": None if on_cpu else device.get("name"),
        "device_count": device.get("count", 1),
        "cuda": None if on_cpu else environment.get("cuda"),
        "torch": str(environment.get("torch")),
        "cpu_model": (environment.get("cpu") or {}).get("model") if on_cpu else None,
        "cpu_capability": cpu_capability(environment) if on_cpu else None,
        "threads": environment.get("threads") if on_cpu else None,
    }


def cpu_capability(environment: Mapping[str, Any]) -> str | None:
    """The CPU instruction set torch uses, as the environment recorded it (None before perfgate recorded it)."""
    capability = (environment.get("cpu") or {}).get("capability")
    return str(capability) if capability else None


def fingerprint_key(fingerprint: dict[str, Any]) -> str:
    """A readable key naming the machine type, used to file its baseline entries."""
    if fingerprint.get("device_type") == "cpu":
        threads = fingerprint.get("threads")
        plural = "" if threads == 1 else "s"
        model = fingerprint.get("cpu_model")
        if fingerprint.get("cpu_capability"):
            model = f"{model} ({fingerprint['cpu_capability']})"
        return f"cpu {model}, {threads} thread{plural}, torch {fingerprint.get('torch')}"
    return (
        f"{fingerprint.get('device_count')}x {fingerprint.get('device_name')}, cuda {fingerprint.get('cuda')}, "
        f"torch {fingerprint.get('torch')}"
    )


def fingerprint_differences(wanted: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """`field: stored != wanted` for each fingerprint field that differs."""
    return [
        f"{name} {stored.get(name)!r} (this machine: {wanted.get(name)!r})"
        for name in FINGERPRINT_FIELDS
        if stored.get(name) != wanted.get(name)
    ]
