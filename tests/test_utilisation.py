"""Achieved FLOP/s and model FLOPs utilisation: the counted FLOPs per sample at the lab's samples/s, over the GPU's
dense peak where perfgate's table (or `[tool.perfgate] peak_tflops`) knows it.

Records are built by hand (`tests.helpers.results`) with known counts and speeds, and read by the real functions
and reports: no trial runs, no GPU is needed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from perfgate.app.judging import judge, read_run
from perfgate.errors import UsageError
from perfgate.judge.utilisation import GPU_PEAKS, gpu_peak, workload_utilisation
from perfgate.judge.verdict import compare_results
from perfgate.project import ProjectConfig, load_project_config
from perfgate.records.results import Against, ConfigResult, RunResult
from perfgate.records.shapes import Counts, Environment
from perfgate.records.verdicts import GateSettings
from perfgate.report.json import gate_to_dict
from perfgate.report.markdown import format_lab_markdown, format_markdown
from perfgate.report.render import lab_to_dict
from perfgate.report.text import format_run
from tests.helpers.results import BASE_MS, phased_run

H100 = "NVIDIA H100 80GB HBM3"
# fp32: 6.7e9 FLOPs a sample at 1,000 samples/s is 6.7 TFLOP/s, 10% of the H100 SXM's 67; bf16: 1e11 at 3,000 is
# 300 TFLOP/s, 30.3% of its 989.5.
FP32_FLOPS, FP32_SPS = 6.7e9, 1000.0
BF16_FLOPS, BF16_SPS = 1e11, 3000.0


def counts(flops_per_sample: float | None, device: str = "cuda") -> Counts:
    return Counts(
        device=device,
        parameters=1000,
        trainable_parameters=1000,
        flops_per_sample=flops_per_sample,
        operators_per_step=100,
        kernels_per_step=120 if device == "cuda" else None,
        allocated_peak_bytes=1 << 20,
        allocated_kind="cuda-max-allocated" if device == "cuda" else "cpu-live-storage",
        graphs=None,
        graph_breaks=None,
        recompiles=None,
    )


def config(name: str, base: ConfigResult, sps: float, flops: float | None, device: str) -> ConfigResult:
    """`base`'s trials as config `name`, each at `sps` samples/s (the median too), with counts of `flops`."""
    trials = [
        dataclasses.replace(
            t, config=name, samples_per_sec=sps, counts=None if flops is None else counts(flops, device)
        )
        for t in base.trials
    ]
    return ConfigResult(name, trials)


def lab_run(
    gpu: str | None = H100,
    fp32: float | None = FP32_FLOPS,
    bf16: float | None = BF16_FLOPS,
    *,
    fp32_sps: float = FP32_SPS,
    nproc: int | None = None,
) -> RunResult:
    """Workload w's fp32 and bf16 configs, three trials each, on the CUDA device `gpu` (None: the CPU)."""
    run = phased_run(BASE_MS)
    workload = run.workloads[0]
    device = "cpu" if gpu is None else "cuda"
    base = workload.configs["fp32"]
    configs = {
        "fp32": config("fp32", base, fp32_sps, fp32, device),
        "bf16": config("bf16", base, BF16_SPS, bf16, device),
    }
    settings = dataclasses.replace(workload.settings, device=device, nproc=nproc or None)
    environment = (
        run.environment
        if gpu is None
        else Environment.from_dict(
            {"device": {"type": "cuda", "name": gpu, "count": 1}, "cuda": "12.4", "torch": "2.5.0"}
        )
    )
    workload = dataclasses.replace(workload, settings=settings, configs=configs)
    return dataclasses.replace(run, environment=environment, workloads=[workload])


def table_row(text: str, config_name: str) -> list[str]:
    """The lab table's row of a config, split at its column gaps."""
    row = next(line for line in text.splitlines() if line.startswith(f"  {config_name} "))  # before the reading
    return [cell.strip() for cell in row.strip().split("  ") if cell]


# -- the peak table --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla T4", "T4"),
        # not in the table: another chip behind a similar name, a MIG slice, an older card
        ("NVIDIA GeForce RTX 4090 D", None),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", None),
        ("NVIDIA GeForce GTX 1080", None),
        ("NVIDIA L20", None),
    ],
)
def test_a_cuda_device_name_finds_its_gpu_model_in_the_peak_table(name, model):
    found = gpu_peak(name)
    assert (found.model if found else None) == model


def test_the_peak_table_gives_dense_figures_and_no_bf16_where_the_tensor_cores_have_none():
    peaks = {p.model: p for p in GPU_PEAKS}
    assert (peaks["H100 SXM"].bf16_tflops, peaks["H100 SXM"].fp32_tflops) == (989.5, 67.0)  # 1,979 sparse / 2
    assert (peaks["A100 SXM"].bf16_tflops, peaks["A100 PCIe"].bf16_tflops) == (312.0, 312.0)
    assert peaks["T4"].bf16_tflops is None and peaks["V100 SXM2"].bf16_tflops is None
    assert all(p.bf16_tflops is None or p.bf16_tflops > p.fp32_tflops for p in GPU_PEAKS)
    assert len({p.model for p in GPU_PEAKS}) == len(GPU_PEAKS)


# -- on a GPU the table knows ----------------------------------------------------------------------------


def test_an_h100_run_shows_each_configs_share_of_the_h100s_dense_peak_for_its_dtype():
    run = lab_run()
    use = workload_utilisation(run.workloads[0], run.environment)
    assert use is not None and use.gpu is not None and use.gpu.model == "H100 SXM"
    fp32, bf16 = use.configs["fp32"], use.configs["bf16"]
    assert fp32.achieved_flops_per_s == pytest.approx(6.7e12) and fp32.mfu == pytest.approx(0.10)
    assert bf16.achieved_flops_per_s == pytest.approx(3e14) and bf16.mfu == pytest.approx(300 / 989.5)
    text = format_run(read_run(run))
    assert "FLOP/s (MFU)" in text.splitlines()[1]
    assert table_row(text, "fp32")[1:3] == ["1,000.0 ±0.0%", "6.70 TFLOP/s (10%)"]
    assert table_row(text, "bf16")[1:3] == ["3,000.0 ±0.0%", "300 TFLOP/s (30%)"]


def test_the_lab_reading_says_each_configs_share_of_the_gpus_peak():
    line = (
        "Model FLOPs utilisation (counted FLOPs x samples/s over the dense peak): fp32: 10% of the H100 SXM's peak "
        "(6.70 TFLOP/s of 67 TFLOP/s); bf16: 30% (300 TFLOP/s of 989.5 TFLOP/s)."
    )
    run = lab_run()
    assert f"  {line}" in format_run(read_run(run)).splitlines()
    assert f"- {line}" in format_lab_markdown(read_run(run))
    assert line in lab_to_dict(read_run(run))["workloads"][0]["reading"]


def test_a_data_parallel_trial_is_measured_against_the_peak_of_all_its_gpus():
    run = lab_run(nproc=2)
    use = workload_utilisation(run.workloads[0], run.environment)
    assert use is not None and use.configs["bf16"].mfu == pytest.approx(300 / (2 * 989.5))
    assert "fp32: 5% of 2 H100 SXMs' peak (6.70 TFLOP/s of 134 TFLOP/s); bf16: 15% (300 TFLOP/s of 1979" in format_run(
        read_run(run)
    )


def test_an_fp32_config_above_the_fp32_peak_is_read_as_tf32_at_work():
    run = lab_run(fp32_sps=FP32_SPS * 12)  # 80.4 TFLOP/s: more than an H100's 67 without tensor cores
    assert "fp32: 120% of the H100 SXM's peak" in format_run(read_run(run))
    assert "fp32 is above the fp32 peak: TF32 tensor cores did part of the work" in format_run(read_run(run))
    assert "TF32" not in format_run(read_run(lab_run()))


def test_a_gpu_without_bf16_tensor_cores_shows_bf16_as_achieved_flops_only():
    run = lab_run("Tesla T4", fp32=8.1e8)  # 0.81 TFLOP/s: 10% of the T4's 8.1
    text = format_run(read_run(run))
    assert table_row(text, "fp32")[2] == "810 GFLOP/s (10%)"
    assert table_row(text, "bf16")[2] == "300 TFLOP/s"
    assert (
        "fp32: 10% of the T4's peak (810 GFLOP/s of 8.1 TFLOP/s); bf16: 300 TFLOP/s (the T4 has no bf16 peak)" in text
    )


# -- an unknown GPU, the project's peak, the CPU ---------------------------------------------------------


def test_an_unknown_gpu_gets_its_achieved_flops_and_no_share():
    run = lab_run("NVIDIA GeForce GTX 1080")
    use = workload_utilisation(run.workloads[0], run.environment)
    assert use is not None and use.gpu is None
    assert use.configs["bf16"].achieved_flops_per_s == pytest.approx(3e14) and use.configs["bf16"].mfu is None
    text = format_run(read_run(run))
    assert table_row(text, "bf16")[2] == "300 TFLOP/s"
    assert (
        "  Achieved FLOP/s (counted FLOPs per sample x samples/s): fp32: 6.70 TFLOP/s; bf16: 300 TFLOP/s; perfgate "
        "knows no peak for the NVIDIA GeForce GTX 1080: peak_tflops in [tool.perfgate] gives it."
    ) in text.splitlines()
    fp32 = lab_to_dict(read_run(run))["workloads"][0]["configs"][0]
    assert fp32["achieved_flops_per_s"] == pytest.approx(6.7e12) and fp32["mfu"] is None


def test_the_projects_peak_tflops_wins_over_the_table_for_the_dtypes_it_gives(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\npeak_tflops = {bf16 = 500}\n")
    peaks = load_project_config(tmp_path).peak_tflops
    assert peaks == {"bf16": 500.0}
    run = lab_run()
    use = workload_utilisation(run.workloads[0], run.environment, peaks)
    assert use is not None
    assert use.configs["bf16"].mfu == pytest.approx(0.6) and use.configs["bf16"].peak_from == "peak_tflops"
    assert use.configs["fp32"].mfu == pytest.approx(0.10)  # fp32 keeps the table's 67
    text = format_run(read_run(run, peaks))
    assert table_row(text, "bf16")[2] == "300 TFLOP/s (60%)"
    assert "; bf16: 60% of the peak_tflops in [tool.perfgate] (300 TFLOP/s of 500 TFLOP/s)." in text
    unknown = lab_run("NVIDIA GeForce GTX 1080")  # the setting gives a peak the table lacks
    assert table_row(format_run(read_run(unknown, peaks)), "bf16")[2] == "300 TFLOP/s (60%)"


def test_a_cpu_run_shows_achieved_flops_alone_whatever_the_project_says():
    run = lab_run(None, fp32=1.23e7, bf16=None)  # 1.23e7 FLOPs a sample at 1,000 samples/s
    text = format_run(read_run(run, {"fp32": 1.0}))
    assert table_row(text, "fp32")[2] == "12.3 GFLOP/s"
    assert table_row(text, "bf16")[2] == "-"  # its FLOPs were not counted
    assert "  Achieved FLOP/s (counted FLOPs per sample x samples/s): fp32: 12.3 GFLOP/s." in text.splitlines()
    assert "%)" not in table_row(text, "fp32")[2] and "utilisation" not in text
    assert "| fp32 | 1,000.0 ±0.0% | 12.3 GFLOP/s |" in format_lab_markdown(read_run(run))


def test_a_run_without_counts_has_no_flops_column_and_no_utilisation_line():
    run = lab_run(fp32=None, bf16=None)  # files written before perfgate counted
    assert workload_utilisation(run.workloads[0], run.environment) is None
    text = format_run(read_run(run))
    assert "FLOP/s" not in text
    assert "FLOP/s" not in format_lab_markdown(read_run(run))
    configs = lab_to_dict(read_run(run))["workloads"][0]["configs"]
    assert [(c["achieved_flops_per_s"], c["mfu"]) for c in configs] == [(None, None), (None, None)]


def test_a_counts_only_run_times_nothing_so_achieves_nothing():
    run = lab_run(fp32_sps=0.0)
    use = workload_utilisation(run.workloads[0], run.environment)
    assert use is not None and "fp32" not in use.configs and "bf16" in use.configs


# -- a check's reports -----------------------------------------------------------------------------------


def test_a_checks_markdown_and_json_carry_the_heads_utilisation_with_the_projects_peak():
    head = lab_run()
    base = lab_run()
    paired = dataclasses.replace(head, against=Against("main", "0123456789abcdef", None, True, base))
    settings = GateSettings(project=ProjectConfig(peak_tflops={"fp32": 33.5}), first_n=3, max_n=3)
    result = compare_results(paired, settings)
    assert "fp32: 20% of the peak_tflops in [tool.perfgate] (6.70 TFLOP/s of 33.5 TFLOP/s)" in format_markdown(
        judge(result, diagnosed=False)
    )
    configs = json.loads(json.dumps(gate_to_dict(judge(result, diagnosed=False))))["workloads"][0]["configs"]
    by_name = {c["config"]: c for c in configs}
    assert by_name["fp32"]["mfu"] == pytest.approx(0.2)
    assert by_name["bf16"]["mfu"] == pytest.approx(300 / 989.5)
    assert by_name["bf16"]["achieved_flops_per_s"] == pytest.approx(3e14)


# -- [tool.perfgate] peak_tflops -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("989", "peak_tflops must be a table of TFLOP/s by dtype"),
        ("{fp16 = 989}", "unknown dtype 'fp16'"),
        ("{bf16 = -1}", "bf16 must be a positive number of TFLOP/s, got -1"),
        ("{bf16 = 0}", "bf16 must be a positive number of TFLOP/s, got 0"),
        ('{fp32 = "67"}', "fp32 must be a positive number of TFLOP/s, got '67'"),
        ("{fp32 = true}", "fp32 must be a positive number of TFLOP/s, got True"),
        ("{fp32 = inf}", "fp32 must be a positive number of TFLOP/s, got inf"),
    ],
)
def test_a_bad_peak_tflops_is_refused_in_one_line_naming_it(tmp_path, value, message):
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\npeak_tflops = {value}\n")
    with pytest.raises(UsageError) as raised:
        load_project_config(tmp_path)
    line = raised.value.one_line()
    assert line.startswith(f"{message} ({tmp_path / 'pyproject.toml'} [tool.perfgate] peak_tflops); ")
    assert "\n" not in line
