"""The `perfgate` command: an adapter from the command line to the application layer (`perfgate.app`).

The parser is rendered from the declared options (`app.options.COMMANDS`); each command turns its namespace
into a request (`app.request`) and hands it to the application (`app.gate`, `app.commands`), which prints
through a sink (`app.sink`) and returns the exit code (`perfgate.outcome`, `errors.EXIT_CODES`).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from perfgate._process import leave
from perfgate.app import commands, gate, request
from perfgate.app.options import COMMAND_EXIT_CODES, build_parser, given_from_namespace, resolve_all
from perfgate.app.sink import StreamSink, stop_on_signals
from perfgate.dependencies import missing_dependency
from perfgate.errors import EXIT_INTERRUPTED, EXIT_USAGE, PerfgateError
from perfgate.project import ProjectConfig, load_project_config

__all__ = ["COMMANDS", "COMMAND_EXIT_CODES", "build_parser", "main"]

Values = dict[str, Any]


def _values(args: argparse.Namespace) -> Values:
    """The command's options, each resolved once: the command line, then PERFGATE_<NAME>, then its default."""
    return request.plain(resolve_all(args.command, given_from_namespace(args, args.command)))


def _sink(values: Values) -> StreamSink:
    return StreamSink(quiet=bool(values.get("quiet")))


def _project() -> ProjectConfig:
    return load_project_config()


def command_run(args: argparse.Namespace) -> int:
    """Run the lab and print its table (--json, --markdown: also to files); exit 4 when nothing was measured."""
    values = _values(args)
    lab = request.lab_request(values, project=_project(), command="run")
    return commands.run_lab(lab, _sink(values))


def command_check(args: argparse.Namespace) -> int:
    """Measure and judge against the stored baselines, in pairs (--against) or by the counts (--counts-only)."""
    values = _values(args)
    sink = _sink(values)
    check = request.gate_request(values, project=_project(), cwd=Path.cwd(), warn=sink.warn)
    return gate.run_gate(check, sink).exit_code


def command_calibrate(args: argparse.Namespace) -> int:
    """Measure the runner's A/A noise and a planted slowdown; exit 0 once measured (it judges no code)."""
    values = _values(args)
    calibration = request.calibration_request(values, project=_project(), cwd=Path.cwd())
    return commands.calibrate(calibration, _sink(values))


def command_update(args: argparse.Namespace) -> int:
    """Measure and write this machine's baselines; the baseline folder is checked writable before measuring."""
    values = _values(args)
    lab = request.lab_request(values, project=_project(), command="update")
    return commands.update(lab, _sink(values))


def command_compare(args: argparse.Namespace) -> int:
    """Judge a results file against the baselines or another file; exit with the verdict's code."""
    values = _values(args)
    sink = _sink(values)
    return commands.compare(request.compare_request(values, project=_project, cwd=Path.cwd(), warn=sink.warn), sink)


def command_report(args: argparse.Namespace) -> int:
    """Render a results file: a check's as the check judged it, a lab run's as the lab's table; exit 0."""
    values = _values(args)
    return commands.report(request.report_request(values, project=_project), _sink(values))


def command_history(args: argparse.Namespace) -> int:
    """Print the recorded runs, their change points and creep; exit 0, or 3 when nothing is recorded."""
    values = _values(args)
    return commands.history(request.series_request(values, _project()), _sink(values))


def command_bisect(args: argparse.Namespace) -> int:
    """Bisect GOOD..BAD with paired checks; exit 0 once it ran, whatever it found."""
    values = _values(args)
    bisect = request.bisect_request(values, project=_project(), cwd=Path.cwd())
    return commands.bisect(bisect, _sink(values))


def command_export(args: argparse.Namespace) -> int:
    """Print one recorded run in another tool's JSON format; exit 0 once written, 3 when no run is recorded."""
    values = _values(args)
    return commands.export(request.export_request(values, _project()), _sink(values))


def command_demo(args: argparse.Namespace) -> int:
    """Check two demo pull requests in a throwaway repository; exit 0 once both checks ran."""
    from perfgate.demo import run_demo

    values = _values(args)
    return run_demo(values.get("dir"), budget_s=values["time_budget"])


def command_init(args: argparse.Namespace) -> int:
    """Write the project's perfgate files (or, with --dry-run, print them); exit 0 once written."""
    from perfgate.scaffold import format_dry_run, format_written, plan_init, write_plan

    plan = plan_init(Path.cwd(), workload_file=args.workload_file, gpu=args.gpu)
    if args.dry_run:
        sys.stdout.write(format_dry_run(plan))
        return 0
    write_plan(plan)
    sys.stdout.write(format_written(plan, Path.cwd()))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": command_run,
    "check": command_check,
    "update": command_update,
    "calibrate": command_calibrate,
    "compare": command_compare,
    "report": command_report,
    "history": command_history,
    "export": command_export,
    "bisect": command_bisect,
    "demo": command_demo,
    "init": command_init,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code, one of `errors.EXIT_CODES`."""
    if argv is None:
        stop_on_signals()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return EXIT_USAGE
        return COMMANDS[args.command](args)
    except PerfgateError as error:
        if debug:
            traceback.print_exc()
            if error.details:
                sys.stderr.write(error.details)
        StreamSink().error(error.one_line())  # a workload's own text may be in it: printed safe
        return error.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: trials stopped; every file perfgate writes is replaced whole or not at all\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug in perfgate itself: one line, the traceback with --debug
        missing = missing_dependency(exc)  # ... unless it is a package that is not installed
        if missing is not None:
            if debug:
                traceback.print_exc()
            sys.stderr.write(f"error: {missing.one_line()}\n")
            return missing.exit_code
        if debug:
            raise
        if isinstance(exc, OSError) and exc.filename is not None:  # a file the OS refused: name it
            sys.stderr.write(f"error: cannot use {exc.filename}: {exc.strerror}; check the path and permissions\n")
            return EXIT_USAGE
        sys.stderr.write(f"error: internal error {type(exc).__name__}: {exc}; rerun with --debug and report it\n")
        return EXIT_USAGE


def entry() -> NoReturn:
    """The `perfgate` command (the console script, `python -m perfgate`): `main`, then the process ends without
    tearing down the interpreter, whose modules (torch's) took 0.6 s to tear down after every command."""
    leave(main())


if __name__ == "__main__":
    entry()
