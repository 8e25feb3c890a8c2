"""The `perfgate` command: a thin front end over the core (references, runner, report)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import perfgate
from perfgate.configs import CONFIG_NAMES, parse_configs
from perfgate.errors import EXIT_USAGE, PerfgateError, UsageError
from perfgate.runner import DEFAULT_TIMEOUT_S, DEFAULT_TRIALS

EXIT_NO_MEASUREMENT = 4
EXIT_INTERRUPTED = 130


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but its errors use perfgate's one-line form and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, hint=f"see '{self.prog} --help'")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that runs the lab."""
    parser.add_argument(
        "workloads",
        nargs="*",
        metavar="WORKLOAD",
        help="path/to/file.py:function, package.module:function, or a built-in (lm, vision, lm@large); "
        "default: [tool.perfgate] workloads in pyproject.toml, else the built-in lm and vision",
    )
    group = parser.add_argument_group("lab")
    group.add_argument(
        "--configs",
        default=",".join(CONFIG_NAMES),
        help=f"comma-separated subset of {','.join(CONFIG_NAMES)} (default: all)",
    )
    group.add_argument(
        "--trials",
        type=_positive_int,
        default=DEFAULT_TRIALS,
        help=f"trials per config, each in a fresh process (default: {DEFAULT_TRIALS})",
    )
    group.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: cuda when available, else cpu"
    )
    group.add_argument(
        "--threads", type=_positive_int, default=None, help="torch threads per trial (default: the CPUs available)"
    )
    group.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"per-trial time limit (default: {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="write the results (schema_version 1) to PATH"
    )
    group.add_argument("--quiet", action="store_true", help="no progress lines")


def check_writable(path: Path, option: str) -> None:
    """Refuse an output path that cannot be written before spending minutes measuring."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory", where=option, hint="give a file name, e.g. results.json")
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
        raise UsageError(f"cannot write {path}: {ancestor} is not a writable folder", where=option)


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="perfgate", description="Performance-regression gate for PyTorch training code.")
    parser.add_argument("--version", action="version", version=f"perfgate {perfgate.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    run = commands.add_parser(
        "run",
        help="run the three-run lab and print the table",
        description="Run the three-run lab (fp32, bf16, bf16-compile) on each workload.",
    )
    run.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    add_run_options(run)
    return parser


def command_run(args: argparse.Namespace) -> int:
    from perfgate.device import select_device
    from perfgate.environment import available_cpus
    from perfgate.progress import Progress
    from perfgate.references import resolve_references
    from perfgate.report import format_run
    from perfgate.runner import RunSettings, run_lab

    configs = parse_configs(args.configs)
    if args.json is not None:
        check_writable(args.json, "--json")
    references = resolve_references(args.workloads)
    device = select_device(args.device)
    settings = RunSettings(
        configs=configs,
        trials=args.trials,
        device=device.type,
        threads=args.threads or available_cpus(),
        timeout_s=args.timeout,
    )
    progress = None if args.quiet else Progress(settings.trials)
    result = run_lab(references, settings, progress)
    sys.stdout.write(format_run(result))
    if args.json is not None:
        result.write_json(args.json)
        sys.stdout.write(f"results written to {args.json}\n")
    measured = any(t.ok for w in result.workloads for c in w.configs.values() for t in c.trials)
    if not measured:
        sys.stderr.write("error: no trial produced a measurement; see the failures above\n")
        return EXIT_NO_MEASUREMENT
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 usage or input error, 4 nothing measured)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return EXIT_USAGE
        return command_run(args)
    except PerfgateError as error:
        if debug:
            traceback.print_exc()
            if error.details:
                sys.stderr.write(error.details)
        sys.stderr.write(f"error: {error.one_line()}\n")
        return error.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug in perfgate itself: one line, the traceback with --debug
        if debug:
            raise
        sys.stderr.write(f"error: internal error {type(exc).__name__}: {exc}; rerun with --debug and report it\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
