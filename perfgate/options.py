"""The options the CLI and the pytest plugin share, declared once and rendered for each.

Each `Option` holds a name, a help text and a parser; `add_to_argparse` renders it as `--NAME` for
`perfgate`, `add_to_pytest` as `--perfgate-NAME` with the ini key `perfgate_NAME` (the way
pytest-benchmark renders its options for a prefix); a `FrontEnd` gives each its spelling. A value
read from an option or an ini key goes through the same parser, so both get the same error message.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import PerfgateError
from perfgate.judge.acceptance import Acceptance, parse_acceptance, parse_label
from perfgate.judge.settings import DEFAULT_MAX_PAIRS, DEFAULT_MAX_TRIALS
from perfgate.judge.stats import DEFAULT_ALPHA
from perfgate.naming import FrontEnd
from perfgate.project import parse_count, parse_fraction
from perfgate.records.baselines import DEFAULT_BASELINE_DIR
from perfgate.variants import CONFIG_NAMES

Parse = Callable[[Any, str], Any]  # (value, where) -> parsed value; a PerfgateError when it is bad


@dataclass(frozen=True)
class Option:
    """One option: a `flag` takes no value; the others are parsed by `parse` (None: kept as text); a `repeat`
    option may be given more than once, each value kept (a list)."""

    name: str
    help: str  # `{default}`: the default of the command that renders it
    metavar: str | None = None
    parse: Parse | None = None
    flag: bool = False
    repeat: bool = False

    def help_for(self, **values: Any) -> str:
        return self.help.format(**values)


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


CONFIGS = Option("configs", f"comma-separated subset of {','.join(CONFIG_NAMES)} (default: all)", "LIST")
TRIALS = Option("trials", "trials per config, each in a fresh process (default: {default})", "N", parse_count)
MAX_TRIALS = Option(
    "max-trials",
    "add trials (in a paired check, pairs) to inconclusive configs up to N per config "
    f"(default: {DEFAULT_MAX_TRIALS} trials, {DEFAULT_MAX_PAIRS} pairs)",
    "N",
    parse_count,
)
THREADS = Option(
    "threads",
    "torch threads per trial (default: torch's own, as your training gets them; --threads 1 gives quieter trials "
    "but leaves a DataLoader's workers cores that your training would not)",
    "N",
    parse_count,
)
ROUNDS = Option(
    "rounds",
    "timed rounds over the pinned slice in each trial process: auto (default): a paired check calibrates them "
    "from its first pair so about 65% of the runner's time goes to timed steps, other runs time the slice once",
    "N|auto",
    _rounds,
)
NPROC = Option(
    "nproc",
    "run each trial as an N-rank data-parallel job under torchrun: DistributedDataParallel, gloo on the CPU, "
    "NCCL on CUDA with one device per rank (default: [tool.perfgate] nproc, else 1; a Workload's nproc wins)",
    "N",
    parse_count,
)
BASELINE_DIR = Option(
    "baseline-dir", f"where the baseline YAML files live (default: {DEFAULT_BASELINE_DIR}/)", "DIR", _path
)
THRESHOLD = Option(
    "threshold",
    "regression threshold on time per sample, e.g. 5%: 5% more time per sample, samples/s 4.8% lower "
    "(default: [tool.perfgate] threshold, else 5%)",
    "PCT",
    parse_fraction,
)
ALPHA = Option(
    "alpha",
    f"significance level per config, one-sided, over all its looks (default: {DEFAULT_ALPHA:g})",
    "P",
    parse_fraction,
)
# The file outputs: `--json PATH`, `--markdown PATH`, `--html DIR`, `--png PATH`, each the same name wherever
# it applies; `--format` only chooses what a command prints on standard output.
JSON = Option("json", "write the results (schema_version 2) to PATH", "PATH", _path)
JSON_REPORT = Option("json", "also write the report as JSON (what --format json prints) to PATH", "PATH", _path)
JSON_EXPORT = Option("json", "also write the exported JSON document to PATH", "PATH", _path)
MARKDOWN = Option(
    "markdown",
    "also write the report as Markdown to PATH (for a job summary or a pull-request comment)",
    "PATH",
    _path,
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
AGAINST = Option(
    "against",
    "measure the working tree against this git ref (branch, tag, commit) in pairs, side by side, "
    "instead of comparing with stored baselines",
    "REF",
)
ACCEPT = Option(
    "accept",
    "accept a slowdown on purpose: 'WORKLOAD/CONFIG PCT' (WORKLOAD alone: all its configs; * for every workload), "
    "e.g. 'lm-small/fp32 15%': within it the config passes as accepted, beyond it still fails (repeatable)",
    "'TARGET PCT'",
    _acceptance,
    repeat=True,
)
ACCEPT_LABEL = Option(
    "accept-label",
    "the same from a pull-request label named 'perf-accept: TARGET PCT' (the Action passes them; repeatable)",
    "LABEL",
    _label,
    repeat=True,
)
ACCEPT_FROM = Option(
    "accept-from",
    "read the Perf-Accept: TARGET PCT trailers of this commit's message (a pull request's head commit) "
    "(default: {head})",
    "COMMIT",
)
FAIL_ON_INCONCLUSIVE = Option("fail-on-inconclusive", "fail the build when a verdict stays inconclusive", flag=True)
COUNTS_ONLY = Option(
    "counts-only",
    "judge by the exact counts alone (FLOPs, operators, graph breaks, parameters, allocated peak): one untimed "
    "counting trial per config and side, no statistics; a CPU runner can gate a model that trains on GPUs",
    flag=True,
)
ALLOW_DIRTY = Option(
    "allow-dirty",
    "write baselines even with uncommitted changes to tracked files (they must match a commit)",
    flag=True,
)


def add_to_argparse(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    option: Option,
    front_end: FrontEnd,
    *,
    default: Any = None,
    **help_values: Any,
) -> None:
    """`option` as `--NAME`; `help_values` fill the help text's placeholders (`default`: the default's)."""
    text = option.help_for(**{"default": default, **help_values}).replace("%", "%%")
    if option.flag:
        parser.add_argument(front_end.option(option.name), action="store_true", help=text)
        return
    kwargs: dict[str, Any] = {"default": default, "metavar": option.metavar, "help": text}
    if option.repeat:
        kwargs.update(action="append", default=list(default or []))
    if option.parse is not None:
        kwargs["type"] = argparse_type(option.parse, front_end.option(option.name))
    parser.add_argument(front_end.option(option.name), **kwargs)


def add_to_pytest(group: Any, parser: Any, option: Option, front_end: FrontEnd, **help_values: Any) -> None:
    """`option` as `--perfgate-NAME` with the ini key `perfgate_NAME`; the plugin parses the values itself,
    so an ini value and an option share one parser (`Option.parse`) and one error message."""
    text = option.help_for(**help_values)
    key = ini_key(option)
    if option.flag:
        group.addoption(front_end.option(option.name), dest=key, action="store_true", default=None, help=text)
        parser.addini(key, f"perfgate: {text}", type="bool", default=False)
        return
    group.addoption(
        front_end.option(option.name), dest=key, default=None, metavar=option.metavar, help=text.replace("%", "%%")
    )
    parser.addini(key, f"perfgate: {text}", default=None)


def ini_key(option: Option) -> str:
    return f"perfgate_{option.name.replace('-', '_')}"
