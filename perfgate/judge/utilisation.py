"""How much of the hardware a config's step uses: the counted FLOPs at the measured speed (achieved FLOP/s) and,
on a GPU whose peak is known, the share of its dense peak (model FLOPs utilisation, MFU).

Achieved FLOP/s is the FLOPs one step does per sample (`Counts.flops_per_sample`, counted outside the timed steps)
times the config's samples/s as the lab's table shows it (the median over trials). MFU divides that by the peak of
the devices the trial ran on: one GPU's dense peak for the config's dtype (`GPU_PEAKS`, or `[tool.perfgate]
peak_tflops`) times the ranks of a data-parallel trial. Pure functions of the records: nothing here imports torch.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence

from perfgate.project import PEAK_DTYPES
from perfgate.records.reading import PEAK_SETTING, GpuPeak, Utilisation, WorkloadUtilisation, is_mig
from perfgate.records.results import ConfigResult, TrialResult, WorkloadResult
from perfgate.records.shapes import Environment
from perfgate.variants import CONFIGS

# Dense peaks from NVIDIA's datasheets. The datasheets give tensor-core figures "with sparsity" (2:4 structured
# sparsity, which training does not use): the dense figure is half of it. bf16 is the tensor cores' rate with FP32
# accumulate, which autocast's matmuls and convolutions use (GeForce cards run it at half their FP16-accumulate rate).
#
# fp32 is the rate without tensor cores: perfgate's fp32 config leaves torch's defaults, under which matmuls do not
# use TF32 (torch.backends.cuda.matmul.allow_tf32 is False by default since torch 1.12). A trial does not record
# whether the workload turned TF32 on, nor the runner's process can know it: this is an assumption. Two things break
# it: cuDNN's convolutions use TF32 by default (torch.backends.cudnn.allow_tf32 is True), and a workload may allow
# it for matmuls (allow_tf32 = True, or torch.set_float32_matmul_precision("high")). An fp32 config above 100% of
# this peak is the sign; `[tool.perfgate] peak_tflops = {fp32 = ...}` with the GPU's TF32 figure is the remedy.
#
# The patterns match the names torch.cuda.get_device_name and NVML give ("NVIDIA H100 80GB HBM3" is the SXM,
# "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "Tesla T4"); the first that matches wins, so the more specific
# come first. A MIG slice ("... MIG 1g.10gb") has a share of the GPU's peak that its name does not say: no match.
GPU_PEAKS: tuple[GpuPeak, ...] = (
    # Hopper: NVIDIA H100 Tensor Core GPU datasheet (SXM, NVL and, in its 2022 edition, PCIe columns):
    # SXM FP32 67, BF16 1,979 sparse; NVL FP32 60, BF16 1,671 sparse; PCIe FP32 51, BF16 1,513 sparse.
    GpuPeak("H100 NVL", r"\bh100\b.*\bnvl\b", 835.5, 60.0),
    GpuPeak("H100 PCIe", r"\bh100\b.*\b(pcie|hbm2e)\b", 756.5, 51.0),
    GpuPeak("H100 SXM", r"\bh100\b", 989.5, 67.0),
    # NVIDIA H200 Tensor Core GPU datasheet: H200 SXM FP32 67, BF16 1,979 sparse; H200 NVL FP32 60, BF16 1,671.
    GpuPeak("H200 NVL", r"\bh200\b.*\bnvl\b", 835.5, 60.0),
    GpuPeak("H200", r"\bh200\b", 989.5, 67.0),
    # NVIDIA GH200 Grace Hopper Superchip datasheet: the Hopper GPU's FP32 67, BF16 1,979 sparse.
    GpuPeak("GH200", r"\bgh200\b", 989.5, 67.0),
    # NVIDIA HGX B200 datasheet, eight GPUs: FP32 600 TFLOPS, FP16/BF16 36 PFLOPS sparse; per GPU 75 and 4,500.
    GpuPeak("B200", r"\bb200\b", 2250.0, 75.0),
    # NVIDIA A100 Tensor Core GPU datasheet: SXM and PCIe alike, FP32 19.5, BF16 312 (624 sparse).
    GpuPeak("A100 PCIe", r"\ba100\b.*\bpcie\b", 312.0, 19.5),
    GpuPeak("A100 SXM", r"\ba100\b", 312.0, 19.5),
    # The A10G (AWS's G5 instances) has no NVIDIA datasheet; it is a GA102 board like the A10, whose figures are used
    # here (as Lightning's throughput utilities do): an assumption; peak_tflops overrides it.
    GpuPeak("A10G", r"\ba10g\b", 125.0, 31.2),
    # NVIDIA A10 Tensor Core GPU datasheet: FP32 31.2, BF16 125 (250 sparse).
    GpuPeak("A10", r"\ba10\b", 125.0, 31.2),
    # NVIDIA A40 datasheet: FP32 37.4, BF16 with FP32 accumulate 149.7 (299.4 sparse).
    GpuPeak("A40", r"\ba40\b", 149.7, 37.4),
    # NVIDIA L40S datasheet: FP32 91.6, BF16 362.05 (733 sparse).
    GpuPeak("L40S", r"\bl40s\b", 362.05, 91.6),
    # NVIDIA L40 datasheet: FP32 90.5, BF16 with FP32 accumulate 181.05 (362.1 sparse).
    GpuPeak("L40", r"\bl40\b", 181.05, 90.5),
    # NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, BF16 242 sparse.
    GpuPeak("L4", r"\bl4\b", 121.0, 30.3),
    # NVIDIA RTX 6000 Ada Generation datasheet (FP32 91.1; tensor 1,457 FP8 sparse) and the NVIDIA Ada GPU
    # architecture whitepaper's table: BF16 with FP32 accumulate 364.2 (728.5 sparse).
    GpuPeak("RTX 6000 Ada", r"\brtx 6000 ada\b", 364.2, 91.1),
    # NVIDIA RTX A6000 datasheet (FP32 38.7; tensor 309.7 sparse) and the NVIDIA Ampere GA102 GPU architecture
    # whitepaper's table: BF16 with FP32 accumulate 154.8 (309.7 sparse).
    GpuPeak("RTX A6000", r"\brtx a6000\b", 154.8, 38.7),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: FP32 82.6, BF16 with FP32 accumulate 165.2 (330.3
    # sparse). Anchored at the end: the RTX 4090 D and the laptop part are other chips.
    GpuPeak("RTX 4090", r"\brtx 4090$", 165.2, 82.6),
    # NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 3090: FP32 35.6, BF16 with FP32 accumulate 71
    # (142 sparse).
    GpuPeak("RTX 3090", r"\brtx 3090$", 71.0, 35.6),
    # NVIDIA V100 Tensor Core GPU datasheet: V100S PCIe FP32 16.4, V100 PCIe 14, V100 SXM2 15.7; Volta's tensor
    # cores have no bf16.
    GpuPeak("V100S PCIe", r"\bv100s\b", None, 16.4),
    GpuPeak("V100 PCIe", r"\bv100\b.*\bpcie\b", None, 14.0),
    GpuPeak("V100 SXM2", r"\bv100\b.*\bsxm2\b", None, 15.7),
    # NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1; Turing's tensor cores have no bf16.
    GpuPeak("T4", r"\bt4\b", None, 8.1),
)


def gpu_peak(device_name: str) -> GpuPeak | None:
    """The table's row for a CUDA device as torch or NVML name it (`NVIDIA H100 80GB HBM3`); None for a GPU the
    table lacks, and for a MIG slice."""
    name = " ".join(device_name.lower().split())
    if is_mig(name):
        return None
    return next((peak for peak in GPU_PEAKS if re.search(peak.pattern, name)), None)


def config_dtype(config: str) -> str:
    """Which peak applies to a config: `bf16` under bf16 autocast, else `fp32`."""
    known = CONFIGS.get(config)
    return "bf16" if known is not None and known.autocast_dtype == "bfloat16" else "fp32"


def cuda_device_name(environment: Environment | None, trials: Sequence[TrialResult]) -> str | None:
    """The CUDA device a run measured on, as the environment recorded it (torch.cuda.get_device_name), else as NVML
    named it to a trial's system sampler (`GpuFacts.name`); None where neither did."""
    device = None if environment is None else environment.device
    if device is not None and device.type == "cuda" and device.name:
        return device.name
    return next((t.system.gpu.name for t in trials if t.system is not None and t.system.gpu is not None), None)


def config_utilisation(
    config: ConfigResult, *, gpu: GpuPeak | None, ranks: int = 1, peak_tflops: Mapping[str, float] | None = None
) -> Utilisation | None:
    """One config's achieved FLOP/s and, with a peak (`peak_tflops` first, then the `gpu`'s), its MFU; None where no
    good trial counted its FLOPs or none was timed. `gpu` is None on the CPU and on a GPU the table lacks."""
    counted = [t.counts.flops_per_sample for t in config.trials if t.ok and t.counts is not None]
    flops = [f for f in counted if f is not None]
    timed = any(t.ok and t.samples_per_sec > 0 for t in config.trials)  # `--counts-only` times nothing
    summary = config.summary if flops and timed else None
    if summary is None:
        return None
    flops_per_sample = statistics.median(flops)  # exact counts: every trial's is the same
    dtype = config_dtype(config.config)
    tflops, source = None, None
    if peak_tflops and dtype in peak_tflops:
        tflops, source = peak_tflops[dtype], PEAK_SETTING
    elif gpu is not None and gpu.tflops(dtype) is not None:
        tflops, source = gpu.tflops(dtype), gpu.model
    return Utilisation(
        config=config.config,
        dtype=dtype,
        flops_per_sample=flops_per_sample,
        achieved_flops_per_s=flops_per_sample * summary.samples_per_sec.median,
        peak_flops_per_s=None if tflops is None else tflops * 1e12 * ranks,
        peak_from=source,
    )


def workload_utilisation(
    workload: WorkloadResult,
    environment: Environment | None = None,
    peak_tflops: Mapping[str, float] | None = None,
) -> WorkloadUtilisation | None:
    """Each config's `Utilisation` on the device the workload ran on (`environment`: the run's, `RunResult.
    environment`); `peak_tflops` (`[tool.perfgate]`, by `PEAK_DTYPES`) replaces the table's peaks on a GPU, never
    on the CPU. None where no config's FLOPs were counted (files written before perfgate counted them)."""
    trials = [t for c in workload.configs.values() for t in c.trials if t.ok]
    counts = next((t.counts for t in trials if t.counts is not None and t.counts.flops_per_sample is not None), None)
    if counts is None:
        return None
    on_gpu = counts.device == "cuda"
    name = cuda_device_name(environment, trials) if on_gpu else None
    gpu = gpu_peak(name) if name is not None else None
    ranks = int(workload.settings.nproc or 1)
    given = {k: v for k, v in (peak_tflops or {}).items() if k in PEAK_DTYPES} if on_gpu else {}
    configs = {}
    for config_name, config in workload.configs.items():
        use = config_utilisation(config, gpu=gpu, ranks=ranks, peak_tflops=given)
        if use is not None:
            configs[config_name] = use
    return WorkloadUtilisation(device=counts.device, gpu_name=name, gpu=gpu, ranks=ranks, configs=configs)
