"""The `perfgate` command: a thin front end over the core (references, runner, report)."""

from __future__ import annotations

import argparse
import sys
import textwrap
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import perfgate
from perfgate import options
from perfgate.dependencies import missing_dependency
from perfgate.errors import (
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_NO_BASELINE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    EXIT_WORKLOAD_FAILED,
    NothingToCompareError,
    PerfgateError,
    UsageError,
    exit_code_help,
)
from perfgate.judge.settings import DEFAULT_TIME_BUDGET_S, PER_CONFIG_BUDGET_S
from perfgate.measure.lab import DEFAULT_TIMEOUT_S, DEFAULT_TRIALS
from perfgate.naming import CLI
from perfgate.options import add_to_argparse, argparse_type
from perfgate.project import parse_count, parse_fraction
from perfgate.records.baselines import DEFAULT_BASELINE_DIR, DEFAULT_UPDATE_TRIALS
from perfgate.records.history import EXPORT_FORMATS
from perfgate.report import FORMATS as REPORT_FORMATS
from perfgate.variants import CONFIG_NAMES, parse_configs

if TYPE_CHECKING:
    from perfgate.judge.acceptance import Acceptance
    from perfgate.judge.diagnosis import Diagnosis
    from perfgate.judge.settings import GateSettings
    from perfgate.judge.verdict import GateResult
    from perfgate.measure.lab import ProgressCallback, RunSettings
    from perfgate.records.history import HistoryStore
    from perfgate.records.results import RunResult
    from perfgate.references import Reference


# The rows of the exit-code table (`errors.EXIT_CODES`) that each command can end with, shown by its --help.
_ANY = (EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED)  # every command: done, a usage error, or interrupted
_MEASURES = (*_ANY, EXIT_WORKLOAD_FAILED)  # a command that runs the user's workload
COMMAND_EXIT_CODES: dict[str, tuple[int, ...]] = {
    "init": _ANY,
    "run": _MEASURES,
    "check": (*_MEASURES, EXIT_REGRESSION, EXIT_NO_BASELINE),
    "update": _MEASURES,
    "calibrate": _MEASURES,
    "bisect": _MEASURES,
    "demo": (*_MEASURES, EXIT_NO_BASELINE),
    "compare": (*_ANY, EXIT_REGRESSION, EXIT_NO_BASELINE, EXIT_WORKLOAD_FAILED),
    "report": _ANY,
    "history": (*_ANY, EXIT_NO_BASELINE),
    "export": (*_ANY, EXIT_NO_BASELINE),
}


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but its errors use perfgate's one-line form and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, hint=f"see '{self.prog} --help'")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """argparse's, but an option the command does not take points at that command's --help."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            raise UsageError(f"unrecognized arguments: {' '.join(extras)}", hint=f"see '{prog} --help'")
        return parsed


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, but a description or epilog keeps its line breaks: the exit-code table, a row a line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(
            textwrap.fill(
                line,
                width,
                initial_indent=indent,
                subsequent_indent=indent + " " * 7 * line.startswith(" "),
                break_on_hyphens=False,
            )
            for line in text.splitlines()
        )


FORK_HELP = (
    "fork each side's trials from one process that imported torch (CPU only): about a third less time a pair, "
    "but not the default until its noise is measured better (default: a fresh process per trial)"
)
INTERLEAVE_HELP = (
    "start each pair's two trials together and let them take turns at the training steps, the waiting side "
    "stopped (POSIX only): a busy neighbour hits both sides alike (default, but for --parallel-pairs and on "
    "CUDA, where a stopped side's queued kernels would run in the other's turn); --no-interleaved-pairs runs them "
    "one after the other"
)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_run_options(
    parser: argparse.ArgumentParser,
    *,
    trials: int = DEFAULT_TRIALS,
    json: bool = True,
    profile: bool = True,
    profile_note: str = "",
) -> None:
    """Options shared by every command that runs the lab; `json`: it writes a results file; `profile`: it can
    add a profiling trial (a command that only measures in pairs cannot), `profile_note` says when."""
    parser.add_argument(
        "workloads",
        nargs="*",
        metavar="WORKLOAD",
        help="path/to/file.py:function, package.module:function, or a built-in (lm, vision, lm@large); "
        "default: [tool.perfgate] workloads in pyproject.toml, else the built-in lm and vision",
    )
    group = parser.add_argument_group("lab")
    add_to_argparse(group, options.CONFIGS, CLI, default=",".join(CONFIG_NAMES))
    add_to_argparse(group, options.TRIALS, CLI, default=trials)
    group.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: cuda when available, else cpu"
    )
    add_to_argparse(group, options.THREADS, CLI)
    add_to_argparse(group, options.ROUNDS, CLI)
    add_to_argparse(group, options.NPROC, CLI)
    group.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"per-trial time limit (default: {DEFAULT_TIMEOUT_S:g})",
    )
    if json:
        add_to_argparse(group, options.JSON, CLI)
    group.add_argument("--quiet", action="store_true", help="no progress lines")
    if not profile:
        return
    group.add_argument(
        "--profile",
        action="store_true",
        help="after the trials, one profiling trial per workload and config: a trace and the top operators"
        + profile_note,
    )
    group.add_argument(
        "--profile-dir",
        type=Path,
        default=Path("perfgate-traces"),
        metavar="DIR",
        help="where --profile writes its Chrome/Perfetto traces (default: perfgate-traces/)",
    )


def add_baseline_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    add_to_argparse(parser, options.BASELINE_DIR, CLI, default=DEFAULT_BASELINE_DIR)


def add_gate_options(
    parser: argparse.ArgumentParser, *, measuring: bool, exits: bool = True, baselines: bool = True
) -> None:
    """Options of the commands that judge results: `measuring`, it adds trials; `exits`, it exits with the
    verdict's code (--fail-on-inconclusive); `baselines`, it reads the stored baselines (a paired one does not)."""
    group = parser.add_argument_group("gate")
    add_to_argparse(group, options.THRESHOLD, CLI)
    add_to_argparse(group, options.ALPHA, CLI)
    if exits:
        add_to_argparse(group, options.FAIL_ON_INCONCLUSIVE, CLI)
    if measuring:
        add_to_argparse(group, options.MAX_TRIALS, CLI)
        group.add_argument(
            "--time-budget",
            type=_positive_float,
            default=None,
            metavar="SECONDS",
            help=f"stop adding trials once the check has run this long (default: {PER_CONFIG_BUDGET_S:g} per config "
            f"judged, {DEFAULT_TIME_BUDGET_S:g} at most)",
        )
    if baselines:
        add_baseline_option(group)


def add_accept_options(parser: argparse.ArgumentParser, *, head: str) -> None:
    """Slowdowns accepted on purpose (`judge.acceptance`); `head`: whose trailers count when --accept-from is not
    given, in words."""
    group = parser.add_argument_group("accepting a slowdown on purpose")
    add_to_argparse(group, options.ACCEPT, CLI)
    add_to_argparse(group, options.ACCEPT_LABEL, CLI)
    add_to_argparse(group, options.ACCEPT_FROM, CLI, head=head)


def _acceptances(args: argparse.Namespace) -> list[Acceptance]:
    """The slowdowns accepted for this command: --accept, --accept-label, and the Perf-Accept trailers of
    --accept-from's commit (check: of HEAD when not given); a warning for trailer lines git ignores."""
    from perfgate.judge.acceptance import commit_acceptances, head_acceptances

    accepted = [*(getattr(args, "accept", None) or ()), *(getattr(args, "accept_label", None) or ())]
    commit = getattr(args, "accept_from", None)
    if commit is not None:
        trailers, stray = commit_acceptances(commit, Path.cwd())
    else:
        trailers, stray = head_acceptances(Path.cwd()) if args.command == "check" else ([], [])
    for line in stray:
        sys.stderr.write(f"warning: {line}\n")
    return [*trailers, *accepted]


def _add_history_dir(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--history-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the history folder (default: [tool.perfgate] history, else .perfgate/history)",
    )
    parser.add_argument(
        "--history-branch",
        default=None,
        metavar="BRANCH",
        help="keep the history on this branch of the origin remote too (CI runners keep no files): "
        "a recorded run is pushed to it, retrying when another job pushed first, and history (and the trend in "
        "check's Markdown report) fetches it first (e.g. perfgate-history)",
    )


def _history_store(args: argparse.Namespace) -> HistoryStore:
    from perfgate.project import load_project_config
    from perfgate.records.history import DEFAULT_HISTORY_DIR, HistoryStore

    folder = args.history_dir or load_project_config().history or DEFAULT_HISTORY_DIR
    return HistoryStore(folder)


def _fetch_history_branch(args: argparse.Namespace, store: HistoryStore) -> int | None:
    """With --history-branch, copy that branch's records into the store's folder: how many; None without it."""
    if args.history_branch is None:
        return None
    from perfgate.records.history_branch import fetch_history

    return fetch_history(Path.cwd(), store.directory, branch=args.history_branch)


def _add_command(commands: Any, name: str, **kwargs: str) -> argparse.ArgumentParser:
    """A subcommand that also takes --debug after its name; its --help ends with its exit codes."""
    epilog = exit_code_help(COMMAND_EXIT_CODES.get(name, [row.code for row in EXIT_CODES]))
    parser: argparse.ArgumentParser = commands.add_parser(name, formatter_class=_HelpFormatter, epilog=epilog, **kwargs)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="perfgate",
        description="Performance-regression gate for PyTorch training code.",
        epilog=exit_code_help(),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"perfgate {perfgate.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    demo = _add_command(
        commands,
        "demo",
        help="see the gate at work: two pull requests in a throwaway repository, checked in pairs (about 3 minutes)",
        description="Make a throwaway git repository with a small image classifier and two pull requests against "
        "its main branch, one that adds a hidden layer and one that changes a comment; check each with "
        "perfgate check --against main as CI would, and sum up both verdicts. Needs no baseline and no "
        "configuration; nothing is downloaded.",
    )
    demo.add_argument(
        "--dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to make the repository and write the reports: a new or empty folder (default: a new "
        "temporary folder, kept)",
    )
    demo.add_argument(
        "--time-budget",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="the two checks' time: the first may take about half, the second what is left; each stops adding "
        "pairs once its share is spent (default: 160)",
    )
    init = _add_command(
        commands,
        "init",
        help="set up a project: [tool.perfgate], a workload file to fill in and a pull-request workflow",
        description="Write [tool.perfgate] into pyproject.toml (appended, or a new file), a commented workload "
        "file that runs at once on a stand-in model, and .github/workflows/perfgate.yml, which checks each pull "
        "request against its base branch. Overwrites nothing: when a file exists, it writes nothing.",
    )
    init.add_argument(
        "--workload-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="where to write the workload file, relative to the current folder (default: perf/workloads.py in "
        "the project's root: the git repository's top level, else the current folder)",
    )
    init.add_argument("--dry-run", action="store_true", help="print what it would write, and write nothing")
    run = _add_command(
        commands,
        "run",
        help="run the three-run lab on each workload and print its table; judges nothing",
        description="Run the three-run lab (fp32, bf16, bf16-compile) on each workload and print the lab's table: "
        "samples/s, step times, phases, peak memory, compile time. Judges nothing (perfgate check does). "
        "--json writes the results file, --markdown the table as Markdown.",
    )
    add_run_options(run)
    add_to_argparse(run, options.MARKDOWN, CLI)
    check = _add_command(
        commands,
        "check",
        help="measure and judge against the stored baselines, or with --against REF against a git ref measured in "
        "pairs; exit 1 on a supported regression",
        description="Run the lab and judge each config: against its stored baseline for this machine (perfgate "
        "update writes them), or, with --against REF, against REF checked out in a worktree and measured beside "
        "the working tree in pairs. Open verdicts get more trials until they are decided or the time budget is "
        "spent. Prints the lab's table and the gate's report; --json writes the results file, --markdown the "
        "report as Markdown.",
    )
    add_run_options(check, profile_note=" (against stored baselines; a paired check, --against, does not profile)")
    add_gate_options(check, measuring=True)
    add_accept_options(check, head="HEAD, the commit the working tree is on")
    add_to_argparse(check, options.MARKDOWN, CLI)
    check.add_argument(
        "--diagnose", action="store_true", help="diagnose every config (by default only those that regressed)"
    )
    history = check.add_argument_group("history")
    history.add_argument(
        "--record",
        action="store_true",
        help="append this run to the history (a new file in the history folder): for pushes to main",
    )
    _add_history_dir(history)
    add_to_argparse(check, options.COUNTS_ONLY, CLI)
    paired = check.add_argument_group("paired check")
    add_to_argparse(paired, options.AGAINST, CLI)
    paired.add_argument(
        "--parallel-pairs",
        action="store_true",
        help="with --against: run each pair's two trials at the same time, each on half of the CPUs",
    )
    paired.add_argument("--fork-trials", action="store_true", help=f"with --against: {FORK_HELP}")
    paired.add_argument(
        "--interleaved-pairs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"with --against: {INTERLEAVE_HELP}",
    )
    history_command = _add_command(
        commands,
        "history",
        help="the recorded runs (check --record): a table per workload and config, change points and creep",
        description="Read the history that perfgate check --record keeps and print, per workload, config and "
        "machine, the recent runs, the change points where samples/s or peak memory changed level, and slow "
        "creep that adds up past the threshold over several runs. Measures nothing.",
    )
    _add_history_dir(history_command)
    history_command.add_argument(
        "--limit",
        type=argparse_type(parse_count, "--limit"),
        default=10,
        metavar="N",
        help="runs shown per series (change points are found over all of them) (default: 10)",
    )
    add_to_argparse(history_command, options.HTML, CLI)
    add_to_argparse(history_command, options.THRESHOLD, CLI)
    add_to_argparse(history_command, options.ALPHA, CLI)
    bisect = _add_command(
        commands,
        "bisect",
        help="find the first commit between GOOD and BAD that made a config slower",
        description="Measure BAD against GOOD in pairs, then halve the commits between them, each step a paired "
        "check of one commit against GOOD (both checked out in worktrees), and print the first commit that made a "
        "config slower with its evidence; the first bad commit is also checked against its parent, and the "
        "result says so when the history is not monotonic. Exits 0 once it ran, whatever it found: a first bad "
        "commit, nothing to find, or a history that is not monotonic.",
    )
    bisect.add_argument("good", metavar="GOOD", help="a ref that was fast (older)")
    bisect.add_argument("bad", metavar="BAD", help="a ref that is slower (newer)")
    add_run_options(bisect, json=False, profile=False)
    add_gate_options(bisect, measuring=True, exits=False, baselines=False)
    export = _add_command(
        commands,
        "export",
        help="print a recorded run in another tool's JSON format (Bencher, github-action-benchmark)",
        description="Print the latest recorded run of the history (or the latest of one commit) in another "
        "tool's JSON format: Bencher's Metric Format (--format bencher) or github-action-benchmark's "
        "customBiggerIsBetter list (--format github-action-benchmark); --json also writes it to a file.",
    )
    _add_history_dir(export)
    export.add_argument(
        "--format", required=True, choices=EXPORT_FORMATS, help="the other tool's format (both are JSON)"
    )
    export.add_argument("--commit", default=None, metavar="SHA", help="the latest run of this commit (a prefix)")
    add_to_argparse(export, options.JSON_EXPORT, CLI)
    calibrate = _add_command(
        commands,
        "calibrate",
        help="measure what this runner can detect: paired A/A noise and a planted slowdown",
        description="Measure this runner's paired noise (the working tree against itself), check a planted slowdown "
        "as perfgate check --against would, and report the smallest slowdown a paired check detects within the "
        "time budget. --json writes the planted check's results.",
    )
    add_run_options(calibrate, profile=False)
    add_gate_options(calibrate, measuring=True, exits=False, baselines=False)
    calibrate.set_defaults(configs="fp32")  # a first answer in minutes; --configs adds the others
    calibrate.add_argument(
        "--pairs",
        type=argparse_type(parse_count, "--pairs"),
        default=5,
        metavar="N",
        help="A/A pairs per config (default: 5)",
    )
    calibrate.add_argument(
        "--slowdown",
        type=argparse_type(parse_fraction, "--slowdown"),
        default=0.10,
        metavar="PCT",
        help="the planted slowdown: every step of head takes this much longer (default: 10%%)",
    )
    calibrate.add_argument(
        "--parallel-pairs", action="store_true", help="run each pair's two trials at the same time, on half the CPUs"
    )
    calibrate.add_argument("--fork-trials", action="store_true", help=FORK_HELP)
    calibrate.add_argument(
        "--interleaved-pairs", action=argparse.BooleanOptionalAction, default=None, help=INTERLEAVE_HELP
    )
    update = _add_command(
        commands,
        "update",
        help="measure and write this machine's baselines (commit them; check compares with them)",
        description="Run the lab and store its results as this machine's baselines (one YAML file per workload).",
    )
    add_run_options(update, trials=DEFAULT_UPDATE_TRIALS)
    add_baseline_option(update)
    add_to_argparse(update, options.ALLOW_DIRTY, CLI)
    compare = _add_command(
        commands,
        "compare",
        help="judge a saved results file against the stored baselines, or against another results file; "
        "measures nothing",
        description="Judge a results file written by --json against the stored baselines, or, given two files, "
        "the second against the first. Two files from different machine types get a warning: their comparison "
        "mixes the machine with the code (perfgate check --against REF measures both sides on one runner).",
    )
    compare.add_argument("results", type=Path, nargs="+", metavar="RESULTS", help="[BASELINE.json] CANDIDATE.json")
    _add_report_outputs(compare)
    add_gate_options(compare, measuring=False)
    add_accept_options(compare, head="none")
    report = _add_command(
        commands,
        "report",
        help="render a results file: a check's verdicts as the check judged them, or a lab run's table; "
        "measures nothing",
        description="Render a results file written by --json. A check's (perfgate check, pytest --perfgate-json) "
        "is judged the way the check did (its settings are in the file) and shown as the check's report, with "
        "the check's verdict; a lab run's (perfgate run, perfgate update) is shown as the lab's table. Exits 0 "
        "once the report is written, whatever the verdict (perfgate compare exits with it).",
    )
    report.add_argument(
        "results",
        type=Path,
        metavar="RESULTS",
        help="results file written by --json (perfgate check, run or update; pytest --perfgate-json)",
    )
    _add_report_outputs(report)
    add_to_argparse(report, options.PNG, CLI)
    report.add_argument(
        "--max-chars",
        type=argparse_type(parse_count, "--max-chars"),
        default=None,
        metavar="N",
        help="shorten the Markdown report to at most N characters, leaving out whole sections (default: 65536, "
        "GitHub's limit for a comment)",
    )
    report.add_argument(
        "--baseline-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="judge a check's results against the baselines in DIR (default: the folder the check used)",
    )
    return parser


def _add_report_outputs(parser: argparse.ArgumentParser) -> None:
    """What a command that renders a results file prints (--format) and the files it also writes."""
    parser.add_argument(
        "--format",
        choices=REPORT_FORMATS,
        default="text",
        help="what to print on standard output: the report as text, Markdown or JSON (default: text)",
    )
    add_to_argparse(parser, options.JSON_REPORT, CLI)
    add_to_argparse(parser, options.MARKDOWN, CLI)


def _run_settings(args: argparse.Namespace) -> tuple[list[Reference], RunSettings]:
    from perfgate.measure.device import select_device
    from perfgate.measure.environment import default_threads
    from perfgate.measure.lab import RunSettings
    from perfgate.project import load_project_config
    from perfgate.records.results import check_writable
    from perfgate.references import resolve_references

    configs = parse_configs(args.configs)
    for path, option in ((getattr(args, "json", None), "--json"), (getattr(args, "markdown", None), "--markdown")):
        if path is not None:  # a file that cannot be written is refused before anything is measured
            check_writable(path, option)
    references = resolve_references(args.workloads)
    device = select_device(args.device)
    nproc = args.nproc or load_project_config().nproc
    settings = RunSettings(
        configs=configs,
        trials=args.trials,
        device=device.type,
        threads=args.threads or default_threads(nproc or 1),
        rounds=args.rounds,
        timeout_s=args.timeout,
        profile_dir=args.profile_dir if getattr(args, "profile", False) else None,
        nproc=nproc,
    )
    return references, settings


def _progress(args: argparse.Namespace, gate: GateSettings | None = None, judged: int = 0) -> ProgressCallback | None:
    """The progress display; for a check (`gate`, judging `judged` workload configs), bounded by its budget."""
    from perfgate.report.progress import Progress

    if args.quiet:
        return None
    if gate is None:
        return Progress(args.trials)
    paired = getattr(args, "against", None) is not None
    if getattr(args, "counts_only", False):  # one counting trial a config (and side), no budget to spend
        return Progress(1, unit="pair" if paired else "trial")
    return Progress(
        gate.trials, most=gate.max_trials, budget_s=gate.budget_s(judged), unit="pair" if paired else "trial"
    )


def _write_json(result: RunResult, path: Path | None) -> None:
    if path is not None:
        result.write_json(path)
        sys.stdout.write(f"results written to {path}\n")


def _measured(result: RunResult) -> bool:
    if any(t.ok for w in result.workloads for c in w.configs.values() for t in c.trials):
        return True
    sys.stderr.write("error: no trial produced a measurement; see the failures above\n")
    return False


def command_run(args: argparse.Namespace) -> int:
    """Run the lab and print its table (--json, --markdown: also to files); exit 4 when nothing was measured."""
    from perfgate.measure.lab import run_lab
    from perfgate.project import load_project_config
    from perfgate.records.results import write_text_atomic
    from perfgate.report.markdown import format_lab_markdown
    from perfgate.report.text import format_run

    references, settings = _run_settings(args)
    peaks = load_project_config().peak_tflops
    result = run_lab(references, settings, _progress(args))
    sys.stdout.write(format_run(result, peak_tflops=peaks))
    _write_json(result, args.json)
    if args.markdown is not None:
        details = str(args.json) if args.json else None
        write_text_atomic(args.markdown, format_lab_markdown(result, details=details, peak_tflops=peaks))
    return EXIT_OK if _measured(result) else EXIT_WORKLOAD_FAILED


def _gate_settings(args: argparse.Namespace, trials: int, *, single_look: bool = False) -> GateSettings:
    """Gate settings from the options and [tool.perfgate]; `single_look` for a judgement that adds no trials."""
    from perfgate.judge.settings import DEFAULT_MAX_PAIRS, GateSettings
    from perfgate.project import load_project_config

    max_trials = getattr(args, "max_trials", None)
    if max_trials is None and getattr(args, "against", None) is not None:
        max_trials = max(trials, DEFAULT_MAX_PAIRS)
    return GateSettings.from_options(
        load_project_config(),
        trials=trials,
        threshold=args.threshold,
        alpha=args.alpha,
        max_trials=trials if single_look else max_trials,
        time_budget_s=getattr(args, "time_budget", None),
        fail_on_inconclusive=getattr(args, "fail_on_inconclusive", False),
        accepted=_acceptances(args),
    )


def _notify(args: argparse.Namespace) -> Callable[[str], None] | None:
    if args.quiet:
        return None
    return lambda message: print(message, file=sys.stderr, flush=True)


def command_check(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from perfgate.check.stored import run_check
    from perfgate.records.baselines import BaselineStore
    from perfgate.records.results import write_text_atomic
    from perfgate.report.json import gate_record
    from perfgate.report.text import format_run

    if args.against is not None:
        from perfgate.measure.paired import open_repository, resolve_ref

        resolve_ref(open_repository(Path.cwd()), args.against)  # a bad ref fails at once, before torch loads
    references, run_settings = _run_settings(args)
    gate_settings = _gate_settings(args, run_settings.trials)
    progress = _progress(args, gate_settings, len(references) * len(run_settings.configs))
    history = _history_store(args)  # a bad [tool.perfgate] history fails before any trial
    if args.history_branch is not None:
        from perfgate.records.history_branch import check_branch

        check_branch(Path.cwd(), args.history_branch)
    if args.counts_only:
        from perfgate.check.counts import run_counts_check

        for given, option in ((args.record, "--record"), (run_settings.profile_dir is not None, "--profile")):
            if given:
                raise UsageError(
                    f"{option} cannot be combined with --counts-only, which times nothing",
                    hint=f"leave out {option}, or run the timed check without --counts-only",
                )
        result = run_counts_check(
            references,
            run_settings,
            gate_settings,
            against=args.against,
            store=BaselineStore(args.baseline_dir),
            progress=progress,
            notify=_notify(args),
        )
    elif args.against is not None:
        from perfgate.check.paired import run_paired_check

        result = run_paired_check(
            references,
            run_settings,
            gate_settings,
            args.against,
            parallel=args.parallel_pairs,
            fork=args.fork_trials,
            interleaved=args.interleaved_pairs,
            progress=progress,
            notify=_notify(args),
        )
    else:
        for given, option in (
            (args.parallel_pairs, "--parallel-pairs"),
            (args.fork_trials, "--fork-trials"),
            (args.interleaved_pairs is not None, f"--{'' if args.interleaved_pairs else 'no-'}interleaved-pairs"),
        ):
            if given:
                raise UsageError(f"{option} needs --against", hint="add --against REF, e.g. --against main")
        result = run_check(
            references,
            run_settings,
            gate_settings,
            BaselineStore(args.baseline_dir),
            progress,
            _notify(args),
            measure_unjudged=args.record,  # the history keeps a run that has no baseline yet, without a verdict
        )
    if result.run is not None:
        run = replace(result.run, gate=gate_record(result, args.baseline_dir))
        result = replace(result, run=run)
        sys.stdout.write(format_run(run, peak_tflops=gate_settings.project.peak_tflops) + "\n")
        _write_json(run, args.json)
        if not _measured(run) and not result.verdicts:  # nothing measured, and nothing had a baseline
            return EXIT_WORKLOAD_FAILED
    from perfgate.judge.diagnosis import diagnose

    diagnoses = diagnose(result, every_config=args.diagnose)
    trends = []
    if args.markdown is not None:  # the recorded runs beside this one, charted in the report
        from perfgate.records.history_branch import HistoryBranchError
        from perfgate.report.history import trends_of

        try:
            _fetch_history_branch(args, history)
        except HistoryBranchError as error:  # the verdicts stand; only the chart is missing
            sys.stderr.write(f"warning: no trend in the report: {error.one_line()}\n")
        trends = trends_of(result, history.load())
    if args.record:
        from perfgate.report.history import record_of_check, unjudged_note

        record = record_of_check(result)
        if record is None:
            sys.stderr.write("warning: nothing measured, nothing recorded in the history\n")
        else:
            path = history.append(record)
            sys.stdout.write(f"recorded in the history: {path}\n")
            note = unjudged_note(result, record)
            if note:
                sys.stdout.write(note + "\n")
            if args.history_branch is not None:
                from perfgate.records.history_branch import push_record

                commit = push_record(
                    Path.cwd(), path.name, path.read_text(encoding="utf-8"), branch=args.history_branch
                )
                sys.stdout.write(f"pushed to the history branch {args.history_branch} as {commit[:12]}\n")
    if args.markdown is not None:
        from perfgate.report.markdown import format_markdown

        details = str(args.json) if args.json else None
        write_text_atomic(args.markdown, format_markdown(result, details=details, diagnoses=diagnoses, trends=trends))
    return _report_gate(result, diagnoses, command="perfgate check")


def command_calibrate(args: argparse.Namespace) -> int:
    """Measure the runner's A/A noise and a planted slowdown; exit 0 once measured (it judges no code)."""
    from perfgate.check.calibrate import format_calibration, run_calibration
    from perfgate.report.text import format_gate

    args.against = "itself"  # paired defaults: the largest number of pairs
    references, run_settings = _run_settings(args)
    gate_settings = _gate_settings(args, run_settings.trials)
    calibration = run_calibration(
        references,
        run_settings,
        gate_settings,
        pairs=args.pairs,
        slowdown=args.slowdown,
        parallel=args.parallel_pairs,
        fork=args.fork_trials,
        interleaved=args.interleaved_pairs,
        progress=_progress(args),
        notify=_notify(args),
    )
    if calibration.planted.run is not None:
        _write_json(calibration.planted.run, args.json)
    if not args.quiet:
        _print_report("A/A " + format_gate(calibration.aa, command="perfgate calibrate (A/A)", exits=False) + "\n")
    sys.stdout.write(format_calibration(calibration))
    return EXIT_OK


def command_update(args: argparse.Namespace) -> int:
    from perfgate.measure.environment import require_clean_tree
    from perfgate.measure.lab import run_lab
    from perfgate.project import load_project_config
    from perfgate.records.baselines import BaselineStore
    from perfgate.report.text import format_run, format_updates

    references, settings = _run_settings(args)
    store = BaselineStore(args.baseline_dir)
    if not args.allow_dirty:
        require_clean_tree(Path.cwd(), store.directory)
    result = run_lab(references, settings, _progress(args))
    sys.stdout.write(format_run(result, peak_tflops=load_project_config().peak_tflops) + "\n")
    _write_json(result, args.json)
    if not _measured(result):
        return EXIT_WORKLOAD_FAILED
    sys.stdout.write(format_updates(store.write_run(result), store))
    return EXIT_OK


def command_compare(args: argparse.Namespace) -> int:
    """Judge a results file against the baselines or another file; print the report (--format), write --json and
    --markdown; exit with the verdict's code."""
    from perfgate.judge.diagnosis import diagnose
    from perfgate.judge.verdict import compare_results
    from perfgate.records.baselines import BaselineStore
    from perfgate.records.results import load_results
    from perfgate.report.render import render_gate

    _check_outputs(args)
    if len(args.results) > 2:
        raise UsageError(
            "compare takes one or two results files", hint="perfgate compare [BASELINE.json] CANDIDATE.json"
        )
    candidate = load_results(args.results[-1])
    baseline = load_results(args.results[0]) if len(args.results) == 2 else None
    if baseline is not None:
        from perfgate.report.text import machine_difference

        differences = machine_difference(baseline, candidate)
        if differences is not None:
            sys.stderr.write(
                f"warning: {args.results[0]} and {args.results[1]} come from different machines ({differences}): "
                "this comparison mixes the machine with the code; to judge the code alone, run "
                "perfgate check --against REF on one runner\n"
            )
    # compare runs nothing, so it decides once: one look, with the whole alpha.
    settings = _gate_settings(args, 1, single_look=True)
    result = compare_results(candidate, settings, store=BaselineStore(args.baseline_dir), baseline=baseline)
    diagnoses = diagnose(result)
    details = str(args.results[-1])
    _write_outputs(
        args,
        lambda form: render_gate(result, form, command="perfgate compare", diagnoses=diagnoses, details=details),
    )
    return _warn_open(result)


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse at once a file output (--json, --markdown, --png) that cannot be written."""
    from perfgate.records.results import check_writable

    for option in ("json", "markdown", "png"):
        path = getattr(args, option, None)
        if path is not None:
            check_writable(path, f"--{option}")


def _write_outputs(args: argparse.Namespace, render: Callable[[str], str]) -> None:
    """Print the report in the form --format asks for, and write the files --json and --markdown name;
    `render(form)` is the report in one form (text, markdown, json)."""
    from perfgate.records.results import write_text_atomic

    _print_report(render(args.format), coloured=args.format == "text")
    for form, path in (("json", args.json), ("markdown", args.markdown)):
        if path is not None:
            write_text_atomic(path, render(form))


def _report_gate(result: GateResult, diagnoses: Sequence[Diagnosis] = (), *, command: str) -> int:
    """Print the gate's report and any diagnosis, its summary line naming `command`; inconclusive verdicts that
    pass also get a warning on stderr."""
    from perfgate.report.text import format_gate

    _print_report(format_gate(result, diagnoses, command=command))
    return _warn_open(result)


def _print_report(text: str, *, coloured: bool = True) -> None:
    """A report on standard output: its verdicts coloured on a terminal (never with NO_COLOR, nor in a file)."""
    from perfgate.report.colour import for_stream

    sys.stdout.write(for_stream(text, sys.stdout) if coloured else text)


def _warn_open(result: GateResult) -> int:
    """Warn on stderr of inconclusive verdicts that do not fail the build; the gate's exit code."""
    from perfgate.judge.verdict import Status

    open_verdicts = [f"{v.workload} {v.config}" for v in result.verdicts if v.status == Status.INCONCLUSIVE]
    if open_verdicts and result.exit_code == 0:
        sys.stderr.write(f"warning: inconclusive, not failing the build: {', '.join(open_verdicts)}\n")
    for line in result.unused_acceptances:
        sys.stderr.write(f"warning: {line}\n")
    return result.exit_code


def command_report(args: argparse.Namespace) -> int:
    """Render a results file: a check's as the check judged it, a lab run's as the lab's table; exits 0 once
    written (the check's own exit code is its verdict's)."""
    from perfgate.judge.diagnosis import diagnose
    from perfgate.judge.verdict import judge_saved
    from perfgate.project import load_project_config
    from perfgate.records.results import load_results
    from perfgate.report.markdown import COMMENT_LIMIT
    from perfgate.report.render import is_lab_run, render_gate, render_lab
    from perfgate.report.text import format_run

    _check_outputs(args)
    run = load_results(args.results)
    details, limit = str(args.results), args.max_chars or COMMENT_LIMIT
    if is_lab_run(run):
        if args.png is not None:
            raise UsageError(
                "--png charts a check's verdicts, and this is a lab run that no check judged",
                where=str(args.results),
                hint="chart the results of perfgate check --json, or leave out --png",
            )
        peaks = load_project_config().peak_tflops
        _write_outputs(args, lambda form: render_lab(run, form, details=details, limit=limit, peak_tflops=peaks))
        return EXIT_OK
    result = judge_saved(run, load_project_config(), args.baseline_dir)
    diagnoses = diagnose(result)
    if args.png is not None:
        from perfgate.report.chart import write_chart

        write_chart(result, args.png)

    def render(form: str) -> str:
        text = render_gate(
            result,
            form,
            command="perfgate report",
            exits=False,
            diagnoses=diagnoses,
            micro=run.micro,  # a pytest --perfgate session's pytest-benchmark verdicts, as it decided them
            details=details,
            limit=limit,
        )
        lab = format_run(run, peak_tflops=result.settings.project.peak_tflops) + "\n"
        return (lab if form == "text" and run.workloads else "") + text

    _write_outputs(args, render)
    return EXIT_OK


def command_history(args: argparse.Namespace) -> int:
    """Print the recorded runs, their change points and creep (--html: also the dashboard); exit 0, or 3 when
    nothing is recorded (it judges nothing)."""
    from perfgate.judge.stats import DEFAULT_ALPHA
    from perfgate.project import DEFAULT_THRESHOLD, load_project_config
    from perfgate.report.history import format_history, series_of

    store = _history_store(args)
    fetched = _fetch_history_branch(args, store)
    if fetched is not None:
        sys.stderr.write(f"fetched {fetched} record(s) from the history branch {args.history_branch}\n")
    history = store.load()
    for line in history.skipped:
        sys.stderr.write(f"warning: {line}\n")
    if not history.records:
        raise NothingToCompareError(
            f"no recorded run in {store.directory}",
            hint="record runs with perfgate check --record, or give --history-dir or --history-branch",
        )
    project = load_project_config()
    threshold = next(v for v in (args.threshold, project.threshold, DEFAULT_THRESHOLD) if v is not None)
    alpha = next(v for v in (args.alpha, project.alpha, DEFAULT_ALPHA) if v is not None)
    series = series_of(history, threshold=threshold, alpha=alpha)
    sys.stdout.write(format_history(series, limit=args.limit))
    if args.html is not None:
        from perfgate.records.results import write_text_atomic
        from perfgate.report.dashboard import render_dashboard

        page = args.html / "index.html"
        write_text_atomic(page, render_dashboard(series, skipped=history.skipped))
        sys.stdout.write(f"dashboard written to {page}\n")
    return EXIT_OK


def command_bisect(args: argparse.Namespace) -> int:
    """Bisect GOOD..BAD with paired checks; print each step and what it found; exit 0 once it ran, whatever
    it found (a first bad commit, nothing, or a history that is not monotonic)."""
    from perfgate.check.bisect import commits_between, format_bisect, run_bisect

    commits_between(args.good, args.bad)  # bad refs fail at once, before torch loads
    args.against = args.good  # paired defaults: one thread, the pairs' budget
    references, run_settings = _run_settings(args)
    gate_settings = _gate_settings(args, run_settings.trials)
    result = run_bisect(
        references, run_settings, gate_settings, args.good, args.bad, progress=_progress(args), notify=_notify(args)
    )
    sys.stdout.write(format_bisect(result))
    return EXIT_OK


def command_export(args: argparse.Namespace) -> int:
    """Print one recorded run in another tool's JSON format (--json: also to a file); exit 0 once written, 3
    when no run is recorded."""
    import json

    from perfgate.records.results import write_text_atomic
    from perfgate.report.history import export_run

    _check_outputs(args)
    store = _history_store(args)
    _fetch_history_branch(args, store)
    history = store.load()
    for line in history.skipped:
        sys.stderr.write(f"warning: {line}\n")
    records = [r for r in history.records if args.commit is None or (r.commit or "").startswith(args.commit)]
    if not records:
        which = f" of commit {args.commit}" if args.commit else ""
        raise NothingToCompareError(
            f"no recorded run{which} in {store.directory}",
            hint="record runs with perfgate check --record, or give --history-dir or --history-branch",
        )
    text = json.dumps(export_run(records[-1], args.format), indent=2, allow_nan=False) + "\n"
    sys.stdout.write(text)
    if args.json is not None:
        write_text_atomic(args.json, text)
    return EXIT_OK


def command_demo(args: argparse.Namespace) -> int:
    """Check two demo pull requests in a throwaway repository; exit 0 once both checks ran."""
    from perfgate.demo import DEFAULT_BUDGET_S, run_demo

    return run_demo(args.dir, budget_s=args.time_budget or DEFAULT_BUDGET_S)


def command_init(args: argparse.Namespace) -> int:
    """Write the project's perfgate files (or, with --dry-run, print them); exit 0 once written."""
    from perfgate.scaffold import format_dry_run, format_written, plan_init, write_plan

    plan = plan_init(Path.cwd(), workload_file=args.workload_file)
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


def _stop_on_sigterm() -> None:
    """A cancelled CI job is sent SIGTERM: stop as on Ctrl-C, so trials are killed and a paired check's
    worktree is removed, instead of dying where it stands."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, interrupt)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code, one of `errors.EXIT_CODES`."""
    if argv is None:
        _stop_on_sigterm()
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
        sys.stderr.write(f"error: {error.one_line()}\n")
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
        sys.stderr.write(f"error: internal error {type(exc).__name__}: {exc}; rerun with --debug and report it\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
