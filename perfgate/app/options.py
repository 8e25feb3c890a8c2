"""Every option perfgate takes, declared once, and every command that takes them.

Each `Option` holds its name, help text, parser, kind and default; `add_to_argparse` renders it as `--NAME`
for `perfgate`, `add_to_pytest` as `--perfgate-NAME` with the ini key `perfgate_NAME` (the way
pytest-benchmark renders its options for a prefix), and the Action's own options are `ACTION_OPTIONS`. A
`Command` lists a subcommand's help, description, options (in the order `--help` shows them) and exit codes;
`build_parser` renders them all for argparse. `resolve` finds an option's value once, in one order: the
command line, then the environment (`PERFGATE_<NAME>`), then `[tool.perfgate]`, then the default; a value
from any source goes through the same parser, and its error names the source.
"""

from __future__ import annotations

import argparse
import os
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import perfgate
from perfgate.check.calibrate import DEFAULT_CALIBRATION_PAIRS, DEFAULT_PLANTED_SLOWDOWN
from perfgate.errors import (
    EXIT_INTERRUPTED,
    EXIT_NO_BASELINE,
    EXIT_NOTHING_TO_GATE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    EXIT_WORKLOAD_FAILED,
    PerfgateError,
    UsageError,
    exit_code_help,
)
from perfgate.measure.lab import DEFAULT_TIMEOUT_S
from perfgate.measure.packages import MODES as ENVIRONMENT_MODES
from perfgate.naming import CLI, PYTEST, FrontEnd
from perfgate.project import DEFAULT_TRIALS, ProjectConfig, parse_count, parse_fraction, parse_seconds
from perfgate.records.acceptance import Acceptance, parse_acceptance, parse_label
from perfgate.records.baselines import DEFAULT_BASELINE_DIR, DEFAULT_UPDATE_TRIALS
from perfgate.records.comparisons import DEFAULT_ALPHA
from perfgate.records.history import EXPORT_FORMATS
from perfgate.records.verdicts import DEFAULT_MAX_PAIRS, DEFAULT_MAX_TRIALS, DEFAULT_TIME_BUDGET_S, PER_CONFIG_BUDGET_S
from perfgate.report import FORMATS as REPORT_FORMATS
from perfgate.report.markdown import COMMENT_LIMIT
from perfgate.variants import CONFIG_NAMES, DEFAULT_CONFIGS

Parse = Callable[[Any, str], Any]  # (value, where) -> parsed value; a PerfgateError when it is bad
Kind = Literal["value", "flag", "negatable", "repeat", "positional", "version"]
Source = Literal["option", "env", "project", "default"]

DEMO_BUDGET_S = 160.0  # `perfgate demo`'s two checks together (perfgate.demo.DEFAULT_BUDGET_S)
HISTORY_LIMIT = 10  # `perfgate history`: runs shown per series
NO_BASELINE_POLICIES = ("fail", "warn")  # the Action's `no-baseline` input


@dataclass(frozen=True)
class Option:
    """One option. `kind`: a `value` parsed by `parse` (None: kept as text), a `flag` (no value), a
    `negatable` flag (`--no-NAME` too), a `repeat` value (given more than once, a list), a `positional`.
    `default`: one value, or a mapping from command name to its default there. `env`: read
    `PERFGATE_<NAME>` when not given; `project_key`: then `[tool.perfgate]`'s key; `pytest`: the plugin
    renders it too; `action_input`: the action.yml input that passes it."""

    name: str
    help: str  # `{default}`, `{head}`, `{note}`: filled in by the command that renders it
    metavar: str | None = None
    parse: Parse | None = None
    kind: Kind = "value"
    default: Any = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    env: bool = True
    project_key: str | None = None
    pytest: bool = False
    action_input: str | None = None
    dest: str | None = None  # a positional's name in the namespace
    required: bool = False
    suppress: bool = False  # not given: absent from the namespace (a subcommand's --debug)

    @property
    def flag(self) -> bool:
        return self.kind == "flag"

    @property
    def repeat(self) -> bool:
        return self.kind == "repeat"

    @property
    def key(self) -> str:
        """The namespace attribute: `max-trials` -> `max_trials`."""
        return self.dest or self.name.replace("-", "_")

    def default_for(self, command: str | None = None) -> Any:
        if isinstance(self.default, Mapping):
            return self.default.get(command, self.default.get(None))
        return self.default

    def help_for(self, **values: Any) -> str:
        return self.help.format(**values)


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help, its description, its options in `--help`'s order (each with the title
    of the argparse group it shows under, None: the command's own options) and the exit codes it can end with;
    `help_values` fill its options' help placeholders."""

    name: str
    help: str
    description: str
    options: tuple[tuple[str | None, Option], ...]
    exit_codes: tuple[int, ...]
    help_values: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Given:
    """A value a front end was given, and where: `--threshold`, `ini perfgate_threshold`."""

    value: Any
    where: str


@dataclass(frozen=True)
class Resolved:
    """An option's value and where it came from."""

    value: Any
    where: str
    source: Source


def argparse_type(parse: Parse, where: str) -> Callable[[str], Any]:
    """`parse` as argparse wants it: the error's text and hint become argparse's message."""

    def convert(text: str) -> Any:
        try:
            return parse(text, where)
        except PerfgateError as error:
            raise argparse.ArgumentTypeError(f"{error.what}; {error.hint}" if error.hint else error.what) from None

    return convert


def _path(value: Any, where: str) -> Path:
    return Path(str(value))


def _acceptance(value: Any, where: str) -> Acceptance:
    return parse_acceptance(str(value), "option", where)


def _label(value: Any, where: str) -> Acceptance:
    return parse_label(str(value))


def _rounds(value: Any, where: str) -> int | None:
    """`auto` (None: calibrated, `perfgate.measure.rounds`) or a whole number of at least 1."""
    if str(value).strip().lower() == "auto":
        return None
    return parse_count(value, where)


def _int(value: Any, where: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise UsageError(f"expected a whole number, got {value!r}", where=where) from None


FORK_HELP = (
    "fork each trial from one process that imported torch, one a side in a paired check (CPU only): no import "
    "of torch a trial, but not the default until its noise is measured better; baselines measured with it are "
    "this machine's forked ones, which only a check with it compares (default: a fresh process per trial)"
)
INTERLEAVE_HELP = (
    "start each pair's two trials together and let them take turns at the training steps, the waiting side "
    "stopped (POSIX only): a busy neighbour hits both sides alike (default, but for --parallel-pairs and on "
    "CUDA, where a stopped side's queued kernels would run in the other's turn); --no-interleaved-pairs runs them "
    "one after the other"
)
ENVIRONMENT_HELP = (
    "where the base side runs: auto (default): in its own environment where the two commits declare different "
    "packages (pyproject.toml, requirements*.txt, uv.lock, poetry.lock, pylock.toml) or the project builds a "
    "compiled extension, else in the head's at no cost; per-side: always in its own; shared: always in the "
    "head's (the base's code with the head's installed packages)"
)
HISTORY_BRANCH_HELP = (
    "keep the history on this branch of the origin remote too (CI runners keep no files): "
    "a recorded run is pushed to it, retrying when another job pushed first, and history (and the trend in "
    "check's Markdown report) fetches it first (e.g. perfgate-history)"
)

# -- the options -------------------------------------------------------------------------------------------

VERSION = Option("version", "show program's version number and exit", kind="version", env=False)
DEBUG = Option("debug", "show tracebacks on errors", kind="flag", env=False)
SUB_DEBUG = Option("debug", "show tracebacks on errors", kind="flag", env=False, suppress=True)
WORKLOADS = Option(
    "workloads",
    "path/to/file.py:function, package.module:function, or a built-in (lm, vision, lm@large); "
    "default: [tool.perfgate] workloads in pyproject.toml, else the built-in lm and vision",
    "WORKLOAD",
    kind="positional",
    nargs="*",
    env=False,
    project_key="workloads",
)
CONFIGS = Option(
    "configs",
    f"comma-separated subset of {','.join(CONFIG_NAMES)} (default: {','.join(DEFAULT_CONFIGS)})",
    "LIST",
    default={None: ",".join(DEFAULT_CONFIGS), "calibrate": "fp32"},  # calibrate: a first answer in minutes
    pytest=True,
    action_input="configs",
)
TRIALS = Option(
    "trials",
    "trials per config, each in a fresh process (default: {default})",
    "N",
    parse_count,
    default={None: DEFAULT_TRIALS, "update": DEFAULT_UPDATE_TRIALS},
    pytest=True,
    action_input="trials",
)
DEVICE = Option(
    "device", "default: cuda when available, else cpu", default="auto", choices=("auto", "cpu", "cuda"), pytest=True
)
THREADS = Option(
    "threads",
    "torch threads per trial (default: torch's own, as your training gets them; --threads 1 gives quieter trials "
    "but leaves a DataLoader's workers cores that your training would not)",
    "N",
    parse_count,
    pytest=True,
)
ROUNDS = Option(
    "rounds",
    "timed rounds over the pinned slice in each trial process: auto (default): a paired check calibrates them "
    "from its first pair so about 65% of the runner's time goes to timed steps (leaving the time budget 5 pairs of "
    "each config), other runs time the slice once",
    "N|auto",
    _rounds,
    pytest=True,
)
NPROC = Option(
    "nproc",
    "run each trial as an N-rank data-parallel job under torchrun: DistributedDataParallel, gloo on the CPU, "
    "NCCL on CUDA with one device per rank (default: [tool.perfgate] nproc, else 1; a Workload's nproc wins)",
    "N",
    parse_count,
    project_key="nproc",
    pytest=True,
    action_input="nproc",
)
TIMEOUT = Option(
    "timeout",
    f"per-trial time limit (default: {DEFAULT_TIMEOUT_S:g})",
    "SECONDS",
    parse_seconds,
    default=DEFAULT_TIMEOUT_S,
    pytest=True,
)
QUIET = Option("quiet", "no progress lines", kind="flag")
PROFILE = Option(
    "profile",
    "after the trials, one profiling trial per workload and config: a trace and the top operators{note}",
    kind="flag",
    pytest=True,
    action_input="profile",
)
PAIRED_PROFILE_NOTE = " (a paired check, --against: one profiling trial on each side after the pairs)"
PROFILE_DIR = Option(
    "profile-dir",
    "where --profile writes its Chrome/Perfetto traces (default: perfgate-traces/)",
    "DIR",
    _path,
    default=Path("perfgate-traces"),
    pytest=True,
)
BASELINE_DIR = Option(
    "baseline-dir",
    f"where the baseline YAML files live (default: {DEFAULT_BASELINE_DIR}/)",
    "DIR",
    _path,
    default=DEFAULT_BASELINE_DIR,
    pytest=True,
    action_input="baseline-dir",
)
REPORT_BASELINE_DIR = Option(
    "baseline-dir",
    "judge a check's results against the baselines in DIR (default: the folder the check used)",
    "DIR",
    _path,
)
THRESHOLD = Option(
    "threshold",
    "regression threshold on time per sample, e.g. 5%: 5% more time per sample, samples/s 4.8% lower "
    "(default: [tool.perfgate] threshold, else 5%)",
    "PCT",
    parse_fraction,
    project_key="threshold",
    pytest=True,
    action_input="threshold",
)
ALPHA = Option(
    "alpha",
    f"significance level per config, one-sided, over all its looks (default: {DEFAULT_ALPHA:g})",
    "P",
    parse_fraction,
    project_key="alpha",
    pytest=True,
)
FAIL_ON_INCONCLUSIVE = Option(
    "fail-on-inconclusive",
    "fail the build when a verdict stays inconclusive",
    kind="flag",
    pytest=True,
    action_input="fail-on-inconclusive",
)
WARN_ONLY = Option(
    "warn-only",
    "report every verdict (the report, its annotations and comment included) and exit 0 whatever it is: adopt the "
    "gate without blocking merges (a usage error still exits 2)",
    kind="flag",
    pytest=True,
    action_input="fail",
)
MAX_TRIALS = Option(
    "max-trials",
    "add trials (in a paired check, pairs) to inconclusive configs up to N per config "
    f"(default: {DEFAULT_MAX_TRIALS} trials, {DEFAULT_MAX_PAIRS} pairs)",
    "N",
    parse_count,
    project_key="max_trials",
    pytest=True,
)
TIME_BUDGET = Option(
    "time-budget",
    f"stop adding trials once the check has run this long (default: {PER_CONFIG_BUDGET_S:g} per config "
    f"judged, {DEFAULT_TIME_BUDGET_S:g} at most)",
    "SECONDS",
    parse_seconds,
    pytest=True,
)
DEMO_TIME_BUDGET = Option(
    "time-budget",
    "the two checks' time: the first may take about half, the second what is left; each stops adding "
    f"pairs once its share is spent (default: {DEMO_BUDGET_S:g})",
    "SECONDS",
    parse_seconds,
    default=DEMO_BUDGET_S,
)
# The file outputs: `--json PATH`, `--markdown PATH`, `--html DIR`, `--png PATH`, each the same name wherever
# it applies; `--format` only chooses what a command prints on standard output.
JSON = Option("json", "write the results (schema_version 2) to PATH", "PATH", _path, pytest=True)
# `--json` is the results file wherever a command writes one; a report as JSON and an export have their own names
REPORT_JSON = Option("report-json", "also write the report as JSON (what --format json prints) to PATH", "PATH", _path)
EXPORT_OUTPUT = Option("output", "also write the exported JSON document to PATH", "PATH", _path)
MARKDOWN = Option(
    "markdown",
    "also write the report as Markdown to PATH (for a job summary or a pull-request comment)",
    "PATH",
    _path,
    pytest=True,
)
HTML = Option(
    "html",
    "also write the dashboard, DIR/index.html: one static page, a chart per series (for GitHub Pages)",
    "DIR",
    _path,
)
PNG = Option(
    "png",
    "also write a chart of each config's ratio and its interval to PATH (needs matplotlib: "
    "pip install 'perfgate[chart]')",
    "PATH",
    _path,
)
FORMAT = Option(
    "format",
    "what to print on standard output: the report as text, Markdown or JSON (default: text)",
    choices=REPORT_FORMATS,
    default="text",
)
EXPORT_TO = Option("to", "the other tool whose JSON format to write", choices=EXPORT_FORMATS, env=False, required=True)
MAX_CHARS = Option(
    "max-chars",
    "shorten the Markdown report to at most N characters, leaving out whole sections (default: "
    f"{COMMENT_LIMIT}, GitHub's limit for a comment)",
    "N",
    parse_count,
)
AGAINST = Option(
    "against",
    "measure the working tree against this git ref (branch, tag, commit) in pairs, side by side, "
    "instead of comparing with stored baselines",
    "REF",
    pytest=True,
    action_input="against",
)
PARALLEL_PAIRS = Option(
    "parallel-pairs",
    "in a paired check: run each pair's two trials at the same time, each on half of the CPUs",
    kind="flag",
    pytest=True,
)
FORK_TRIALS = Option("fork-trials", FORK_HELP, kind="flag", pytest=True)
INTERLEAVED_PAIRS = Option("interleaved-pairs", f"in a paired check: {INTERLEAVE_HELP}", kind="negatable", pytest=True)
ENVIRONMENT = Option(
    "environment",
    f"in a paired check: {ENVIRONMENT_HELP}",
    "MODE",
    choices=ENVIRONMENT_MODES,
    pytest=True,
    action_input="environment",
)
ACCEPT = Option(
    "accept",
    "accept a slowdown on purpose: 'WORKLOAD/CONFIG PCT' (WORKLOAD alone: all its configs; * for every workload), "
    "e.g. 'lm-small/fp32 15%': within it the config passes as accepted, beyond it still fails (repeatable)",
    "'TARGET PCT'",
    _acceptance,
    kind="repeat",
    env=False,
    pytest=True,
)
ACCEPT_LABEL = Option(
    "accept-label",
    "the same from a pull-request label named 'perf-accept: TARGET PCT' (the Action passes them; repeatable)",
    "LABEL",
    _label,
    kind="repeat",
    env=False,
    action_input="accept-labels",
)
ACCEPT_FROM = Option(
    "accept-from",
    "read the Perf-Accept: TARGET PCT trailers of this commit's message (a pull request's head commit) "
    "(default: {head})",
    "COMMIT",
    pytest=True,
)
COUNTS_ONLY = Option(
    "counts-only",
    "judge by the exact counts alone (FLOPs, operators, graph breaks, parameters, allocated peak): one untimed "
    "counting trial per config and side, no statistics; a CPU runner can gate a model that trains on GPUs",
    kind="flag",
    pytest=True,
    action_input="counts-only",
)
ALLOW_DIRTY = Option(
    "allow-dirty",
    "write baselines even with uncommitted changes to tracked files (they must match a commit)",
    kind="flag",
    pytest=True,
)
DIAGNOSE = Option("diagnose", "diagnose every config (by default only those that regressed)", kind="flag", pytest=True)
RECORD = Option(
    "record",
    "append this run to the history (a new file in the history folder): for pushes to main",
    kind="flag",
    pytest=True,
    action_input="record",
)
HISTORY_DIR = Option(
    "history-dir",
    "the history folder (default: [tool.perfgate] history, else .perfgate/history)",
    "DIR",
    _path,
    project_key="history",
    pytest=True,
)
HISTORY_BRANCH = Option("history-branch", HISTORY_BRANCH_HELP, "BRANCH", pytest=True, action_input="history-branch")
LIMIT = Option(
    "limit",
    f"runs shown per series (change points are found over all of them) (default: {HISTORY_LIMIT})",
    "N",
    parse_count,
    default=HISTORY_LIMIT,
)
COMMIT = Option("commit", "the latest run of this commit (a prefix)", "SHA")
GOOD = Option("good", "a ref that was fast (older)", "GOOD", kind="positional", env=False)
BAD = Option("bad", "a ref that is slower (newer)", "BAD", kind="positional", env=False)
RESULTS = Option("results", "[BASELINE.json] CANDIDATE.json", "RESULTS", _path, kind="positional", nargs="+", env=False)
RESULTS_FILE = Option(
    "results",
    "results file written by --json (perfgate check, run or update; pytest --perfgate-json)",
    "RESULTS",
    _path,
    kind="positional",
    env=False,
)
PAIRS = Option(
    "pairs",
    f"A/A pairs per config (default: {DEFAULT_CALIBRATION_PAIRS})",
    "N",
    parse_count,
    default=DEFAULT_CALIBRATION_PAIRS,
)
SLOWDOWN = Option(
    "slowdown",
    f"the planted slowdown: every step of head takes this much longer (default: {DEFAULT_PLANTED_SLOWDOWN:.0%})",
    "PCT",
    parse_fraction,
    default=DEFAULT_PLANTED_SLOWDOWN,
)
DIR = Option(
    "dir",
    "where to make the repository and write the reports: a new or empty folder (default: a new temporary folder, kept)",
    "DIR",
    _path,
    env=False,
)
WORKLOAD_FILE = Option(
    "workload-file",
    "where to write the workload file, relative to the current folder (default: perf/workloads.py in "
    "the project's root: the git repository's top level, else the current folder)",
    "PATH",
    _path,
    env=False,
)
DRY_RUN = Option("dry-run", "print what it would write, and write nothing", kind="flag", env=False)
GPU_WORKFLOW = Option(
    "gpu",
    "write the workflow for a self-hosted GPU runner (labels self-hosted, gpu): torch's CUDA build, all three "
    "configs, pull requests from forks skipped (default: a GitHub-hosted CPU runner, fp32)",
    kind="flag",
    env=False,
)

# pytest-only: the two switches that turn the plugin on
PERFGATE = Option("perfgate", "run the perf tests and fail on supported regressions", kind="flag", env=False)
PERFGATE_UPDATE = Option(
    "perfgate-update", "run the perf tests and write their baselines instead", kind="flag", env=False
)

# The Action's own (python -m perfgate.action): how the job ends, not how perfgate measures
NO_BASELINE = Option(
    "no-baseline", "", choices=NO_BASELINE_POLICIES, default="fail", env=False, action_input="no-baseline"
)
JOB_EXIT_CODE = Option("job-exit-code", "write the code the job ends with to this file", parse=_path, env=False)
FIRST_COMMIT = Option("first-commit", "a recorded first commit: no parent to judge by", kind="flag", env=False)
ACTION_WARN_ONLY = Option("warn-only", "what would fail the job warns, and the job passes", kind="flag", env=False)
VERDICT_CODE = Option("verdict-code", "write the code the verdicts alone end the check with", parse=_path, env=False)
ACTION_MODE = Option("mode", "", kind="positional", env=False)
ACTION_CODE = Option("code", "", kind="positional", parse=_int, env=False)
ACTION_RESULTS = Option("results", "", kind="positional", parse=_path, env=False)
ACTION_LOG = Option("log", "", kind="positional", parse=_path, env=False)
ACTION_OPTIONS = (
    ACTION_MODE,
    ACTION_CODE,
    ACTION_RESULTS,
    ACTION_LOG,
    NO_BASELINE,
    JOB_EXIT_CODE,
    FIRST_COMMIT,
    ACTION_WARN_ONLY,
    VERDICT_CODE,
)

# The options the pytest plugin renders as --perfgate-NAME (+ ini key), in its --help order
PLUGIN_OPTIONS = (
    CONFIGS,
    TRIALS,
    MAX_TRIALS,
    TIME_BUDGET,
    DEVICE,
    THREADS,
    ROUNDS,
    NPROC,
    TIMEOUT,
    BASELINE_DIR,
    THRESHOLD,
    ALPHA,
    JSON,
    MARKDOWN,
    DIAGNOSE,
    PROFILE,
    PROFILE_DIR,
    COUNTS_ONLY,
    AGAINST,
    PARALLEL_PAIRS,
    FORK_TRIALS,
    INTERLEAVED_PAIRS,
    ENVIRONMENT,
    ACCEPT,
    ACCEPT_FROM,
    RECORD,
    HISTORY_DIR,
    HISTORY_BRANCH,
    FAIL_ON_INCONCLUSIVE,
    WARN_ONLY,
    ALLOW_DIRTY,
)
PYTEST_OPTIONS = (PERFGATE, PERFGATE_UPDATE, *PLUGIN_OPTIONS)

# -- the commands ------------------------------------------------------------------------------------------


def _lab(*, trials: bool = True, json: bool = True, profile: bool = True) -> tuple[tuple[str | None, Option], ...]:
    """The options of every command that runs the lab: `json`, it writes a results file; `profile`, it can add
    a profiling trial."""
    lab = [CONFIGS, TRIALS, DEVICE, THREADS, ROUNDS, NPROC, TIMEOUT, FORK_TRIALS, *([JSON] if json else []), QUIET]
    lab += [PROFILE, PROFILE_DIR] if profile else []
    return ((None, WORKLOADS), *(("lab", option) for option in lab))


def _gate(*, measuring: bool, exits: bool = True, baselines: bool = True) -> tuple[tuple[str | None, Option], ...]:
    """The options of the commands that judge: `measuring`, it adds trials; `exits`, it exits with the verdict's
    code; `baselines`, it reads the stored baselines."""
    gate = [THRESHOLD, ALPHA, *([FAIL_ON_INCONCLUSIVE, WARN_ONLY] if exits else [])]
    gate += [MAX_TRIALS, TIME_BUDGET] if measuring else []
    gate += [BASELINE_DIR] if baselines else []
    return tuple(("gate", option) for option in gate)


def _own(*options: Option) -> tuple[tuple[str | None, Option], ...]:
    return tuple((None, option) for option in options)


def _in(title: str, *options: Option) -> tuple[tuple[str | None, Option], ...]:
    return tuple((title, option) for option in options)


_ACCEPTING = "accepting a slowdown on purpose"
_ANY = (EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED)  # every command: done, a usage error, or interrupted
_MEASURES = (*_ANY, EXIT_WORKLOAD_FAILED)  # a command that runs the user's workload
_GATES = (*_MEASURES, EXIT_NOTHING_TO_GATE)  # ... and refuses an empty workload list

COMMANDS = (
    Command(
        "demo",
        "see the gate at work: two pull requests in a throwaway repository, checked in pairs (about 3 minutes)",
        "Make a throwaway git repository with a small image classifier and two pull requests against "
        "its main branch, one that adds a hidden layer and one that changes a comment; check each with "
        "perfgate check --against main as CI would, and sum up both verdicts. Needs no baseline and no "
        "configuration; nothing is downloaded.",
        _own(SUB_DEBUG, DIR, DEMO_TIME_BUDGET),
        (*_MEASURES, EXIT_NO_BASELINE),
    ),
    Command(
        "init",
        "set up a project: [tool.perfgate], a workload file to fill in and a pull-request workflow",
        "Write [tool.perfgate] into pyproject.toml (appended, or a new file), a commented workload "
        "file that runs at once on a stand-in model, and .github/workflows/perfgate.yml, which checks each pull "
        "request against its base branch. Overwrites nothing: when a file exists, it writes nothing.",
        _own(SUB_DEBUG, WORKLOAD_FILE, DRY_RUN, GPU_WORKFLOW),
        _ANY,
    ),
    Command(
        "run",
        "run the three-run lab on each workload and print its table; judges nothing",
        "Run the three-run lab (fp32, bf16, bf16-compile) on each workload and print the lab's table: "
        "samples/s, step times, phases, peak memory, compile time. Judges nothing (perfgate check does). "
        "--json writes the results file, --markdown the table as Markdown.",
        (*_own(SUB_DEBUG), *_lab(), *_own(MARKDOWN)),
        _GATES,
        {"note": ""},
    ),
    Command(
        "check",
        "measure and judge against the stored baselines, or with --against REF against a git ref measured in "
        "pairs; exit 1 on a supported regression",
        "Run the lab and judge each config: against its stored baseline for this machine (perfgate "
        "update writes them), or, with --against REF, against REF checked out in a worktree and measured beside "
        "the working tree in pairs. Open verdicts get more trials until they are decided or the time budget is "
        "spent. Prints the lab's table and the gate's report; --json writes the results file, --markdown the "
        "report as Markdown.",
        (
            *_own(SUB_DEBUG),
            *_lab(),
            *_gate(measuring=True),
            *_in(_ACCEPTING, ACCEPT, ACCEPT_LABEL, ACCEPT_FROM),
            *_own(MARKDOWN, DIAGNOSE),
            *_in("history", RECORD, HISTORY_DIR, HISTORY_BRANCH),
            *_own(COUNTS_ONLY),
            *_in("paired check", AGAINST, PARALLEL_PAIRS, INTERLEAVED_PAIRS, ENVIRONMENT),
        ),
        (*_GATES, EXIT_REGRESSION, EXIT_NO_BASELINE),
        {
            "note": PAIRED_PROFILE_NOTE,
            "head": "HEAD, the commit the working tree is on",
        },
    ),
    Command(
        "history",
        "the recorded runs (check --record): a table per workload and config, change points and creep",
        "Read the history that perfgate check --record keeps and print, per workload, config and "
        "machine, the recent runs, the change points where samples/s or peak memory changed level, and slow "
        "creep that adds up past the threshold over several runs. Measures nothing.",
        _own(SUB_DEBUG, HISTORY_DIR, HISTORY_BRANCH, LIMIT, HTML, THRESHOLD, ALPHA),
        (*_ANY, EXIT_NO_BASELINE),
    ),
    Command(
        "bisect",
        "find the first commit between GOOD and BAD that made a config slower",
        "Measure BAD against GOOD in pairs, then halve the commits between them, each step a paired "
        "check of one commit against GOOD (both checked out in worktrees), and print the first commit that made a "
        "config slower with its evidence; the first bad commit is also checked against its parent, and the "
        "result says so when the history is not monotonic. Exits 0 once it ran, whatever it found: a first bad "
        "commit, nothing to find, or a history that is not monotonic.",
        (
            *_own(SUB_DEBUG, GOOD, BAD),
            *_lab(json=False, profile=False),
            *_gate(measuring=True, exits=False, baselines=False),
            *_own(PARALLEL_PAIRS, INTERLEAVED_PAIRS),
        ),
        _GATES,
    ),
    Command(
        "export",
        "print a recorded run in another tool's JSON format (Bencher, github-action-benchmark)",
        "Print the latest recorded run of the history (or the latest of one commit) in another "
        "tool's JSON format: Bencher's Metric Format (--to bencher) or github-action-benchmark's "
        "customBiggerIsBetter list (--to github-action-benchmark); --output also writes it to a file.",
        _own(SUB_DEBUG, HISTORY_DIR, HISTORY_BRANCH, EXPORT_TO, COMMIT, EXPORT_OUTPUT),
        (*_ANY, EXIT_NO_BASELINE),
    ),
    Command(
        "calibrate",
        "measure what this runner can detect: paired A/A noise and a planted slowdown",
        "Measure this runner's paired noise (the working tree against itself), check a planted slowdown "
        "as perfgate check --against would, and report the smallest slowdown a paired check detects within the "
        "time budget. --json writes the planted check's results.",
        (
            *_own(SUB_DEBUG),
            *_lab(profile=False),
            *_gate(measuring=True, exits=False, baselines=False),
            *_own(PAIRS, SLOWDOWN, PARALLEL_PAIRS, INTERLEAVED_PAIRS),
        ),
        _GATES,
    ),
    Command(
        "update",
        "measure and write this machine's baselines (commit them; check compares with them)",
        "Run the lab and store its results as this machine's baselines (one YAML file per workload).",
        (*_own(SUB_DEBUG), *_lab(), *_own(BASELINE_DIR, ALLOW_DIRTY)),
        _GATES,
        {"note": ""},
    ),
    Command(
        "compare",
        "judge a saved results file against the stored baselines, or against another results file; measures nothing",
        "Judge a results file written by --json against the stored baselines, or, given two files, "
        "the second against the first. Two files from different machine types get a warning: their comparison "
        "mixes the machine with the code (perfgate check --against REF measures both sides on one runner).",
        (
            *_own(SUB_DEBUG, RESULTS, FORMAT, REPORT_JSON, MARKDOWN),
            *_gate(measuring=False),
            *_in(_ACCEPTING, ACCEPT, ACCEPT_LABEL, ACCEPT_FROM),
        ),
        (*_ANY, EXIT_REGRESSION, EXIT_NO_BASELINE, EXIT_WORKLOAD_FAILED),
        {"head": "none"},
    ),
    Command(
        "report",
        "render a results file: a check's verdicts as the check judged them, or a lab run's table; measures nothing",
        "Render a results file written by --json. A check's (perfgate check, pytest --perfgate-json) "
        "is judged the way the check did (its settings are in the file) and shown as the check's report, with "
        "the check's verdict; a lab run's (perfgate run, perfgate update) is shown as the lab's table. Exits 0 "
        "once the report is written, whatever the verdict (perfgate compare exits with it).",
        _own(SUB_DEBUG, RESULTS_FILE, FORMAT, REPORT_JSON, MARKDOWN, PNG, MAX_CHARS, REPORT_BASELINE_DIR),
        _ANY,
    ),
)
COMMAND_NAMES = tuple(c.name for c in COMMANDS)
COMMAND_EXIT_CODES: dict[str, tuple[int, ...]] = {c.name: c.exit_codes for c in COMMANDS}


def command(name: str) -> Command:
    return next(c for c in COMMANDS if c.name == name)


# -- rendering ---------------------------------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but its errors use perfgate's one-line form and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, hint=f"see '{self.prog} --help'")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """argparse's, but an option the command does not take points at that command's --help."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            name = getattr(parsed, "command", None)
            prog = f"{self.prog} {name}" if name else self.prog
            raise UsageError(f"unrecognized arguments: {' '.join(extras)}", hint=f"see '{prog} --help'")
        return parsed


class HelpFormatter(argparse.HelpFormatter):
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


def add_to_argparse(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    option: Option,
    front_end: FrontEnd = CLI,
    *,
    command: str | None = None,
    **help_values: Any,
) -> None:
    """`option` as argparse renders it. A value not given is None in the namespace (a flag's too), so that
    `resolve` can tell it from a default; `help_values` fill the help text's placeholders."""
    values = {"default": option.default_for(command), **help_values}
    text = option.help_for(**values).replace("%", "%%")
    flag = front_end.option(option.name)
    if option.kind == "version":
        parser.add_argument(flag, action="version", version=f"perfgate {perfgate.__version__}")
        return
    if option.kind == "positional":
        kwargs: dict[str, Any] = {"metavar": option.metavar, "help": text}
        if option.nargs is not None:
            kwargs["nargs"] = option.nargs
        if option.parse is not None:
            kwargs["type"] = argparse_type(option.parse, option.metavar or option.name)
        parser.add_argument(option.dest or option.name, **kwargs)
        return
    if option.kind == "flag":
        default = argparse.SUPPRESS if option.suppress else (False if not option.env else None)
        parser.add_argument(flag, action="store_true", default=default, help=text)
        return
    if option.kind == "negatable":
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        return
    kwargs = {"default": None, "metavar": option.metavar, "help": text}
    if option.choices is not None:
        kwargs.update(choices=option.choices, metavar=None)
    if option.required:
        kwargs["required"] = True
    if option.kind == "repeat":
        kwargs["action"] = "append"
    if option.parse is not None:
        kwargs["type"] = argparse_type(option.parse, flag)
    parser.add_argument(flag, **kwargs)


# Spellings a command no longer takes, each refused in one line that names the new one: {command: (old, new, why)}
RENAMED = {
    "compare": (("--json", "--report-json", "--json writes a results file, and compare writes none"),),
    "report": (("--json", "--report-json", "--json writes a results file, and report writes none"),),
    "export": (
        ("--json", "--output", "--json writes a results file, and export writes another tool's document"),
        ("--format", "--to", "--format chooses how a report is printed; export's document is another tool's"),
    ),
}


class _Renamed(argparse.Action):
    """An option spelling a command no longer takes: using it is a one-line usage error naming the new one."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str, why: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.new, self.why = new, why

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        raise UsageError(f"{option_string} is not an option here: {self.why}", hint=f"use {self.new}")


def add_command(commands: Any, spec: Command) -> argparse.ArgumentParser:
    """One subcommand, its options in the declared order; its --help ends with its exit codes."""
    parser: argparse.ArgumentParser = commands.add_parser(
        spec.name,
        formatter_class=HelpFormatter,
        epilog=exit_code_help(spec.exit_codes),
        help=spec.help,
        description=spec.description,
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for title, option in spec.options:
        target: Any = parser
        if title is not None:
            target = groups.get(title) or groups.setdefault(title, parser.add_argument_group(title))
        add_to_argparse(target, option, CLI, command=spec.name, **spec.help_values)
    for old, new, why in RENAMED.get(spec.name, ()):
        parser.add_argument(old, dest=f"renamed_{old.strip('-')}", action=_Renamed, new=new, why=why, default=None)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """`perfgate`'s parser, every command rendered from `COMMANDS`."""
    parser = ArgumentParser(
        prog="perfgate",
        description="Performance-regression gate for PyTorch training code.",
        epilog=exit_code_help(),
        formatter_class=HelpFormatter,
    )
    add_to_argparse(parser, VERSION)
    add_to_argparse(parser, DEBUG)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    for spec in COMMANDS:
        add_command(commands, spec)
    return parser


def build_action_parser() -> argparse.ArgumentParser:
    """The Action's gate step (`python -m perfgate.action MODE CODE RESULTS LOG [options]`)."""
    parser = argparse.ArgumentParser(prog="python -m perfgate.action")
    for option in ACTION_OPTIONS:
        if option.kind == "positional":
            kwargs: dict[str, Any] = {} if option.parse is None else {"type": argparse_type(option.parse, option.name)}
            parser.add_argument(option.name, **kwargs)
        elif option.kind == "flag":
            parser.add_argument(CLI.option(option.name), action="store_true", help=option.help)
        elif option.choices is not None:
            parser.add_argument(CLI.option(option.name), choices=option.choices, default=option.default)
        else:
            assert option.parse is not None
            parser.add_argument(
                CLI.option(option.name), type=argparse_type(option.parse, option.name), help=option.help
            )
    return parser


def add_to_pytest(group: Any, parser: Any, option: Option, front_end: FrontEnd, **help_values: Any) -> None:
    """`option` as `--perfgate-NAME` with the ini key `perfgate_NAME`; the plugin parses the values itself
    (`resolve_pytest`), so an ini value and an option share one parser (`Option.parse`) and one error message."""
    text = _spelled(option.help_for(**help_values), front_end)
    key = ini_key(option)
    if option.flag:
        group.addoption(front_end.option(option.name), dest=key, action="store_true", default=None, help=text)
        parser.addini(key, f"perfgate: {text}", type="bool", default=False)
        return
    if option.repeat:  # given more than once; the ini key takes one value a line
        group.addoption(
            front_end.option(option.name),
            dest=key,
            action="append",
            default=None,
            metavar=option.metavar,
            help=text.replace("%", "%%"),
        )
        parser.addini(key, f"perfgate: {text} (one a line)", type="linelist", default=[])
        return
    if option.kind == "negatable":  # --perfgate-NAME and --perfgate-no-NAME; the ini key's text is true or false
        group.addoption(front_end.option(option.name), dest=key, action="store_const", const=True, help=text)
        group.addoption(front_end.option(f"no-{option.name}"), dest=key, action="store_const", const=False)
        parser.addini(key, f"perfgate: {text}", default=None)
        return
    group.addoption(
        front_end.option(option.name), dest=key, default=None, metavar=option.metavar, help=text.replace("%", "%%")
    )
    parser.addini(key, f"perfgate: {text}", default=None)


def _spelled(text: str, front_end: FrontEnd) -> str:
    """A help text's `--NAME` of a plugin option as the front end spells it (`--threads 1`: `--perfgate-threads 1`);
    any other `--NAME` stays as it is."""
    names = {option.name for option in PLUGIN_OPTIONS}

    def spell(match: re.Match[str]) -> str:
        name = match.group(1)
        return front_end.option(name) if name.removeprefix("no-") in names else match.group(0)

    return re.sub(r"(?<![\w-])--([a-z][a-z-]*)", spell, text)


def add_switch_to_pytest(group: Any, option: Option) -> None:
    """`--perfgate` and `--perfgate-update`, the switches that turn the plugin on (no ini key)."""
    group.addoption(f"--{option.name}", action="store_true", help=option.help)


def add_all_to_pytest(parser: Any) -> None:
    """The plugin's group of `pytest --help`: the two switches, then `PLUGIN_OPTIONS`, each with its ini key."""
    group = parser.getgroup("perfgate", "perfgate: performance-regression gate")
    for option in PYTEST_OPTIONS:
        if option in (PERFGATE, PERFGATE_UPDATE):
            add_switch_to_pytest(group, option)
        else:
            trials = f"{DEFAULT_TRIALS}; {DEFAULT_UPDATE_TRIALS} with {PYTEST.option('update')}"
            head = "HEAD, the commit the working tree is on"
            add_to_pytest(group, parser, option, PYTEST, default=trials, head=head, note=PAIRED_PROFILE_NOTE)


def resolve_pytest(config: Any, *, command: str, environ: Mapping[str, str] | None = None) -> dict[str, Resolved]:
    """The plugin's options (`PLUGIN_OPTIONS`, by key) from a pytest config, each from the first source that has
    it: `--perfgate-NAME`, then `PERFGATE_<NAME>`, then the ini key `perfgate_NAME` (pytest.ini keeps quotes,
    TOML does not: stripped), then the default (`command` "update" has its own trials). Every value goes through
    the option's parser; a bad one names its source (`--perfgate-trials`, `ini perfgate_threshold`). The
    project's own keys are left to the core, as for the CLI (`resolve_all`)."""
    found = {}
    for option in PLUGIN_OPTIONS:
        key = ini_key(option)
        value = config.getoption(key)
        given = None
        if value is not None:
            flag = PYTEST.option(option.name)
            if option.kind == "negatable":
                flag = PYTEST.option(option.name if value else f"no-{option.name}")
                given = Given(value, flag)
            elif option.repeat:
                given = Given([item for text in value for item in _from_text(option, str(text), flag)], flag)
            else:
                given = Given(True if option.flag else _from_text(option, str(value), flag), flag)
        resolved = resolve(option, given, command=command, environ=environ)
        if resolved.source == "default" and option.repeat:
            lines = [str(line).strip() for line in config.getini(key) or () if str(line).strip()]
            if lines:
                values = [item for line in lines for item in _from_text(option, line, f"ini {key}")]
                resolved = Resolved(values, f"ini {key}", "project")
        elif resolved.source == "default":
            ini = config.getini(key)
            text = "1" if option.flag and ini is True else "" if option.flag else str(ini or "").strip()
            if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
                text = text[1:-1]
            if text:
                resolved = Resolved(_from_text(option, text, f"ini {key}"), f"ini {key}", "project")
        found[option.key] = resolved
    return found


def ini_key(option: Option) -> str:
    return f"perfgate_{option.name.replace('-', '_')}"


def env_key(option: Option) -> str:
    """`max-trials` -> `PERFGATE_MAX_TRIALS`."""
    return f"PERFGATE_{option.name.replace('-', '_').upper()}"


# -- resolving ---------------------------------------------------------------------------------------------

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _from_text(option: Option, text: str, where: str) -> Any:
    """A value given as text (an environment variable, an ini key), parsed as the command line would."""
    if option.kind in ("flag", "negatable"):
        word = text.strip().lower()
        if word not in _TRUE + _FALSE:
            raise UsageError(f"expected true or false, got {text!r}", where=where, hint="give 1 or 0")
        return word in _TRUE
    if option.choices is not None and text.strip() not in option.choices:
        raise UsageError(
            f"invalid choice {text.strip()!r}", where=where, hint=f"choose from {', '.join(option.choices)}"
        )
    if option.kind == "repeat":
        return [option.parse(text, where) if option.parse else text]
    return option.parse(text, where) if option.parse is not None else text.strip()


def resolve(
    option: Option,
    given: Given | None,
    *,
    command: str | None = None,
    environ: Mapping[str, str] | None = None,
    project: ProjectConfig | None = None,
) -> Resolved:
    """The option's value, from the first source that has one: the command line (`given`, already parsed),
    `PERFGATE_<NAME>` (when `option.env`), `[tool.perfgate]` (`option.project_key`, already parsed by
    `project.load_project_config`), else the command's default. A bad value names its source."""
    if given is not None and given.value is not None:
        return Resolved(given.value, given.where, "option")
    environ = os.environ if environ is None else environ
    name = env_key(option)
    if option.env and environ.get(name, "").strip():
        return Resolved(_from_text(option, environ[name], name), name, "env")
    if option.project_key is not None and project is not None:
        value = getattr(project, option.project_key, None)
        if value is not None:
            where = f"{project.source or 'pyproject.toml'} [tool.perfgate] {option.project_key}"
            return Resolved(value, where, "project")
    return Resolved(option.default_for(command), "default", "default")


def options_of(name: str) -> tuple[Option, ...]:
    """The options one command takes, each once (the first declaration of a name)."""
    seen: dict[str, Option] = {}
    for _, option in command(name).options:
        seen.setdefault(option.key, option)
    return tuple(seen.values())


def given_from_namespace(args: argparse.Namespace, name: str) -> dict[str, Given]:
    """What the command line gave, by option key (None: not given)."""
    found = {}
    for option in options_of(name):
        value = getattr(args, option.key, None)
        if value is not None and value != []:
            flag = option.metavar if option.kind == "positional" else CLI.option(option.name)
            found[option.key] = Given(value, flag or option.name)
    return found


def resolve_all(
    name: str,
    given: Mapping[str, Given],
    *,
    environ: Mapping[str, str] | None = None,
    project: ProjectConfig | None = None,
    use_project: bool = False,
) -> dict[str, Resolved]:
    """Every option of command `name`, resolved (`resolve`). `use_project`: fall back on `[tool.perfgate]` here;
    without it, an option the project also sets is left to the core's own reading of the project (the
    threshold's per-workload overrides, the paired check's pairs), exactly as before."""
    return {
        option.key: resolve(
            option, given.get(option.key), command=name, environ=environ, project=project if use_project else None
        )
        for option in options_of(name)
    }
