"""The judges of `kqe doctor`'s rules: from the event a rule found (and what else its start showed),
the pattern, a one-line summary, the fixes in the guide's order (parameters, quantization, tensor
parallel, prefix caching) and the figures read. Numbers in advice come from the log itself, its
"non-default args" line, or the serve profile given."""

from __future__ import annotations

import math
import re
from typing import Literal, NamedTuple

from evals.serving.doctor import messages as msg
from evals.serving.doctor.log_scan import Event, GpuProcesses, Start
from evals.serving.memory import KV_CAPACITY, MODEL_LOADING

Pattern = Literal["A", "B", "C", "D"]
DEDICATED_UTILIZATION = 0.95
SHARED_MARGIN_GIB = 0.5
"""Room left beside another process's memory when suggesting a utilization."""
_UNIT = {"input tokens": "token", "characters": "character"}


class Finding(NamedTuple):
    """What a rule concludes."""

    pattern: Pattern
    summary: str
    advice: list[str]
    numbers: dict[str, float]


def number(text: str) -> float:
    return float(text.replace(",", ""))


_SIZE = re.compile(r"(?P<value>[\d.,]+)\s*(?P<unit>[KMG]iB|bytes)")


def gib(size: str) -> float:
    """ "270.00 MiB" (or "270.00MiB", a wrapped line joined) → GiB."""
    m = _SIZE.fullmatch(size.strip())
    if m is None:
        raise ValueError(f"not a size: {size!r}")
    return number(m["value"]) * {"KiB": 2**-20, "MiB": 2**-10, "GiB": 1.0, "bytes": 2**-30}[m["unit"]]


def other_processes(start: Start, extra: GpuProcesses | None = None) -> list[str]:
    """nvidia-smi's processes that are not this vLLM (by pid), largest first, as "pid name (N GiB)"."""
    table = {**start.gpu_processes, **(extra or {})}
    others = [(pid, name, size) for pid, (name, size) in table.items() if pid not in start.own_pids]
    return [f"{pid} {name} ({size:.2f} GiB)" for pid, name, size in sorted(others, key=lambda o: -o[2])]


def _check_others(start: Start, held: float, smi: GpuProcesses | None) -> str:
    named = other_processes(start, smi)
    if named:
        return f"stop what nvidia-smi shows beside vLLM: {', '.join(named)}"
    return f"check what holds {held:.2f} GiB (`nvidia-smi` on GPU, `free -g` on CPU) and stop it"


def shared_gpu(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    g = e.groups
    free, total, util = number(g["free"]), number(g["total"]), number(g["util"])
    fitting = math.floor((free - SHARED_MARGIN_GIB) / total * 100) / 100
    device = "this machine's RAM" if "CPU memory" in e.text else "the GPU"
    summary = (
        f"OOM pattern D (another process): {total - free:.2f} of {total:.2f} GiB of {device} were in use "
        f"at start; utilization {util} asks {number(g['want']):.2f} GiB"
    )
    advice = [
        _check_others(start, total - free, smi),
        f"parameters: or share it: --gpu-memory-utilization {fitting} fits the {free:.2f} GiB free "
        "(the guide: ≤ 0.80 on a shared GPU); the KV cache shrinks with it — `kqe plan` sizes it",
    ]
    numbers = {"free_gib": free, "total_gib": total, "utilization": util, "wanted_gib": number(g["want"])}
    return Finding("D", summary, advice, numbers)


def memory_changed(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    g = e.groups
    scale = 1.0 if g.get("gib") else 2**-30  # before 0.9 the figures were bytes
    before, after = number(g["before"]) * scale, number(g["after"]) * scale
    released = after - before if g["kind"] == "free" else before - after
    summary = (
        f"OOM pattern D (another process): {released:.2f} GiB of GPU memory were freed by another "
        "process while vLLM profiled"
    )
    named = other_processes(start, smi)
    advice = [
        "give vLLM a GPU of its own (CUDA_VISIBLE_DEVICES, or its own container), or start it once "
        "the other process's memory is steady; "
        + (f"nvidia-smi shows {', '.join(named)}" if named else "`nvidia-smi` shows who shares it"),
        "parameters: on a shared GPU keep --gpu-memory-utilization ≤ 0.80",
    ]
    return Finding("D", summary, advice, {"released_gib": round(released, 2)})


def cpu_kv_pool(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    free, total, want = number(e.groups["free"]), number(e.groups["total"]), number(e.groups["want"])
    fitting = math.floor((free - SHARED_MARGIN_GIB) * 4) / 4
    size = f"--kv-cache-memory-bytes (the profile's cpu_kv_cache_gib) ≤ {fitting:g} GiB"
    numbers = {"free_gib": free, "total_gib": total, "wanted_gib": want}
    if want > total:
        summary = (
            f"OOM pattern B (KV cache): the KV pool asked, {want:g} GiB, is larger than the machine's "
            f"{total:g} GiB"
        )
        return Finding("B", summary, [f"parameters: {size}; {free:g} GiB were available"], numbers)
    summary = (
        f"OOM pattern D (other processes): only {free:g} of {total:g} GiB RAM were available for a "
        f"{want:g} GiB KV pool"
    )
    advice = [
        f"check what holds {total - free:.1f} GiB (`free -g`, `ps`) and stop it",
        f"parameters: or {size}",
    ]
    return Finding("D", summary, advice, numbers)


def torch_oom_of_other_process(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    if not msg.THIS_PROCESS.search(e.text):
        return None  # without "this process" the pids are another namespace's: no telling who is who
    others = [(p["pid"], gib(p["size"])) for p in msg.OTHER_PROCESS.finditer(e.text)]
    held = sum(size for _, size in others)
    if held < 1:
        return None
    total = number(e.groups["total"])
    pids = ", ".join(f"{pid} ({size:.2f} GiB)" for pid, size in others)
    fitting = math.floor((total - held - SHARED_MARGIN_GIB) / total * 100) / 100
    gpu = e.groups.get("gpu") or "0"
    summary = f"OOM pattern D (another process): process {pids} held GPU {gpu} when vLLM ran out"
    advice = [
        f"stop process {pids} (`nvidia-smi` lists it) or move vLLM to another GPU",
        f"parameters: or share the GPU: --gpu-memory-utilization ≤ {fitting} leaves the other "
        f"{held:.2f} GiB alone",
    ]
    return Finding("D", summary, advice, {"total_gib": total, "other_gib": round(held, 2)})


def weights_do_not_fit(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    loaded = start.context.get(MODEL_LOADING)
    if "load_failed" not in start.last and loaded and loaded.line < e.line:
        return None  # the weights were in: this OOM came later
    sizes = start.last.get("torch_oom") or start.last.get("torch_oom_old")
    total = number(sizes.groups["total"]) if sizes else None
    where = f" ({total:g} GiB)" if total else ""
    summary = f"OOM pattern A (weights): the model's weights do not fit the GPU{where} while loading"
    named = other_processes(start, smi)
    first = (
        f"nvidia-smi shows other processes on the GPU: {', '.join(named)} — stop them first (pattern D)"
        if named
        else "parameters: none shrinks the weights; first check `nvidia-smi` that nothing else holds "
        "the GPU (pattern D fails the same way)"
    )
    advice = [
        first,
        "quantization: AWQ W4A16 ≈ ¼ of 16-bit weights, FP8 ≈ ½ (calibrate AWQ on Korean text); "
        "`kqe plan --model M --gpu-gib N --scheme awq-w4a16` sizes it",
        "tensor parallel: --tensor-parallel-size 2 or more (it must divide the attention heads; "
        "`kqe plan` lists the valid sizes)",
    ]
    numbers = {"total_gib": total} if total else {}
    if sizes:
        numbers["tried_gib"] = round(gib(sizes.groups["size"]), 2)
    return Finding("A", summary, advice, numbers)


def one_request_does_not_fit(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    g = e.groups
    length, need, avail = int(g["len"]), number(g["need"]), number(g["avail"])
    advice = []
    if g.get("est"):
        advice.append(f"parameters: --max-model-len {g['est']} (vLLM's estimate of what fits)")
    if start.settings.get("kv_cache_memory_bytes"):
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
    fits = f"; longest that fits: {int(g['est']):,}" if g.get("est") else ""
    summary = (
        f"OOM pattern C (one long context): one {length:,}-token request needs {g['need']} GiB of KV "
        f"cache, {g['avail']} GiB available{fits}"
    )
    numbers = {"max_model_len": length, "needed_gib": need, "available_gib": avail}
    if g.get("est"):
        numbers["estimated_len"] = int(g["est"])
    return Finding("C", summary, advice, numbers)


def old_engine_max_seq(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    tokens, length = int(e.groups["tokens"]), int(e.groups["len"])
    summary = (
        f"OOM pattern C (one long context): max_model_len {length:,} is above the {tokens:,} tokens "
        "the KV cache holds"
    )
    advice = [
        f"parameters: --max-model-len {tokens}, or raise --gpu-memory-utilization (≤ "
        f"{DEDICATED_UTILIZATION} dedicated)",
        "parameters: --kv-cache-dtype fp8 doubles the tokens the KV cache holds",
        "quantization: AWQ W4A16 or FP8 weights leave more memory to the KV cache",
    ]
    return Finding("C", summary, advice, {"max_model_len": length, "kv_tokens": tokens})


def prompt_too_long(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    g = e.groups
    size, limit = int(g.get("prompt") or g["total"]), int(g["max"])
    unit = g.get("unit", "input tokens")
    capacity = start.context.get(KV_CAPACITY)
    kv_tokens = int(number(capacity.groups["tokens"])) if capacity else None
    if unit != "input tokens":
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
    if g.get("completion"):
        first += f"; or ask for fewer than {g['completion']} output tokens (max_tokens)"
    summary = (
        f"OOM pattern C (one long context): a {size:,}-{_UNIT[unit]} prompt exceeds max_model_len {limit:,}"
    )
    advice = [first, "prefix caching and chunked prefill: keep them on for long Korean RAG prompts"]
    length = "prompt_tokens" if unit == "input tokens" else "prompt_characters"
    return Finding("C", summary, advice, {length: size, "max_model_len": limit})


def prompt_beyond_kv_cache(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    size = int(e.groups["prompt"])
    summary = f"OOM pattern C (one long context): a {size:,}-token prompt is longer than the whole KV cache"
    advice = [
        f"parameters: give the KV cache room for {size:,} tokens (--gpu-memory-utilization up to "
        f"{DEDICATED_UTILIZATION}, --kv-cache-dtype fp8) or split the context (RAG chunks)",
        "quantization: AWQ W4A16 or FP8 weights leave more memory to the KV cache",
        "tensor parallel: --tensor-parallel-size 2 splits the KV cache across GPUs",
    ]
    return Finding("C", summary, advice, {"prompt_tokens": size})


def no_cache_blocks(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    loaded = start.context.get(MODEL_LOADING)
    weights = f" after {number(loaded.groups['gib']):g} GiB of weights" if loaded else ""
    util = start.settings.get("gpu_memory_utilization", "the default 0.92")
    cpu = "VLLM_CPU_KVCACHE_SPACE" in e.text
    summary = f"OOM pattern B (KV cache): no memory left for KV cache blocks{weights} at utilization {util}"
    first = (
        "parameters: VLLM_CPU_KVCACHE_SPACE (GiB of RAM for the KV cache) larger"
        if cpu
        else f"parameters: --gpu-memory-utilization {DEDICATED_UTILIZATION} on a dedicated GPU; "
        "--enforce-eager frees the CUDA graphs' 0.5–1 GB; a lower --max-num-seqs and "
        "--max-num-batched-tokens shrink the activation peak"
    )
    advice = [
        first,
        "quantization: AWQ W4A16 (≈ ¼) or FP8 (≈ ½) weights free the memory the KV cache needs",
        "tensor parallel: --tensor-parallel-size 2 halves the weights per GPU",
    ]
    return Finding("B", summary, advice, {"weights_gib": number(loaded.groups["gib"])} if loaded else {})


def sampler_warmup(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    seqs = int(e.groups["n"])
    summary = f"OOM pattern B (concurrency): warming up the sampler for {seqs} sequences ran out of memory"
    advice = [
        f"parameters: --max-num-seqs {max(seqs // 2, 1)} (its logits for {seqs} sequences did not fit)",
        "parameters: or lower --gpu-memory-utilization by 0.02–0.05 to leave room beside the KV cache",
    ]
    return Finding("B", summary, advice, {"max_num_seqs": seqs})


def oom_after_loading(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    loaded = start.context.get(MODEL_LOADING)
    if "load_failed" in start.last or not loaded or loaded.line > e.line:
        return None  # an OOM before the weights were in is pattern A's
    capture = start.context.get(msg.GRAPH_CAPTURE)
    advice = [
        "parameters: lower --gpu-memory-utilization by 0.02–0.05: the activation peak did not fit "
        "beside the KV cache; lower --max-num-batched-tokens / --max-num-seqs shrink that peak",
        "quantization: AWQ W4A16 or FP8 weights leave more room",
    ]
    during = "serving or profiling"
    if capture and capture.line < e.line:
        during = "CUDA graph capture"
        advice.insert(0, "parameters: --enforce-eager: no CUDA graphs (frees 0.5–1 GB, 5–10% slower)")
    summary = (
        f"OOM pattern B (activations / KV budget): CUDA ran out of memory during {during}, after the "
        "weights had loaded"
    )
    return Finding("B", summary, advice, {})
