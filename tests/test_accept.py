"""Accepting a slowdown on purpose: `Perf-Accept` trailers, `perf-accept:` labels and `--accept`.

The verdicts are judged from entries built by hand (no trials); the trailers are read from real git
repositories under the test's folder; one paired check measures a planted slowdown for real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.action import gate_outcome
from perfgate.app.judging import judge
from perfgate.judge.acceptance import commit_acceptances, head_acceptances
from perfgate.judge.verdict import Status, compare_entries, fails_build
from perfgate.records.acceptance import Acceptance, AcceptanceError, parse_acceptance, parse_label, strongest
from perfgate.records.results import GateRecord
from perfgate.records.verdicts import GateResult, GateSettings
from perfgate.report.json import gate_to_dict
from perfgate.report.markdown import format_markdown
from tests.helpers.baselines import GATE_BASE, gate_entry
from tests.helpers.cli import run_in_process, run_main
from tests.helpers.git import commit, git, new_repository
from tests.helpers.results import results_document, validate_results
from tests.helpers.workloads import TINY_FILE, paced_source

SHA = "abc1234" + "0" * 33  # the commit a hand-made trailer came from
# Workload w's fp32 trials: samples/s 12% below GATE_BASE's 500 (13.6% more time per sample), the
# machine probe as fast as the baseline's.
SLOWER_12 = gate_entry([440, 442, 438], [1000, 1002, 998])
SLOWER_30 = gate_entry([350, 352, 349], [1000, 1002, 998])
TRAILER_FORM = "write the trailer as Perf-Accept: WORKLOAD/CONFIG PCT, e.g. Perf-Accept: lm-small/fp32 15%"


def accepting(*targets: str, origin: str = "trailer", source: str = SHA) -> GateSettings:
    return GateSettings(first_n=3, max_n=3, accepted=tuple(parse_acceptance(t, origin, source) for t in targets))


def judged(candidate, settings: GateSettings, *, base=GATE_BASE, paired: bool = False) -> GateResult:
    return GateResult([compare_entries(base, candidate, settings, paired=paired)], settings)


# --- Judging -------------------------------------------------------------------------------------------


def test_a_slowdown_within_the_accepted_bound_passes_as_accepted_and_says_where_it_was_accepted():
    result = judged(SLOWER_12, accepting("w/fp32 25%"))
    (verdict,) = result.verdicts
    assert verdict.status == Status.ACCEPTED and not fails_build(verdict.status)
    assert result.exit_code == 0
    assert verdict.reason.startswith("accepted: 0.880x, within the 25% accepted in commit abc1234 (the interval ")
    assert "; without it, samples/s -12.0% (0.880x" in verdict.reason  # the threshold's verdict, still shown
    assert ": a regression beyond the 5% threshold on time per sample" in verdict.reason
    assert verdict.throughput is not None and verdict.throughput.verdict == "regression"
    assert result.unused_acceptances == []


def test_a_slowdown_beyond_the_accepted_bound_still_fails():
    result = judged(SLOWER_30, accepting("w/fp32 15%"))
    (verdict,) = result.verdicts
    assert verdict.status == Status.REGRESSION and result.exit_code == 1
    assert verdict.reason.startswith(
        "slower than accepted, beyond the 15% accepted in commit abc1234: samples/s -29.9%"
    )
    assert verdict.accepted is not None and verdict.accepted.verdict == "regression"


def test_the_accepted_slowdown_is_on_time_per_sample_like_the_threshold():
    """14% fewer samples/s is 16% more time per sample: beyond an accepted 15%, within an accepted 20%."""
    candidate = gate_entry([430, 432, 428], [1000, 1002, 998])
    assert judged(candidate, accepting("w/fp32 15%")).verdicts[0].status == Status.REGRESSION
    assert judged(candidate, accepting("w/fp32 20%")).verdicts[0].status == Status.ACCEPTED


def test_a_slowdown_the_data_cannot_place_against_the_accepted_bound_stays_inconclusive():
    noisy = gate_entry([380, 470, 420], [1000, 1002, 998])  # about 16% slower, give or take 10%
    (verdict,) = judged(noisy, accepting("w/fp32 20%")).verdicts
    assert verdict.status == Status.INCONCLUSIVE
    assert verdict.reason.startswith("not yet shown within the 20% accepted in commit abc1234: samples/s -")
    assert "inconclusive, the interval straddles the 20% threshold on time per sample" in verdict.reason


def test_an_accepted_slowdown_does_not_accept_more_peak_memory():
    fatter = gate_entry([440, 442, 438], [1000, 1002, 998], peak_mib=80)
    (verdict,) = judged(fatter, accepting("w 25%")).verdicts
    assert verdict.status == Status.REGRESSION
    assert verdict.reason.startswith("accepted: 0.880x, within the 25% accepted in commit abc1234")
    assert verdict.reason.endswith("): a memory regression")


def test_a_paired_check_judges_its_pairs_against_the_accepted_bound():
    base = gate_entry([500, 505, 495, 502, 498])
    head = gate_entry([441, 444, 436, 443, 439])
    (verdict,) = judged(head, accepting("w/fp32 25%"), base=base, paired=True).verdicts
    assert verdict.status == Status.ACCEPTED
    assert verdict.throughput is not None and verdict.throughput.n_candidate == 5  # five pairs
    (beyond,) = judged(head, accepting("w/fp32 10%"), base=base, paired=True).verdicts
    assert beyond.status == Status.REGRESSION


def test_an_acceptance_applies_only_to_what_it_names_and_the_rest_is_reported_unused():
    result = judged(SLOWER_12, accepting("w/bf16 25%", "lm-small 25%", "*/fp32 3%"))
    (verdict,) = result.verdicts
    assert verdict.status == Status.REGRESSION and verdict.accepted is None  # 3% is below the 5% threshold
    assert verdict.reason.startswith("samples/s -12.0% (0.880x")
    assert result.unused_acceptances == [
        "w/bf16 25% accepted in commit abc1234 matches nothing this check measured (bf16 was not measured)",
        "lm-small 25% accepted in commit abc1234 matches nothing this check measured (no workload of that name)",
    ]


def test_the_most_specific_acceptance_applies_and_of_equals_the_largest():
    found = [parse_acceptance(text, "option", "--accept") for text in ("* 50%", "w 40%", "*/fp32 30%", "w/fp32 10%")]
    assert strongest(found, "w", "fp32") == found[3]
    assert strongest(found, "w", "bf16") == found[1]
    assert strongest(found, "v", "bf16") == found[0]
    assert strongest([*found, parse_acceptance("w/fp32 12%", "label", "perf-accept: w/fp32 12%")], "w", "fp32") == (
        Acceptance("w", "fp32", 0.12, "label", "perf-accept: w/fp32 12%")
    )
    (verdict,) = judged(SLOWER_12, accepting("* 50%", "w/fp32 10%")).verdicts
    assert verdict.status == Status.REGRESSION and "beyond the 10% accepted in commit abc1234" in verdict.reason


def test_the_reports_show_the_accepted_verdict_and_what_was_accepted():
    result = judged(SLOWER_12, accepting("w/fp32 25%", "w/bf16 25%", origin="label", source="perf-accept: w 25%"))
    markdown = format_markdown(judge(result, diagnosed=False))
    assert "| accepted |" in markdown
    assert "1 accepted (w fp32)." in markdown
    assert "Slowdowns accepted: w/fp32 25% by label 'perf-accept: w 25%'; w/bf16 25% by label" in markdown
    assert "**Warning**: w/bf16 25% accepted by label 'perf-accept: w 25%' matches nothing" in markdown
    document = gate_to_dict(judge(result, diagnosed=False))
    (config,) = document["workloads"][0]["configs"]
    assert config["status"] == "accepted" and config["throughput"]["verdict"] == "regression"
    assert {k: config["accepted"][k] for k in ("target", "slowdown", "origin", "verdict")} == {
        "target": "w/fp32",
        "slowdown": 0.25,
        "origin": "label",
        "verdict": "no change",
    }
    assert document["accepted"][0] == {
        "target": "w/fp32",
        "slowdown": 0.25,
        "origin": "label",
        "source": "perf-accept: w 25%",
    }
    assert document["exit_code"] == 0 and len(document["warnings"]) == 1


def test_the_results_file_keeps_what_was_accepted_and_where_so_a_report_judges_it_the_same():
    settings = accepting("lm-small/fp32 15%", "* 0.2")
    record = settings.to_record(Path("baselines")).to_dict()
    assert record["accepted"] == [
        {"target": "lm-small/fp32", "slowdown": 0.15, "origin": "trailer", "source": SHA},
        {"target": "*", "slowdown": 0.2, "origin": "trailer", "source": SHA},
    ]
    assert GateSettings.from_record(settings.project, GateRecord.from_dict(record)).accepted == settings.accepted
    validate_results({**results_document(), "gate": json.loads(json.dumps(record))})
    unreadable = GateRecord.from_dict({**record, "accepted": [{"target": "*", "slowdown": 0.2}]})
    with pytest.raises(AcceptanceError, match="unreadable accepted slowdown"):
        GateSettings.from_record(settings.project, unreadable)


# --- Reading trailers, labels and --accept ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "target", "slowdown"),
    [
        ("lm-small/fp32 15%", "lm-small/fp32", 0.15),
        ("  lm-small   0.15 ", "lm-small", 0.15),  # a workload alone: all its configs
        ("*/bf16-compile 10%", "*/bf16-compile", 0.10),
        ("* 20%", "*", 0.20),
    ],
)
def test_an_acceptance_names_a_target_and_a_percentage_parsed_like_the_threshold(text, target, slowdown):
    accepted = parse_acceptance(text, "trailer", SHA)
    assert (accepted.target, accepted.slowdown) == (target, pytest.approx(slowdown))
    assert accepted.describe() == f"the {100 * slowdown:g}% accepted in commit abc1234"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("lm-small/fp32", "expected a target and a percentage, got 'lm-small/fp32'"),
        ("", "it is empty"),
        ("lm-small/fp64 15%", "unknown config 'fp64' (one of fp32, bf16, bf16-compile, fp16)"),
        ("lm-small/fp32 15", "'15' is ambiguous: a fraction must be below 1"),
        ("lm-small/fp32 150%", "'150%' must be between 0% and 100%"),
        ("lm-small/fp32 fast", "'fast' is not a percentage"),
        ("lm small 15%", "expected a target and a percentage, got 'lm small 15%'"),
        ("/fp32 15%", "the target '/fp32' is not one of WORKLOAD/CONFIG, WORKLOAD, */CONFIG or *"),
        ("lm:small 15%", "'lm:small' is not a workload name: letters, digits, -, _ and . only"),
    ],
)
def test_a_malformed_trailer_is_a_one_line_error_naming_what_is_wrong_and_the_form(text, problem):
    with pytest.raises(AcceptanceError) as caught:
        parse_acceptance(text, "trailer", SHA)
    line = caught.value.one_line()
    assert (
        line
        == f"malformed Perf-Accept trailer {('Perf-Accept: ' + text.strip())!r}: {problem} (commit abc1234); "
        + (TRAILER_FORM)
    )


def test_a_label_says_the_same_as_a_trailer_and_a_malformed_one_is_named():
    label = parse_label("Perf-Accept: lm-small/fp32 15%")
    assert (label.target, label.slowdown, label.origin) == ("lm-small/fp32", 0.15, "label")
    assert label.describe() == "the 15% accepted by label 'Perf-Accept: lm-small/fp32 15%'"
    with pytest.raises(AcceptanceError) as caught:
        parse_label("perf-accept: lm-small/fp32")
    assert caught.value.one_line() == (
        "malformed perf-accept label 'perf-accept: lm-small/fp32': expected a target and a percentage, got "
        "'lm-small/fp32'; name the label perf-accept: WORKLOAD/CONFIG PCT, e.g. perf-accept: lm-small/fp32 15%"
    )
    with pytest.raises(AcceptanceError, match="does not start with 'perf-accept:'"):
        parse_label("perf-accept lm-small 15%")


def test_the_head_commits_trailers_are_read_as_git_reads_them(tmp_path):
    repo = new_repository(tmp_path / "repo")
    head = commit(
        repo,
        {},
        "A bigger model\n\nTwice the layers, on purpose.\n\n"
        "Perf-Accept: lm-small/fp32 15%\nSigned-off-by: CI <ci@example.com>\nperf-accept:  vision 10%",
        allow_empty=True,
    )
    accepted, warnings = head_acceptances(repo)
    assert [(a.target, a.slowdown, a.origin, a.source) for a in accepted] == [
        ("lm-small/fp32", 0.15, "trailer", head),
        ("vision", 0.10, "trailer", head),
    ]
    assert warnings == []


def test_a_trailer_on_an_older_commit_does_not_count(tmp_path):
    repo = new_repository(tmp_path / "repo")
    older = commit(repo, {}, "Slower on purpose\n\nPerf-Accept: lm-small/fp32 15%", allow_empty=True)
    commit(repo, {}, "The next change", allow_empty=True)
    assert head_acceptances(repo) == ([], [])
    (accepted,), _ = commit_acceptances(older, repo)  # only when that commit is named
    assert accepted.source == older


def test_accept_from_reads_the_pull_requests_head_under_a_merge_commit(tmp_path):
    """What actions/checkout checks out for a pull request: a merge commit, whose message has no trailers."""
    repo = new_repository(tmp_path / "repo")
    commit(repo, {}, "start", allow_empty=True)
    git(repo, "checkout", "-q", "-b", "feature")
    pull_head = commit(repo, {"a.txt": "a"}, "Costlier augmentation\n\nPerf-Accept: vision/bf16 12%", allow_empty=True)
    git(repo, "checkout", "-q", "main")
    commit(repo, {"b.txt": "b"}, "main moves on", allow_empty=True)
    git(repo, "merge", "-q", "--no-ff", "-m", f"Merge {pull_head} into main", "feature")
    assert head_acceptances(repo) == ([], [])
    (accepted,), _ = commit_acceptances(pull_head, repo)
    assert accepted.describe() == f"the 12% accepted in commit {pull_head[:7]}"


def test_a_perf_accept_line_outside_the_trailer_block_is_ignored_with_a_warning(tmp_path):
    repo = new_repository(tmp_path / "repo")
    head = commit(
        repo, {}, "Slower\n\nPerf-Accept: lm-small/fp32 15%\n\nand then a paragraph of prose, last", allow_empty=True
    )
    accepted, warnings = head_acceptances(repo)
    assert accepted == []
    assert warnings == [
        f"commit {head[:7]} has 1 Perf-Accept line(s) that git does not read as trailers, ignored: a trailer goes "
        "in the message's last paragraph, with nothing but trailers (e.g. 'Perf-Accept: lm-small/fp32 15%')"
    ]


def test_outside_git_or_before_the_first_commit_the_head_accepts_nothing(tmp_path):
    assert head_acceptances(tmp_path) == ([], [])
    assert head_acceptances(new_repository(tmp_path / "empty")) == ([], [])


@pytest.fixture
def tiny_repo(tmp_path, monkeypatch):
    repo = new_repository(tmp_path / "repo")
    commit(repo, {"tiny.py": TINY_FILE.read_text(encoding="utf-8")}, "start", allow_empty=True)
    monkeypatch.chdir(repo)
    return repo


@pytest.mark.parametrize(
    ("message", "options", "error"),
    [
        (
            "Slower\n\nPerf-Accept: tiny/fp64 15%",
            (),
            "error: malformed Perf-Accept trailer 'Perf-Accept: tiny/fp64 15%': unknown config 'fp64' (one of fp32, "
            f"bf16, bf16-compile, fp16) (commit {{sha}}); {TRAILER_FORM}",
        ),
        (
            "Slower",
            ("--accept-label", "perf-accept: tiny"),
            "error: argument --accept-label: malformed perf-accept label 'perf-accept: tiny': expected a target and "
            "a percentage, got 'tiny'; name the label perf-accept: WORKLOAD/CONFIG PCT, e.g. perf-accept: "
            "lm-small/fp32 15%; see 'perfgate check --help'",
        ),
        (
            "Slower",
            ("--accept", "tiny 15"),
            "error: argument --accept: malformed --accept value 'tiny 15': '15' is ambiguous: a fraction must be "
            "below 1; give --accept 'WORKLOAD/CONFIG PCT', e.g. --accept 'lm-small/fp32 15%'; see 'perfgate check "
            "--help'",
        ),
        (
            "Slower",
            ("--accept-from", "no-such-commit"),
            "error: unknown commit no-such-commit (--accept-from); fetch it first (git fetch --depth=1 origin "
            "no-such-commit); in GitHub Actions give actions/checkout fetch-depth: 0",
        ),
    ],
    ids=["trailer", "label", "option", "unknown-commit"],
)
def test_a_malformed_acceptance_stops_the_check_in_one_line_before_any_trial(
    tiny_repo, capsys, message, options, error
):
    sha = commit(tiny_repo, {}, message, allow_empty=True)
    result = run_main(capsys, "check", "tiny.py:tiny", "--configs", "fp32", "--against", "HEAD~1", *options)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [error.format(sha=sha[:7])]
    assert result.stdout == ""  # nothing measured, no worktree made
    assert git(tiny_repo, "worktree", "list").count("\n") == 0


# --- End to end: a planted slowdown, accepted in the head commit ------------------------------------------


@pytest.mark.e2e
def test_a_planted_slowdown_passes_as_accepted_with_a_trailer_in_the_head_commit(tmp_path, capsys, monkeypatch):
    """Every step of head waits 30 ms where base waits 20: 50% more time per sample, accepted up to 80%
    (samples/s 0.67x against a bound of 0.56x: a margin no runner's noise closes)."""
    repo = new_repository(tmp_path / "repo")
    commit(repo, {"paced.py": paced_source(0.02, samples=64, steps=4)}, "base", allow_empty=True)
    head = commit(
        repo,
        {"paced.py": paced_source(0.03, samples=64, steps=4)},
        "A slower step, on purpose\n\nPerf-Accept: paced/fp32 80%",
        allow_empty=True,
    )
    results, report = tmp_path / "results.json", tmp_path / "report.md"
    (tmp_path / "tmp").mkdir()
    # four pairs: fewer never call a regression, and `compare` below judges these pairs without the acceptance
    paired = ("--against", "HEAD~1", "--configs", "fp32", "--threads", "1", "--trials", "4", "--max-trials", "4")
    # Forked trials, one round of the four steps: the subject is the acceptance, not how a trial process starts
    # or how rounds are calibrated; sleeps of 20 and 30 ms keep the pairs' ratio within about 1% of 0.68x.
    paired += ("--fork-trials", "--rounds", "1")
    outputs = ("--time-budget", "120", "--quiet", "--json", str(results), "--markdown", str(report))
    checked = run_in_process(
        "check", "paced.py:paced", *paired, *outputs, cwd=repo, env={"TMPDIR": str(tmp_path / "tmp")}
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"slowdowns accepted: paced/fp32 80% in commit {head[:7]}" in checked.stdout
    (reason,) = [line for line in checked.stdout.splitlines() if line.startswith("  ! fp32: ")]
    assert reason.startswith("  ! fp32: accepted: 0.") and f"within the 80% accepted in commit {head[:7]}" in reason
    ratio = float(reason.removeprefix("  ! fp32: accepted: ").split("x,")[0])
    assert 1 / 1.8 < ratio < 1 / 1.05  # slower beyond the threshold (a step's own work adds to the 20 and 30 ms)
    assert checked.stdout.rstrip().endswith("perfgate check: 1 accepted (paced fp32). Exit 0 (pass).")
    markdown = report.read_text(encoding="utf-8")
    assert "| accepted |" in markdown and "### perfgate: pass" in markdown
    document = json.loads(results.read_text(encoding="utf-8"))
    validate_results(document)
    assert document["gate"]["accepted"] == [
        {"target": "paced/fp32", "slowdown": 0.8, "origin": "trailer", "source": head}
    ]

    # Saved, the run is judged again the same way: by perfgate report, and by the Action (a notice, no error).
    monkeypatch.chdir(repo)
    rendered = run_main(capsys, "report", str(results), "--format", "json")
    assert json.loads(rendered.stdout)["workloads"][0]["configs"][0]["status"] == "accepted"
    lines, code = gate_outcome("check", 0, results, tmp_path / "perfgate.log")
    assert code == 0 and [line.split("::")[1] for line in lines] == ["notice title=perfgate%3A paced fp32 accepted"]
    # compare judges with its own options: without the acceptance the slowdown fails, with --accept it passes.
    assert run_main(capsys, "compare", str(results)).returncode == 1
    accepted = run_main(capsys, "compare", str(results), "--accept", "paced 80%", "--format", "json")
    assert accepted.returncode == 0
    assert json.loads(accepted.stdout)["workloads"][0]["configs"][0]["status"] == "accepted"
    assert (
        "within the 80% accepted with --accept" in json.loads(accepted.stdout)["workloads"][0]["configs"][0]["reason"]
    )
