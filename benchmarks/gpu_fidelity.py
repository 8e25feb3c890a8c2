"""perfgate's measured samples/sec against the seed's bare lab loop, on CUDA (and on the CPU), on the same workload.

The bare loop is the seed's three-run lab as written by hand: the same model, data, dtype, batch, warm-up and
timed steps as perfgate's trial, one `torch.cuda.synchronize()` before the timed steps and one after, samples/sec
over the host's wall time between the two. perfgate's trial (`perfgate.measure.trial`, as `perfgate run` starts
it) marks its phases with CUDA events and synchronises only at the same two edges, so the two figures should
agree. Each measurement is a fresh process; bare loops and perfgate trials alternate, swapping which goes first
every repeat, so drift of the machine hits both alike. Workloads: the built-in `lm@large` and `vision@large`,
and `gpt2`, a transformers GPT-2 (GPT2Config, random weights) that the team did not write.
Target: perfgate / bare >= 0.99 (ratio of medians) on each workload.

    python benchmarks/gpu_fidelity.py [--device auto] [--repeats 5] [--workloads lm@large,vision@large,gpt2]
                                      [--config fp32|bf16|bf16-compile] [--quick] [--small]

`--quick` is a smoke run: small sizes, one repeat; `--small` takes the small sizes with every repeat (the
CPU's run: `python benchmarks/gpu_fidelity.py --device cpu --small`). `gpt2` needs `pip install
transformers`; without it the benchmark says so and measures the others.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import _figures, bootstrap_median_ci  # noqa: E402 - the CPU overhead benchmark's helpers

TARGET = 0.99
DEFAULT_WORKLOADS = "lm@large,vision@large,gpt2"
QUICK_SIZES = {"lm@large": "lm@small", "vision@large": "vision@small"}  # --quick's smaller stand-ins

# A GPT-2 from transformers' config with random weights: a model perfgate's authors did not write. The size
# comes from PERFGATE_FIDELITY_GPT2 (set by this benchmark, read by both sides' processes).
GPT2_WORKLOAD = '''"""A transformers GPT-2 (GPT2Config, random weights) on seeded random tokens."""
import os

import torch

import perfgate

SIZES = {  # layers, width, heads, vocabulary, sequence, batch, steps, warm-up
    "large": (12, 768, 12, 50257, 512, 16, 50, 3),  # GPT-2 small's shape, 124M parameters
    "small": (2, 128, 4, 1024, 64, 8, 10, 2),
}
LAYERS, WIDTH, HEADS, VOCAB, SEQ, BATCH, STEPS, WARMUP = SIZES[os.environ.get("PERFGATE_FIDELITY_GPT2", "large")]


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, VOCAB, ((STEPS + WARMUP) * BATCH + BATCH, SEQ), generator=generator)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        return self.tokens[index]


def model():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def loss(net, ids):
    return net(input_ids=ids, labels=ids).loss


def gpt2():
    return perfgate.Workload(
        name="gpt2",
        model=model,
        dataset=Tokens,
        loss=loss,
        batch_size=BATCH,
        loader={"num_workers": 2, "pin_memory": True},
        steps=STEPS,
        warmup_steps=WARMUP,
    )
'''


def _move(batch: Any, device: Any, non_blocking: bool) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {key: _move(value, device, non_blocking) for key, value in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_move(value, device, non_blocking) for value in batch)
    return batch


def bare_loop(reference_text: str, reference_target: str, config: str, device_name: str) -> dict[str, float]:
    """The seed's lab loop on the workload: seeded, its DataLoader options, one synchronisation before the timed
    steps and one after, samples/sec over the wall time between them."""
    import torch

    from perfgate.references import Reference

    workload = Reference(reference_text, reference_target).load()
    cuda = device_name == "cuda"
    device = torch.device("cuda" if cuda else "cpu")
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(workload.seed)
    dataset = workload.dataset()
    options = dict(workload.loader)
    if not cuda:
        options.pop("pin_memory", None)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=workload.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(workload.seed),
        **options,
    )
    torch.manual_seed(workload.seed)
    model = workload.model().to(device).train()
    optimizer = (
        workload.optimizer(model.parameters())
        if workload.optimizer is not None
        else torch.optim.AdamW(model.parameters(), lr=1e-4)  # perfgate's default, as the trial uses
    )
    step_model: Any = torch.compile(model) if config == "bf16-compile" else model
    autocast = config != "fp32"
    non_blocking = cuda and bool(options.get("pin_memory", False))
    warmup, steps = workload.warmup_steps, workload.steps
    batches = iter(loader)
    started, samples = 0.0, 0
    for step in range(warmup + steps):
        if step == warmup:
            synchronize()
            started = time.perf_counter()
        batch = _move(next(batches), device, non_blocking)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = workload.loss(step_model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            samples += workload.batch_size
    synchronize()
    elapsed = time.perf_counter() - started
    return {"samples_per_sec": samples / elapsed}


def _environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED="0", TRANSFORMERS_VERBOSITY="error")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def bare_process(reference: Any, config: str, device: str) -> float:
    output = subprocess.run(
        [sys.executable, __file__, "--bare", reference.text, reference.target, config, device],
        env=_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if output.returncode != 0:
        raise SystemExit(f"the bare loop on {reference.text} failed:\n{output.stderr[-3000:]}")
    return float(json.loads(output.stdout.strip().splitlines()[-1])["samples_per_sec"])


def perfgate_process(reference: Any, config: str, device: str, scratch: Path) -> tuple[dict[str, float], str]:
    """perfgate's figures from one trial in a fresh process, and how the trial was clocked."""
    from perfgate.measure.lab import run_trial_process
    from perfgate.measure.trial import TrialSpec

    spec = TrialSpec(reference.text, reference.target, config, 0, device, None)
    record = run_trial_process(spec, scratch, timeout_s=1200)
    return _figures(record), record.result.clocking


def _references(names: list[str], quick: bool, folder: Path) -> list[Any]:
    from perfgate.references import resolve_references

    references = []
    for name in names:
        if name == "gpt2":
            if importlib.util.find_spec("transformers") is None:
                print("gpt2: SKIPPED, transformers is not installed (pip install transformers)", flush=True)
                continue
            path = folder / "fidelity_gpt2.py"
            path.write_text(GPT2_WORKLOAD, encoding="utf-8")
            name = f"{path}:gpt2"
        elif quick:
            name = QUICK_SIZES.get(name, name)
        references.extend(resolve_references([name]))
    return references


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=5, help="measurements of each side per workload")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=f"comma-separated (default {DEFAULT_WORKLOADS})")
    parser.add_argument("--config", default="fp32", choices=("fp32", "bf16", "bf16-compile"))
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, one repeat")
    parser.add_argument("--small", action="store_true", help="the small sizes (for a CPU: large ones take minutes)")
    parser.add_argument("--bare", nargs=4, metavar=("TEXT", "TARGET", "CONFIG", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        print(json.dumps(bare_loop(*args.bare)))
        return

    import torch

    from perfgate.measure.device import select_device

    device = select_device(args.device).type
    repeats = 1 if args.quick else args.repeats
    small = args.quick or args.small
    os.environ["PERFGATE_FIDELITY_GPT2"] = "small" if small else "large"
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print(
        f"gpu fidelity benchmark: perfgate's trial against the bare lab loop on {device} ({name}), config "
        f"{args.config}, {repeats} repeat(s) a side, a fresh process each{', quick' if args.quick else ''}; "
        f"{time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for reference in _references(args.workloads.split(","), small, folder):
            bares: list[float] = []
            reported: list[float] = []
            ratios: list[float] = []
            clockings = set()
            for repeat in range(repeats):
                bare_first = repeat % 2 == 0
                bare = bare_process(reference, args.config, device) if bare_first else 0.0
                measured, clocking = perfgate_process(reference, args.config, device, folder)
                if not bare_first:
                    bare = bare_process(reference, args.config, device)
                clockings.add(clocking)
                bares.append(bare)
                reported.append(measured["reported"])
                ratios.append(measured["reported"] / bare)
                print(
                    f"  {reference.text} repeat {repeat + 1:2d}: bare {bare:9.1f}  perfgate {measured['reported']:9.1f}"
                    f"  (wall {measured['wall']:9.1f})  ratio {ratios[-1]:.4f}",
                    flush=True,
                )
            ratio = statistics.median(reported) / statistics.median(bares)
            low, high = bootstrap_median_ci(ratios) if len(ratios) > 1 else (ratios[0], ratios[0])
            verdict = "met" if ratio >= TARGET else "NOT met"
            print(
                f"{reference.text}: samples/s median bare {statistics.median(bares):.1f}, perfgate "
                f"{statistics.median(reported):.1f} (clocked by {', '.join(sorted(clockings))}); ratio of medians "
                f"{ratio:.4f}; median of paired ratios {statistics.median(ratios):.4f}, "
                f"95% CI [{low:.4f}, {high:.4f}]; target >= {TARGET}: {verdict}",
                flush=True,
            )


if __name__ == "__main__":
    main()
