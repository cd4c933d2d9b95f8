"""Pattern B without an explicit error: the KV cache exhausted under concurrency, read from the periodic
stats lines of a log (usage near 100% with requests waiting, V1's preemption counts, V0's preemption
warnings) or from a running server's Prometheus `/metrics`."""

from __future__ import annotations

import math

import httpx

from evals.serving.doctor.judges import DEDICATED_UTILIZATION, Finding, number
from evals.serving.doctor.log_scan import PRESSURE_USAGE, Event, GpuProcesses, Start
from evals.serving.memory import KV_CAPACITY
from evals.serving.vllm_metrics import kv_gauges
from kqe.core.errors import UserError

METRICS_TIMEOUT_S = 5.0


def kv_pressure(start: Start, e: Event, smi: GpuProcesses | None = None) -> Finding | None:
    """B from the stats lines and V0's preemption warnings of one start; None when they show none."""
    stats = start.stats
    v0 = start.last.get("v0_preempted")
    preemptions = max(stats.preemptions, int(v0.groups["n"]) if v0 else 0)
    if not preemptions and not stats.waiting_under_pressure:
        return None
    numbers = {
        "peak_kv_usage_pct": stats.peak_usage,
        "waiting": stats.waiting_under_pressure,
        "preemptions": preemptions,
        "running": stats.running_max,
    }
    if not stats.lines:  # V0's warning alone: no stats line to read usage from
        numbers = {"preemptions": preemptions}
    seen = [f"{preemptions} preemptions"] if preemptions else []
    if stats.lines:
        seen.append(f"KV cache {stats.peak_usage:g}% full at peak")
    if stats.waiting_under_pressure:
        seen.append(f"{stats.waiting_under_pressure} requests waiting")
    if stats.running_max:
        seen.append(f"{stats.running_max} running")
    summary = f"OOM pattern B (KV cache exhausted under concurrency): {', '.join(seen)}"
    return Finding("B", summary, pressure_advice(start), numbers)


def pressure_advice(start: Start | None) -> list[str]:
    """The guide's order for a KV cache too small for the concurrency asked, with the log's numbers."""
    settings = start.settings if start else {}
    capacity = start.context.get(KV_CAPACITY) if start else None
    advice = []
    if capacity:
        c = capacity.groups
        concurrency, length, tokens = number(c["conc"]), int(number(c["len"])), int(number(c["tokens"]))
        advice.append(
            f"parameters: --max-num-seqs {max(math.floor(concurrency), 1)}: the KV cache holds "
            f"{tokens:,} tokens, {concurrency:g} requests of {length:,}"
        )
    seqs, model_len = settings.get("max_num_seqs"), settings.get("max_model_len")
    together = "--max-num-seqs × --max-model-len is what the KV cache holds at worst: shrink them together"
    if seqs and model_len:
        together += f" ({seqs} × {model_len:,} = {seqs * model_len:,} tokens asked now)"
    advice += [
        f"parameters: {together}: lowering one alone leaves the worst case above what the cache holds",
        f"parameters: more KV cache: --gpu-memory-utilization up to {DEDICATED_UTILIZATION} (dedicated), "
        "--kv-cache-dtype fp8, --enforce-eager",
        "quantization: AWQ W4A16 or FP8 weights leave more memory to the KV cache",
        "tensor parallel: --tensor-parallel-size 2 splits the KV cache across GPUs",
        "prefix caching: --enable-prefix-caching stores shared prompt prefixes (RAG system prompts) once",
    ]
    return advice


def metrics_finding(text: str, source: str) -> tuple[Finding | None, dict[str, float]]:
    """B when a `/metrics` text shows the KV cache nearly full with requests waiting now (None when it
    shows no pressure), and the gauges read. UserError when it is not vLLM's metrics."""
    gauges = kv_gauges(text)
    if gauges is None:
        raise UserError(
            f"{source} is not a vLLM /metrics page (no vllm:kv_cache_usage_perc): give the server's "
            "root URL, e.g. http://127.0.0.1:8000"
        )
    usage, waiting = gauges["kv_usage_pct"], int(gauges.get("waiting", 0))
    numbers = {key: float(value) for key, value in gauges.items()}
    if usage < PRESSURE_USAGE or waiting == 0:
        return None, numbers
    running, preemptions = int(gauges.get("running", 0)), int(gauges.get("preemptions", 0))
    summary = (
        f"OOM pattern B (KV cache exhausted under concurrency): now {usage:g}% of the KV cache is in use, "
        f"{waiting} requests wait, {running} run; {preemptions} preemptions since start"
    )
    return Finding("B", summary, pressure_advice(None), numbers), numbers


def read_metrics(url: str) -> str:
    """The text of a server's `/metrics` (`url` is its root or the page itself); UserError when nothing
    answers or it answers with an error."""
    page = url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"
    if not page.startswith(("http://", "https://")):
        raise UserError(f"--metrics {url!r}: give an http(s) URL, e.g. http://127.0.0.1:8000")
    try:
        response = httpx.get(page, timeout=METRICS_TIMEOUT_S)
    except httpx.InvalidURL as error:  # `http://[::1`, a port of letters: no request was sent
        raise UserError(f"--metrics {url!r} is no URL ({error}): e.g. http://127.0.0.1:8000") from None
    except httpx.HTTPError as error:
        reason = type(error).__name__
        raise UserError(f"--metrics {page}: no answer ({reason}): is the server running?") from None
    if response.status_code != 200:
        raise UserError(f"--metrics {page}: HTTP {response.status_code}: give the vLLM server's root URL")
    return response.text
