"""The out-of-memory messages of vLLM 0.32 and PyTorch that `kqe doctor` recognises, as patterns.

Each pattern follows its message's format string; where each is raised (file:line in vLLM 0.32) is
listed in `tests/data/vllm_errors/README.md`, which holds an excerpt of each.
"""

from __future__ import annotations

import re

_N = r"\d[\d,]*(?:\.\d+)?"

# vLLM 0.32 (v1/worker/utils.py): free GPU memory below the utilization asked.
FREE_AT_STARTUP = re.compile(
    rf"Free memory on device (?P<device>\S+) \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup is less "
    rf"than desired GPU memory utilization \((?P<util>{_N}), (?P<want>{_N}) GiB\)"
)
# v1/worker/gpu_worker.py: another process released memory while vLLM profiled.
PROFILING_ERROR = re.compile(
    rf"Error in memory profiling\. Initial free memory (?P<before>{_N}) GiB, current free memory "
    rf"(?P<after>{_N}) GiB"
)
# v1/worker/cpu_worker.py: RAM below the fraction asked, or below the KV pool asked.
CPU_AT_STARTUP = re.compile(
    rf"Available memory on node \d+ \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup is less than "
    rf"desired CPU memory utilization \((?P<util>{_N}), (?P<want>{_N}) GiB\)"
)
CPU_KV_TOO_BIG = re.compile(
    rf"Available memory on node \d+ \((?P<free>{_N})/(?P<total>{_N}) GiB\) on kv cache allocation is "
    rf"less than requested memory for kv \((?P<want>{_N}) GiB\)"
)
# PyTorch c10/cuda/CUDACachingAllocator.cpp ("capacty" in PyTorch ≤ 2.1).
TORCH_OOM = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<size>{_N} [KMG]iB)\. GPU (?P<gpu>\d*) ?has a total "
    rf"capac(?:i)?ty of (?P<total>{_N}) GiB of which (?P<free>{_N} (?:[KMG]iB|bytes)) is free"
)
# Any CUDA OOM, older PyTorch wording included ("Tried to allocate 4.56 GiB (GPU 0; 23.68 GiB total
# capacity; …)").
ANY_CUDA_OOM = re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError")
OTHER_PROCESS = re.compile(rf"Process (?P<pid>\d+) has (?P<size>{_N} [KMG]iB) memory in use")
THIS_PROCESS = re.compile(rf"Including non-PyTorch memory, this process has (?P<size>{_N} [KMG]iB)")
# v1/worker/gpu_model_runner.py
LOAD_FAILED = re.compile(r"Failed to load model - not enough GPU memory")
SAMPLER_WARMUP = re.compile(r"CUDA out of memory occurred when warming up sampler with (?P<n>\d+) dummy")
GRAPH_CAPTURE = re.compile(r"Capturing CUDA graphs")
# v1/core/kv_cache_utils.py
NO_CACHE_BLOCKS = re.compile(r"No available memory for the cache blocks")
ONE_REQUEST = re.compile(
    rf"To serve at least one request with the model's max seq len \((?P<len>\d+)\), \((?P<need>{_N}) "
    rf"GiB KV cache is needed, which is larger than the available KV cache memory \((?P<avail>{_N}) "
    r"GiB\)\.(?: Based on the available memory, the estimated maximum model length is (?P<est>\d+)\.)?"
)
# vLLM's v0 engine (≤ 0.10, vllm/worker/worker.py) said the same thing this way.
OLD_MAX_SEQ = re.compile(
    r"The model's max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<tokens>\d+)\)"
)
# renderers/params.py: a request longer than max_model_len.
LONG_PROMPT = re.compile(
    r"This model's maximum context length is (?P<max>\d+) tokens\. However, your prompt contains "
    r"(?:at least )?(?P<prompt>\d+) (?P<unit>input tokens|characters)"
)
# v1/metrics/loggers.py: the periodic stats line.
PREEMPTIONS = re.compile(r"Running: (?P<running>\d+) reqs.*Preemptions: (?P<n>\d+)")
NON_DEFAULT_ARGS = re.compile(r"non-default args: (?P<args>\{.*\})")
