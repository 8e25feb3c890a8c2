"""A project as a new user brings it: its own package, a workload file that imports it, three pull requests.

The project (made in a temporary folder, nothing installed): `textcls/`, a small transformer text classifier and a
Dataset that tokenizes in `__getitem__`, at the repository's root; `perf/workloads.py` imports it (accumulation 2,
clipping, one DataLoader worker), as `perfgate init` leaves it once the stand-ins are replaced. Then three
branches off main, each checked with the README's command through the `perfgate` console script:

- `wider`: the model's width 96 -> 128. Right answer: a regression, suspect model compute (FLOPs counted).
- `retune`: the positional embedding's init scale and the learning rate: the numbers change, not the work. Right
  answer: a pass, with the changed numerics named.
- `masking`: token masking in `__getitem__`, a Python loop a token (about 0.5 ms a sample, in the worker). Right
  answer: a regression, suspect data pipeline.

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

BRANCHES = {
    "wider": {"textcls/model.py": [("dim=96", "dim=128")]},
    "retune": {"textcls/model.py": [("* 0.02)", "* 0.05)")], "perf/workloads.py": [("lr=3e-4", "lr=1e-3")]},
    "masking": {
        "textcls/model.py": [("        label = int(words[:4].sum()) % 5\n        return words, label\n", MASKING)]
    },
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_project(repo: Path) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "new@example.com")
    git(repo, "config", "user.name", "New User")
    files = {
        "pyproject.toml": (
            '[project]\nname = "textcls"\nversion = "0.1"\n\n'
            '[tool.perfgate]\nworkloads = ["perf/workloads.py:workload"]\n'
        ),
        "textcls/__init__.py": "",
        "textcls/model.py": MODEL,
        "perf/workloads.py": WORKLOADS,
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "textcls, checked by perfgate")
    for branch, edits in BRANCHES.items():
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
    repo = folder / "repo"
    make_project(repo)
    print(f"the project: {repo}")
    for branch in BRANCHES:
        git(repo, "checkout", "-q", branch)
        started = time.monotonic()
        done = subprocess.run(
            [str(perfgate), "check", "--against", "main", "--configs", args.configs],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        (folder / f"{branch}.txt").write_text(done.stdout + done.stderr, encoding="utf-8")
        verdict = re.compile(r"  (fp32|bf16|bf16-compile) +[\d,.]+ +[\d,.]+ +[\d.]+x")
        rows = [line for line in done.stdout.splitlines() if verdict.match(line)]
        suspects = [line.strip() for line in done.stdout.splitlines() if re.match(r"  textcls \S+: suspect ", line)]
        print(f"\n{branch}: exit {done.returncode} ({time.monotonic() - started:.0f} s)")
        for line in rows + suspects or [done.stderr.strip()]:
            print(f"  {line.strip()}")
    git(repo, "checkout", "-q", "main")
    print(f"\nreports: {folder}/*.txt")


if __name__ == "__main__":
    main()
