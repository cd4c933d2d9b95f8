"""The registry of message shapes `kqe doctor` recognises: vLLM's out-of-memory, KV-cache,
context-length and device-occupancy messages from 0.5 to 0.32 (V0 and V1 engines, GPU and CPU
builds), PyTorch's CUDA allocator's, its periodic stats lines and `nvidia-smi`'s process table.

Each shape names the versions whose format string it follows and where that string is raised; every
message of `tests/data/vllm_messages/corpus.toml` is one of them, with its own version and file:line.
A space in a shape's pattern matches any run of whitespace or none, so a message the terminal wrapped
and the scanner joined back (`evals/serving/doctor/log_scan.py`) still matches; "GiB"/"GB", a typo fixed
between versions or a device name added are alternatives within one shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_N = r"\d[\d,]*(?:\.\d+)?"
_GIB = r"Gi?B"  # "GB" in vLLM 0.7's V1 KV message, "GiB" before and after
_SIZE = rf"{_N} (?:[KMG]iB|bytes)"


@dataclass(frozen=True)
class Shape:
    """One message as vLLM or PyTorch prints it, across the versions it covers."""

    name: str
    regex: re.Pattern[str]
    versions: str
    """The vLLM (or PyTorch) versions whose wording this shape follows."""
    source: str
    """Where the message is raised, in the newest version listed."""


def _tolerant(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace(" ", r"\s*"))


def _shape(name: str, pattern: str, versions: str, source: str) -> Shape:
    return Shape(name, _tolerant(pattern), versions, source)


# --- D: another process holds or changes the device memory ------------------------------------------
FREE_AT_STARTUP = _shape(
    "free_at_startup",
    rf"Free memory on device (?:(?P<device>[^\s(]+) )?\((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup "
    rf"is less than desired GPU memory utilization \((?P<util>{_N}), (?P<want>{_N}) GiB\)",
    "V1 0.9–0.11 (no device name), 0.32 (with it)",
    "vllm/v1/worker/utils.py:763 (0.32); vllm/v1/worker/gpu_worker.py:146–188 (0.9–0.11)",
)
CPU_AT_STARTUP = _shape(
    "cpu_at_startup",
    rf"Available memory on node \d+ \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup is less than "
    rf"desired CPU memory utilization \((?P<util>{_N}), (?P<want>{_N}) GiB\)",
    "V1 CPU 0.32",
    "vllm/v1/worker/cpu_worker.py:87",
)
PROFILING_ERROR = _shape(
    "profiling_error",
    rf"Error in memory profiling\. Initial (?P<kind>free|used) memory (?P<before>{_N})(?P<gib> GiB)?, "
    rf"current(?:ly)? (?:free|used) memory (?P<after>{_N})",
    "V0 0.5–0.6 and V1 0.7–0.8 (free bytes), V0 0.7–0.10 (used bytes), V1 0.9–0.32 (free GiB)",
    "vllm/v1/worker/gpu_worker.py:720 (0.32); vllm/worker/worker.py:232–339 (V0)",
)
CPU_KV_TOO_BIG = _shape(
    "cpu_kv_too_big",
    rf"Available memory on node \d+ \((?P<free>{_N})/(?P<total>{_N}) GiB\) on kv cache allocation is "
    rf"less than requested memory for kv \((?P<want>{_N}) GiB\)",
    "V1 CPU 0.32",
    "vllm/v1/worker/cpu_worker.py:219",
)
# PyTorch c10/cuda/CUDACachingAllocator.cpp: "capacty" in 2.1, "capacity" from 2.2.
TORCH_OOM = _shape(
    "torch_oom",
    rf"CUDA out of memory\. Tried to allocate (?P<size>{_N} [KMG]iB)\. GPU (?P<gpu>\d*) ?has a total "
    rf"capac(?:i)?ty of (?P<total>{_N}) GiB of which (?P<free>{_SIZE}) is free",
    "PyTorch 2.1–2.13",
    "c10/cuda/CUDACachingAllocator.cpp (TORCH_CHECK_WITH(OutOfMemoryError, …))",
)
TORCH_OOM_OLD = _shape(
    "torch_oom_old",
    rf"CUDA out of memory\. Tried to allocate (?P<size>{_N} [KMG]iB) \(GPU (?P<gpu>\d+); (?P<total>{_N}) "
    rf"GiB total capacity;[^)]*? (?P<free>{_SIZE}) free;",
    "PyTorch ≤ 2.0",
    "c10/cuda/CUDACachingAllocator.cpp",
)
ANY_CUDA_OOM = _shape(
    "any_cuda_oom",
    r"CUDA out of memory(?! occurred when warming)|torch\.(?:cuda\.)?OutOfMemoryError"
    r"|CUDA error: out of memory",
    "PyTorch (any), CUDA runtime",
    "c10/cuda/CUDACachingAllocator.cpp",
)
OTHER_PROCESS = _tolerant(rf"Process (?P<pid>\d+) has (?P<size>{_N} [KMG]iB) memory in use")
THIS_PROCESS = _tolerant(rf"Including non-PyTorch memory, this process has (?P<size>{_N} [KMG]iB)")

# --- A: the weights do not fit ------------------------------------------------------------------------
LOAD_FAILED = _shape(
    "load_failed",
    r"Failed to load model - not enough GPU memory",
    "V1 0.32",
    "vllm/v1/worker/gpu_model_runner.py:5140",
)

# --- B: the KV cache gets too little memory -----------------------------------------------------------
NO_CACHE_BLOCKS = _shape(
    "no_cache_blocks",
    r"No available memory for the cache blocks",
    "V0 0.5–0.10 (GPU and CPU), V1 0.7–0.32",
    "vllm/v1/core/kv_cache_utils.py:1011 (0.32); vllm/worker/worker.py, cpu_worker.py (V0)",
)
SAMPLER_WARMUP = _shape(
    "sampler_warmup",
    r"CUDA out of memory occurred when warming up sampler with (?P<n>\d+) dummy",
    "V1 0.8–0.32",
    "vllm/v1/worker/gpu_model_runner.py:5991 (0.32)",
)
GRAPH_CAPTURE = re.compile(r"Capturing (?:CUDA graphs|cudagraphs|the model for CUDA graphs)", re.IGNORECASE)
# the periodic stats line; V0 says "Swapped" and "Pending", V1 "Waiting", V1 0.32 adds "Preemptions: N"
STATS = _shape(
    "stats",
    rf"Running: (?P<running>\d+) reqs, (?:Swapped: \d+ reqs, )?(?:Pending|Waiting): (?P<waiting>\d+) "
    rf"reqs,(?P<rest>[^%]*?)(?P<device>[A-Z]+) KV cache usage: (?P<usage>{_N})%",
    "V0 0.5–0.10, V1 0.7–0.32",
    "vllm/v1/metrics/loggers.py:285 (0.32); vllm/engine/metrics.py:354–401 (V0)",
)
STATS_PREEMPTIONS = re.compile(r"Preemptions:\s*(?P<n>\d+)")
V0_PREEMPTED = _shape(
    "v0_preempted",
    r"Sequence group (?P<seq>\S+) is preempted by (?:PreemptionMode\.)?(?P<mode>RECOMPUTE|SWAP) mode "
    r"because there is not enough KV cache space\..*?total_num_cumulative_preemption=(?P<n>\d+)",
    "V0 0.5–0.10",
    "vllm/core/scheduler.py:1243–1835 (every 50th preemption)",
)

# --- C: one request is longer than the KV cache or than max_model_len ---------------------------------
ONE_REQUEST = _shape(
    "one_request",
    rf"To serve at least one request with the models?'s max seq len \((?P<len>\d+)\), \((?P<need>{_N}) "
    rf"{_GIB} KV cache is needed, which is larger than the available KV cache memory \((?P<avail>{_N}) "
    rf"{_GIB}\)\.(?: Based on the available memory,? the estimated maximum model length is (?P<est>\d+)\.)?",
    'V1 0.7 ("models\'s", GB), 0.8–0.11 ("models\'s", GiB, estimate), 0.32 ("model\'s")',
    "vllm/v1/core/kv_cache_utils.py:1031 (0.32)",
)
OLD_MAX_SEQ = _shape(
    "old_max_seq",
    r"The model's max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<tokens>\d+)\)",
    "V0 0.5–0.10 (GPU and CPU)",
    "vllm/worker/worker.py:666 (0.10); vllm/worker/cpu_worker.py:310 (0.9)",
)
BLOCK_MANAGER_FULL = _shape(
    "block_manager_full",
    r"Input prompt \((?P<prompt>\d+) tokens\) is too long and exceeds the capacity of block_manager",
    "V0 0.5–0.10",
    "vllm/core/scheduler.py:1128 (0.10)",
)
PROMPT_LIMIT = _shape(
    "prompt_limit",
    r"Input prompt \((?P<prompt>\d+) tokens\) is too long and exceeds limit of (?P<max>\d+)",
    "V0 0.5–0.10",
    "vllm/core/scheduler.py:1103 (0.10)",
)
PROMPT_LONGER = _shape(
    "prompt_longer",
    r"The (?:decoder |encoder )?prompt \(length (?P<prompt>\d+)\) is longer than the maximum model "
    r"length of (?P<max>\d+)",
    "V0 and V1 0.8–0.11",
    "vllm/v1/engine/processor.py:536 (0.11)",
)
LONG_PROMPT = _shape(
    "long_prompt",
    r"This model's maximum context length is (?P<max>\d+) tokens\. However, your prompt contains "
    r"(?:at least )?(?P<prompt>\d+) (?P<unit>input tokens|characters)",
    "0.32",
    "vllm/renderers/params.py:528",
)
REQUESTED_TOKENS = _shape(
    "requested_tokens",
    r"This model's maximum context length is (?P<max>\d+) tokens\. However, you requested "
    r"(?P<total>\d+) tokens (?:\((?P<prompt>\d+) in the messages, (?P<completion>\d+) in the "
    r"completion\)|in the (?:messages|input))",
    "0.5–0.9 (chat and completions), 0.10–0.11 (embeddings, scoring)",
    "vllm/entrypoints/openai/serving_engine.py:570 (0.9)",
)
REQUEST_HAS = _shape(
    "request_has",
    r"This (?:model's )?maximum context length is (?P<max>\d+) tokens\. However, your request has "
    r"(?P<prompt>\d+) input tokens",
    '0.10 ("This maximum context length" in renderer.py), 0.11',
    "vllm/entrypoints/openai/serving_engine.py:676, vllm/entrypoints/renderer.py:386 (0.11)",
)
MAX_TOKENS_TOO_LARGE = _shape(
    "max_tokens_too_large",
    r"'max_tokens' or 'max_completion_tokens' is too large: (?P<completion>\d+)\. This model's maximum "
    r"context length is (?P<max>\d+) tokens and your request has (?P<prompt>\d+) input tokens",
    "0.10–0.11",
    "vllm/entrypoints/openai/serving_engine.py:685 (0.11)",
)

# --- context: settings, what had loaded, nvidia-smi ---------------------------------------------------
NON_DEFAULT_ARGS = re.compile(r"non-default args: (?P<args>\{.*\})")
# "|    0   N/A  N/A   1234567      C   python3        14512MiB |" (the GI/CI columns since driver 450)
SMI_PROCESS = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?:\S+\s+\S+\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|C|G)\s+(?P<name>\S.*?)\s+"
    r"(?P<mib>\d+)\s*MiB\s*\|"
)
SMI_MEMORY = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
SMI_HEADER = "NVIDIA-SMI"

SHAPES: tuple[Shape, ...] = (
    FREE_AT_STARTUP, CPU_AT_STARTUP, PROFILING_ERROR, CPU_KV_TOO_BIG, TORCH_OOM, TORCH_OOM_OLD,
    ANY_CUDA_OOM, LOAD_FAILED, NO_CACHE_BLOCKS, SAMPLER_WARMUP, STATS, V0_PREEMPTED, ONE_REQUEST,
    OLD_MAX_SEQ, BLOCK_MANAGER_FULL, PROMPT_LIMIT, PROMPT_LONGER, LONG_PROMPT, REQUESTED_TOKENS,
    REQUEST_HAS, MAX_TOKENS_TOO_LARGE,
)  # fmt: skip
"""Every shape the scanner looks for, in no particular order (the doctor's rules order them)."""

HINTS: tuple[str, ...] = (
    "memory", "Memory", "max seq len", "KV cache", "context length", "preempt", "Preempt", "too long",
    "longer than", "Tried to allocate", "OutOfMemory", "cache blocks", "warming up", "Running:",
    "max_tokens", "maximum model", "request with", "capac", "not enough", "Input prompt", "However,",
    "too large", "input tokens", "CUDA error", "apturing",
)  # fmt: skip
"""Words of which every shape's message holds at least two (so that one split by a wrap leaves the
other whole), and the context lines one ("apturing": CUDA graph capture): a line without any is
skipped unparsed, which is what keeps a 50 MB log fast."""
