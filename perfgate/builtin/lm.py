"""A small decoder-only transformer language model trained on generated token data (compute-heavy)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from perfgate.workload import Workload, world_size


@dataclass(frozen=True)
class LMSize:
    vocab: int
    d_model: int
    layers: int
    heads: int
    seq_len: int
    batch_size: int
    steps: int
    sequences: int


LM_SIZES = {
    "small": LMSize(vocab=512, d_model=128, layers=2, heads=4, seq_len=64, batch_size=16, steps=50, sequences=1024),
    "medium": LMSize(vocab=4096, d_model=384, layers=6, heads=6, seq_len=256, batch_size=16, steps=30, sequences=1024),
    "large": LMSize(
        vocab=16384, d_model=768, layers=12, heads=12, seq_len=512, batch_size=32, steps=50, sequences=2048
    ),
}


class TokenSequences(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Token sequences from a seeded sparse Markov chain, so the model has something to learn."""

    def __init__(self, vocab: int, seq_len: int, sequences: int, seed: int = 1234) -> None:
        generator = torch.Generator().manual_seed(seed)
        # Each token has a few likely successors: a learnable, deterministic language.
        successors = torch.randint(0, vocab, (vocab, 4), generator=generator)
        tokens = torch.empty(sequences, seq_len + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, vocab, (sequences,), generator=generator)
        for position in range(1, seq_len + 1):
            choice = torch.randint(0, 4, (sequences,), generator=generator)
            noise = torch.rand(sequences, generator=generator) < 0.1
            random_tokens = torch.randint(0, vocab, (sequences,), generator=generator)
            following = successors[tokens[:, position - 1], choice]
            tokens[:, position] = torch.where(noise, random_tokens, following)
        self.tokens = tokens

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[index]
        return row[:-1], row[1:]


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """GPT-style decoder: token and position embeddings, pre-norm blocks, tied output head."""

    def __init__(self, size: LMSize) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(size.vocab, size.d_model)
        self.position_embedding = nn.Embedding(size.seq_len, size.d_model)
        self.blocks = nn.ModuleList(Block(size.d_model, size.heads) for _ in range(size.layers))
        self.ln_f = nn.LayerNorm(size.d_model)
        self.head = nn.Linear(size.d_model, size.vocab, bias=False)
        self.head.weight = self.token_embedding.weight
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
        for module in self.modules():
            if isinstance(module, CausalSelfAttention):  # residual projections, scaled by depth (GPT-2)
                nn.init.normal_(module.proj.weight, std=0.02 / math.sqrt(2 * size.layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def next_token_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of the next token at every position."""
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def transformer_lm(size: str = "small") -> Workload:
    """The built-in language model workload at the given size (`small`, `medium`, `large`)."""
    spec = LM_SIZES[size]
    return Workload(
        name=f"lm-{size}",
        model=lambda: TinyGPT(spec),
        # every rank of a data-parallel trial reads a slice of its own
        dataset=lambda: TokenSequences(spec.vocab, spec.seq_len, spec.sequences * world_size()),
        loss=next_token_loss,
        batch_size=spec.batch_size,
        optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4),
        loader={"num_workers": 0},
        steps=spec.steps,
        warmup_steps=3,
    )
