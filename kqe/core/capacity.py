"""Serving capacity records: what `vllm bench serve` measured for one served checkpoint, per
concurrency level, and the guide's A/Bs on one checkpoint (prefix caching, enforce-eager).

They cross stages (the pipeline writes them, the leaderboard and run.json read them), so they live
on the floor; `evals.capacity` runs the benchmark and parses its JSON into them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from kqe.core.records import SCHEMA_VERSION, Engine, MemoryReport, Record
from kqe.core.workspace import unique_file_stem

Workload = Literal["rag", "shared-prefix"]
"""`rag`: long Korean RAG prompts, each with its own passages (little prefix to share);
`shared-prefix`: one long Korean system prompt reused by every request, only the question differs."""

AbOption = Literal["prefix-caching", "enforce-eager"]
"""The serve options the guide makes capacity claims about, measured on and off on one checkpoint."""

GUIDE_CLAIMS: dict[AbOption, str] = {
    "prefix-caching": "--enable-prefix-caching raises concurrent requests 1.5-2x when a 4K+ system "
    "prompt repeats (RTX 4090, Qwen2.5-14B AWQ: 32+ -> 48+)",
    "enforce-eager": "--enforce-eager frees 0.5-1 GB of GPU memory and costs 5-10% throughput",
}
"""What the field guide claims for each A/B, shown beside the measurement."""


class Slo(BaseModel):
    """Service-level objectives a request must meet to count towards goodput (`--goodput`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    ttft_ms: float
    """Longest acceptable time to first token, milliseconds."""
    tpot_ms: float
    """Longest acceptable mean time per output token after the first, milliseconds."""


DEFAULT_SLO: dict[Engine, Slo] = {
    "gpu": Slo(ttft_ms=2000, tpot_ms=100),
    # A 2-core CPU prefills a 1.5k-token prompt of a sub-1B model in seconds: 10 s to the first token
    # and 4 tokens/s (about Korean reading speed) keep goodput from being zero by construction.
    "cpu": Slo(ttft_ms=10_000, tpot_ms=250),
}
"""Goodput SLOs by engine: common chat SLOs on GPU; chosen for small models on CPU (docs/capacity.md)."""


class BenchLevel(Record):
    """One concurrency level: one `vllm bench serve` run and the server's counters around it."""

    concurrency: int
    """`--max-concurrency`: requests kept in flight."""
    num_prompts: int
    """Requests sent (sized to the level's time budget)."""
    completed: int
    """Requests that finished."""
    failed: int
    """Requests that failed."""
    duration_s: float
    """Wall time of the benchmark run."""
    output_tokens_per_s: float
    """Generated tokens per second over the run (`output_throughput`)."""
    requests_per_s: float
    """Completed requests per second (`request_throughput`)."""
    goodput_requests_per_s: float | None
    """Requests per second that met the SLO (`request_goodput`); None when no SLO was given."""
    ttft_p50_ms: float
    """Median time to first token, milliseconds."""
    ttft_p99_ms: float
    """99th percentile time to first token."""
    tpot_p50_ms: float
    """Median time per output token (first excluded)."""
    tpot_p99_ms: float
    """99th percentile time per output token."""
    itl_p50_ms: float
    """Median inter-token latency."""
    itl_p99_ms: float
    """99th percentile inter-token latency."""
    e2el_p50_ms: float
    """Median end-to-end request latency."""
    e2el_p99_ms: float
    """99th percentile end-to-end request latency."""
    preemptions: int | None
    """Increase of vLLM's preemption counter (`/metrics`) over the level; None without the counter."""
    prefix_cache_hit_rate: float | None
    """Prefix-cache hit tokens / queried tokens over the level (`/metrics`); None without queries."""


class CapacityReport(Record):
    """One served checkpoint under one workload, measured with vLLM's own benchmark client."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    checkpoint: str
    """Served model name."""
    profile: str | None
    """Serve profile as `name@key` when the suite served it; None for a server given by --url."""
    engine_version: str
    """vLLM version of the serve environment that ran server and benchmark."""
    workload: Workload
    """Which Korean workload was sent."""
    prompt_tokens: int
    """Tokens of every prompt (the shared system prompt included)."""
    shared_prefix_tokens: int
    """Tokens every prompt shares (the system prompt); 0 for `rag`."""
    max_tokens: int
    """Tokens generated per request (end of sequence ignored)."""
    seconds_per_level: float
    """Time budget each level's request count was sized to."""
    slo: Slo
    """The goodput SLO."""
    levels: list[BenchLevel]
    """One entry per concurrency level, in the order run (ascending)."""

    def at(self, concurrency: int) -> BenchLevel | None:
        """The level run at `concurrency`, if any."""
        return next((level for level in self.levels if level.concurrency == concurrency), None)

    def max_concurrency_without_preemption(self) -> int | None:
        """Highest level that ran without a preemption; None when every level preempted (or unknown)."""
        clean = [level.concurrency for level in self.levels if level.preemptions == 0]
        return max(clean) if clean else None


class AbReport(Record):
    """A serve option measured on and off on the same checkpoint, workload and levels."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    option: AbOption
    """Which option was toggled."""
    guide_claim: str
    """What the guide claims for it (GUIDE_CLAIMS)."""
    on: CapacityReport
    """Measured with the option on."""
    off: CapacityReport
    """Measured with the option off (every other setting identical)."""
    on_memory: MemoryReport
    """What vLLM reserved with the option on (its start-up log)."""
    off_memory: MemoryReport
    """The same with it off: on a GPU, the KV cache `--enforce-eager` gains is the CUDA graphs' memory."""


class LoadRecord(Record):
    """`results/<model>/load/<checkpoint>.<profile>.<workload>[.<option>-ab].json`: one `kqe load`."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    command: str
    """The `kqe load` command line that measured it."""
    machine: str
    """This machine as `kqe env` names it: CPU, cores, vLLM, kernel library or GPU, profile dtype."""
    report: CapacityReport | AbReport
    """What was measured: one serve configuration, or an option on and off."""

    def file_name(self) -> str:
        """Where in `results/<model>/load/` it is kept: one file per checkpoint, profile, workload, A/B."""
        one = self.report.on if isinstance(self.report, AbReport) else self.report
        ab = f".{self.report.option}-ab" if isinstance(self.report, AbReport) else ""
        profile = (one.profile or "url").partition("@")[0]
        return f"{unique_file_stem(one.checkpoint, 'checkpoint')}.{profile}.{one.workload}{ab}.json"
