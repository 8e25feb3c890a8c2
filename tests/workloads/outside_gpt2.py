"""A model perfgate's authors did not write: transformers' GPT-2 with a tiny config and random weights, for the
exact counts' tests. Changes planted through the environment, each a real change to the code:

- PERFGATE_TEST_LAYERS: the transformer blocks (default 2), one more block being a bigger model;
- PERFGATE_TEST_PLANT=slowitem: each sample's `__getitem__` sleeps 2 ms (a slower data pipeline, same model);
- PERFGATE_TEST_PLANT=graphbreak: the model's forward calls `torch._dynamo.graph_break()` after the blocks,
  as a logging line or a data-dependent branch would;
- PERFGATE_TEST_PLANT=keep: each step keeps a copy of the logits (an activation kept for a metric).
"""

from __future__ import annotations

import os
import time

import torch

import perfgate

SEQ = 32
VOCAB = 256
KEPT: list[torch.Tensor] = []


def _plant() -> str:
    return os.environ.get("PERFGATE_TEST_PLANT", "")


class Tokens(torch.utils.data.Dataset):
    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, VOCAB, (64, SEQ), generator=generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> torch.Tensor:
        if _plant() == "slowitem":
            time.sleep(0.002)
        return self.tokens[index]


def model() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=int(os.environ.get("PERFGATE_TEST_LAYERS", "2")),
        n_embd=64,
        n_head=4,
        vocab_size=VOCAB,
        n_positions=SEQ,
        bos_token_id=0,
        eos_token_id=0,
    )
    gpt2 = GPT2LMHeadModel(config)
    if _plant() == "graphbreak":
        blocks = gpt2.transformer.h[-1]
        forward = blocks.forward

        def breaking(*args, **kwargs):
            out = forward(*args, **kwargs)
            torch._dynamo.graph_break()  # the planted graph break
            return out

        blocks.forward = breaking
    return gpt2


def loss(gpt2: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = gpt2(input_ids=ids, labels=ids)
    if _plant() == "keep":
        KEPT.append(out.logits.detach().clone())
    return out.loss


def gpt2() -> perfgate.Workload:
    return perfgate.Workload(
        name="gpt2-outside",
        model=model,
        dataset=Tokens,
        loss=loss,
        batch_size=8,
        steps=4,
        warmup_steps=2,
    )
