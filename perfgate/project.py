"""Project configuration: `[tool.perfgate]` in pyproject.toml, or `perfgate.yaml`, in the current folder.

```toml
[tool.perfgate]
workloads = ["perf/workloads.py:gpt_small", "vision"]
threshold = "5%"            # throughput regression threshold
memory_threshold = "5%"     # peak-memory tolerance
alpha = 0.01                # significance level of a check
max_trials = 8              # power-aware checks stop adding trials here
nproc = 2                   # ranks per trial: data-parallel under torchrun (a Workload's own nproc wins)
benchmark_noise = "10%"     # pytest-benchmark tests: how much a session's speed varies from session to session
peak_tflops = { bf16 = 989, fp32 = 67 }  # one GPU's dense peak TFLOP/s, for the utilisation (judge/utilisation.py)
slow_pair_rate = "5%"       # the count test's r0: one side of a pair stalled on unchanged code (perfgate calibrate)
slow_pair_rate_date = 2026-11-28  # ... and when calibrate measured it

[tool.perfgate.thresholds]  # per workload, per config, or both; the most specific wins
"vision-small" = { throughput = "10%" }
"*/bf16-compile" = { memory = "10%" }
"lm-small/bf16-compile" = { throughput = "8%", memory = "10%" }

[tool.perfgate.counts]      # exact counts' tolerances on growth (judge/counts.py); "report": shown, never failing
flops_per_sample = "2%"
graph_breaks = 0
```
"""

from __future__ import annotations

import datetime
import difflib
import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from perfgate.errors import UsageError
from perfgate.variants import CONFIG_NAMES

DEFAULT_THRESHOLD = 0.05  # a throughput regression beyond this fails the build
DEFAULT_MEMORY_TOLERANCE = 0.05  # peak memory beyond this much more fails it
DEFAULT_TRIALS = 3  # trials per config (in a paired check, pairs) at a check's first look
KEYS = (
    "workloads",
    "history",
    "threshold",
    "memory_threshold",
    "alpha",
    "max_trials",
    "nproc",
    "thresholds",
    "benchmark_noise",
    "diagnosis",
    "counts",
    "peak_tflops",
    "slow_pair_rate",
    "slow_pair_rate_date",
)
METRICS = ("throughput", "memory")
# `peak_tflops`' keys: a GPU's dense peak TFLOP/s for bf16 (tensor cores) and fp32 (without them), replacing the
# figures of `perfgate.judge.utilisation.GPU_PEAKS` for the model FLOPs utilisation
PEAK_DTYPES = ("bf16", "fp32")


@dataclass(frozen=True)
class DiagnosisThresholds:
    """When the diagnosis rules fire; `[tool.perfgate.diagnosis]` sets any of them (same names)."""

    data_wait_share: float = 0.20  # of the step: the loader, not the model, sets the pace
    data_wait_growth: float = 1.5  # data wait per step over the baseline's, with the DataLoader's settings changed
    explains: float = 0.5  # a part whose growth is at least this share of the step's growth explains it
    evidence_sigmas: float = 4.0  # a change counts beyond this many standard errors of its trials' spread
    # ... where a stored baseline's session also differs from this one by about this much (relative s.d.):
    # early evidence against stored baselines must clear it too (a paired check measures both in one session)
    session_noise: float = 0.10
    # ... and, behind a failing peak-memory verdict, a slower step ranks the findings beyond this many
    ranking_sigmas: float = 2.0
    tail_ratio: float = 1.5  # p95 / p50 of step times
    tail_sigmas: float = 3.0
    memory_growth_kib: float = 8.0  # per timed step: perfgate's own bookkeeping adds under 1 KiB
    memory_growth_fit: float = 0.9  # correlation of memory with the step number: a steady rise, not a jump
    torch_calls_growth: float = 1.5  # torch functions per step, current over baseline ...
    call_overhead_us: float = 20.0  # ... each adding at most this much step time: overhead, not compute
    gpu_low_percent: float = 70.0  # p95 of GPU utilisation (SageMaker Debugger's LowGPUUtilization)
    gpu_idle_percent: float = 10.0  # mean GPU utilisation ...
    cpu_busy_percent: float = 90.0  # ... while the busiest core is this busy (SageMaker Debugger's CPUBottleneck)
    comm_growth: float = 0.05  # data-parallel: the gradient all-reduce's time in flight grew by this share of the step
    imbalance_growth: float = 0.05  # ... one rank's lead over the others (outside the all-reduce) grew by this share


REPORT = "report"  # a count's tolerance that shows the count and never fails the build
ABSOLUTE_COUNTS = ("graph_breaks", "recompiles")  # tolerated as new ones, not as a share of the base's


@dataclass(frozen=True)
class CountTolerances:
    """How much each exact count may grow before the build fails (`[tool.perfgate.counts]`, same names): a share
    of the other side's count, new graph breaks and recompiles as a number, or `REPORT` (shown, never failing)."""

    # FLOPs per sample: exact, and one more layer moves it by far more (a GPT-2 block: +38%); 2% leaves room for
    # a bias or a loss term, as PyTorch gates its instruction counts at about 1.5%
    flops_per_sample: float | str = 0.02
    # operators and kernels a step: a small refactor adds a view or a copy (5% of the GPT-2's 400 is 20)
    operators_per_step: float | str = 0.05
    kernels_per_step: float | str = 0.05
    allocated_peak_bytes: float | str = 0.05  # as the peak-memory threshold
    parameters: float | str = 0.0  # any growth: a bigger model is a decision, said with Perf-Accept
    graph_breaks: int | str = 0  # any new one: a break splits the compiled graph
    recompiles: int | str = 0


@dataclass(frozen=True)
class Thresholds:
    """The thresholds that apply to one workload and config."""

    throughput: float = DEFAULT_THRESHOLD
    memory: float = DEFAULT_MEMORY_TOLERANCE


@dataclass(frozen=True)
class ProjectConfig:
    """What the project file says; None where it says nothing."""

    source: str | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    workloads: list[str] | None = None
    threshold: float | None = None
    memory_threshold: float | None = None
    alpha: float | None = None
    max_trials: int | None = None
    nproc: int | None = None  # ranks per trial (data-parallel); None: one process, or the workload's own
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    benchmark_noise: float | None = None
    diagnosis: dict[str, float] = field(default_factory=dict)  # DiagnosisThresholds' names
    history: Path | None = None  # the history folder (`check --record`, `perfgate history`), relative to base_dir
    counts: CountTolerances = field(default_factory=CountTolerances)  # `[tool.perfgate.counts]`
    peak_tflops: dict[str, float] = field(default_factory=dict)  # the GPU's dense peak by PEAK_DTYPES, TFLOP/s
    # A paired check's count test: the runner's rate of one-sided slow pairs on unchanged code (r0, as
    # `perfgate calibrate` prints it), and the day calibrate measured it; None: perfgate's default
    slow_pair_rate: float | None = None
    slow_pair_rate_date: datetime.date | None = None

    @property
    def slow_pair_rate_source(self) -> str:
        """Where `slow_pair_rate` came from, as the count test's line names it ("" where the project sets none)."""
        if self.slow_pair_rate is None:
            return ""
        if self.slow_pair_rate_date is not None:
            return f"measured by perfgate calibrate on {self.slow_pair_rate_date.isoformat()}"
        where = "[tool.perfgate]" if self.source is None or self.source.endswith("[tool.perfgate]") else "perfgate.yaml"
        return f"from {where} slow_pair_rate"

    def diagnosis_thresholds(self) -> DiagnosisThresholds:
        """The diagnosis rules' thresholds: the defaults with this project's values."""
        return DiagnosisThresholds(**self.diagnosis)

    def thresholds_for(self, workload: str, config: str, *, threshold: float | None = None) -> Thresholds:
        """Thresholds for one workload and config: per-config override, then per-workload, then global.

        `threshold` (from the command line) replaces the global throughput threshold, not the overrides.
        """
        throughput = threshold if threshold is not None else self.threshold
        memory = self.memory_threshold
        values = {"throughput": throughput, "memory": memory}
        for key in (workload, f"*/{config}", f"{workload}/{config}"):  # least specific first
            values.update(self.thresholds.get(key, {}))
        return Thresholds(
            throughput=values["throughput"] if values["throughput"] is not None else DEFAULT_THRESHOLD,
            memory=values["memory"] if values["memory"] is not None else DEFAULT_MEMORY_TOLERANCE,
        )


def parse_fraction(value: Any, where: str) -> float:
    """`"5%"` or `0.05` to 0.05; anything ambiguous or out of range is a UsageError."""
    hint = 'write a percentage such as "5%" (or the fraction 0.05)'
    if isinstance(value, str):
        text = value.strip()
        if not text.endswith("%"):
            try:
                number = float(text)
            except ValueError:
                raise UsageError(f"{value!r} is not a percentage", where=where, hint=hint) from None
            return _fraction(number, value, where, hint)
        try:
            percent = float(text[:-1])
        except ValueError:
            raise UsageError(f"{value!r} is not a percentage", where=where, hint=hint) from None
        if not 0 < percent < 100:
            raise UsageError(f"{value!r} must be between 0% and 100%", where=where, hint=hint)
        return percent / 100
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _fraction(_as_float(value), value, where, hint)
    raise UsageError(f"{_shown(value)} is not a percentage", where=where, hint=hint)


def parse_count(value: Any, where: str) -> int:
    """A whole number of at least 1, from text or an int; anything else is a UsageError."""
    huge = isinstance(value, int) and abs(value) >= 10**MAX_DIGITS  # printing one of 5,000 digits is a ValueError
    text = "" if huge else str(value).strip()
    if isinstance(value, bool) or not text.lstrip("+").isdigit() or len(text.lstrip("+").lstrip("0")) > MAX_DIGITS:
        raise UsageError(f"expected a whole number, got {_shown(value)}", where=where, hint="give a count such as 3")
    count = int(text)
    if count < 1:
        raise UsageError(f"must be at least 1, got {count}", where=where, hint="give a count such as 3")
    return count


def parse_seconds(value: Any, where: str) -> float:
    """A positive number of seconds, from text or a number; anything else is a UsageError."""
    try:
        seconds = float(str(value).strip())
    except ValueError:
        raise UsageError(f"expected a number of seconds, got {value!r}", where=where) from None
    if isinstance(value, bool) or not seconds > 0:
        raise UsageError(f"must be positive, got {value}", where=where)
    return seconds


def _fraction(number: float, original: Any, where: str, hint: str) -> float:
    if 0 < number < 1:
        return number
    if number >= 1:
        raise UsageError(f"{_shown(original)} is ambiguous: a fraction must be below 1", where=where, hint=hint)
    raise UsageError(f"{_shown(original)} must be positive", where=where, hint=hint)


MAX_DIGITS = 18  # a count beyond this is no count anyone meant (and past what int() reads, an error of its own)


def _as_float(number: int | float) -> float:
    """`number` as a float; an integer too large for one (a 400-digit figure) is infinite, not an OverflowError."""
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def _shown(value: Any) -> str:
    """`value` as an error message quotes it: its repr, cut short when it is long (a 400-digit number)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond the digits Python will print
        return "a number too long to print"
    return text if len(text) <= 40 else f"{text[:16]}... ({len(text)} characters)"


def load_project_config(directory: Path | None = None) -> ProjectConfig:
    """Read `[tool.perfgate]` from pyproject.toml, else `perfgate.yaml`, in `directory` (default: cwd)."""
    directory = directory or Path.cwd()
    pyproject = directory / "pyproject.toml"
    section: Any = None
    source = None
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot parse pyproject.toml: {exc}", where=str(pyproject)) from exc
        section = data.get("tool", {}).get("perfgate")
        source = f"{pyproject} [tool.perfgate]"
    perfgate_yaml = directory / "perfgate.yaml"
    if section is None and perfgate_yaml.is_file():
        try:
            section = yaml.safe_load(perfgate_yaml.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise UsageError(
                f"cannot parse perfgate.yaml: {' '.join(str(exc).split())}", where=str(perfgate_yaml)
            ) from exc
        source = str(perfgate_yaml)
    if section is None:
        return ProjectConfig(base_dir=directory)
    assert source is not None
    if not isinstance(section, dict):
        raise UsageError("the perfgate settings must be a table of keys", where=source)
    return _parse(section, source, directory)


def _parse(section: dict[str, Any], source: str, directory: Path) -> ProjectConfig:
    for key in section:
        if key not in KEYS:
            raise UsageError(f"unknown key {key!r}", where=source, hint=_suggest(str(key), KEYS))
    workloads = section.get("workloads")
    if workloads is not None and (not isinstance(workloads, list) or not all(isinstance(w, str) for w in workloads)):
        hint = 'write workloads = ["perf/workloads.py:gpt_small"]'
        raise UsageError("workloads must be a list of strings", where=source, hint=hint)
    alpha = section.get("alpha")
    if alpha is not None:
        alpha = parse_fraction(alpha, f"{source} alpha")
    max_trials = section.get("max_trials")
    if max_trials is not None and (isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1):
        raise UsageError(f"max_trials must be a whole number of at least 1, got {max_trials!r}", where=source)
    nproc = section.get("nproc")
    if nproc is not None and (isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1):
        raise UsageError(f"nproc must be a whole number of at least 1, got {nproc!r}", where=source)
    thresholds: dict[str, dict[str, float]] = {}
    raw_thresholds = section.get("thresholds", {})
    if not isinstance(raw_thresholds, dict):
        raise UsageError(
            "thresholds must be a table", where=source, hint='write "vision-small" = { throughput = "10%" }'
        )
    for key, values in raw_thresholds.items():
        where = f"{source} thresholds.{key}"
        _check_threshold_key(str(key), where)
        if not isinstance(values, dict):
            hint = 'write { throughput = "10%", memory = "5%" }'
            raise UsageError("must be a table of metrics", where=where, hint=hint)
        parsed = {}
        for metric, value in values.items():
            if metric not in METRICS:
                raise UsageError(f"unknown metric {metric!r}", where=where, hint=_suggest(str(metric), METRICS))
            parsed[metric] = parse_fraction(value, f"{where}.{metric}")
        thresholds[str(key)] = parsed
    return ProjectConfig(
        source=source,
        base_dir=directory,
        workloads=workloads,
        threshold=_optional_fraction(section, "threshold", source),
        memory_threshold=_optional_fraction(section, "memory_threshold", source),
        alpha=alpha,
        max_trials=max_trials,
        nproc=nproc,
        thresholds=thresholds,
        benchmark_noise=_optional_fraction(section, "benchmark_noise", source),
        diagnosis=_diagnosis(section.get("diagnosis", {}), f"{source} diagnosis"),
        history=_folder(section, "history", source, directory),
        counts=_count_tolerances(section.get("counts", {}), f"{source} counts"),
        peak_tflops=_peak_tflops(section.get("peak_tflops", {}), f"{source} peak_tflops"),
        slow_pair_rate=_slow_pair_rate(section.get("slow_pair_rate"), f"{source} slow_pair_rate"),
        slow_pair_rate_date=_slow_pair_rate_date(section, source),
    )


def _slow_pair_rate(value: Any, where: str) -> float | None:
    """`slow_pair_rate = "5%"`: a share of pair-sides, strictly between 0 and 1."""
    if value is None:
        return None
    try:
        return parse_fraction(value, where)
    except UsageError as exc:
        hint = 'write the rate perfgate calibrate printed, such as slow_pair_rate = "5%" (or remove it: 5%)'
        raise UsageError(exc.what, where=where, hint=hint) from exc


def _slow_pair_rate_date(section: dict[str, Any], source: str) -> datetime.date | None:
    """`slow_pair_rate_date = 2026-11-28` (a TOML or YAML date, or that text): when calibrate measured the rate."""
    value = section.get("slow_pair_rate_date")
    if value is None:
        return None
    where = f"{source} slow_pair_rate_date"
    if section.get("slow_pair_rate") is None:
        hint = "add the slow_pair_rate perfgate calibrate printed, or remove the date"
        raise UsageError("a date without slow_pair_rate", where=where, hint=hint)
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise UsageError(f"{_shown(value)} is not a date", where=where, hint="write slow_pair_rate_date = 2026-11-28")


def _folder(section: dict[str, Any], key: str, source: str, directory: Path) -> Path | None:
    """A folder setting: a non-empty string, relative to the project's folder."""
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(
            f"{key} must be a folder path, got {value!r}", where=source, hint=f'write {key} = ".perfgate/{key}"'
        )
    return directory / value


def _diagnosis(values: Any, where: str) -> dict[str, float]:
    """`[tool.perfgate.diagnosis]`: names of DiagnosisThresholds' fields, each a positive number."""
    names = tuple(f.name for f in fields(DiagnosisThresholds))
    if not isinstance(values, dict):
        raise UsageError("diagnosis must be a table", where=where, hint="write data_wait_share = 0.3")
    parsed = {}
    for key, value in values.items():
        if key not in names:
            raise UsageError(f"unknown rule threshold {key!r}", where=where, hint=_suggest(str(key), names))
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < _as_float(value) < math.inf:
            raise UsageError(f"{key} must be a positive number, got {_shown(value)}", where=where)
        parsed[key] = float(value)
    return parsed


def _count_tolerances(values: Any, where: str) -> CountTolerances:
    """`[tool.perfgate.counts]`: CountTolerances' names, each a share ("2%", 0.02, 0 for any growth), a whole
    number of new breaks or recompiles, or "report"."""
    names = tuple(f.name for f in fields(CountTolerances))
    if not isinstance(values, dict):
        raise UsageError("counts must be a table", where=where, hint='write flops_per_sample = "2%"')
    parsed: dict[str, Any] = {}
    for key, value in values.items():
        if key not in names:
            raise UsageError(f"unknown count {key!r}", where=where, hint=_suggest(str(key), names))
        if value == REPORT:
            parsed[key] = REPORT
        elif key in ABSOLUTE_COUNTS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(
                    f"{key} must be a whole number of new ones (0 or more) or {REPORT!r}, got {value!r}",
                    where=f"{where}.{key}",
                    hint=f'write {key} = 0 (any new one fails) or {key} = "{REPORT}"',
                )
            parsed[key] = value
        elif (value.strip() if isinstance(value, str) else value) in (0, "0", "0%") and not isinstance(value, bool):
            parsed[key] = 0.0  # any growth fails
        else:
            try:
                parsed[key] = parse_fraction(value, f"{where}.{key}")
            except UsageError as exc:
                raise UsageError(
                    exc.what,
                    where=f"{where}.{key}",
                    hint=f'write a percentage such as "5%" (or 0.05), "0%" for any growth, or "{REPORT}"',
                ) from exc
    return CountTolerances(**parsed)


def _peak_tflops(values: Any, where: str) -> dict[str, float]:
    """`peak_tflops = {bf16 = 989, fp32 = 67}`: the GPU's dense peak TFLOP/s by PEAK_DTYPES, each a positive number."""
    hint = "write peak_tflops = {bf16 = 989, fp32 = 67} (dense TFLOP/s of one GPU)"
    if not isinstance(values, dict):
        raise UsageError("peak_tflops must be a table of TFLOP/s by dtype", where=where, hint=hint)
    parsed = {}
    for key, value in values.items():
        if key not in PEAK_DTYPES:
            raise UsageError(f"unknown dtype {key!r}", where=where, hint=_suggest(str(key), PEAK_DTYPES))
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < _as_float(value) < math.inf:
            raise UsageError(f"{key} must be a positive number of TFLOP/s, got {_shown(value)}", where=where, hint=hint)
        parsed[key] = float(value)
    return parsed


def _check_threshold_key(key: str, where: str) -> None:
    workload, slash, config = key.partition("/")
    if not workload or (slash and config not in CONFIG_NAMES):
        raise UsageError(
            f"bad key {key!r}",
            where=where,
            hint=f'use "WORKLOAD", "WORKLOAD/CONFIG" or "*/CONFIG" with CONFIG one of {", ".join(CONFIG_NAMES)}',
        )


def _optional_fraction(section: dict[str, Any], key: str, source: str) -> float | None:
    return None if section.get(key) is None else parse_fraction(section[key], f"{source} {key}")


def _suggest(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"known keys: {', '.join(choices)}"
