"""The guide's RTX 4090 table (Qwen2.5-14B, 16K context) against `kqe plan`, figure by figure.

The guide gives "GB" figures; they are read as GiB, the unit vLLM meant when its V0 logs said "GB"
("Loading model weights took 14.9888 GB" is the 14.99 GiB its V1 logs print for the same weights).
Its own tolerance is ±15%.
"""

from __future__ import annotations

from evals.planning.plan_evaluation import evaluate
from evals.planning.vllm_memory import PlanRequest, gpu_named
from kqe.core.records import Record

GUIDE_MODEL = "qwen2.5-14b"
GUIDE_GPU = "rtx4090"
GUIDE_PROFILE = "rtx4090-16k"
GUIDE_TOLERANCE_PCT = 15.0
GUIDE_TABLE: tuple[tuple[str, str, float], ...] = (
    ("bf16", "weights_gib", 28.0),
    ("awq-w4a16", "weights_gib", 9.0),
    ("awq-w4a16", "kv_cache_gib", 13.0),
    ("fp8-dynamic", "weights_gib", 14.0),
    ("fp8-dynamic", "kv_cache_gib", 8.0),
)
"""(scheme, measure, the guide's figure); the guide's FP16 row also says it does not fit."""


class GuideFigure(Record):
    """One figure of the guide's table and what `kqe plan` makes of it."""

    scheme: str
    """Checkpoint scheme (the guide's FP16 row is bf16 here)."""
    measure: str
    """`weights_gib` or `kv_cache_gib` (per GPU)."""
    guide: float
    """The guide's figure."""
    planned: float
    """The planner's, for the guide's settings."""
    distance_pct: float
    """(planned − guide) / guide in percent."""
    within_tolerance: bool
    """Within the guide's ±15%."""
    fits: bool
    """Whether the plan fits the GPU."""


def guide_figures() -> list[GuideFigure]:
    """Every figure of the guide's table, planned with the rtx4090-16k profile on an RTX 4090."""
    from evals.serving.serve import load_profile
    from kqe.core.registry import load_registry

    model, gpu = load_registry()[GUIDE_MODEL], gpu_named(GUIDE_GPU)
    profile = load_profile(GUIDE_PROFILE)
    figures = []
    for scheme, measure, guide in GUIDE_TABLE:
        ev = evaluate(PlanRequest.for_profile(model, scheme, profile, engine="gpu", gpu=gpu))
        planned = ev.weights_gib if measure == "weights_gib" else ev.kv_gib
        distance = (planned - guide) / guide * 100
        figures.append(
            GuideFigure(
                scheme=scheme,
                measure=measure,
                guide=guide,
                planned=round(planned, 2),
                distance_pct=round(distance, 1),
                within_tolerance=abs(distance) <= GUIDE_TOLERANCE_PCT,
                fits=ev.fits,
            )
        )
    return figures
