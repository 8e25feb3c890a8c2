"""`perfgate bisect`'s report: each step of the bisection, then the first bad commit with its evidence."""

from __future__ import annotations

from perfgate.records.bisection import BisectResult


def format_bisect(result: BisectResult) -> str:
    """The bisection in words: each step, then the first bad commit with its evidence, or why there is none."""
    lines = [
        f"bisect {result.good[:10]}..{result.bad[:10]}: {len(result.commits)} commit(s), {len(result.steps)} "
        "paired check(s)"
    ]
    against = result.steps[0].result.against if result.steps else None
    if against is not None:
        lines.append(f"each pair measured {against.measured()}")
    for step in result.steps:
        lines.append(f"  {step.commit[:10]} against {step.base[:10]}: {'slower' if step.slower else 'not slower'}")
    if result.first_bad is None:
        lines.append(f"{result.bad[:10]} is not slower than {result.good[:10]} beyond the threshold: nothing to find")
        lines.extend(f"  {line}" for line in result.steps[0].evidence)
        return "\n".join(lines) + "\n"
    step = next(s for s in result.steps if s.commit == result.first_bad and s.base == result.good)
    if result.monotonic:
        lines.append(f"first bad commit: {result.first_bad}")
    else:
        lines.append(
            f"not monotonic: {result.first_bad[:10]} is the first commit slower than {result.good[:10]}, but it is "
            "not slower than its own parent: the slowdown came in steps, or came and went"
        )
    lines.extend(f"  {line}" for line in step.evidence)
    return "\n".join(lines) + "\n"
