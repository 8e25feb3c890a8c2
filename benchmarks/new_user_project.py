"""Projects as a new user brings them: their own code, a workload file that imports it, real pull requests.

Each project is made in a temporary folder, nothing installed, and each branch is checked with the README's command
(`perfgate check --against main`) through the `perfgate` console script.

`textcls`: a small transformer text classifier and a Dataset that tokenizes in `__getitem__`, in a package at the
repository's root; `perf/workloads.py` imports it (accumulation 2, clipping, one DataLoader worker), as `perfgate
init` leaves it once the stand-ins are replaced.
- `wider`: the model's width 96 -> 128. Right answer: a regression, suspect model compute (FLOPs counted).
- `retune`: the positional embedding's init scale and the learning rate: the numbers change, not the work. Right
  answer: a pass, with the changed numerics named.
- `masking`: token masking in `__getitem__`, a Python loop a token (about 0.5 ms a sample, in the worker). Right
  answer: a regression, suspect data pipeline.

`tinyhf`: a GRU language model under `src/` (uninstalled) taking dict batches, with its own collate function.
- `pad64`: the collate function pads to 64 tokens instead of 32. Right answer: a regression, suspect model compute
  (FLOPs per sample doubled with the same parameters), pointing at the batches' shapes.

Prints each check's exit code, verdict line and diagnosis headline; the reports stay in the folder it names.

    python benchmarks/new_user_project.py [--configs fp32]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

MODEL = '''import math

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab=512, dim=96, heads=4, layers=2, classes=5, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(64, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pos[: tokens.shape[1]]
        return self.head(self.blocks(x).mean(dim=1))


class Reviews(torch.utils.data.Dataset):
    """Synthetic reviews: seeded by index, tokenized in __getitem__."""

    def __init__(self, n=4096, length=48):
        self.n, self.length = n, length

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        words = torch.randint(0, 512, (self.length,), generator=g)
        label = int(words[:4].sum()) % 5
        return words, label
'''

WORKLOADS = """import torch
import torch.nn.functional as F

import perfgate
from textcls.model import Encoder, Reviews


def loss(model, batch):
    tokens, labels = batch
    return F.cross_entropy(model(tokens), labels)


def workload() -> perfgate.Workload:
    return perfgate.Workload(
        name="textcls",
        model=lambda: Encoder(),
        dataset=lambda: Reviews(),
        loss=loss,
        batch_size=32,
        optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01),
        loader={"num_workers": 1},
        accumulation=2,
        max_grad_norm=1.0,
    )
"""

MASKING = """        label = int(words[:4].sum()) % 5
        masked = words.clone()  # token masking, one token at a time
        for t in range(self.length):
            if int(torch.randint(0, 10, (1,), generator=g)) == 0:
                masked[t] = 0
            masked[t] = masked[t] % 512
        return masked, label
"""

# A second project: a `src/` layout, uninstalled; dict batches built by its own collate function.
TINYHF = """import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab=1000, dim=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, input_ids, attention_mask, labels=None):
        h, _ = self.rnn(self.emb(input_ids))
        logits = self.out(h)
        loss = None
        if labels is not None:
            per = nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
            loss = (per * attention_mask).sum() / attention_mask.sum()
        return {"loss": loss, "logits": logits}


class Docs(torch.utils.data.Dataset):
    def __init__(self, n=2048, length=32):
        self.n, self.length = n, length

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        n = int(torch.randint(8, self.length + 1, (1,), generator=g))
        return {"input_ids": torch.randint(1, 1000, (n,), generator=g)}


def collate(items, length=32):
    ids = torch.zeros(len(items), length, dtype=torch.long)
    mask = torch.zeros(len(items), length)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        ids[row, :n] = item["input_ids"]
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.roll(-1, dims=1)}
"""

TINYHF_BENCH = """import torch

import perfgate
from tinyhf import Docs, TinyLM, collate


def lm() -> perfgate.Workload:
    return perfgate.Workload(
        name="tinyhf",
        model=TinyLM,
        dataset=Docs,
        loss=lambda model, batch: model(**batch)["loss"],
        batch_size=16,
        loader={"num_workers": 2, "collate_fn": collate},
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    )
"""

PROJECTS = {
    "textcls": (
        {
            "pyproject.toml": (
                '[project]\nname = "textcls"\nversion = "0.1"\n\n'
                '[tool.perfgate]\nworkloads = ["perf/workloads.py:workload"]\n'
            ),
            "textcls/__init__.py": "",
            "textcls/model.py": MODEL,
            "perf/workloads.py": WORKLOADS,
        },
        {
            "wider": {"textcls/model.py": [("dim=96", "dim=128")]},
            "retune": {"textcls/model.py": [("* 0.02)", "* 0.05)")], "perf/workloads.py": [("lr=3e-4", "lr=1e-3")]},
            "masking": {
                "textcls/model.py": [
                    ("        label = int(words[:4].sum()) % 5\n        return words, label\n", MASKING)
                ]
            },
        },
    ),
    "tinyhf": (
        {
            "pyproject.toml": '[tool.perfgate]\nworkloads = ["perf/bench.py:lm"]\n',
            "src/tinyhf/__init__.py": TINYHF,
            "perf/bench.py": TINYHF_BENCH,
        },
        {"pad64": {"src/tinyhf/__init__.py": [("def collate(items, length=32):", "def collate(items, length=64):")]}},
    ),
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_project(repo: Path, files: dict[str, str], branches: dict[str, dict[str, list[tuple[str, str]]]]) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "new@example.com")
    git(repo, "config", "user.name", "New User")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "checked by perfgate")
    for branch, edits in branches.items():
        git(repo, "checkout", "-q", "-b", branch, "main")
        for name, replacements in edits.items():
            path = repo / name
            text = path.read_text(encoding="utf-8")
            for old, new in replacements:
                assert text.count(old) == 1, (branch, name, old)
                text = text.replace(old, new)
            path.write_text(text, encoding="utf-8")
        git(repo, "commit", "-q", "-am", branch)
    git(repo, "checkout", "-q", "main")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="fp32")
    args = parser.parse_args()
    perfgate = Path(sysconfig.get_path("scripts")) / "perfgate"  # the console script, as a user types it
    if not perfgate.exists():
        sys.exit(f"no perfgate console script at {perfgate}: pip install -e . first")
    folder = Path(tempfile.mkdtemp(prefix="perfgate-new-user-"))
    verdict = re.compile(r"  (fp32|bf16|bf16-compile) +[\d,.]+ +[\d,.]+ +[\d.]+x")
    for project, (files, branches) in PROJECTS.items():
        repo = folder / project
        make_project(repo, files, branches)
        print(f"\n{project}: {repo}")
        for branch in branches:
            git(repo, "checkout", "-q", branch)
            started = time.monotonic()
            done = subprocess.run(
                [str(perfgate), "check", "--against", "main", "--configs", args.configs],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            (folder / f"{project}-{branch}.txt").write_text(done.stdout + done.stderr, encoding="utf-8")
            lines = done.stdout.splitlines()
            rows = [line for line in lines if verdict.match(line)]
            suspects = [line for line in lines if re.match(rf"  {project} \S+: suspect ", line)]
            suspects += [line for line in lines if line.startswith("    - ")][:1]  # the leading finding's line
            print(f"  {branch}: exit {done.returncode} ({time.monotonic() - started:.0f} s)")
            for line in rows + suspects or [done.stderr.strip()]:
                print(f"    {line.strip()}")
        git(repo, "checkout", "-q", "main")
    print(f"\nreports: {folder}/*.txt")


if __name__ == "__main__":
    main()
