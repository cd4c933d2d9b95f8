"""`kqe doctor`: the OOM pattern a vLLM log shows, the line that shows it, and the fix to try first.

Patterns (DESIGN.md §1): A the weights do not fit (loading fails); B the KV cache gets too little
memory (no cache blocks, the sampler warm-up, preemption under concurrency, an asked KV pool larger
than the machine); C one request is longer than the KV cache or than max_model_len; D another
process holds or changes the device memory. None: the log shows no out-of-memory failure.

The messages matched are vLLM 0.32's and PyTorch's CUDA allocator's (where each comes from:
`tests/data/vllm_errors/README.md`). Advice numbers come from the log: its own figures, the settings
on its "non-default args" line, else the serve profile given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from evals.serving import vllm_messages as msg
from evals.serving.memory import KV_CAPACITY, MODEL_LOADING
from evals.serving.vllm_log import VllmLog
from kqe.core.records import Record, ServeProfile

Pattern = Literal["A", "B", "C", "D"]
DEDICATED_UTILIZATION = 0.95
SHARED_MARGIN_GIB = 0.5
"""Room left beside another process's memory when suggesting a utilization."""
_UNIT = {"input tokens": "token", "characters": "character"}


class Diagnosis(Record):
    """What `kqe doctor` concludes from one log."""

    pattern: Pattern | None
    """The OOM pattern, or None when the log shows no out-of-memory failure."""
    evidence: str | None
    """The log message that shows it (log prefix removed), None without a pattern."""
    advice: list[str]
    """Fixes in the guide's order, the first to try first, with numbers from the log."""
    summary: str
    """One line for an error message or a leaderboard row."""


def diagnose(log_text: str, profile: ServeProfile | None = None) -> Diagnosis:
    """The pattern a vLLM log shows; `profile` fills in settings the log does not state. A log that
    holds several starts (a retried server appends to its log) is judged by its last start."""
    log = VllmLog.last_start(log_text, profile)
    for rule in _RULES:
        found = rule.find(log)
        finding = rule.judge(log, *found) if found else None
        if found and finding:
            return Diagnosis(
                pattern=finding.pattern, evidence=log.evidence(found[0]), advice=finding.advice,
                summary=finding.summary,
            )  # fmt: skip
    return Diagnosis(pattern=None, evidence=None, advice=[], summary="not an OOM: no out-of-memory failure")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _gib(size: str) -> float:
    """ "270.00 MiB" → GiB."""
    value, unit = size.split()
    return _number(value) * {"KiB": 2**-20, "MiB": 2**-10, "GiB": 1.0, "bytes": 2**-30}[unit]


class _Finding(NamedTuple):
    """What a rule concludes; the evidence is the line its message matched."""

    pattern: Pattern
    summary: str
    advice: list[str]


@dataclass(frozen=True)
class _Rule:
    """A rule judges the last line that one of its messages matches (the first message found wins)."""

    messages: tuple[re.Pattern[str], ...]
    judge: Callable[[VllmLog, int, re.Match[str]], _Finding | None]
    accept: Callable[[re.Match[str]], bool] = bool
    """Which matches count, e.g. a stats line only when it counts a preemption."""

    def find(self, log: VllmLog) -> tuple[int, re.Match[str]] | None:
        """Index and match of the line to judge, None when none of the messages is in the log."""
        for message in self.messages:
            found = log.last(message, self.accept)
            if found:
                return found
        return None


# --- the judges of the rules, most specific first ---------------------------------------------------


def _shared_gpu(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    free, total, util = _number(m["free"]), _number(m["total"]), _number(m["util"])
    fitting = math.floor((free - SHARED_MARGIN_GIB) / total * 100) / 100
    device = "the GPU" if "GPU" in log.lines[index] else "this machine's RAM"
    summary = (
        f"OOM pattern D (another process): {total - free:.2f} of {total:.2f} GiB of {device} were in use "
        f"at start; utilization {util} asks {_number(m['want']):.2f} GiB"
    )
    advice = [
        f"check what holds {total - free:.2f} GiB (`nvidia-smi` on GPU, `free -g` on CPU) and stop it",
        f"parameters: or share it: --gpu-memory-utilization {fitting} fits the {free:.2f} GiB free "
        "(the guide: ≤ 0.80 on a shared GPU); the KV cache shrinks with it — `kqe plan` sizes it",
    ]
    return _Finding("D", summary, advice)


def _memory_changed(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    released = _number(m["after"]) - _number(m["before"])
    summary = (
        f"OOM pattern D (another process): {released:.2f} GiB of GPU memory were freed by another "
        "process while vLLM profiled"
    )
    advice = [
        "give vLLM a GPU of its own (CUDA_VISIBLE_DEVICES, or its own container), or start it once "
        "the other process's memory is steady; `nvidia-smi` shows who shares it",
        "parameters: on a shared GPU keep --gpu-memory-utilization ≤ 0.80",
    ]
    return _Finding("D", summary, advice)


def _cpu_kv_pool(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    free, total, want = _number(m["free"]), _number(m["total"]), _number(m["want"])
    fitting = math.floor((free - SHARED_MARGIN_GIB) * 4) / 4
    size = f"--kv-cache-memory-bytes (the profile's cpu_kv_cache_gib) ≤ {fitting:g} GiB"
    if want > total:
        summary = (
            f"OOM pattern B (KV cache): the KV pool asked, {want:g} GiB, is larger than the machine's "
            f"{total:g} GiB"
        )
        advice = [f"parameters: {size}; {free:g} GiB were available"]
        return _Finding("B", summary, advice)
    summary = (
        f"OOM pattern D (other processes): only {free:g} of {total:g} GiB RAM were available for a "
        f"{want:g} GiB KV pool"
    )
    advice = [
        f"check what holds {total - free:.1f} GiB (`free -g`, `ps`) and stop it",
        f"parameters: or {size}",
    ]
    return _Finding("D", summary, advice)


def _torch_oom_of_other_process(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    if not msg.THIS_PROCESS.search(log.lines[index]):
        return None  # without "this process" the pids are another namespace's: no telling who is who
    others = [(p["pid"], _gib(p["size"])) for p in msg.OTHER_PROCESS.finditer(log.lines[index])]
    held = sum(size for _, size in others)
    if held < 1:
        return None
    total = _number(m["total"])
    pids = ", ".join(f"{pid} ({size:.2f} GiB)" for pid, size in others)
    fitting = math.floor((total - held - SHARED_MARGIN_GIB) / total * 100) / 100
    summary = f"OOM pattern D (another process): process {pids} held GPU {m['gpu'] or 0} when vLLM ran out"
    advice = [
        f"stop process {pids} (`nvidia-smi` lists it) or move vLLM to another GPU",
        f"parameters: or share the GPU: --gpu-memory-utilization ≤ {fitting} leaves the other "
        f"{held:.2f} GiB alone",
    ]
    return _Finding("D", summary, advice)


def _weights_do_not_fit(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    loaded = log.last(MODEL_LOADING)
    if not msg.LOAD_FAILED.search(log.lines[index]) and loaded and loaded[0] < index:
        return None  # the weights were in: this OOM came later
    sizes = msg.TORCH_OOM.search("\n".join(log.lines[index:]))
    where = f" ({sizes['total']} GiB)" if sizes else ""
    summary = f"OOM pattern A (weights): the model's weights do not fit the GPU{where} while loading"
    advice = [
        "parameters: none shrinks the weights; first check `nvidia-smi` that nothing else holds "
        "the GPU (pattern D fails the same way)",
        "quantization: AWQ W4A16 ≈ ¼ of 16-bit weights, FP8 ≈ ½ (calibrate AWQ on Korean text); "
        "`kqe plan --model M --gpu-gib N --scheme awq-w4a16` sizes it",
        "tensor parallel: --tensor-parallel-size 2 or more (it must divide the attention heads; "
        "`kqe plan` lists the valid sizes)",
    ]
    return _Finding("A", summary, advice)


def _one_request_does_not_fit(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    length, need, avail = int(m["len"]), _number(m["need"]), _number(m["avail"])
    advice = []
    if m["est"]:
        advice.append(f"parameters: --max-model-len {m['est']} (vLLM's estimate of what fits)")
    if log.settings.get("kv_cache_memory_bytes"):
        advice.append(f"parameters: or a KV pool of at least {math.ceil(need * 1.05 * 4) / 4:g} GiB")
    else:
        advice.append(
            f"parameters: or --gpu-memory-utilization up to {DEDICATED_UTILIZATION} on a dedicated GPU "
            f"(the KV cache needs {need - avail:.2f} GiB more); --enforce-eager frees 0.5–1 GB"
        )
    fp8 = "enough" if need / 2 <= avail else "not enough alone"
    advice += [
        f"parameters: --kv-cache-dtype fp8 halves the need to {need / 2:.2f} GiB ({fp8})",
        "quantization: AWQ W4A16 or FP8 weights leave more of the budget to the KV cache",
        "tensor parallel: --tensor-parallel-size 2 splits the KV cache across GPUs",
    ]
    summary = (
        f"OOM pattern C (one long context): one {length:,}-token request needs {m['need']} GiB of KV "
        f"cache, {m['avail']} GiB available" + (f"; longest that fits: {int(m['est']):,}" if m["est"] else "")
    )
    return _Finding("C", summary, advice)


def _old_engine_max_seq(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    tokens = int(m["tokens"])
    summary = (
        f"OOM pattern C (one long context): max_model_len {int(m['len']):,} is above the {tokens:,} tokens "
        "the KV cache holds"
    )
    advice = [
        f"parameters: --max-model-len {tokens}, or raise --gpu-memory-utilization (≤ "
        f"{DEDICATED_UTILIZATION} dedicated)",
        "parameters: --kv-cache-dtype fp8 doubles the tokens the KV cache holds",
        "quantization: AWQ W4A16 or FP8 weights leave more memory to the KV cache",
    ]
    return _Finding("C", summary, advice)


def _prompt_too_long(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    limit, size = int(m["max"]), int(m["prompt"])
    capacity = log.last(KV_CAPACITY)
    kv_tokens = int(_number(capacity[1]["tokens"])) if capacity else None
    if m["unit"] != "input tokens":
        first = f"parameters: the prompt has {size:,} characters: shorten or split it below {limit:,} tokens"
    elif kv_tokens is not None and size < kv_tokens:
        wanted = min(kv_tokens, 1024 * math.ceil(size * 1.25 / 1024))
        first = (
            f"parameters: --max-model-len {wanted} (prompt + room to answer); the KV cache holds "
            f"{kv_tokens:,} tokens"
        )
    else:
        first = (
            f"parameters: split the {size:,}-token context (RAG chunks) or give the KV cache more memory "
            "(utilization, fp8 KV cache, quantization) before raising --max-model-len"
        )
    summary = (
        f"OOM pattern C (one long context): a {size:,}-{_UNIT[m['unit']]} prompt exceeds max_model_len "
        f"{limit:,}"
    )
    advice = [first, "prefix caching and chunked prefill: keep them on for long Korean RAG prompts"]
    return _Finding("C", summary, advice)


def _no_cache_blocks(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    loaded = log.last(MODEL_LOADING)
    weights = f" after {_number(loaded[1]['gib']):g} GiB of weights" if loaded else ""
    util = log.settings.get("gpu_memory_utilization", "the default 0.92")
    summary = f"OOM pattern B (KV cache): no memory left for KV cache blocks{weights} at utilization {util}"
    advice = [
        f"parameters: --gpu-memory-utilization {DEDICATED_UTILIZATION} on a dedicated GPU; "
        "--enforce-eager frees the CUDA graphs' 0.5–1 GB; a lower --max-num-seqs and "
        "--max-num-batched-tokens shrink the activation peak",
        "quantization: AWQ W4A16 (≈ ¼) or FP8 (≈ ½) weights free the memory the KV cache needs",
        "tensor parallel: --tensor-parallel-size 2 halves the weights per GPU",
    ]
    return _Finding("B", summary, advice)


def _sampler_warmup(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    seqs = int(m["n"])
    summary = f"OOM pattern B (concurrency): warming up the sampler for {seqs} sequences ran out of memory"
    advice = [
        f"parameters: --max-num-seqs {max(seqs // 2, 1)} (its logits for {seqs} sequences did not fit)",
        "parameters: or lower --gpu-memory-utilization by 0.02–0.05 to leave room beside the KV cache",
    ]
    return _Finding("B", summary, advice)


def _oom_after_loading(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    capture = log.last(msg.GRAPH_CAPTURE)
    advice = [
        "parameters: lower --gpu-memory-utilization by 0.02–0.05: the activation peak did not fit "
        "beside the KV cache; lower --max-num-batched-tokens / --max-num-seqs shrink that peak",
        "quantization: AWQ W4A16 or FP8 weights leave more room",
    ]
    during = "serving or profiling"
    if capture and capture[0] < index:
        during = "CUDA graph capture"
        advice.insert(0, "parameters: --enforce-eager: no CUDA graphs (frees 0.5–1 GB, 5–10% slower)")
    summary = (
        f"OOM pattern B (activations / KV budget): CUDA ran out of memory during {during}, after the "
        "weights had loaded"
    )
    return _Finding("B", summary, advice)


def _preemption(log: VllmLog, index: int, m: re.Match[str]) -> _Finding | None:
    capacity = log.last(KV_CAPACITY)
    advice = []
    if capacity:
        c = capacity[1]
        concurrency, length = _number(c["conc"]), int(_number(c["len"]))
        advice.append(
            f"parameters: --max-num-seqs {max(math.floor(concurrency), 1)}: the KV cache holds "
            f"{int(_number(c['tokens'])):,} tokens, {concurrency:g} requests of {length:,}"
        )
    advice += [
        "parameters: more KV cache: --gpu-memory-utilization up to 0.95 (dedicated), "
        "--kv-cache-dtype fp8, --enforce-eager",
        "quantization: AWQ W4A16 or FP8 weights leave more memory to the KV cache",
        "prefix caching: --enable-prefix-caching stores shared prompt prefixes (RAG system prompts) once",
    ]
    summary = (
        f"OOM pattern B (concurrency): {int(m['n'])} preemptions with {int(m['running'])} requests "
        "running: the KV cache ran out"
    )
    return _Finding("B", summary, advice)


_RULES = (
    _Rule((msg.FREE_AT_STARTUP, msg.CPU_AT_STARTUP), _shared_gpu),
    _Rule((msg.PROFILING_ERROR,), _memory_changed),
    _Rule((msg.CPU_KV_TOO_BIG,), _cpu_kv_pool),
    _Rule((msg.TORCH_OOM,), _torch_oom_of_other_process),
    _Rule((msg.LOAD_FAILED, msg.ANY_CUDA_OOM), _weights_do_not_fit),
    _Rule((msg.ONE_REQUEST,), _one_request_does_not_fit),
    _Rule((msg.OLD_MAX_SEQ,), _old_engine_max_seq),
    _Rule((msg.LONG_PROMPT,), _prompt_too_long),
    _Rule((msg.NO_CACHE_BLOCKS,), _no_cache_blocks),
    _Rule((msg.SAMPLER_WARMUP,), _sampler_warmup),
    _Rule((msg.ANY_CUDA_OOM,), _oom_after_loading),
    _Rule((msg.PREEMPTIONS,), _preemption, accept=lambda m: int(m["n"]) > 0),
)
