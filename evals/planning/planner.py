"""`kqe plan`: does a checkpoint fit a GPU under vLLM, what does its KV cache hold, and what to change
when it does not (pure core; the arithmetic is in `evals/planning/vllm_memory.py`).

OOM patterns (DESIGN.md §1) as the planner decides them:
- A: the weights per GPU exceed the GPU's memory: loading fails with CUDA out of memory.
- B with fits = False: weights + overhead leave not one KV block in the budget (vLLM: "No available
  memory for the cache blocks"), or a fixed KV pool does not fit beside them.
  B with fits = True: the cache holds fewer than max_num_seqs requests of max_model_len: at full
  load with long requests vLLM preempts.
- C: the cache holds blocks but not one request of max_model_len: vLLM refuses to start and prints
  the estimated maximum model length, which `estimated_max_model_len` reproduces.
- D (another process holds the GPU) cannot be planned; `kqe doctor` names it from a log.
`fits` means vLLM starts and serves one request of max_model_len.

Advice (`plan_evaluation.py` beside it) follows the guide's order: parameters, quantization, tensor parallel,
prefix caching and chunked prefill; each option is re-planned, so its line says what it would buy.
"""

from __future__ import annotations

from typing import Literal

from evals.planning.plan_evaluation import Evaluation, Pattern, advice, evaluate, without_native_fp8
from evals.planning.vllm_memory import (
    BATCHES_IN_FLIGHT,
    PlanRequest,
    batched_tokens,
    kv_bytes_per_token,
    overhead_parts,
    valid_tensor_parallel_sizes,
)
from kqe.core.errors import UserError
from kqe.core.records import EngineSettings, MemoryReport, Record
from kqe.core.schemes import scheme_info


class Plan(Record):
    """What `kqe plan` predicts for one checkpoint on one GPU type (per GPU under tensor parallel)."""

    model: str
    scheme: str
    gpu: str | None
    engine: Literal["gpu", "cpu"]
    gpu_gib: float | None
    """Memory of one GPU, GiB as the driver reports it."""
    tensor_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    kv_cache_mode: Literal["utilization", "fixed"]
    """`utilization`: the KV cache gets what the utilization budget leaves; `fixed`: a given pool."""
    weights_gib: float
    """Weights one GPU holds."""
    overhead_gib: float | None
    """Activation peak + sampler + CUDA graphs + non-torch buffers per GPU (GPU engine only)."""
    kv_bytes_per_token: int
    """2 × layers × KV heads × head_dim × KV dtype bytes: one token's K and V over the whole model."""
    kv_cache_gib: float
    """KV cache per GPU."""
    kv_cache_tokens: int
    """Tokens the KV cache holds, counted as vLLM logs them (concurrency × max_model_len)."""
    max_concurrency: float
    """Requests of max_model_len tokens the KV cache holds at once."""
    estimated_max_model_len: int | None
    """Longest max_model_len the KV cache holds, when max_model_len does not fit (pattern C)."""
    fits: bool
    """vLLM starts and serves one request of max_model_len."""
    pattern: Pattern | None
    """The OOM pattern these settings meet (see the module doc), None when none."""
    summary: str
    """One line: fits or not, and the pattern."""
    advice: list[str]
    """What to try, in the guide's order, each with what it would buy."""
    notes: list[str]
    """Caveats: the overhead model, sliding-window layers, FP8 on Ampere, replicated KV heads."""
    valid_tensor_parallel_sizes: list[int]
    """Tensor parallel sizes vLLM accepts for this model and scheme."""

    def memory_report(self, profile: str | None = None) -> MemoryReport:
        """The plan as a memory record, comparable with what vLLM logged; `profile` names the serve
        profile it was planned under, where the record leaves its run."""
        shared = self.model_dump(include=_MEMORY_FIELDS)
        return MemoryReport(source="planner", device=self.engine, profile=profile, **shared)


_MEMORY_FIELDS = set(Plan.model_fields) & set(MemoryReport.model_fields)
"""What a plan and a `MemoryReport` both state, under the same names: weights, KV cache, tokens,
concurrency, max_model_len, whether it fits and the one-line summary."""

_PLANNED_SETTINGS = set(Plan.model_fields) & set(EngineSettings.model_fields)
"""The engine settings a plan records of its request (a plan's format predates `EngineSettings`: it
keeps these few, flat)."""


def validate(req: PlanRequest) -> None:
    """UserError (one line naming the option and the fix) for settings vLLM would reject."""
    model = req.model
    scheme_info(req.scheme)  # raises for an unknown scheme
    kv_bytes_per_token(model, req.kv_cache_dtype)  # raises for an unknown KV dtype
    if not 0 < req.gpu_memory_utilization <= 1:
        raise UserError(
            f"--gpu-memory-utilization {req.gpu_memory_utilization} is outside (0, 1]: use 0.92–0.95 "
            "on a dedicated GPU, at most 0.80 on a shared one"
        )
    if not 1 <= req.max_model_len <= model.max_context:
        raise UserError(
            f"--max-model-len {req.max_model_len} is outside 1..{model.max_context}, "
            f"{model.name}'s context: use at most {model.max_context}"
        )
    if req.max_num_seqs < 1:
        raise UserError(f"--max-num-seqs {req.max_num_seqs} must be at least 1")
    _check_batched_tokens(req)
    _check_tensor_parallel(req)
    if req.engine == "gpu" and not (req.gpu_gib and req.gpu_gib > 0):
        raise UserError("no GPU memory to plan for: give --gpu NAME or --gpu-gib N (GiB per GPU)")
    if req.engine == "cpu" and req.kv_cache_gib is None:
        raise UserError("the CPU engine sizes its KV cache explicitly: give --kv-cache-gib N")
    if req.kv_cache_gib is not None and req.kv_cache_gib <= 0:
        raise UserError(f"--kv-cache-gib {req.kv_cache_gib} must be above 0")


def _check_batched_tokens(req: PlanRequest) -> None:
    """What vLLM 0.32's scheduler refuses at start (`SchedulerConfig.verify_max_model_len`) of a
    `--max-num-batched-tokens` given (vLLM's defaults satisfy it)."""
    tokens = req.max_num_batched_tokens
    if tokens is None:
        return
    if tokens < req.max_num_seqs:
        raise UserError(
            f"--max-num-batched-tokens {tokens} is below --max-num-seqs {req.max_num_seqs}, which vLLM "
            f"refuses: give at least {req.max_num_seqs}"
        )
    if tokens < req.max_model_len and not req.enable_chunked_prefill:
        raise UserError(
            f"--max-num-batched-tokens {tokens} is below --max-model-len {req.max_model_len} without "
            f"chunked prefill, which vLLM refuses: give at least {req.max_model_len}, or chunked prefill"
        )


def _check_tensor_parallel(req: PlanRequest) -> None:
    model, tp = req.model, req.tensor_parallel_size
    valid = valid_tensor_parallel_sizes(model, req.scheme)
    if tp in valid:
        return
    group = scheme_info(req.scheme).group_size
    why = f"{model.heads} attention heads and {model.kv_heads} KV heads"
    if group:
        why += f", and {req.scheme} needs MLP width {model.intermediate} / size to be a multiple of {group}"
    raise UserError(
        f"--tensor-parallel-size {tp} does not fit {model.name} ({why}): valid sizes are "
        f"{', '.join(map(str, valid))}"
    )


def plan(req: PlanRequest) -> Plan:
    """The plan for one request (UserError for settings vLLM would reject)."""
    validate(req)
    ev = evaluate(req)
    return Plan(
        model=req.model.name,
        scheme=req.scheme,
        gpu=req.gpu,
        engine=req.engine,
        gpu_gib=req.gpu_gib,
        **req.model_dump(include=_PLANNED_SETTINGS),
        kv_cache_mode="fixed" if req.kv_cache_gib is not None else "utilization",
        weights_gib=round(ev.weights_gib, 2),
        overhead_gib=None if ev.overhead_gib is None else round(ev.overhead_gib, 2),
        kv_bytes_per_token=kv_bytes_per_token(req.model, req.kv_cache_dtype),
        kv_cache_gib=round(ev.kv_gib, 2),
        kv_cache_tokens=ev.capacity.tokens if ev.fits else 0,
        max_concurrency=round(ev.capacity.max_concurrency, 2) if ev.fits else 0.0,
        estimated_max_model_len=ev.capacity.estimated_max_model_len,
        fits=ev.fits,
        pattern=ev.pattern,
        summary=summary(ev),
        advice=advice(ev),
        notes=notes(ev),
        valid_tensor_parallel_sizes=valid_tensor_parallel_sizes(req.model, req.scheme),
    )


def summary(ev: Evaluation) -> str:
    """One line: fits or not, and why."""
    req, cap = ev.req, ev.capacity
    if ev.pattern == "A":
        return f"does not fit: pattern A, weights {ev.weights_gib:.1f} GiB per GPU > {req.gpu_gib:.1f} GiB"
    if ev.pattern == "C":
        return (
            f"does not fit: pattern C, one {req.max_model_len:,}-token request exceeds the KV cache "
            f"({ev.kv_gib:.2f} GiB); longest {cap.estimated_max_model_len:,}"
        )
    if not ev.fits:
        return f"does not fit: pattern B, no room for the KV cache beside {ev.weights_gib:.1f} GiB of weights"
    if ev.pattern == "B":
        return (
            f"fits, but pattern B at full load: the KV cache holds {cap.max_concurrency:.2f} of "
            f"{req.max_num_seqs} requests of {req.max_model_len:,} tokens; vLLM preempts beyond that"
        )
    return (
        f"fits: {cap.max_concurrency:.2f}× {req.max_model_len:,}-token requests, "
        f"≥ max-num-seqs {req.max_num_seqs}"
    )


def notes(ev: Evaluation) -> list[str]:
    """Caveats that hold whatever the pattern."""
    req, model = ev.req, ev.req.model
    lines = []
    if req.engine == "gpu":
        parts = ", ".join(f"{name} {gib:.2f}" for name, gib in overhead_parts(req).items())
        lines.append(
            f"overhead {ev.overhead_gib:.2f} GiB per GPU is a model ({parts} GiB), not a measurement: "
            "vLLM measures it at start-up; its non-torch and CUDA-graph parts are medians of real GPU "
            "logs (`kqe plan --check-logs` shows how far plans are from them)"
        )
    if model.sliding_window and model.sliding_window_layers:
        in_flight = BATCHES_IN_FLIGHT[req.engine] * batched_tokens(req)
        kept = min(model.sliding_window - 1 + in_flight, req.max_model_len)
        lines.append(
            f"{model.name}: {model.sliding_window_layers} of {model.layers} layers attend to a "
            f"{model.sliding_window}-token window; vLLM keeps {kept:,} of their tokens per request "
            f"(window − 1 + {in_flight:,} in flight, at most max-model-len), so tokens per GiB grow with "
            "max-model-len; kv_bytes_per_token counts every layer"
        )
    if req.scheme.startswith("fp8") and without_native_fp8(req):
        lines.append(
            f"FP8 on SM {req.compute_capability} (Ampere): vLLM runs the weights as W8A16 (Marlin): the "
            "memory of this plan, but no FP8 speed-up; native FP8 needs SM ≥ 8.9"
        )
    if req.tensor_parallel_size > model.kv_heads:
        lines.append(
            f"{req.tensor_parallel_size} GPUs > {model.kv_heads} KV heads: every GPU keeps a replica of "
            "one KV head, so the KV cache per token does not shrink further"
        )
    return lines
