"""How long a paired check spends preparing the base's environment (issue 43's targets: under 20 s when one small
package differs, with torch installed, and 0 s when nothing differs).

    python benchmarks/base_environment.py [--repeats 3]

This interpreter (torch installed) is the head's environment. Two folders stand for the two commits: the same
`pyproject.toml` (nothing differs), then one whose pin of a small local package differs. For each installer
(uv, pip) it times `perfgate.measure.packages.base_environment`: nothing differs; one package differs, the
overlay built anew (the installer's own cache warm after the first build); the same again, the overlay taken
from perfgate's cache. Every build goes to a new temporary cache folder except the cached row. Run nothing
else beside it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfgate.measure.packages import base_environment  # noqa: E402
from tests.helpers.environments import build_wheel  # noqa: E402

PYPROJECT = '[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["evaldep=={version}", "torch"]\n'


def timed(mode: str, base: Path, head: Path, scratch: Path) -> tuple[float, str, str]:
    started = time.perf_counter()
    with base_environment(mode, base, head, scratch) as own:
        seconds = time.perf_counter() - started
        return seconds, own.record.kind, own.record.changed_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    print(
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"torch {torch.__version__}, python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="perfgate-envbench-") as folder:
        work = Path(folder)
        wheels = work / "wheels"
        build_wheel(wheels, "evaldep", "1.0", "VERSION = '1.0'\n")
        os.environ["PIP_FIND_LINKS"] = str(wheels)
        base, head = work / "base", work / "head"
        for path, version in ((base, "1.0"), (head, "1.1")):
            path.mkdir()
            (path / "pyproject.toml").write_text(PYPROJECT.format(version=version))
        same = work / "same"
        same.mkdir()
        (same / "pyproject.toml").write_text(PYPROJECT.format(version="1.1"))
        print("| installer | case | seconds (each run) | median | kind | packages that differ |")
        print("|---|---|---|---|---|---|")
        for installer in ("uv", "pip"):
            os.environ["PERFGATE_INSTALLER"] = installer
            rows: dict[str, list[tuple[float, str, str]]] = {
                "nothing differs": [],
                "one differs, built": [],
                "one differs, cached": [],
            }
            for repeat in range(args.repeats):
                os.environ["PERFGATE_ENVIRONMENT_CACHE"] = str(work / f"cache-{installer}-{repeat}")
                rows["nothing differs"].append(timed("auto", same, head, work))
                rows["one differs, built"].append(timed("auto", base, head, work))
                rows["one differs, cached"].append(timed("auto", base, head, work))
            for case, runs in rows.items():
                each = ", ".join(f"{s:.2f}" for s, _, _ in runs)
                median = statistics.median(s for s, _, _ in runs)
                print(f"| {installer} | {case} | {each} | {median:.2f} | {runs[0][1]} | {runs[0][2] or '-'} |")


if __name__ == "__main__":
    main()
