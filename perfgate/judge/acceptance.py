"""Accepting a slowdown on purpose: `Perf-Accept` trailers, `perf-accept:` labels and `--accept`.

A pull request that is slower on purpose (a bigger model, a costlier augmentation) says so, reviewed
with the code, in its head commit's message:

    Perf-Accept: lm-small/fp32 15%

One trailer per target, as many as needed. The target is `WORKLOAD/CONFIG`, `WORKLOAD` (all its
configs), `*/CONFIG` (that config of every workload) or `*` (everything); the percentage is on time per
sample, parsed like the threshold (`15%` or `0.15`). Where several cover a config, the most specific
wins (as in `[tool.perfgate.thresholds]`), and of equally specific ones the largest. Only the commit
named (the head) counts: its message's trailers are read the way git reads them (the last paragraph,
`git interpret-trailers --parse`), nothing of an older commit, so nothing carries over to a later pull
request. A `perf-accept: TARGET PCT` pull-request label (`--accept-label`, read by the Action) and
`--accept "TARGET PCT"` say the same. `judge.verdict` judges an accepted config against the larger of
the threshold and the accepted slowdown, and names where the acceptance came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import PerfgateError, UsageError
from perfgate.gitrepo import find_repository
from perfgate.naming import CLI, MAX_NAME_CHARS, WORKLOAD_NAME, FrontEnd
from perfgate.project import parse_fraction
from perfgate.variants import CONFIG_NAMES

TRAILER = "Perf-Accept"
LABEL_PREFIX = "perf-accept:"
EXAMPLE = "lm-small/fp32 15%"
ORIGINS = ("trailer", "label", "option")


def forms(front_end: FrontEnd = CLI) -> dict[str, str]:
    """How to write an acceptance, by origin (the option as `front_end` spells it)."""
    accept = front_end.option("accept")
    return {
        "trailer": f"write the trailer as {TRAILER}: WORKLOAD/CONFIG PCT, e.g. {TRAILER}: {EXAMPLE}",
        "label": f"name the label {LABEL_PREFIX} WORKLOAD/CONFIG PCT, e.g. {LABEL_PREFIX} {EXAMPLE}",
        "option": f"give {accept} 'WORKLOAD/CONFIG PCT', e.g. {accept} '{EXAMPLE}'",
    }


FORMS = forms()
ACCEPT_FROM = CLI.option("accept-from")  # the option naming the commit whose trailers count, by default
TRAILER_LINE = re.compile(rf"{TRAILER}\s*:", re.IGNORECASE)  # what a trailer line would start with
TARGET_FORMS = "WORKLOAD/CONFIG, WORKLOAD, */CONFIG or *"


class AcceptanceError(UsageError):
    """A `Perf-Accept` trailer, a `perf-accept:` label or an `--accept` value that cannot be read."""


@dataclass(frozen=True)
class Acceptance:
    """A slowdown accepted on purpose: up to `slowdown` more time per sample for `workload` (`*`: every
    workload) and `config` (None: every config), from a commit's trailer, a label or the option."""

    workload: str
    config: str | None
    slowdown: float  # a fraction of time per sample, like the threshold
    origin: str  # "trailer", "label" or "option"
    source: str  # the commit (its full id), the label's name, or the option

    @property
    def target(self) -> str:
        return self.workload if self.config is None else f"{self.workload}/{self.config}"

    @property
    def specificity(self) -> int:
        """How specific the target is: WORKLOAD/CONFIG 3, */CONFIG 2, WORKLOAD 1, * 0 (as thresholds rank)."""
        if self.config is None:
            return 0 if self.workload == "*" else 1
        return 2 if self.workload == "*" else 3

    def covers(self, workload: str, config: str) -> bool:
        return self.workload in ("*", workload) and self.config in (None, config)

    def names(self, workload: str) -> bool:
        """Whether the target names this workload (or every workload)."""
        return self.workload in ("*", workload)

    @property
    def where(self) -> str:
        """Where it was accepted, after "accepted": `in commit abc1234`, `by label 'perf-accept: ...'`."""
        if self.origin == "trailer":
            return f"in commit {self.source[:7]}"
        if self.origin == "label":
            return f"by label '{self.source}'"
        return f"with {self.source}"

    def describe(self) -> str:
        """`the 15% accepted in commit abc1234`."""
        return f"the {100 * self.slowdown:g}% accepted {self.where}"

    @property
    def shown(self) -> str:
        """`lm-small/fp32 15% in commit abc1234`, for the reports' list of what was accepted."""
        return f"{self.target} {100 * self.slowdown:g}% {self.where}"

    def to_record(self) -> dict[str, Any]:
        return {"target": self.target, "slowdown": self.slowdown, "origin": self.origin, "source": self.source}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str = "results file") -> Acceptance:
        """An acceptance as `to_record` wrote it; anything else is a one-line error."""
        if not isinstance(record, Mapping) or set(record) != {"target", "slowdown", "origin", "source"}:
            raise AcceptanceError(f"unreadable accepted slowdown {record!r}", where=where)
        origin, source = record["origin"], record["source"]
        if origin not in ORIGINS or not isinstance(source, str) or isinstance(record["slowdown"], bool):
            raise AcceptanceError(f"unreadable accepted slowdown {record!r}", where=where)
        return parse_acceptance(f"{record['target']} {record['slowdown']}", origin, source)


def parse_acceptance(text: str, origin: str, source: str, front_end: FrontEnd = CLI) -> Acceptance:
    """`TARGET PCT` (a trailer's value, a label's name after `perf-accept:`, an `--accept` value) as an
    Acceptance; anything else is a one-line error naming what was wrong and the expected form."""
    words = text.split()
    if len(words) != 2:
        problem = "it is empty" if not words else f"expected a target and a percentage, got {' '.join(words)!r}"
        raise _malformed(text, origin, source, problem, front_end)
    target, percent = words
    workload, slash, config = target.partition("/")
    if not workload or (slash and not config):
        raise _malformed(text, origin, source, f"the target {target!r} is not one of {TARGET_FORMS}", front_end)
    if len(workload) > MAX_NAME_CHARS:
        problem = f"{workload[:40]!r}... is not a workload name: at most {MAX_NAME_CHARS} characters"
        raise _malformed(text, origin, source, problem, front_end)
    if workload != "*" and not WORKLOAD_NAME.fullmatch(workload):  # the results schema's own rule
        problem = f"{workload!r} is not a workload name: letters, digits, -, _ and . only"
        raise _malformed(text, origin, source, problem, front_end)
    if slash and config not in CONFIG_NAMES:
        problem = f"unknown config {config!r} (one of {', '.join(CONFIG_NAMES)})"
        raise _malformed(text, origin, source, problem, front_end)
    try:
        slowdown = parse_fraction(percent, "")
    except PerfgateError as error:
        raise _malformed(text, origin, source, error.what, front_end) from None
    return Acceptance(workload, config or None, slowdown, origin, source)


def parse_label(name: str) -> Acceptance:
    """A pull-request label `perf-accept: TARGET PCT` (the prefix in any case)."""
    if not name.strip().lower().startswith(LABEL_PREFIX):
        raise _malformed(name, "label", name, f"it does not start with {LABEL_PREFIX!r}")
    return parse_acceptance(name.strip()[len(LABEL_PREFIX) :], "label", name)


def _malformed(text: str, origin: str, source: str, problem: str, front_end: FrontEnd = CLI) -> AcceptanceError:
    shown = {
        "trailer": f"{TRAILER} trailer {_quoted(f'{TRAILER}: {text.strip()}')}",
        "label": f"perf-accept label {_quoted(source)}",
        "option": f"{front_end.option('accept')} value {_quoted(text)}",
    }[origin]
    where = f"commit {source[:7]}" if origin == "trailer" else None
    return AcceptanceError(f"malformed {shown}: {problem}", where=where, hint=forms(front_end)[origin])


def _quoted(text: str, limit: int = 120) -> str:
    """`text` quoted as the message shows it, cut short when long (a 5,000-character label)."""
    return repr(text) if len(text) <= limit else f"{text[: limit // 2]!r}... ({len(text)} characters)"


def strongest(acceptances: Iterable[Acceptance], workload: str, config: str) -> Acceptance | None:
    """The acceptance that applies to one config: the most specific target, then the largest slowdown."""
    covering = [a for a in acceptances if a.covers(workload, config)]
    return max(covering, key=lambda a: (a.specificity, a.slowdown), default=None)


def commit_acceptances(commit: str, directory: Path, where: str = ACCEPT_FROM) -> tuple[list[Acceptance], list[str]]:
    """The `Perf-Accept` trailers of `commit`'s message, and a warning for each `Perf-Accept` line that git
    does not read as a trailer (not in the message's last paragraph, so ignored).

    A commit that is not in the repository, or a folder outside git, is a one-line error."""
    repo = find_repository(directory)
    if repo is None:
        raise AcceptanceError(
            f"{directory} is not inside a git repository", where=where, hint="run perfgate in your project's checkout"
        )
    if not commit.strip() or commit.startswith("-"):
        raise AcceptanceError(f"{commit!r} is not a commit", where=where, hint="give a commit id, e.g. HEAD")
    sha = repo.commit_of(commit)
    if not sha:
        raise AcceptanceError(
            f"unknown commit {commit}",
            where=where,
            hint=f"fetch it first (git fetch --depth=1 origin {commit}); in GitHub Actions give actions/checkout "
            "fetch-depth: 0",
        )
    message = repo.commit_message(sha)
    acceptances = [
        parse_acceptance(value, "trailer", sha)
        for key, value in repo.trailers(message)
        if key.lower() == TRAILER.lower()
    ]
    return acceptances, _stray_lines(message, len(acceptances), sha)


def head_acceptances(directory: Path) -> tuple[list[Acceptance], list[str]]:
    """The trailers of HEAD, the commit the working tree is on; none outside git or before the first commit."""
    repo = find_repository(directory)
    if repo is None or repo.head_commit() is None:
        return [], []
    return commit_acceptances("HEAD", directory, where="HEAD")


def _stray_lines(message: str, trailers: int, sha: str) -> list[str]:
    """Warnings for the `Perf-Accept:` lines beyond those git read as trailers."""
    lines = [line.strip() for line in message.splitlines()[1:] if TRAILER_LINE.match(line.strip())]
    if len(lines) <= trailers:
        return []
    return [
        f"commit {sha[:7]} has {len(lines) - trailers} {TRAILER} line(s) that git does not read as trailers, "
        f"ignored: a trailer goes in the message's last paragraph, with nothing but trailers (e.g. {lines[0]!r})"
    ]


def unused(acceptances: Sequence[Acceptance], measured: Mapping[str, Iterable[str]]) -> list[str]:
    """A warning for each acceptance whose target the check did not measure (`measured`: each workload the
    check knows of, with the configs it judged; none for a workload it could not compare)."""
    lines = []
    for a in acceptances:
        named = {w: set(configs) for w, configs in measured.items() if a.names(w)}
        if not named:
            problem = "no workload of that name" if a.workload != "*" else "no workload"
        elif a.config is not None and all(configs and a.config not in configs for configs in named.values()):
            problem = f"{a.config} was not measured"
        else:
            continue
        lines.append(
            f"{a.target} {100 * a.slowdown:g}% accepted {a.where} matches nothing this check measured ({problem})"
        )
    return lines
