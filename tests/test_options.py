"""Every option declared once (`perfgate.app.options`): one order of precedence (the command line, then
PERFGATE_<NAME>, then [tool.perfgate], then the default), errors that name their source, and the Action's
inputs and the reference's tables held to the declarations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from perfgate.app import options
from perfgate.app.options import (
    COMMANDS,
    PLUGIN_OPTIONS,
    PYTEST_OPTIONS,
    Given,
    Option,
    build_parser,
    env_key,
    given_from_namespace,
    ini_key,
    resolve,
    resolve_all,
)
from perfgate.app.request import HistoryRequest, _pairing, gate_settings, plugin_request, series_request
from perfgate.errors import UsageError
from perfgate.measure.lab import Pairing
from perfgate.naming import PYTEST
from perfgate.project import ProjectConfig
from perfgate.records.history import DEFAULT_HISTORY_DIR
from perfgate.records.verdicts import DEFAULT_MAX_PAIRS, DEFAULT_MAX_TRIALS
from perfgate.variants import DEFAULT_CONFIGS
from tests.helpers.cli import run_cli

ROOT = Path(__file__).parent.parent
REFERENCE = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
ALL = [value for value in vars(options).values() if isinstance(value, Option)]
# action.yml inputs that are the Action's own, not a perfgate option it passes on
ACTION_OWN = {
    "args",
    "mode",
    "trend",
    "comment",
    "upload-artifacts",
    "github-token",
    "id",
    "working-directory",
    "torch-index-url",
    "cache",
}


def values(argv: list[str], environ: dict[str, str]) -> dict[str, object]:
    """What the CLI resolves for `perfgate ARGV` under `environ` (the command's options by key)."""
    args = build_parser().parse_args(argv)
    resolved = resolve_all(args.command, given_from_namespace(args, args.command), environ=environ)
    return {key: r.value for key, r in resolved.items()}


# -- precedence ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "given", "env", "project", "default"),
    [
        (options.THRESHOLD, 0.07, ("6%", 0.06), ProjectConfig(threshold=0.08), None),
        (options.MAX_TRIALS, 9, ("11", 11), ProjectConfig(max_trials=12), None),
        (options.NPROC, 2, ("3", 3), ProjectConfig(nproc=4), None),
    ],
)
def test_an_option_wins_over_the_environment_which_wins_over_the_project_then_the_default(
    option, given, env, project, default
):
    name = env_key(option)
    environ = {name: env[0]}
    assert resolve(option, Given(given, f"--{option.name}"), environ=environ, project=project).value == given
    from_env = resolve(option, None, environ=environ, project=project)
    assert (from_env.value, from_env.where, from_env.source) == (env[1], name, "env")
    from_project = resolve(option, None, environ={}, project=project)
    assert from_project.source == "project" and from_project.value == getattr(project, option.project_key)
    assert "[tool.perfgate]" in from_project.where
    assert resolve(option, None, environ={}, project=ProjectConfig()).value == default


def test_configs_and_trials_resolve_the_same_way_through_the_parser():
    assert values(["check", "--configs", "fp32"], {"PERFGATE_CONFIGS": "bf16"})["configs"] == "fp32"
    assert values(["check"], {"PERFGATE_CONFIGS": "bf16"})["configs"] == "bf16"
    assert values(["check"], {})["configs"] == ",".join(DEFAULT_CONFIGS)
    assert values(["calibrate"], {})["configs"] == "fp32"  # a first answer in minutes
    assert values(["check", "--trials", "2"], {"PERFGATE_TRIALS": "4"})["trials"] == 2
    assert values(["check"], {"PERFGATE_TRIALS": "4"})["trials"] == 4
    assert values(["check"], {})["trials"] == 3 and values(["update"], {})["trials"] == 5
    assert values(["check"], {"PERFGATE_QUIET": "1"})["quiet"] is True


def test_a_bad_value_names_its_source():
    with pytest.raises(UsageError) as error:
        resolve(options.THRESHOLD, None, environ={"PERFGATE_THRESHOLD": "150%"})
    assert error.value.where == "PERFGATE_THRESHOLD" and "must be between 0% and 100%" in error.value.what
    with pytest.raises(UsageError) as error:
        resolve(options.QUIET, None, environ={"PERFGATE_QUIET": "maybe"})
    assert error.value.where == "PERFGATE_QUIET"


@pytest.mark.e2e
def test_the_environment_reaches_a_real_perfgate_process_and_the_command_line_still_wins(tmp_path):
    bad = run_cli("history", cwd=tmp_path, env={"PERFGATE_LIMIT": "0"})
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.startswith("error: must be at least 1, got 0 (PERFGATE_LIMIT); ")
    overridden = run_cli("history", "--limit", "3", cwd=tmp_path, env={"PERFGATE_LIMIT": "0"})
    assert overridden.returncode == 3 and "no recorded run" in overridden.stderr  # the option won


def test_the_recorded_threshold_is_only_one_given_and_paired_means_more_pairs():
    project = ProjectConfig(threshold=0.08, max_trials=12)
    stored = gate_settings({}, project, trials=3, paired=False)
    assert stored.threshold is None and stored.max_n == 12  # the project's threshold applies, unrecorded
    assert gate_settings({"threshold": 0.07}, project, trials=3, paired=False).threshold == 0.07
    assert gate_settings({}, ProjectConfig(), trials=3, paired=False).max_n == DEFAULT_MAX_TRIALS
    assert gate_settings({}, project, trials=3, paired=True).max_n == DEFAULT_MAX_PAIRS
    assert gate_settings({"max_trials": 6}, project, trials=3, paired=True).max_n == 6
    assert gate_settings({}, project, trials=1, paired=False, single_look=True).max_n == 1


# -- the paired check's environment (--environment, --perfgate-environment, the Action's environment) ----------


class PytestConfig:
    """What `resolve_pytest` reads of a pytest config: the options given (by ini key) and the ini file's keys."""

    def __init__(self, given: dict[str, object] | None = None, ini: dict[str, str] | None = None) -> None:
        self.given = given or {}
        self.ini = ini or {}

    def getoption(self, key: str) -> object:
        return self.given.get(key)

    def getini(self, key: str) -> object:
        return self.ini.get(key)


def test_the_history_request_carries_the_threshold_and_alpha_its_trends_are_found_at(tmp_path):
    """`perfgate history`'s request resolves them once: as given, else the gate's global threshold and the project's
    alpha, else the defaults (5%, 0.01)."""
    plain = series_request({"limit": 10}, ProjectConfig(base_dir=tmp_path))
    assert (plain.limit, plain.html, plain.threshold, plain.alpha) == (10, None, 0.05, 0.01)
    project = ProjectConfig(base_dir=tmp_path, threshold=0.1, alpha=0.05)
    assert (series_request({"limit": 3}, project).threshold, series_request({"limit": 3}, project).alpha) == (0.1, 0.05)
    given = series_request({"limit": 3, "threshold": 0.2, "alpha": 0.02, "html": tmp_path}, project)
    assert (given.threshold, given.alpha, given.html) == (0.2, 0.02, tmp_path)
    assert given.history == HistoryRequest(DEFAULT_HISTORY_DIR)


def test_environment_is_a_check_option_from_the_command_line_or_the_environment_else_auto():
    assert values(["check", "--environment", "per-side"], {})["environment"] == "per-side"
    assert values(["check", "--environment", "shared"], {"PERFGATE_ENVIRONMENT": "per-side"})["environment"] == "shared"
    assert values(["check"], {"PERFGATE_ENVIRONMENT": "per-side"})["environment"] == "per-side"
    assert values(["check"], {})["environment"] is None  # not given: no --against needed for it
    assert _pairing({}).environment == "auto" and Pairing().environment == "auto"
    assert _pairing(values(["check", "--environment", "per-side"], {})).environment == "per-side"
    for command in ("run", "update", "calibrate", "bisect", "compare"):
        assert "environment" not in {option.key for option in options.options_of(command)}, command
    assert options.ENVIRONMENT in PLUGIN_OPTIONS and options.ENVIRONMENT.action_input == "environment"


def test_a_bad_environment_is_a_usage_error_naming_the_option_and_the_choices():
    with pytest.raises(UsageError) as error:
        build_parser().parse_args(["check", "--environment", "sideways"])
    line = error.value.one_line()
    assert line.startswith("argument --environment: invalid choice: 'sideways'"), line
    assert all(choice in line for choice in ("auto", "shared", "per-side")) and "perfgate check --help" in line
    with pytest.raises(UsageError) as error:
        resolve(options.ENVIRONMENT, None, environ={"PERFGATE_ENVIRONMENT": "sideways"})
    choices = "choose from auto, shared, per-side"
    assert error.value.one_line() == f"invalid choice 'sideways' (PERFGATE_ENVIRONMENT); {choices}"


@pytest.mark.parametrize("mode", ["auto", "shared", "per-side"])
def test_environment_given_without_against_is_a_usage_error_naming_where_it_came_from(mode):
    with pytest.raises(UsageError) as error:
        _pairing({"environment": mode}, unpaired=True)
    assert error.value.one_line() == "--environment needs --against; add --against REF, e.g. --against main"
    where = {"environment": "ini perfgate_environment"}
    with pytest.raises(UsageError) as error:
        _pairing({"environment": mode}, unpaired=True, front_end=PYTEST, where=where)
    assert error.value.one_line() == (
        "ini perfgate_environment needs --perfgate-against; add --perfgate-against REF, e.g. --perfgate-against main"
    )
    assert _pairing({"environment": None}, unpaired=True) == Pairing()  # not given: nothing to refuse


def test_the_plugin_reads_its_environment_from_the_option_else_the_ini_key():
    given = PytestConfig({"perfgate_environment": "per-side"}, {"perfgate_environment": "shared"})
    resolved = options.resolve_pytest(given, command="check", environ={})["environment"]
    assert (resolved.value, resolved.where, resolved.source) == ("per-side", "--perfgate-environment", "option")
    ini = PytestConfig(ini={"perfgate_environment": "'shared'"})  # pytest.ini keeps the quotes
    resolved = options.resolve_pytest(ini, command="check", environ={})["environment"]
    assert (resolved.value, resolved.where) == ("shared", "ini perfgate_environment")
    assert options.resolve_pytest(PytestConfig(), command="check", environ={})["environment"].value is None
    for config, where in [
        (PytestConfig({"perfgate_environment": "sideways"}), "--perfgate-environment"),
        (PytestConfig(ini={"perfgate_environment": "sideways"}), "ini perfgate_environment"),
    ]:
        with pytest.raises(UsageError) as error:
            options.resolve_pytest(config, command="check", environ={})
        assert error.value.one_line() == f"invalid choice 'sideways' ({where}); choose from auto, shared, per-side"


def test_the_plugins_environment_without_against_stops_a_check_not_a_session_without_perfgate(tmp_path):
    ini = PytestConfig(ini={"perfgate_environment": "per-side"})
    resolved = options.resolve_pytest(ini, command="check", environ={})
    with pytest.raises(UsageError) as error:
        plugin_request(resolved, mode="check", rootpath=tmp_path)
    assert error.value.one_line() == (
        "ini perfgate_environment needs --perfgate-against; add --perfgate-against REF, e.g. --perfgate-against main"
    )
    assert plugin_request(resolved, mode="off", rootpath=tmp_path).pairing == Pairing()


# -- the Action and the reference, held to the declarations ---------------------------------------------------


def test_every_action_input_that_passes_an_option_is_declared_and_vice_versa():
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    text = (ROOT / "action.yml").read_text(encoding="utf-8")
    passing = set(action["inputs"]) - ACTION_OWN
    declared = {option.action_input: option for option in ALL if option.action_input}
    assert passing == set(declared)
    for option in declared.values():  # and the Action does pass it, by that flag
        assert f"--{option.name}" in text, option.name


def _section(heading: str) -> str:
    start = REFERENCE.index(f"\n## {heading}\n")
    end = REFERENCE.find("\n## ", start + 1)
    return REFERENCE[start : end if end > 0 else None]


def test_the_reference_lists_exactly_the_declared_options_with_their_commands():
    rows = [line for line in _section("Every option").splitlines() if line.startswith("| `--")]
    listed: dict[str, set[str]] = {}
    for row in rows:
        first, commands = (cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip("|"))[:2])
        for name in re.findall(r"`--([a-z-]+)", first):
            listed[name.removeprefix("no-")] = {c.strip() for c in commands.split(",")}
    declared: dict[str, set[str]] = {}
    for command in COMMANDS:
        for _, option in command.options:
            if option.kind != "positional":
                declared.setdefault(option.name, set()).add(command.name)
    declared["version"] = {"perfgate"}
    assert set(listed) == set(declared)
    for name, commands in listed.items():
        if commands != {"every command"}:
            assert commands == declared[name], name


def test_every_option_row_in_the_reference_names_a_declared_option():
    cli = {option.name for option in ALL}
    plugin = {f"perfgate-{option.name}" for option in PLUGIN_OPTIONS} | {"perfgate", "perfgate-update"}
    for row in re.findall(r"^\| `--([a-z-]+)", REFERENCE, re.MULTILINE):
        assert row.removeprefix("no-") in cli | plugin, row


def test_the_pytest_table_lists_exactly_the_plugins_options_and_ini_keys():
    rows = re.findall(
        r"^\| `(--perfgate[a-z-]*)[^`]*`(?:, `--perfgate-no-[a-z-]+`)? \|([^|]*)\|",
        _section("Using perfgate with pytest"),
        re.M,
    )
    shown = {flag: key.strip().strip("`") for flag, key in rows}
    wanted = {
        f"--{o.name}" if o in (options.PERFGATE, options.PERFGATE_UPDATE) else f"--perfgate-{o.name}": o
        for o in PYTEST_OPTIONS
    }
    assert set(shown) == set(wanted)
    for flag, option in wanted.items():
        assert shown[flag] == ("" if option in (options.PERFGATE, options.PERFGATE_UPDATE) else ini_key(option))


def test_no_environment_name_collides_with_one_perfgate_or_the_action_already_uses():
    used: set[str] = set()
    for path in [ROOT / "action.yml", *(ROOT / "perfgate").rglob("*.py"), *(ROOT / ".github").rglob("*.yml")]:
        if path.name != "options.py":
            used |= set(re.findall(r"PERFGATE_[A-Z_]+", path.read_text(encoding="utf-8")))
    names = {env_key(option) for option in ALL if option.env}
    assert names & used == set()


def test_every_command_renders_every_option_it_declares():
    parser = build_parser()
    for command in COMMANDS:
        shown = parser._subparsers._group_actions[0].choices[command.name].format_help()  # type: ignore[union-attr]
        for _, option in command.options:
            flag = option.metavar if option.kind == "positional" else f"--{option.name}"
            assert flag in shown, (command.name, option.name)


# -- the plugin takes what a check takes (issue 45) -----------------------------------------------------------


def test_every_option_of_a_check_that_applies_to_a_plugin_check_is_a_plugin_option():
    """The plugin renders each of check's options that a pytest session's check can use; the rest are the CLI's
    own (its workloads are the session's tests, its outputs named once for the session)."""
    cli_only = {"workloads", "debug", "quiet", "accept-label"}  # the Action passes the labels as --accept-label
    check = {option.name for option in options.options_of("check")}
    plugin = {option.name for option in PLUGIN_OPTIONS}
    assert check - plugin == cli_only, check - plugin
    assert all(option.pytest for option in PLUGIN_OPTIONS)
    assert not [option.name for option in ALL if option.pytest and option not in PLUGIN_OPTIONS]


def test_the_plugins_help_names_its_own_spellings():
    texts = {}

    class Group:
        def addoption(self, *names, **kwargs):
            texts[names[0]] = kwargs.get("help") or ""

    class Parser:
        def getgroup(self, *_):
            return Group()

        def addini(self, *_, **__):
            pass

    options.add_all_to_pytest(Parser())
    assert "--perfgate-threads 1 gives quieter trials" in texts["--perfgate-threads"]
    flags = re.findall(r"(?<![\w-])--[a-z][a-z-]*", " ".join(texts.values()))
    assert flags and all(flag.startswith("--perfgate") for flag in flags), sorted(set(flags))


def test_the_plugins_check_options_reach_its_request(tmp_path):
    given = {
        "perfgate_time_budget": "90",
        "perfgate_device": "cpu",
        "perfgate_timeout": "120",
        "perfgate_diagnose": True,
        "perfgate_warn_only": True,
        "perfgate_accept": ["gated/fp32 15%", "* 20%"],
    }
    ini = {"perfgate_accept": ["other 30%"]}  # the command line wins over the ini's lines
    resolved = options.resolve_pytest(PytestConfig(given, ini), command="check", environ={})
    assert resolved["accept"].where == "--perfgate-accept"
    request = plugin_request(resolved, mode="check", rootpath=tmp_path)
    assert request.gate.time_budget_s == 90 and request.gate.warn_only
    assert [a.shown for a in request.gate.accepted] == [
        "gated/fp32 15% with --perfgate-accept",
        "* 20% with --perfgate-accept",
    ]
    run = request.run()
    assert (run.device, run.timeout_s) == ("cpu", 120)
    check = request.check(())
    assert check.diagnose_all and check.mode == "stored" and check.history is not None and not check.history.record
    from_ini = options.resolve_pytest(PytestConfig(ini=ini), command="check", environ={})
    assert from_ini["accept"].where == "ini perfgate_accept"
    accepted = plugin_request(from_ini, mode="check", rootpath=tmp_path).gate.accepted
    assert [(a.target, a.slowdown) for a in accepted] == [("other", 0.3)]


def test_the_plugins_counts_only_profile_and_record(tmp_path):
    counts = options.resolve_pytest(PytestConfig({"perfgate_counts_only": True}), command="check", environ={})
    assert plugin_request(counts, mode="check", rootpath=tmp_path).check(()).mode == "counts"
    for key, flag in (("perfgate_profile", "--perfgate-profile"), ("perfgate_record", "--perfgate-record")):
        both = PytestConfig({"perfgate_counts_only": True, key: True})
        with pytest.raises(UsageError) as error:
            plugin_request(options.resolve_pytest(both, command="check", environ={}), mode="check", rootpath=tmp_path)
        assert error.value.one_line().startswith(f"{flag} cannot be combined with --perfgate-counts-only")
    traces = tmp_path / "traces"
    profiled = PytestConfig({"perfgate_profile": True, "perfgate_profile_dir": str(traces)})
    request = plugin_request(
        options.resolve_pytest(profiled, command="check", environ={}), mode="check", rootpath=tmp_path
    )
    assert request.run().profile_dir == traces
    history = tmp_path / "history"
    recorded = PytestConfig({"perfgate_record": True, "perfgate_history_dir": str(history)})
    request = plugin_request(
        options.resolve_pytest(recorded, command="check", environ={}), mode="check", rootpath=tmp_path
    )
    assert request.check(()).history == HistoryRequest(history, None, True)
