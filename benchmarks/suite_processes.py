"""Where the test suite's time goes: every Python process it starts, what it was, how long it lived, whether it
imported torch, and which test started it.

    python benchmarks/suite_processes.py [--log suite-processes.tsv] [PYTEST ARGS...]
    python benchmarks/suite_processes.py --summarise suite-processes.tsv

Installs a start-up hook in this interpreter's site-packages for the run (`_suite_census.pth`, removed after): each
Python process of this environment notes its start, and at exit (exit handlers run for `sys.exit` and for
`perfgate._process.leave`) appends a line to the log. A forked child (a fork server's trial, a DataLoader worker)
starts no interpreter and is counted in its parent's life; a process killed (a hung trial at its timeout) is not
counted. Then runs `python -m pytest ARGS` (the README's test
command with `-p no:randomly`, unless ARGS say otherwise) and prints the census. Nothing else may measure
meanwhile. Figures go to docs/performance.md ("The suite's floor").
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

HOOK = """\
import atexit, os, sys, time
_started = time.time()
def _note(log=os.environ.get("PERFGATE_SUITE_CENSUS")):
    try:
        ended = time.time()
        imported = "".join("1" if m in sys.modules else "0" for m in ("torch", "torch._dynamo"))
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        lived = f"{ended - _started:.3f}"
        fields = (os.getpid(), os.getppid(), f"{_started:.3f}", lived, imported, test, " ".join(sys.argv)[:200])
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, ("\\t".join(map(str, fields)) + "\\n").encode())
        os.close(fd)
    except Exception:
        pass
if os.environ.get("PERFGATE_SUITE_CENSUS"):
    atexit.register(_note)
"""


def kind(argv: str, own: bool) -> str:
    """What a process was, from its command line; `own`: its parent is no process of the census (the suite's
    own session, started by this script, is the one pytest session like that)."""
    first = argv.split(" ")[0]
    name = Path(first).name.removesuffix(".py").removeprefix("perfgate.measure.")  # a path, or under the watch a module
    if name in ("trial", "trialserver"):
        return {"trial": "a fresh trial", "trialserver": "a fork server (its children inside)"}[name]
    if "torch.distributed.run" in argv:
        return "torchrun's launcher"
    if first.endswith(("pytest/__main__.py", "/bin/pytest")):
        return "the suite's own pytest session" if own else "a pytest session that a test starts"
    if first.endswith(("perfgate/__main__.py", "/bin/perfgate")):
        return "the perfgate command"
    return "other"


def summarise(log: Path) -> None:
    rows = [line.rstrip("\n").split("\t") for line in log.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if len(r) == 7]
    pids = {r[0] for r in rows}
    by_kind: dict[str, list[float]] = collections.defaultdict(list)
    torch_processes = 0
    for _, parent, _, lived, imported, _, argv in rows:
        by_kind[kind(argv, parent not in pids)].append(float(lived))
        torch_processes += imported[0] == "1"
    print(f"{len(rows)} Python processes, {torch_processes} of them imported torch")
    print(f"{'what':<40} {'count':>6} {'lived, s':>9}")  # "other": helpers, a resource tracker alive to the end
    for name, lives in sorted(by_kind.items(), key=lambda item: -sum(item[1])):
        print(f"{name:<40} {len(lives):>6} {sum(lives):>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, default=Path("suite-processes.tsv"))
    parser.add_argument("--summarise", type=Path, help="print the census of an earlier log and exit")
    known, pytest_args = parser.parse_known_args()
    if known.summarise:
        summarise(known.summarise)
        return
    log = known.log.absolute()
    log.unlink(missing_ok=True)
    site = Path(sysconfig.get_paths()["purelib"])
    (site / "_suite_census_hook.py").write_text(HOOK, encoding="utf-8")
    (site / "_suite_census.pth").write_text("import _suite_census_hook\n", encoding="utf-8")
    try:
        env = {**os.environ, "PERFGATE_SUITE_CENSUS": str(log)}
        args = pytest_args or ["-p", "no:randomly", "-q"]
        code = subprocess.run([sys.executable, "-m", "pytest", *args], env=env).returncode
    finally:
        (site / "_suite_census.pth").unlink(missing_ok=True)
        (site / "_suite_census_hook.py").unlink(missing_ok=True)
    summarise(log)
    sys.exit(code)


if __name__ == "__main__":
    main()
