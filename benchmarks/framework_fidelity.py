"""perfgate's samples/sec for a framework's workload against the framework's own training, same model and data.

Each mode (MODES) is a pair: the framework's own timed training, and the source of a perfgate workload file that
builds the same training through perfgate's adapter for that framework. `trainer`: a Hugging Face `Trainer`
around a GPT-2 (GPT2Config, random weights: nothing downloaded) on seeded random tokens; the framework side is
`Trainer.train()` for max_steps = warm-up + timed steps, timed by a `TrainerCallback` from the end of the last
warm-up step to the end of the last step (the loop's whole steps: fetching the micro-batches, the Trainer's
step, its callbacks), its samples/sec over those steps; perfgate's side is `perfgate run FILE:workload --configs
CONFIG --trials 1` on `from_trainer(trainer)`, its trial's samples_per_sec. Both sides: the same model, data,
batch size, accumulation, clipping, optimizer, scheduler, steps and torch threads (pinned alike in both
processes). Each measurement is a fresh process; the two sides alternate, swapping which goes first every
repeat, so drift of the machine hits both alike. Prints each repeat's figures and ratio, then the median of the
paired ratios perfgate / framework with its bootstrap interval, by samples/sec and by each side's median step
(which one stall of the machine cannot move). Target: within 3% (0.97 to 1.03).

    python benchmarks/framework_fidelity.py [--mode trainer] [--repeats 7] [--config fp32|bf16]
                                            [--device auto|cpu|cuda] [--threads N] [--steps 20] [--warmup 5]
                                            [--accumulation 2] [--workers 0] [--small] [--turns]

`--turns`: the two processes of a repeat run at once and take turns at their steps, as a paired check's
interleaved pair does (`perfgate.measure.turns`: one runs about half a second of steps while the other is
stopped, its DataLoader workers too), so the machine's drift hits both sides alike within the repeat. perfgate's
side is then one trial process started as a paired check starts it (the same `TrialSpec`, one round); the
framework's side hands the turn over at its optimizer steps' ends and counts only its own turns' time from the
end of the last warm-up step to the end of the last step (the waits left out, as perfgate's step clock leaves
them out).

`--mode lightning`: a small Transformer-encoder LM as a `LightningModule`, `Trainer.fit` against `from_lightning`
(benchmarks/_lightning_fidelity.py). `--small` takes a smaller model (a quick look on a slow CPU). Needs
`pip install transformers accelerate` (trainer) or `pip install lightning` (lightning).
Run nothing else beside it: both sides are timed, one after the other, on the same machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import bootstrap_median_ci  # noqa: E402 - the CPU overhead benchmark's helper

TARGET = 0.03  # |perfgate / framework - 1| at most this
WORKLOAD_FILE = "fidelity_workload.py"


@dataclass(frozen=True)
class Settings:
    """What both sides train with; written into the workload file, which the framework side imports too."""

    steps: int
    warmup: int
    accumulation: int
    threads: int
    device: str  # "cpu" or "cuda"
    config: str  # "fp32" or "bf16": the framework's own precision flag and perfgate's config
    workers: int
    small: bool


@dataclass(frozen=True)
class Mode:
    """A framework: `framework(module)` trains with the framework's own loop, built by the workload file's
    module, and returns its samples/sec (and any other figures); `source(settings)` is that workload file."""

    framework: Callable[[ModuleType, TurnClock | None], dict[str, float]]
    source: Callable[[Settings], str]


class TurnClock:
    """The framework side's end of `--turns`: hands the turn over at optimizer-step ends
    (`perfgate.measure.turns.TurnTaker`) and sums its own turns' time over the timed steps, the waits left out."""

    def __init__(self, prefix: str) -> None:
        from perfgate.measure.turns import TurnTaker

        self.taker = TurnTaker(prefix)
        self.own_s = 0.0
        self.since: float | None = None  # start of the timed span's current own turn
        self.steps: list[float] = []  # each timed step's own time, a wait for the turn left out
        self.last: float | None = None  # where the next timed step's own time starts

    def step_end(self, edge: str | None) -> None:
        """At an optimizer step's end: `edge` "first" (the last warm-up step: the clock starts), "last" (the
        last timed step: the clock stops, the turn kept until `finish`), else None."""
        now = time.perf_counter()
        if self.last is not None:
            self.steps.append(now - self.last)
        if edge == "first":
            self.since = now
        elif edge == "last" and self.since is not None:
            self.own_s += now - self.since
            self.since = self.last = None
            return
        turn = self.taker._turn_started  # when this turn began: it moves only when the turn is handed over
        self.taker.step_done()
        handed_over = self.taker._turn_started != turn
        if handed_over and self.since is not None:  # the wait is not the step's
            self.own_s += now - self.since
            self.since = self.taker._turn_started
        if self.since is not None:
            self.last = self.taker._turn_started if handed_over else now

    def begin(self) -> None:
        self.taker.begin()

    def finish(self) -> None:
        self.taker.finish()


# --- trainer: Hugging Face transformers' Trainer ----------------------------------------------------

TRAINER_SOURCE = '''"""A GPT-2 (random weights) trained by a Hugging Face Trainer; perfgate's side: from_trainer."""
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import perfgate

SETTINGS = {settings!r}
STEPS, WARMUP_STEPS, THREADS = SETTINGS["steps"], SETTINGS["warmup"], SETTINGS["threads"]
# layers, width, heads, vocabulary, sequence, batch
LAYERS, WIDTH, HEADS, VOCAB, SEQ, BATCH = (2, 128, 4, 1024, 64, 8) if SETTINGS["small"] else (4, 256, 4, 8192, 128, 8)
SAMPLES = (STEPS + WARMUP_STEPS) * BATCH * SETTINGS["accumulation"]


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        self.tokens = torch.randint(0, VOCAB, (SAMPLES, SEQ), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        return {{"input_ids": self.tokens[index], "labels": self.tokens[index]}}


def build_trainer():
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0, eos_token_id=0
    )
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="fidelity-trainer-"),
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=SETTINGS["accumulation"],
        max_steps=STEPS + WARMUP_STEPS,
        dataloader_num_workers=SETTINGS["workers"],
        bf16=SETTINGS["config"] == "bf16",
        use_cpu=SETTINGS["device"] == "cpu",
        seed=0,
    )
    return Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens())


def workload():
    trainer = build_trainer()
    return perfgate.from_trainer(trainer, name="gpt2-trainer", steps=STEPS, warmup_steps=WARMUP_STEPS, threads=THREADS)
'''


def trainer_source(settings: Settings) -> str:
    return TRAINER_SOURCE.format(settings=asdict(settings))


def trainer_framework(module: ModuleType, clock: TurnClock | None = None) -> dict[str, float]:
    """`Trainer.train()` for warm-up + timed steps; the timed steps clocked by a callback at each step's ends. On
    CUDA the callback synchronises at the two edges of the timed steps only (the Trainer itself synchronises in
    every micro-batch, checking its loss for NaN)."""
    import torch
    from transformers import TrainerCallback

    trainer = module.build_trainer()
    warmup, steps = module.WARMUP_STEPS, module.STEPS
    cuda = trainer.args.device.type == "cuda"
    step_ends: list[float] = []  # perf_counter at the end of warm-up step `warmup` and of every timed step
    step_spans: list[float] = []  # each timed step, on_step_begin to on_step_end (its micro-batches fetched before)

    class Clock(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.began = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step < warmup:  # global_step counts the step that just ended
                return
            if cuda and state.global_step in (warmup, warmup + steps):
                torch.cuda.synchronize()
            now = time.perf_counter()
            step_ends.append(now)
            if state.global_step > warmup:
                step_spans.append(now - self.began)
            if clock is not None:
                edge = state.global_step - warmup
                clock.step_end("first" if edge == 0 else "last" if edge == steps else None)

    trainer.add_callback(Clock())
    trainer.train()
    if len(step_ends) != steps + 1:
        raise SystemExit(f"the Trainer ran {len(step_ends) - 1} timed steps, not {steps}")
    samples = steps * module.BATCH * trainer.args.gradient_accumulation_steps
    step_s = clock.steps if clock else [b - a for a, b in itertools.pairwise(step_ends)]
    return {
        "samples_per_sec": samples / (clock.own_s if clock else step_ends[-1] - step_ends[0]),
        "inside_steps_samples_per_sec": samples / sum(step_spans),
        "median_step_s": statistics.median(step_s),
    }


from _lightning_fidelity import lightning_framework, lightning_source  # noqa: E402 - the Lightning mode's pair

MODES: dict[str, Mode] = {
    "trainer": Mode(trainer_framework, trainer_source),
    "lightning": Mode(lightning_framework, lightning_source),  # benchmarks/_lightning_fidelity.py
}


# --- The two sides, each a fresh process ------------------------------------------------------------


def framework_process(mode: str, file: Path, threads: int) -> dict[str, float]:
    from perfgate.measure.lab import trial_environment

    output = subprocess.run(
        [sys.executable, __file__, "--framework", mode, str(file)],
        env=trial_environment(threads),
        capture_output=True,
        text=True,
    )
    if output.returncode != 0:
        raise SystemExit(f"the framework's own training failed:\n{output.stdout}\n{output.stderr}")
    figures: dict[str, float] = json.loads(output.stdout.strip().splitlines()[-1])
    return figures


def perfgate_process(file: Path, settings: Settings) -> tuple[float, float]:
    """`perfgate run FILE:workload`, one trial of the config, in the workload file's folder: its samples/sec and
    its median step time."""
    from perfgate.measure.lab import trial_environment

    results = file.parent / "results.json"
    command = [sys.executable, "-m", "perfgate", "run", f"{file.name}:workload", "--configs", settings.config]
    command += ["--trials", "1", "--threads", str(settings.threads), "--device", settings.device]
    command += ["--json", str(results), "--quiet"]
    output = subprocess.run(command, cwd=file.parent, env=trial_environment(None), capture_output=True, text=True)
    if output.returncode != 0:
        raise SystemExit(f"perfgate run failed (exit {output.returncode}):\n{output.stdout}\n{output.stderr}")
    (workload,) = json.loads(results.read_text(encoding="utf-8"))["workloads"]
    (trial,) = workload["configs"][settings.config]["trials"]
    if trial["status"] != "ok":
        raise SystemExit(f"perfgate's trial failed: {trial['failure']}")
    return float(trial["samples_per_sec"]), statistics.median(trial["step_s"])


def run_framework_here(mode: str, file: str, turns: str | None = None) -> None:
    """The framework side's process: import the workload file, train with the framework's own loop (taking turns
    through the pipes at `turns` under `--turns`, its imports done before its first turn)."""
    spec = importlib.util.spec_from_file_location("fidelity_workload", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    clock = TurnClock(turns) if turns else None
    if clock is not None:
        clock.begin()
    figures = MODES[mode].framework(module, clock)
    if clock is not None:
        clock.finish()
    print(json.dumps(figures))


def turned_repeat(
    mode: str, file: Path, settings: Settings, repeat: int, framework_first: bool
) -> tuple[dict[str, float], tuple[float, float]]:
    """`--turns`: both sides at once, taking turns at their steps (`perfgate.measure.turns.TurnCoordinator`);
    perfgate's side one trial process as a paired check starts it. The framework's figures and perfgate's
    samples/sec and median step time."""
    from perfgate.measure.lab import RunningTrial, TrialPlace, trial_environment
    from perfgate.measure.trial import TrialSpec
    from perfgate.measure.turns import TurnCoordinator
    from perfgate.references import parse_reference

    sides = ["framework", "perfgate"] if framework_first else ["perfgate", "framework"]
    scratch = file.parent / f"repeat-{repeat}"
    scratch.mkdir()
    turns = TurnCoordinator(scratch / "turns", sides)
    reference = parse_reference(f"{file.name}:workload", base_dir=file.parent)
    trial_spec = TrialSpec(
        reference_text=reference.text,
        reference_target=reference.target,
        config=settings.config,
        trial=repeat,
        device=settings.device,
        threads=settings.threads,
        turns=turns.prefix("perfgate"),
        probe=False,
    )
    log = open(scratch / "framework.log", "w+b")  # noqa: SIM115 - read after the process ends
    command = [sys.executable, __file__, "--framework", mode, str(file), "--turns-prefix", turns.prefix("framework")]
    started: dict[str, Any] = {}
    try:
        for side in sides:  # the first side starts first, as a paired check's pair does
            if side == "framework":
                started[side] = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=trial_environment(settings.threads),
                    start_new_session=True,
                )
            else:
                started[side] = RunningTrial(trial_spec, scratch, 1800.0, TrialPlace(cwd=file.parent))
        processes = {side: started[side] if side == "framework" else started[side].process for side in sides}
        turns.run(processes, sides[0], time.perf_counter() + 1800.0)
        record = started["perfgate"].wait()
        returncode = started["framework"].wait(timeout=600)
    finally:
        turns.close()
        for side, process in started.items():  # an error before both ended: neither side outlives the repeat
            if side == "perfgate":
                process.kill()  # the trial and its DataLoader workers, where still running
            elif process.poll() is None:
                process.kill()
    log.seek(0)
    output = log.read().decode("utf-8", "replace")
    log.close()
    if returncode != 0:
        raise SystemExit(f"the framework's own training failed:\n{output}")
    if not record.result.ok:
        raise SystemExit(f"perfgate's trial failed: {record.result.failure}")
    result = record.result
    figures = json.loads(output.strip().splitlines()[-1])
    return figures, (float(result.samples_per_sec), statistics.median(result.step_s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="trainer", choices=sorted(MODES))
    parser.add_argument("--repeats", type=int, default=7, help="measurements of each side")
    parser.add_argument("--config", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=None, help="torch threads on both sides (default: the CPUs)")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=5, help="optimizer steps before them")
    parser.add_argument("--accumulation", type=int, default=2, help="micro-batches an optimizer step")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--small", action="store_true", help="a smaller model")
    parser.add_argument("--turns", action="store_true", help="the two sides at once, taking turns at their steps")
    parser.add_argument("--framework", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--turns-prefix", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warmup < 1:
        parser.error("--warmup must be at least 1: the timed steps start at the end of a warm-up step")
    if args.framework:
        run_framework_here(*args.framework, args.turns_prefix)
        return

    from perfgate.measure.device import select_device
    from perfgate.measure.environment import available_cpus

    device = select_device(args.device).type
    threads = args.threads or available_cpus()
    settings = Settings(
        args.steps, args.warmup, args.accumulation, threads, device, args.config, args.workers, args.small
    )
    print(
        f"framework fidelity benchmark: {args.mode}, perfgate's trial against the framework's own training on "
        f"{device}, config {args.config}, {threads} thread(s), {args.repeats} repeat(s) a side, a fresh process "
        f"each{', taking turns' if args.turns else ''}; {time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    framework_figures: list[float] = []
    perfgate_figures: list[float] = []
    ratios: list[float] = []
    step_ratios: list[float] = []  # the framework's median step time / perfgate's: samples/s by the typical step
    with tempfile.TemporaryDirectory() as scratch:
        file = Path(scratch) / WORKLOAD_FILE
        file.write_text(MODES[args.mode].source(settings), encoding="utf-8")
        for repeat in range(args.repeats):
            framework_first = repeat % 2 == 0
            if args.turns:
                framework, measured = turned_repeat(args.mode, file, settings, repeat, framework_first)
            else:
                framework = framework_process(args.mode, file, threads) if framework_first else {}
                measured = perfgate_process(file, settings)
                if not framework_first:
                    framework = framework_process(args.mode, file, threads)
            measured, perfgate_step_s = measured
            framework_figures.append(framework["samples_per_sec"])
            perfgate_figures.append(measured)
            ratios.append(measured / framework["samples_per_sec"])
            step_ratios.append(framework["median_step_s"] / perfgate_step_s)
            print(
                f"  repeat {repeat + 1:2d}: framework {framework['samples_per_sec']:9.1f} samples/s (inside its "
                f"steps {framework['inside_steps_samples_per_sec']:9.1f})  perfgate {measured:9.1f}  "
                f"ratio {ratios[-1]:.4f}; median step framework {1e3 * framework['median_step_s']:.1f} ms, perfgate "
                f"{1e3 * perfgate_step_s:.1f} ms, ratio {step_ratios[-1]:.4f}",
                flush=True,
            )
    print(
        f"{args.mode}: samples/s median framework {statistics.median(framework_figures):.1f}, perfgate "
        f"{statistics.median(perfgate_figures):.1f}",
        flush=True,
    )
    for what, values in (("samples/s", ratios), ("the median step", step_ratios)):
        ratio = statistics.median(values)
        low, high = bootstrap_median_ci(values) if len(values) > 1 else (ratio, ratio)
        verdict = "met" if abs(ratio - 1) <= TARGET else "NOT met"
        print(
            f"  by {what}: median of paired ratios perfgate / framework {ratio:.4f}, 95% CI [{low:.4f}, {high:.4f}]; "
            f"target within {TARGET:.0%} of 1: {verdict}",
            flush=True,
        )


if __name__ == "__main__":
    main()
