"""A leaderboard row as a candidate for `kqe choose`'s target: the target, the candidate record, its
memory there and the order candidates rank in (`choose.py` judges the rows and says why).

Memory is measured (the leaderboard's vLLM numbers) only when the run served on a GPU under the same
profile, one written for this GPU (its `gpu` in profiles.toml), with the same GPU count
(`choose.measured_applies`); the planner's otherwise. Each candidate's memory is a `MemoryReport`
whose `source` (`vllm-log` or `planner`) and `profile` say which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import computed_field

from evals.planning.placement import Target
from evals.planning.planner import Plan, plan
from evals.planning.scored_row import ScoredRow
from evals.planning.vllm_memory import Gpu, PlanRequest
from kqe.core.kv_cache import AUTO
from kqe.core.records import MemoryReport, ModelSpec, Record


@dataclass(frozen=True)
class Deployment:
    """What `kqe choose` plans for: the model on the target (a named GPU, how many, the serve
    profile), and whether the run measured it there."""

    model: ModelSpec
    target: Target
    measured: bool = False
    """The leaderboard's memory columns were measured on this GPU class under this profile."""


class Candidate(Record):
    """One leaderboard row judged against the budget and the target."""

    checkpoint: str
    scheme: str
    calibration: str
    status: str
    kv_cache_dtype: str = AUTO
    """The KV dtype it was served with (`bf16+kv-fp8`: fp8): its memory is planned with it."""
    acc: float | None
    delta: float | None
    """Δ accuracy vs the base on the chosen task (fraction)."""
    ci_low: float | None
    ci_high: float | None
    verdict: str | None
    other_task: str
    """Label and Δ with CI on the other task, for context."""
    memory: MemoryReport | None
    """Its memory on the target under the profile: measured or planned (`source`); None when the
    planner refuses the target."""
    quality_ok: bool
    memory_ok: bool
    reasons: list[str]
    """Why it does not qualify; empty when it does."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def qualifies(self) -> bool:
        return self.quality_ok and self.memory_ok


def plan_on_target(
    deployment: Deployment,
    scheme: str,
    gpu: Gpu | None = None,
    count: int | None = None,
    kv_cache_dtype: str | None = None,
) -> Plan:
    """The planner on `count` × `gpu`, by default the target's own, with the profile's KV dtype unless
    `kv_cache_dtype` names the one a row was served with."""
    target = deployment.target
    profile = target.profile
    if kv_cache_dtype not in (None, AUTO):
        profile = profile.model_copy(update={"kv_cache_dtype": kv_cache_dtype})
    request = PlanRequest.for_profile(
        deployment.model, scheme, profile, engine="gpu", gpu=gpu, gpu_gib=target.gpu_gib
    )
    if gpu is None:
        request = request.model_copy(
            update={"gpu": target.gpu, "compute_capability": target.compute_capability}
        )
    return plan(request.model_copy(update={"tensor_parallel_size": count or target.count}))


def memory_on_target(row: ScoredRow, deployment: Deployment) -> MemoryReport:
    """The row's measured memory when the run measured this target, else the planner's."""
    profile = deployment.target.profile
    if deployment.measured and row.max_concurrency is not None:
        return MemoryReport(
            source="vllm-log",
            device="gpu",
            weights_gib=row.weights_gib,
            kv_cache_gib=row.kv_cache_gib,
            kv_cache_tokens=row.kv_cache_tokens,
            max_concurrency=row.max_concurrency,
            max_model_len=profile.max_model_len,
            summary="served by vLLM in the run",
            profile=profile.name,
        )
    return plan_on_target(deployment, row.scheme, kv_cache_dtype=row.kv_cache_dtype).memory_report(
        profile.name
    )


def concurrency(memory: MemoryReport | None) -> float:
    """Requests of max_model_len the memory holds at once; 0 when unknown or when it does not fit."""
    if memory is None or memory.max_concurrency is None:
        return 0.0
    return memory.max_concurrency


def rank_key(c: Candidate) -> tuple:
    """Sort key of a candidate, best first: the order `choose.py`'s docstring gives."""
    requests = concurrency(c.memory)
    weights = c.memory.weights_gib if c.memory and c.memory.weights_gib is not None else math.inf
    ci_low = c.ci_low if c.ci_low is not None else -math.inf
    fits = c.memory is not None and c.memory.fits
    return (not c.qualifies, not fits, not c.memory_ok, not c.quality_ok, -ci_low, -requests, weights)
