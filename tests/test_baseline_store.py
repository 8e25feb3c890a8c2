"""The baseline store: YAML round trip, one entry per machine, atomic writes, safe loading."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from perfgate.records.baselines import BaselineEntry, BaselineError, BaselineStore, parse_baseline, render_baseline
from perfgate.records.fingerprint import fingerprint_differences, fingerprint_key, machine_fingerprint
from perfgate.records.shapes import Environment, OperatorRow
from tests.helpers.baselines import STORE_FINGERPRINT, store_entry


def test_an_entry_survives_the_round_trip_through_yaml(tmp_path):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    loaded = store.find("gpt-small", STORE_FINGERPRINT)
    assert loaded is not None
    assert loaded.configs["fp32"].samples_per_sec == [100.0, 101.0, 99.5]
    assert loaded.configs["fp32"].peak_bytes == [1000, 1001, 1002]
    assert loaded.configs["fp32"].first_losses == [2.5, 2.4, 2.3]
    assert loaded.commit == "0123456789abcdef"
    assert loaded.data_checksum == "sha256:ab"
    assert [t.loader_cpu_s for t in loaded.configs["fp32"].trials] == [None] * 3  # not measured: left out
    assert "loader_cpu_s" not in store.path_for("gpt-small").read_text()
    assert "data_wait_host_s" not in store.path_for("gpt-small").read_text()  # timed with CUDA events only


@pytest.mark.parametrize(
    ("field", "first"),
    [("loader_cpu_s", 0.25), ("data_wait_host_s", 0.5)],  # the DataLoader workers' CPU; the host's wait (CUDA)
)
def test_a_trials_optional_totals_survive_the_round_trip(tmp_path, field, first):
    entry = store_entry()
    fp32 = entry.configs["fp32"]
    trials = [dataclasses.replace(t, **{field: first + i}) for i, t in enumerate(fp32.trials)]
    store = BaselineStore(tmp_path)
    store.write(dataclasses.replace(entry, configs={"fp32": dataclasses.replace(fp32, trials=trials)}))
    loaded = store.find("gpt-small", STORE_FINGERPRINT)
    assert loaded is not None and [getattr(t, field) for t in loaded.configs["fp32"].trials] == [
        first,
        first + 1,
        first + 2,
    ]


def test_updating_one_machine_never_touches_another(tmp_path):
    store = BaselineStore(tmp_path)
    store.write(store_entry(cpu_model="Intel Xeon", sps=(50.0, 51.0)))
    before = store.load("gpt-small")
    store.write(store_entry())
    store.write(store_entry(sps=(200.0, 201.0)))
    after = store.load("gpt-small")
    intel = fingerprint_key(dataclasses.replace(STORE_FINGERPRINT, cpu_model="Intel Xeon"))
    assert after[intel] == before[intel]
    assert after[fingerprint_key(STORE_FINGERPRINT)].configs["fp32"].samples_per_sec == [200.0, 201.0]


def test_the_file_is_stable_so_a_rewrite_is_an_empty_diff(tmp_path):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    first = store.path_for("gpt-small").read_text()
    store.write(store_entry())
    assert store.path_for("gpt-small").read_text() == first
    assert first.index("schema_version") < first.index("workload") < first.index("machines")


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    old = store.path_for("gpt-small").read_text()

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.write(store_entry(sps=(1.0, 2.0)))
    assert store.path_for("gpt-small").read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt-small.yaml"]


def test_a_yaml_tag_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "gpt-small.yaml"
    path.write_text(
        f'schema_version: 1\nworkload: !!python/object/apply:os.system ["touch {marker}"]\nmachines: {{}}\n'
    )
    with pytest.raises(BaselineError, match="invalid YAML"):
        BaselineStore(tmp_path).load("gpt-small")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("schema_version: 1\nworkload: [unclosed\n", "invalid YAML"),
        ("", "the file must be a mapping, got nothing"),
        ("schema_version: 99\nworkload: gpt-small\nmachines: {}\n", "unsupported schema_version 99"),
        ("schema_version: 1\nworkload: other\nmachines: {}\n", "the file is for workload 'other', not 'gpt-small'"),
        ("schema_version: 1\nworkload: gpt-small\nmachines: []\n", "machines must be a mapping"),
    ],
)
def test_malformed_baseline_files_name_what_is_wrong(tmp_path, text, message):
    (tmp_path / "gpt-small.yaml").write_text(text)
    with pytest.raises(BaselineError) as raised:
        BaselineStore(tmp_path).load("gpt-small")
    assert message in raised.value.one_line()
    assert str(tmp_path / "gpt-small.yaml") in raised.value.one_line()


def test_negative_or_missing_trial_values_are_refused(tmp_path):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    path = store.path_for("gpt-small")
    path.write_text(path.read_text().replace("samples_per_sec: 101.0", "samples_per_sec: -101.0"))
    with pytest.raises(BaselineError, match=r"trials\[1\]\.samples_per_sec must be finite and not negative"):
        parse_baseline(path.read_text(), source=str(path))


def test_each_trial_keeps_the_rounds_its_totals_cover_and_a_file_without_them_reads_one_round(tmp_path):
    entry = store_entry()
    fp32 = entry.configs["fp32"]
    trials = [
        dataclasses.replace(t, rounds=r, phase_s={"forward": 0.05 * r})
        for t, r in zip(fp32.trials, (1, 14, 3), strict=True)
    ]
    store = BaselineStore(tmp_path)
    store.write(dataclasses.replace(entry, configs={"fp32": dataclasses.replace(fp32, trials=trials)}))
    loaded = store.find("gpt-small", STORE_FINGERPRINT)
    assert loaded is not None
    assert [t.rounds for t in loaded.configs["fp32"].trials] == [1, 14, 3]
    # every trial reads 5 ms of forward a step over its settings' 10 steps, whatever its rounds
    assert [t.per_step(t.phase_s["forward"], 10) for t in loaded.configs["fp32"].trials] == pytest.approx([0.005] * 3)
    path = store.path_for("gpt-small")
    written = path.read_text()
    assert re.findall(r"rounds: (\d+)", written) == ["14", "3"]  # one round is left out, as files written before
    older = re.sub(r"\s*rounds: \d+", "", written)  # written before trials kept their rounds
    (old,) = parse_baseline(older, source=str(path)).values()
    assert [t.rounds for t in old.configs["fp32"].trials] == [1, 1, 1]
    for bad in ("0", "2.5", "true", "'3'"):
        with pytest.raises(BaselineError, match=r"trials\[1\]\.rounds must be a whole number of at least 1"):
            parse_baseline(written.replace("rounds: 14", f"rounds: {bad}"), source=str(path))


def test_a_profiles_operators_are_written_rounded_and_read_back_to_the_same_text(tmp_path):
    rows = [
        OperatorRow("aten::mm", calls_per_step=2.0, self_cpu_s_per_step=0.00123456789, self_device_s_per_step=0.0),
        OperatorRow("aten::add", calls_per_step=1, self_cpu_s_per_step=1e-05, self_device_s_per_step=0),
    ]
    entry = store_entry()
    fp32 = dataclasses.replace(entry.configs["fp32"], top_operators=rows)
    store = BaselineStore(tmp_path)
    store.write(dataclasses.replace(entry, configs={"fp32": fp32}))
    text = store.path_for("gpt-small").read_text()
    assert (
        "        top_operators:\n"
        "        - {name: 'aten::mm', calls_per_step: 2.0, self_cpu_s_per_step: 0.00123457, "
        "self_device_s_per_step: 0.0}\n"
        "        - {name: 'aten::add', calls_per_step: 1, self_cpu_s_per_step: 1.0e-05, self_device_s_per_step: 0}\n"
    ) in text
    loaded = store.find("gpt-small", STORE_FINGERPRINT)
    assert loaded is not None
    assert loaded.configs["fp32"].top_operators == [
        dataclasses.replace(rows[0], self_cpu_s_per_step=0.00123457),
        rows[1],
    ]
    assert render_baseline("gpt-small", [loaded]) == text


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("['aten::mm']", r"top_operators\[0\] is list, not a JSON object"),
        (
            "{name: 'aten::mm', self_cpu_s_per_step: 0.1}",
            r"top_operators\[0\] lacks the fields 'calls_per_step', 'self_device_s_per_step'",
        ),
        (
            "{name: 'aten::mm', calls_per_step: 1.0, self_cpu_s_per_step: 0.1, self_device_s_per_step: 0.0, s: 1}",
            r"top_operators\[0\] has the unknown field 's'",
        ),
        (
            "{name: 3, calls_per_step: 1.0, self_cpu_s_per_step: 0.1, self_device_s_per_step: 0.0}",
            r"top_operators\[0\] has a name that is not a string",
        ),
        (
            "{name: 'aten::mm', calls_per_step: .nan, self_cpu_s_per_step: 0.1, self_device_s_per_step: 0.0}",
            r"top_operators\[0\] has calls_per_step nan, not a finite number",
        ),
        (
            "{name: 'aten::mm', calls_per_step: 1.0, self_cpu_s_per_step: -0.1, self_device_s_per_step: 0.0}",
            r"top_operators\[0\]\.self_cpu_s_per_step must be finite and not negative",
        ),
    ],
)
def test_an_operator_row_that_is_not_one_is_a_one_line_error_naming_it(tmp_path, row, message):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    path = store.path_for("gpt-small")
    path.write_text(
        path.read_text().replace("    environment: {}", f"        top_operators: [{row}]\n    environment: {{}}")
    )
    with pytest.raises(BaselineError) as raised:
        store.load("gpt-small")
    line = raised.value.one_line()
    assert re.search(r"machines\['cpu AMD EPYC, 2 threads, torch 2\.13\.0\+cpu'\]\.configs\.fp32\." + message, line), (
        line
    )
    assert "\n" not in line


def test_a_fingerprint_field_of_the_wrong_type_is_refused_naming_it(tmp_path):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    path = store.path_for("gpt-small")
    path.write_text(path.read_text().replace("threads: 2}", "threads: two}"))
    with pytest.raises(BaselineError, match=r"\]: the fingerprint has threads 'two', not int"):
        store.load("gpt-small")


def test_the_fingerprint_keeps_stable_fields_only():
    environment = {
        "torch": "2.13.0+cpu",
        "cuda": None,
        "device": {"type": "cpu", "name": "AMD EPYC", "count": 1},
        "cpu": {"model": "AMD EPYC", "logical_cores": 2, "available_cores": 2},
        "threads": 2,
        "python": "3.11.7",
        "git": {"sha": "abc"},
        "platform": "Linux-6.1-x86_64",
    }
    fingerprint = machine_fingerprint(Environment.from_dict(environment))
    assert fingerprint == dataclasses.replace(STORE_FINGERPRINT, cpu_capability=None)  # none recorded
    gpu = {**environment, "cuda": "12.4", "device": {"type": "cuda", "name": "NVIDIA H100", "count": 8}}
    assert (
        fingerprint_key(machine_fingerprint(Environment.from_dict(gpu)))
        == "8x NVIDIA H100, cuda 12.4, torch 2.13.0+cpu"
    )


def test_forked_trials_are_their_own_machine_type_and_fresh_ones_read_as_every_earlier_baseline(tmp_path):
    """`--fork-trials`: the environment says `trials: forked`, the fingerprint files the entry apart (a forked
    trial's resident memory is not a fresh process's), and a fresh run's entry and file are as before."""
    environment = Environment.from_dict({"torch": "2.13.0+cpu", "cpu": {"model": "AMD EPYC"}, "threads": 2})
    assert "trials" not in environment.to_dict()  # fresh processes: nothing written
    forked = dataclasses.replace(environment, trials="forked")
    assert forked.to_dict()["trials"] == "forked"
    assert Environment.from_dict(forked.to_dict()) == forked
    fresh_key, forked_key = (fingerprint_key(machine_fingerprint(e)) for e in (environment, forked))
    assert forked_key == f"{fresh_key}, trials forked"
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    (table,) = [line for line in store.path_for("gpt-small").read_text().splitlines() if "fingerprint:" in line]
    assert "trials" not in table  # a fresh entry's fingerprint table is as every earlier one
    store.write(
        dataclasses.replace(
            store_entry(sps=(70.0, 71.0)), fingerprint=dataclasses.replace(STORE_FINGERPRINT, trials="forked")
        )
    )
    entries = store.load("gpt-small")
    assert entries[fingerprint_key(STORE_FINGERPRINT)].configs["fp32"].samples_per_sec == [100.0, 101.0, 99.5]
    assert entries[fingerprint_key(STORE_FINGERPRINT) + ", trials forked"].configs["fp32"].samples_per_sec == [
        70.0,
        71.0,
    ]
    (difference,) = fingerprint_differences(dataclasses.replace(STORE_FINGERPRINT, trials="forked"), STORE_FINGERPRINT)
    assert (
        difference.startswith("trials fresh processes (this run: forked; ") and "both with --fork-trials" in difference
    )


def test_the_path_of_a_workload_name_stays_inside_the_folder(tmp_path):
    assert BaselineStore(tmp_path).path_for("../../etc/passwd").parent == Path(tmp_path)


def test_updating_one_config_keeps_the_others_unless_the_workload_changed(tmp_path):
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    bf16_only = store_entry(sps=(80.0, 81.0))
    bf16_only = BaselineEntry(**{**bf16_only.__dict__, "configs": {"bf16": bf16_only.configs["fp32"]}})
    _, stored = store.write(bf16_only)
    assert list(stored.configs) == ["fp32", "bf16"]
    changed = BaselineEntry(**{**bf16_only.__dict__, "data_checksum": "sha256:cd"})
    previous, stored = store.write(changed)
    assert previous is not None and list(previous.configs) == ["fp32", "bf16"]
    assert list(stored.configs) == ["bf16"]


def test_the_cpu_instruction_set_is_part_of_the_machine(tmp_path):
    """One CPU model name covers AVX2 and AVX512 hosts, and bf16 runs about 20x slower on the first: they
    are two machine types. An entry written before the fingerprint held it takes it from its environment."""
    environment = {"device": {"type": "cpu"}, "torch": "2.13.0+cpu", "threads": 2, "cpu": {"model": "AMD EPYC"}}
    avx2 = machine_fingerprint(
        Environment.from_dict({**environment, "cpu": {"model": "AMD EPYC", "capability": "AVX2"}})
    )
    avx512 = machine_fingerprint(
        Environment.from_dict({**environment, "cpu": {"model": "AMD EPYC", "capability": "AVX512"}})
    )
    assert fingerprint_key(avx2) == "cpu AMD EPYC (AVX2), 2 threads, torch 2.13.0+cpu"
    assert fingerprint_key(avx512) == "cpu AMD EPYC (AVX512), 2 threads, torch 2.13.0+cpu"
    assert fingerprint_key(machine_fingerprint(Environment.from_dict(environment))) == (
        "cpu AMD EPYC, 2 threads, torch 2.13.0+cpu"
    )
    store = BaselineStore(tmp_path)
    store.write(store_entry())
    path = store.path_for("gpt-small")
    text = path.read_text(encoding="utf-8")
    # the fingerprint as an earlier perfgate wrote it, without cpu_capability; the environment has it
    assert "cpu_capability: null, " in text and "environment: {}" in text
    older = re.sub(r"cpu_capability: null,\s*", "", text).replace(
        "environment: {}", "environment: {cpu: {capability: AVX2}}"
    )
    assert "cpu_capability" not in older
    path.write_text(older, encoding="utf-8")
    (entry,) = store.load("gpt-small").values()
    assert entry.fingerprint.cpu_capability == "AVX2"
    assert store.find("gpt-small", dataclasses.replace(STORE_FINGERPRINT, cpu_capability="AVX2")) is not None
    assert store.find("gpt-small", dataclasses.replace(STORE_FINGERPRINT, cpu_capability="AVX512")) is None
