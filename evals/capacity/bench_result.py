"""`vllm bench serve --save-result` JSON read into a BenchLevel.

Field names are those vLLM 0.32's `vllm/benchmarks/serve.py` writes: `duration`, `completed`,
`failed`, `num_prompts`, `max_concurrency`, `request_throughput`, `request_goodput` (null without
`--goodput`), `output_throughput`, and `p<q>_<metric>_ms` for each `--percentile-metrics` metric and
`--metric-percentiles` percentile.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kqe.core.capacity import BenchLevel
from kqe.core.errors import UserError
from kqe.core.io import loads_json

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
"""Metrics whose percentiles a level records (`--percentile-metrics`)."""
PERCENTILES = (50, 99)
"""Percentiles a level records (`--metric-percentiles`)."""


def read_bench_json(path: Path) -> dict[str, Any]:
    """The saved result as a dict; UserError naming the file when it is missing or not JSON."""
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: vllm bench serve saved no result: see its output above") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path} is not JSON ({error}): re-run the benchmark") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a vllm bench serve result (a JSON object): re-run the benchmark")
    return data


def _number(data: dict[str, Any], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(
            f"{where} has no number {key!r} (got {value!r}): run vllm bench serve with "
            f"--percentile-metrics {','.join(PERCENTILE_METRICS)} "
            f"--metric-percentiles {','.join(map(str, PERCENTILES))}"
        )
    return float(value)


def parse_bench_result(
    data: dict[str, Any], where: str, preemptions: int | None, prefix_cache_hit_rate: float | None
) -> BenchLevel:
    """One level from a saved result (`where` names it in errors) and the server's counter deltas."""
    concurrency = data.get("max_concurrency")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise UserError(f"{where}: max_concurrency is {concurrency!r}: run it with --max-concurrency N")
    goodput = data.get("request_goodput")
    percentiles = {
        f"{metric}_p{q}_ms": _number(data, f"p{q}_{metric}_ms", where)
        for metric in PERCENTILE_METRICS
        for q in PERCENTILES
    }
    return BenchLevel(
        concurrency=concurrency,
        num_prompts=int(_number(data, "num_prompts", where)),
        completed=int(_number(data, "completed", where)),
        failed=int(_number(data, "failed", where)),
        duration_s=_number(data, "duration", where),
        output_tokens_per_s=_number(data, "output_throughput", where),
        requests_per_s=_number(data, "request_throughput", where),
        goodput_requests_per_s=None if goodput is None else _number(data, "request_goodput", where),
        preemptions=preemptions,
        prefix_cache_hit_rate=prefix_cache_hit_rate,
        **percentiles,
    )
