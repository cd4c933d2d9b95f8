"""Where each checkpoint of a run is scored, and where its memory numbers come from.

Quality and memory are different questions: the items a checkpoint gets right depend on its weights
and numerics, not on the GPU it shared with a KV cache; the memory and capacity it buys depend on the
GPU and serve profile it will be deployed with. So a run may name a **target** (a GPU type, how many,
and the serve profile), and every checkpoint is first planned on it:

- it fits (weights + activations + one max-model-len request of KV) and this machine has the target's
  GPU: it is scored there under the target profile, and its memory comes from vLLM's log;
- otherwise its memory is the planner's for the target (`memory_source = planner`, with the doctor's
  pattern and the shortfall), and it is scored where it can be, in the guide's order: on this
  machine's GPUs under the target profile when it fits them; tensor parallel over more of them when
  the heads divide; vLLM's `--cpu-offload-gb` sized from the shortfall plus a margin; the scoring
  profile the user named (`--score-profile`); else its row says why it was not scored.
- A machine without a GPU scores every checkpoint on its CPU under the scoring profile (`cpu-small`
  unless named) while the memory columns are planned for the target.

Without a target every checkpoint is scored under the run's profile and its memory read from the log,
as before.
"""

from __future__ import annotations

import math
from typing import Literal

from evals.planning.planner import Plan, plan
from evals.planning.vllm_memory import Gpu, PlanRequest, valid_tensor_parallel_sizes
from evals.serving.hardware import Device
from kqe.core.errors import UserError
from kqe.core.kv_cache import AUTO
from kqe.core.records import Engine, ModelSpec, Record, ServeProfile
from kqe.core.schemes import BASE_SCHEME, SCHEMES

OFFLOAD_MARGIN_GIB = 1.0
"""Offloaded beyond the planned shortfall: the overhead is a model, not a measurement."""


class Target(Record):
    """The deployment a run answers for."""

    gpu: str | None
    """Name in evals/planning/gpus.toml, or None when given as `--gpu-gib`."""
    label: str
    """What reports call it, e.g. `NVIDIA GeForce RTX 4090 24 GB`."""
    gpu_gib: float
    """Memory of one GPU, GiB as the driver hands it to a process."""
    compute_capability: str | None
    count: int
    """GPUs one checkpoint is split over (the profile's tensor parallel size)."""
    profile: ServeProfile
    """The serve profile it will be deployed with."""


class ScorePlacement(Record):
    """Where and how one checkpoint's items are scored."""

    profile: ServeProfile
    """Profile it is served under for scoring (tensor parallel size and offload included)."""
    device: Literal["cpu", "gpu"]
    why: str
    """Why here: `fits the target`, `no GPU on this machine`, `tensor parallel: …`, `offload: …`."""


class Placement(Record):
    """One checkpoint's placement: its target memory and where it is scored."""

    checkpoint: str
    scheme: str
    target_plan: Plan | None
    """The planner on the target; None without a target or for a format the planner does not know."""
    memory_source: Literal["vllm-log", "planner"] | None
    """Where the row's memory columns come from; None when neither can say (unknown format)."""
    shortfall_gib: float | None
    """GiB per GPU the target lacks for weights + overhead + one request (None when it fits)."""
    score: ScorePlacement | None
    """None when it cannot be scored anywhere here (then `reason` says why)."""
    reason: str | None = None

    @property
    def fits_target(self) -> bool | None:
        return None if self.target_plan is None else self.target_plan.fits


class PlacementPlan(Record):
    """The placement of every checkpoint of a run, decided before anything is built."""

    target: Target | None
    device: str
    """This machine's serving device, e.g. `cpu` or `NVIDIA H100 80GB HBM3 ×8`."""
    checkpoints: list[Placement]

    def of(self, checkpoint: str) -> Placement:
        return next(p for p in self.checkpoints if p.checkpoint == checkpoint)


def target_from(
    gpu: Gpu | None, gpu_gib: float | None, profile: ServeProfile, count: int | None = None
) -> Target:
    """The target of `--target-gpu` (a named GPU) or `--gpu-gib` (memory alone) with its profile, on
    `count` GPUs (default: the profile's tensor parallel size)."""
    if gpu is None and not (gpu_gib and gpu_gib > 0):
        raise UserError("no target GPU: give --target-gpu NAME or --gpu-gib N (GiB per GPU, above 0)")
    return Target(
        gpu=gpu.name if gpu else None,
        label=gpu.label if gpu else f"a {gpu_gib:g} GiB GPU",
        gpu_gib=gpu.memory_gib if gpu else float(gpu_gib or 0),
        compute_capability=gpu.compute_capability if gpu else None,
        count=count or profile.tensor_parallel_size,
        profile=profile,
    )


def check_profile(model: ModelSpec, profile: ServeProfile, device: str, what: str) -> None:
    """One-line errors for a profile this device or model cannot take (offload on CPU, TP sizes)."""
    if device == "cpu" and profile.cpu_offload_gib:
        raise UserError(
            f"{what} {profile.name} sets cpu_offload_gib, a GPU setting (--cpu-offload-gb): the CPU "
            "engine holds every weight in memory already; use a profile without it"
        )
    valid = valid_tensor_parallel_sizes(model, BASE_SCHEME)
    if profile.tensor_parallel_size not in valid:
        raise UserError(
            f"{what} {profile.name}: tensor parallel size {profile.tensor_parallel_size} does not divide "
            f"{model.name}'s {model.heads} attention heads and {model.kv_heads} KV heads: use one of "
            f"{', '.join(map(str, valid))}"
        )


def place(
    model: ModelSpec,
    checkpoints: dict[str, str],
    target: Target | None,
    local: Device,
    run_profile: ServeProfile,
    score_profile: ServeProfile | None,
    kv_dtypes: dict[str, str] | None = None,
) -> PlacementPlan:
    """Placements of `checkpoints` (name → weight format, e.g. `awq-w4a16`) on this machine; a
    checkpoint of `kv_dtypes` (name → `--kv-cache-dtype`) is planned and served with that KV dtype,
    every other setting of its profiles as the run's."""
    engine = local.engine
    if score_profile is not None:
        check_profile(model, score_profile, engine, "--score-profile")
    placements = []
    for name, scheme in checkpoints.items():
        kv = (kv_dtypes or {}).get(name, AUTO)
        if kv != AUTO:
            placements.append(_place_kv(model, name, scheme, kv, target, local, run_profile, score_profile))
        elif target is None:
            placements.append(_place_here(name, scheme, run_profile, engine))
        else:
            placements.append(_place_on_target(model, name, scheme, target, local, score_profile))
    where = local.name if engine == "cpu" else f"{local.name} ×{local.count}"
    return PlacementPlan(target=target, device=where, checkpoints=placements)


def _place_kv(
    model: ModelSpec,
    name: str,
    scheme: str,
    kv: str,
    target: Target | None,
    local: Device,
    run_profile: ServeProfile,
    score_profile: ServeProfile | None,
) -> Placement:
    """`place` for a checkpoint served with KV dtype `kv`: every profile it meets takes `kv`."""
    with_kv = {"kv_cache_dtype": kv}
    scored = score_profile.model_copy(update=with_kv) if score_profile else None
    if target is not None:
        kv_target = target.model_copy(update={"profile": target.profile.model_copy(update=with_kv)})
        return _place_on_target(model, name, scheme, kv_target, local, scored)
    return _place_here(name, scheme, run_profile.model_copy(update=with_kv), local.engine)


def _place_here(name: str, scheme: str, profile: ServeProfile, engine: Engine) -> Placement:
    """A checkpoint with no target: scored on this machine under `profile`, its memory from vLLM's log."""
    here = ScorePlacement(profile=profile, device=engine, why="the run's profile")
    return Placement(
        checkpoint=name,
        scheme=scheme,
        target_plan=None,
        memory_source="vllm-log",
        shortfall_gib=None,
        score=here,
    )


def _place_on_target(
    model: ModelSpec,
    name: str,
    scheme: str,
    target: Target,
    local: Device,
    score_profile: ServeProfile | None,
) -> Placement:
    planned = _plan(model, scheme, target.profile, target.gpu_gib, target.compute_capability, target.count)
    if planned is not None:  # named as the target, so rows and the dry run say which GPU
        planned = planned.model_copy(update={"gpu": target.gpu})
    shortfall = None if planned is None or planned.fits else shortfall_gib(planned)
    score, reason = _score_placement(model, scheme, target, local, score_profile, planned)
    measured = (
        score is not None
        and planned is not None
        and planned.fits
        and score.device == "gpu"
        and score.profile == target.profile
        and _is_target_gpu(local, target)
    )
    source: Literal["vllm-log", "planner"] | None = "vllm-log" if measured else "planner" if planned else None
    return Placement(
        checkpoint=name,
        scheme=scheme,
        target_plan=planned,
        memory_source=source,
        shortfall_gib=None if shortfall is None else round(shortfall, 2),
        score=score,
        reason=reason,
    )


def _score_placement(
    model: ModelSpec,
    scheme: str,
    target: Target,
    local: Device,
    score_profile: ServeProfile | None,
    planned: Plan | None,
) -> tuple[ScorePlacement | None, str | None]:
    """The first scoring placement of the guide's order that works here, or why there is none."""
    if local.engine == "cpu":
        profile = score_profile or target.profile
        return ScorePlacement(profile=profile, device="cpu", why="no GPU on this machine"), None
    local_gib = local.memory_gib or 0.0
    on_local = _plan(model, scheme, target.profile, local_gib, _capability(local), target.count)
    if on_local is None or on_local.fits:
        why = "fits the target" if planned is None or planned.fits else f"fits this machine's {local.name}"
        return ScorePlacement(profile=target.profile, device="gpu", why=why), None
    for size in valid_tensor_parallel_sizes(model, scheme):
        if target.count < size <= local.count:
            wider = _plan(model, scheme, target.profile, local_gib, _capability(local), size)
            if wider is not None and wider.fits:
                profile = target.profile.model_copy(update={"tensor_parallel_size": size})
                return ScorePlacement(
                    profile=profile, device="gpu", why=f"tensor parallel over {size} GPUs"
                ), None
    shortfall = shortfall_gib(on_local)
    if on_local.pattern == "A" and shortfall < on_local.weights_gib:
        offload = float(math.ceil(shortfall + OFFLOAD_MARGIN_GIB))
        profile = target.profile.model_copy(update={"cpu_offload_gib": offload})
        return ScorePlacement(
            profile=profile, device="gpu", why=f"offload {offload:g} GiB of weights to CPU"
        ), None
    if score_profile is not None:
        return ScorePlacement(
            profile=score_profile, device="gpu", why=f"--score-profile {score_profile.name}"
        ), None
    return None, (
        f"not scored: {on_local.summary} on this machine's {local.name}, tensor parallel over "
        f"{local.count} GPU(s) and offload do not help; name a bigger --score-profile"
    )


def shortfall_gib(planned: Plan) -> float:
    """GiB per GPU missing for the weights, the overhead and one max-model-len request of KV."""
    one_request = planned.kv_bytes_per_token * planned.max_model_len / 2**30
    kv = planned.kv_cache_gib if planned.kv_cache_mode == "fixed" else one_request
    budget = planned.gpu_memory_utilization * (planned.gpu_gib or 0.0)
    return max(planned.weights_gib + (planned.overhead_gib or 0.0) + kv - budget, 0.0)


def _plan(
    model: ModelSpec, scheme: str, profile: ServeProfile, gpu_gib: float, capability: str | None, count: int
) -> Plan | None:
    """The planner for one format on a GPU of `gpu_gib`; None for a format it does not know."""
    if scheme not in SCHEMES:
        return None
    request = PlanRequest.for_profile(model, scheme, profile, engine="gpu", gpu_gib=gpu_gib)
    return plan(request.model_copy(update={"tensor_parallel_size": count, "compute_capability": capability}))


def _capability(device: Device) -> str | None:
    return None if device.compute_capability is None else f"{device.compute_capability:.1f}"


def _is_target_gpu(local: Device, target: Target) -> bool:
    """Whether this machine's GPU is the target's kind, so vLLM's log measures the target itself."""
    if target.gpu is None:  # only a memory size was given: the same memory stands for the same GPU
        return local.memory_gib is not None and abs(local.memory_gib - target.gpu_gib) < 0.02 * target.gpu_gib
    return local.name.lower() in target.label.lower() or target.label.lower().startswith(local.name.lower())
