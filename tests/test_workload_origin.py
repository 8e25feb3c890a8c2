"""What a perf test may hand to `perfgate.check`: how a workload is traced back to the function that builds it."""

from __future__ import annotations

import pytest

from perfgate.errors import WorkloadReferenceError
from perfgate.references import reference_for
from tests.helpers.workloads import WORKLOADS
from tests.workloads import tiny

TINY_FILE = str((WORKLOADS / "tiny.py").resolve())


def test_a_workload_knows_the_argument_free_function_that_built_it():
    assert tiny.tiny().origin == (str(WORKLOADS / "tiny.py"), "tiny")


def test_a_helper_with_arguments_is_skipped_for_its_caller():
    # tiny_workers() returns _tiny(name=..., loader=...): the helper takes arguments, its caller does not.
    assert tiny.tiny_workers().origin == (str(WORKLOADS / "tiny.py"), "tiny_workers")


def test_a_workload_built_in_a_nested_function_has_no_origin():
    def local():
        return tiny._tiny()

    assert local().origin is None


def test_references_from_a_function_a_built_workload_and_a_string(tmp_path):
    from_function = reference_for(tiny.tiny, base_dir=WORKLOADS)
    assert from_function.text == "tiny.py:tiny" and from_function.target == f"file:{TINY_FILE}:tiny"
    assert reference_for(tiny.tiny(), base_dir=WORKLOADS) == from_function
    assert reference_for(tiny.tiny(), base_dir=tmp_path).text == f"{TINY_FILE}:tiny"  # outside: absolute
    assert reference_for("lm").target == "builtin:lm@small"


def test_what_trial_processes_cannot_rebuild_is_refused_in_one_line():
    def local():
        return tiny._tiny()

    with pytest.raises(WorkloadReferenceError, match="cannot tell which function built workload 'tiny'"):
        reference_for(local())
    with pytest.raises(WorkloadReferenceError, match="is not a module-level function in a file"):
        reference_for(local)
    with pytest.raises(WorkloadReferenceError, match="cannot measure a int"):
        reference_for(3)
