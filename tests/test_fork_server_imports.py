"""What a fork server imports before its first child: torch._dynamo only where a trial may need it."""

from __future__ import annotations

import dataclasses
import functools

import torch

from perfgate.measure.lab import needs_dynamo
from tests.workloads.tiny import PlainSGD, tiny


def test_a_written_out_optimizer_in_eager_configs_needs_no_dynamo_and_anything_else_may():
    plain = tiny()  # PlainSGD: a class of its own, no torch optimizer
    assert plain.optimizer is PlainSGD
    assert not needs_dynamo([plain], ["fp32", "bf16"])
    assert not needs_dynamo([dataclasses.replace(plain, optimizer=functools.partial(PlainSGD))], ["fp32"])
    assert needs_dynamo([plain], ["fp32", "bf16-compile"])  # compiling imports it
    for optimizer in (
        None,  # the default, AdamW
        torch.optim.SGD,
        functools.partial(torch.optim.AdamW, lr=1e-3),
        lambda params: PlainSGD(params),  # a function may build either: counted as one that may
    ):
        assert needs_dynamo([dataclasses.replace(plain, optimizer=optimizer)], ["fp32"]), optimizer
    assert needs_dynamo([plain, dataclasses.replace(plain, optimizer=None)], ["fp32"])  # one server, both
