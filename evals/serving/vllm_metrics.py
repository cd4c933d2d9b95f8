"""vLLM's Prometheus `/metrics` text, read without a Prometheus client: counters summed by name and
labels, and the two engine counters a `kqe load` level reports (preemptions, prefix-cache hit rate)."""

from __future__ import annotations

import re
from collections.abc import Mapping

PREEMPTIONS = "vllm:num_preemptions_total"
"""vLLM 0.32's counter `vllm:num_preemptions` as Prometheus exposes it (v1/metrics/loggers.py)."""
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"

_SAMPLE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_sum(text: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """Sum of the samples of metric `name` (exact) whose labels include `labels`, from Prometheus text;
    None when there is no such sample."""
    total, found = 0.0, False
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if line.startswith("#") or match is None or match["name"] != name:
            continue
        sample_labels = dict(_LABEL.findall(match["labels"] or ""))
        if labels and any(sample_labels.get(key) != value for key, value in labels.items()):
            continue
        total += float(match["value"])
        found = True
    return total if found else None


def engine_counters(before: str, after: str, served_name: str) -> tuple[int | None, float | None]:
    """Preemptions and prefix-cache hit rate between two `/metrics` texts of the server of `served_name`
    (None where a counter is missing, and a hit rate without any query)."""
    labels = {"model_name": served_name}

    def increase(name: str) -> float | None:
        start, end = metric_sum(before, name, labels), metric_sum(after, name, labels)
        return None if start is None or end is None else end - start

    preemptions, hits, queries = increase(PREEMPTIONS), increase(PREFIX_HITS), increase(PREFIX_QUERIES)
    hit_rate = hits / queries if hits is not None and queries else None
    return (None if preemptions is None else round(preemptions)), hit_rate


KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
"""The KV cache's used fraction (0–1): V1 0.32's name, then V0's and V1 ≤ 0.10's."""
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"


def kv_gauges(text: str) -> dict[str, float] | None:
    """KV cache usage (%, the fullest engine's), requests waiting and running and preemptions so far
    (summed over engines) from one `/metrics` text; None when it holds no vLLM KV-cache gauge."""
    usage = next((u for name in KV_USAGE if (u := _fullest(text, name)) is not None), None)
    if usage is None:
        return None
    gauges = {"kv_usage_pct": round(usage * 100, 1)}
    for key, name in (("waiting", WAITING), ("running", RUNNING), ("preemptions", PREEMPTIONS)):
        value = metric_sum(text, name)
        if value is not None:
            gauges[key] = value
    return gauges


def _fullest(text: str, name: str) -> float | None:
    values = [
        float(m["value"])
        for line in text.splitlines()
        if (m := _SAMPLE.match(line.strip())) and not line.startswith("#") and m["name"] == name
    ]
    return max(values) if values else None
