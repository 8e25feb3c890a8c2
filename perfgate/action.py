"""The GitHub Action's helpers (action.yml runs them; the work is done by perfgate's core).

`python -m perfgate.action MODE CODE RESULTS LOG [--no-baseline fail|warn] [--job-exit-code FILE] [-- ARGV]`
(also `python -m perfgate.annotations`, its earlier name) prints the workflow commands of one run:
`::error` for each regression, failure or missing baseline (a `::warning` for a missing baseline with
`--no-baseline warn`), `::warning` for each inconclusive verdict and each accepted slowdown that matches
nothing measured, a `::notice` for each slowdown accepted on purpose and after an update, and an
`::error` with the last line of the log when perfgate itself failed. Text from the run is escaped, so it
can never start a workflow command of its own. `--job-exit-code` writes the code the job ends with:
perfgate's, except that with `--no-baseline warn` a check whose only trouble is missing baselines passes.
`-- ARGV`: the arguments of a check against the stored baselines (`check WORKLOAD ... OPTIONS`): such a check
that found no baseline at all measured nothing, and its log line names this runner's fingerprint.
`--first-commit`: a recorded push of a repository's first commit, which has no parent to be measured
against: a workload without a stored baseline is recorded without a verdict, a notice says so, and the job
passes (unless something else failed). `--warn-only` (the action's `fail: false`, which also passes
`--warn-only` to the check): every verdict that would fail the job is a `::warning` instead, and the job
passes; a usage error still fails it. `--verdict-code FILE` writes the code the verdicts alone end the check
with (the `verdict` output's source: a warn-only check exits 0 whatever it found).

`python -m perfgate.action names JOB MATRIX_JSON WORKFLOW ATTEMPT [ID]` prints `leg=`, `artifact=` and
`marker=` lines for $GITHUB_OUTPUT: what keeps each job's (and matrix leg's) artifact and comment apart.

`python -m perfgate.action comment MARKER REPORT FOLDER [PR_NUMBER]` writes FOLDER/comment.md (the report
under its marker) and FOLDER/comment.json (the pull request and the marker), the pull-request comment
that the action posts, or that a `workflow_run` relay posts for a pull request from a fork.

`python -m perfgate.action accept-labels LABELS_JSON` prints, each ended by a NUL, an `--accept-label=NAME`
word for each `perf-accept:` label of the pull request (`toJSON(github.event.pull_request.labels)`).

`python -m perfgate.action summary LEGS FOLDER` (the action's `mode: summarize`, a job after a matrix of
legs): LEGS holds each leg's downloaded artifact (`perfgate-<leg>-<attempt>/`); it writes FOLDER/report.md, one
report with a table of every leg's verdict and each leg's own report folded beneath, and exits with the worst
leg's code (a leg with no exit code, one that never finished, is an error: 2).

`python -m perfgate.action comment-new POLICY RESULTS` prints whether the comment step may post a new
comment (`true`/`false`): with `comment: on-change`, only when some verdict is not "no change"; an
earlier comment of the same leg is updated whatever it prints, so it never goes stale.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.errors import EXIT_NO_BASELINE, EXIT_OK, EXIT_REGRESSION, EXIT_WORKLOAD_FAILED, PerfgateError

if TYPE_CHECKING:
    from perfgate.records.results import RunResult
    from perfgate.records.verdicts import GateResult

COMMENT_POLICIES = ("true", "false", "on-change")
ACCEPT_LABEL = re.compile(r"perf-accept(?![\w-])", re.IGNORECASE)  # perf-accept: ..., not perf-acceptance
MARKER_PREFIX = "<!-- perfgate-report "
CUT_NOTE = "\n\n_(cut: the whole report is in the job summary and the artifact)_\n"
# GitHub refuses comment bodies over report.markdown.COMMENT_LIMIT characters: what the cut body may keep, the
# rest being room for the marker and CUT_NOTE
COMMENT_ROOM = 536
RECORD_HINT = (
    "record baselines on a runner of this kind: run the perfgate action there with mode: update (as "
    "a perfgate-baselines.yml workflow does, proposing them in a pull request), or gate pull requests with "
    "against: merge-base, which measures the base beside the pull request and needs no stored baselines"
)


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, title: str, message: str) -> str:
    return f"::{kind} title={escape_property(title)}::{escape_data(message)}"


PASSED_WITHOUT_BASELINES = command("notice", "perfgate", "no baselines for this runner: passed (no-baseline: warn)")
FIRST_COMMIT = (
    "the first commit has no parent to measure against and no stored baseline for {what} on this runner ({runner}): "
    "recorded in the history without a verdict; the next push is measured against this commit"
)
# The check stopped before measuring anything: the workload, this machine's fingerprint, the baseline folder.
MISSING = re.compile(r"no baseline for (\S+) on this machine \((.*)\) in (\S+)/; ")


def gate_outcome(
    mode: str,
    code: int,
    results: Path,
    log: Path,
    no_baseline: str = "fail",
    perfgate_argv: list[str] | None = None,
    *,
    first_commit: bool = False,
    warn_only: bool = False,
) -> tuple[list[str], int]:
    """The workflow commands for one run of the action's gate step, and the code the job ends with.

    `perfgate_argv`: the arguments of a check against the stored baselines (None: a paired check, or not
    known); with them, a check that found no baseline for any workload, and so measured nothing and wrote
    no results, is reported with this runner's fingerprint (from its log line) and judged by the
    `no_baseline` policy. `first_commit`: the check recorded a first commit (`check --record`, nothing to
    measure it against): a missing baseline is a notice and passes. `warn_only`: the job's warn-only mode (a
    check's results file that says it ran warn-only is judged so too): what would fail the job is a warning, and
    the job passes (`outcome.warned_exit_code`)."""
    lines, code = _gate_outcome(mode, code, results, log, no_baseline, perfgate_argv, first_commit, warn_only)
    if warn_only or (mode == "check" and _saved_warn_only(results)):
        from perfgate.outcome import warned_exit_code

        lines = [_as_warning(line) for line in lines]
        code = warned_exit_code(code, warn_only=True)
    return lines, code


def _gate_outcome(
    mode: str,
    code: int,
    results: Path,
    log: Path,
    no_baseline: str,
    perfgate_argv: list[str] | None,
    first_commit: bool,
    warn_only: bool,
) -> tuple[list[str], int]:
    if mode == "update" and code == 0:
        return [command("notice", "perfgate", "baselines written: review and commit them")], code
    if mode == "summarize":  # the legs' own annotations are in their jobs; this one says what they add up to
        headline = next((line for line in _lines(log) if line.strip()), f"perfgate summarize exited {code}")
        return [command("error" if code else "notice", "perfgate: the matrix", headline.strip())], code
    lines: list[str] = []
    absent = [m.groups() for m in map(MISSING.search, _lines(log)) if m]
    stopped = code == EXIT_NO_BASELINE or (warn_only and code == EXIT_OK)  # warn-only: perfgate exited 0
    if mode == "check" and stopped and not results.is_file() and perfgate_argv and absent:
        warn = no_baseline == "warn"
        for workload, runner, directory in absent:
            lines.append(_no_baseline(workload, f"perfgate: {workload} no baseline", runner, directory, warn))
        if warn:
            lines.append(PASSED_WITHOUT_BASELINES)
        return lines, EXIT_OK if warn else code
    if (
        mode == "check"
        and code in (EXIT_OK, EXIT_REGRESSION, EXIT_NO_BASELINE, EXIT_WORKLOAD_FAILED)
        and results.is_file()
    ):
        from perfgate.outcome import Status, fails_build, job_exit_code
        from perfgate.records.fingerprint import fingerprint_key, machine_fingerprint

        try:
            run, judged = judge_results(results)
        except PerfgateError as error:
            return [command("error", "perfgate", error.one_line())], code
        runner = fingerprint_key(machine_fingerprint(run.environment))
        directory = str((run.gate.baseline_dir if run.gate else None) or "baselines")
        stored = run.against is None  # a paired check's base is measured beside it, never stored
        first = first_commit and stored
        warn = (no_baseline == "warn" or first) and stored
        statuses: list[Status] = []
        problems = False
        for workload in judged.workloads:
            if workload.problem and workload.problem_status == Status.NO_BASELINE and first:
                lines.append(command("notice", "perfgate", FIRST_COMMIT.format(what=workload.workload, runner=runner)))
            elif workload.problem and workload.problem_status == Status.NO_BASELINE and stored:
                title = f"perfgate: {workload.workload} no baseline"
                lines.append(_no_baseline(workload.workload, title, runner, directory, warn))
                problems = problems or not warn
            elif workload.problem and workload.new:  # new in the pull request: nothing to compare with yet
                lines.append(command("notice", f"perfgate: {workload.workload}", workload.problem))
            elif workload.problem:
                lines.append(command("error", f"perfgate: {workload.workload}", workload.problem))
                problems = True
            for v in workload.configs:
                title = f"perfgate: {v.workload} {v.config} {v.status.value}"
                if v.status == Status.NO_BASELINE and first:
                    what = f"{v.workload} {v.config}"
                    lines.append(command("notice", "perfgate", FIRST_COMMIT.format(what=what, runner=runner)))
                    continue
                if v.status == Status.NO_BASELINE and stored:
                    lines.append(_no_baseline(f"{v.workload} {v.config}", title, runner, directory, warn))
                    if not warn:
                        statuses.append(v.status)
                    continue
                kind = "error" if fails_build(v.status) else _KINDS.get(v.status, "")
                if kind:
                    lines.append(command(kind, title, v.reason))
                statuses.append(v.status)
        lines += [command("warning", "perfgate: accepted slowdown", text) for text in judged.unused_acceptances]
        job_code = job_exit_code(
            code,
            statuses,
            problems=problems,
            warn_no_baseline=warn,
            fail_on_inconclusive=judged.settings.fail_on_inconclusive,
        )
        if warn and code == EXIT_NO_BASELINE and job_code == EXIT_OK and not first:
            lines.append(PASSED_WITHOUT_BASELINES)
        return lines, job_code
    # any other code fails the job: a usage error (2), nothing to gate (5), interrupted (130), a failed update
    last = next((line for line in reversed(_lines(log)) if line.strip()), f"perfgate {mode} exited {code}")
    return [command("error", f"perfgate {mode} failed (exit {code})", last)], code


_KINDS = {"inconclusive": "warning", "accepted": "notice"}  # the annotation of each verdict that does not fail


def judge_results(results: Path) -> tuple[RunResult, GateResult]:
    """A check's results file and its verdicts, judged by the application layer as the check judged them
    (`app.judging.judge_file`, with the project's `[tool.perfgate]`); what the annotations and outputs read.
    Judged once a process while the file is unchanged: the gate step's annotations and its verdict code read the
    same judgement."""
    return _judged(results.resolve(), results.stat().st_mtime_ns if results.is_file() else None)


@functools.cache
def _judged(results: Path, modified_ns: int | None) -> tuple[RunResult, GateResult]:
    from perfgate.app.judging import judge_file
    from perfgate.project import load_project_config
    from perfgate.records.results import load_results

    run = load_results(results)
    return run, judge_file(run, load_project_config(), diagnosed=False).result


WARN_ONLY_NOTE = " (warn-only: not failing the job)"


def _as_warning(line: str) -> str:
    """An `::error` annotation of a verdict, in warn-only mode: a warning that says it does not fail the job. A
    failure of perfgate itself (`perfgate check failed (exit N)`, a usage error) stays an error."""
    if not line.startswith("::error ") or " failed (exit " in line.split("::", 2)[1]:
        return line
    return "::warning " + line.removeprefix("::error ") + escape_data(WARN_ONLY_NOTE)


def _saved_warn_only(results: Path) -> bool:
    """Whether a check's results file says it ran in warn-only mode (`gate.warn_only`)."""
    try:
        gate = json.loads(results.read_text(encoding="utf-8")).get("gate") or {}
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(gate, dict) and gate.get("warn_only") is True


def verdict_code(mode: str, code: int, results: Path, log: Path) -> int:
    """The code the verdicts alone end a check with: a warn-only check's results judged again without warn-only
    (its own exit code is 0), or 3 where it stopped for want of any baseline (its log says so); else perfgate's
    code."""
    if mode != "check" or code != EXIT_OK:
        return code
    if not results.is_file():
        return EXIT_NO_BASELINE if any(map(MISSING.search, _lines(log))) else code
    if not _saved_warn_only(results):
        return code
    try:
        return judge_results(results)[1].verdict_code
    except PerfgateError:
        return code


def accept_label_options(labels: str) -> list[str]:
    """`--accept-label=NAME` for each label of the pull request named `perf-accept...` (`labels`: the event's
    `pull_request.labels` as JSON; null outside a pull request). perfgate reads each name, and refuses a
    malformed one in one line; other labels are left alone."""
    try:
        found: Any = json.loads(labels) if labels.strip() else None
    except json.JSONDecodeError:
        found = None
    names = [label.get("name") for label in found if isinstance(label, dict)] if isinstance(found, list) else []
    return [f"--accept-label={name}" for name in names if isinstance(name, str) and ACCEPT_LABEL.match(name.strip())]


def has_news(results: Path) -> bool:
    """Whether a check's results have something to say: a verdict that is not "no change", a workload that
    could not be compared, an accepted slowdown that matched nothing (a file that cannot be read: yes)."""
    from perfgate.outcome import Status

    try:
        judged = judge_results(results)[1]
    except PerfgateError:
        return True
    return (
        any(v.status != Status.NO_CHANGE for v in judged.verdicts)
        or any(w.problem for w in judged.workloads)
        or bool(judged.unused_acceptances)
    )


def may_post_new_comment(policy: str, results: Path) -> bool:
    """Whether the comment step may create a comment: always with `comment: true`, with `on-change` only when
    the results have something to say (`has_news`). An earlier comment is updated either way."""
    if policy not in COMMENT_POLICIES:
        raise ValueError(f"comment must be one of {', '.join(COMMENT_POLICIES)}, got {policy!r}")
    return policy == "true" or (policy == "on-change" and (not results.is_file() or has_news(results)))


def _no_baseline(what: str, title: str, runner: str, directory: str, warn: bool) -> str:
    """The annotation for `what` (a workload, or a workload and config) with no baseline for this runner:
    a warning under `no-baseline: warn`, else an error; both say how to record baselines in CI."""
    verdict = "not failing the job (no-baseline: warn)" if warn else "failing the job (no-baseline: fail)"
    message = f"no baseline for {what} on this runner ({runner}) in {directory}/, {verdict}; {RECORD_HINT}"
    return command("warning" if warn else "error", title, message)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _slug(text: str) -> str:
    """Only the characters every artifact name, cache key and HTML comment accepts."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")


def leg_names(job: str, matrix: str, workflow: str, attempt: str, given: str = "") -> dict[str, str]:
    """What keeps one job's (and one matrix leg's) artifact and comment apart from every other's.

    `leg`: `given` (the action's `id` input) when set; else the job's id, and for a matrix job its
    values and a hash of `toJSON(matrix)`, so two legs never share it. The artifact name adds the run
    attempt (one name per workflow run); the comment's marker adds the workflow, so two workflows with a
    job of the same id keep their own comments, and every run of one leg finds its comment again.
    """
    leg = _slug(given)
    if not leg:
        leg = _slug(job) or "perfgate"
        try:
            values: Any = json.loads(matrix) if matrix.strip() else None
        except json.JSONDecodeError:
            values = matrix
        if values:
            canonical = json.dumps(values, sort_keys=True, separators=(",", ":"))
            shown = _slug("-".join(_flat(values)))[:60].strip("-.")
            digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
            leg = "-".join(part for part in (leg, shown, digest) if part)
    marker = f"{MARKER_PREFIX}{_slug(workflow) or 'workflow'}/{leg} -->"
    return {"leg": leg, "artifact": f"perfgate-{leg}-{_slug(attempt) or '1'}", "marker": marker}


def _flat(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for key in sorted(value) for text in _flat(value[key])]
    if isinstance(value, list):
        return [text for item in value for text in _flat(item)]
    return [str(value)]


def write_comment(marker: str, report: Path, folder: Path, pull_request: str = "") -> None:
    """FOLDER/comment.md, the report under the marker that finds the comment again, and comment.json."""
    from perfgate.report.markdown import COMMENT_LIMIT

    body = report.read_text(encoding="utf-8", errors="replace")
    if len(body) > COMMENT_LIMIT - COMMENT_ROOM:
        body = body[: COMMENT_LIMIT - COMMENT_ROOM] + CUT_NOTE
    (folder / "comment.md").write_text(f"{marker}\n{body}", encoding="utf-8")
    number = int(pull_request) if pull_request.isdigit() else None
    (folder / "comment.json").write_text(json.dumps({"pull_request": number, "marker": marker}) + "\n")


@dataclass(frozen=True)
class Leg:
    """One matrix leg's artifact, as `summarize` reads it: its name, the code its job ended with (None: the leg
    never wrote one), the code of its verdict and its report."""

    name: str
    job_code: int | None
    verdict_code: int | None
    report: str


def read_leg(folder: Path) -> Leg:
    """A leg's artifact folder (`perfgate-<leg>-<attempt>`)."""
    name = re.sub(r"-\d+$", "", folder.name.removeprefix("perfgate-")) or folder.name

    def code(file: str) -> int | None:
        text = next(iter(_lines(folder / file)), "").strip()
        return int(text) if text.isdigit() else None

    report = "\n".join(_lines(folder / "report.md")).strip()
    if not report:
        last = next((line for line in reversed(_lines(folder / "perfgate.log")) if line.strip()), "no log")
        report = f"_no report: the leg's perfgate wrote none; its log's last line:_ `{last.strip()}`"
    return Leg(name, code("job-exit-code"), code("verdict-code"), report)


def summarize(legs_folder: Path) -> tuple[str, int]:
    """One report for a matrix's legs (`read_leg` each subfolder of LEGS) and the code the summary job ends
    with: the worst leg's (`errors.worst_exit_code`), 2 where a leg has no exit code or no leg was found."""
    from perfgate.errors import EXIT_MEANINGS, EXIT_USAGE, worst_exit_code

    legs = [read_leg(folder) for folder in sorted(p for p in legs_folder.glob("perfgate-*") if p.is_dir())]
    if not legs:
        text = f"### perfgate: error\n\nno leg's artifact in {legs_folder}: run the legs with upload-artifacts: true\n"
        return text, EXIT_USAGE
    codes = [leg.job_code for leg in legs]
    found = [code for code in codes if code is not None]
    worst = EXIT_USAGE if len(found) < len(codes) else worst_exit_code(found) or max(found)  # 2, 5, 130 else
    failed = [leg.name for leg in legs if leg.job_code != EXIT_OK]
    head = f"### perfgate: {EXIT_MEANINGS.get(worst, 'error')}, {len(legs)} legs"
    head += f", {len(failed)} failed ({', '.join(failed)})" if failed else ", none failed"
    rows = ["| leg | verdict | job |", "| --- | --- | --- |"]
    folded = []
    for leg in legs:
        verdict = leg.verdict_code if leg.verdict_code is not None else leg.job_code
        said = "no exit code: the leg did not finish" if verdict is None else EXIT_MEANINGS.get(verdict, "error")
        job = "passed" if leg.job_code == EXIT_OK else f"failed (exit {leg.job_code})" if leg.job_code else "-"
        rows.append(f"| `{leg.name}` | {said} | {job} |")
        opened = " open" if leg.job_code != EXIT_OK else ""
        folded.append(f"<details{opened}><summary>{leg.name}</summary>\n\n{leg.report}\n\n</details>")
    return "\n\n".join([head, "\n".join(rows), *folded]) + "\n", worst


def main(argv: list[str]) -> int:
    if argv[:1] == ["names"]:
        job, matrix, workflow, attempt, *given = argv[1:]
        names = leg_names(job, matrix, workflow, attempt, *given[:1])
        print("\n".join(f"{key}={value}" for key, value in names.items()))
        return 0
    if argv[:1] == ["accept-labels"]:
        sys.stdout.write("".join(f"{word}\0" for word in accept_label_options(argv[1] if len(argv) > 1 else "")))
        return 0
    if argv[:1] == ["comment-new"]:
        policy, results = argv[1:3]
        print("true" if may_post_new_comment(policy, Path(results)) else "false")
        return 0
    if argv[:1] == ["summary"]:  # (`summarize MODE ...` is the gate step's outcome of that mode, below)
        legs, folder = argv[1:3]
        text, code = summarize(Path(legs))
        (Path(folder) / "report.md").write_text(text, encoding="utf-8")
        print(text.splitlines()[0].removeprefix("### "))  # the headline, for the log and the annotation
        return code
    if argv[:1] == ["comment"]:
        marker, report, folder, *number = argv[1:]
        write_comment(marker, Path(report), Path(folder), *number[:1])
        return 0
    argv, perfgate_argv = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, None)
    from perfgate.app.options import build_action_parser

    options = build_action_parser().parse_args(argv)
    lines, code = gate_outcome(
        options.mode,
        options.code,
        options.results,
        options.log,
        options.no_baseline,
        perfgate_argv,
        first_commit=options.first_commit,
        warn_only=options.warn_only,
    )
    print("\n".join(lines))
    if options.job_exit_code:
        options.job_exit_code.write_text(f"{code}\n")
    if options.verdict_code:
        options.verdict_code.write_text(f"{verdict_code(options.mode, options.code, options.results, options.log)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
