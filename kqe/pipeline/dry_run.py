"""`kqe eval --dry-run [--json]`: the whole plan of a run, nothing built or served.

Per checkpoint: scheme, calibration, whether it fits the target, the planned weights, KV tokens and
concurrency there, the scoring placement, and a rough scoring time from the per-item rates this
machine measured before for that checkpoint under that scoring profile (None when it never did); the
requests `--circular` adds (N × (k − 1) per task) count as items there.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

from pydantic import ValidationError

from evals.planning.placement import Placement
from evals.statistics import resolution
from evals.tasks import circular, item_sets, prompts
from evals.tasks.ko_rag.sweep import CLOSED_BOOK
from evals.tasks.ko_rag.sweep import TASK as RAG_TASK
from evals.tasks.registry import TASK_SPECS
from kqe.core.eval_config import EvalConfig
from kqe.core.results import ScoreRun
from kqe.core.workspace import Workspace
from kqe.pipeline.config import RunPlan, circular_tasks


def describe(cfg: EvalConfig, plan: RunPlan, ws: Workspace) -> dict[str, Any]:
    """The plan as one JSON object: `{"target": {...}, "checkpoints": [...]}`."""
    target = plan.placement.target
    stages = ws.results(plan.spec.name) / "stages"
    item_plan = _items(cfg, ws)
    counts = [task["scored"] for task in item_plan["tasks"]]
    extra = item_plan["circular"]["requests"] if item_plan["circular"] else 0
    items = sum(counts) + extra if counts and None not in counts else None
    mixes = {entry.name: entry.mix for entry in plan.entries}
    placements = plan.placement.checkpoints
    return {
        "model": plan.spec.name,
        "device": plan.placement.device,
        "target": None
        if target is None
        else {
            "gpu": target.gpu,
            "label": target.label,
            "gpu_gib": target.gpu_gib,
            "count": target.count,
            "profile": target.profile.name,
            "profile_key": target.profile.key,
        },
        "items": item_plan,
        "checkpoints": [_checkpoint(p, mixes.get(p.checkpoint), stages, items) for p in placements],
    }


def _items(cfg: EvalConfig, ws: Workspace) -> dict[str, Any]:
    """Which item sets the run would score and fetch, and how many items: nothing is downloaded."""
    choice_tasks = [task for task in cfg.tasks if task in TASK_SPECS]
    sources = prompts.task_sources(ws, choice_tasks, cfg.items.online) if choice_tasks else {}
    tasks = [
        {
            "task": task,
            "set": source.name,
            "where": source.where,
            "full": source.full,
            "source_items": source.items,
            "download": source.hub,
            "scored": item_sets.scored_items(source, cfg.limit),
        }
        for task, source in sources.items()
    ]
    lines = item_sets.announce(ws, list(cfg.tasks), cfg.items, cfg.limit, resolution.unresolved)
    rag = _rag_slice(cfg) if RAG_TASK in cfg.tasks else None
    rotated = _circular(cfg)
    said = [_rag_line(rag)] if rag else []
    said += [_circular_line(rotated)] if rotated else []
    return {
        "online": cfg.items.online,
        "why": cfg.items.why,
        "limit": cfg.limit,
        "tasks": tasks,
        "ko_rag": rag,
        "circular": rotated,
        "lines": lines[: len(tasks)] + said + lines[len(tasks) :],
    }


def _circular(cfg: EvalConfig) -> dict[str, Any] | None:
    """`--circular`'s items and the requests its rotations add per checkpoint; None when it is off."""
    tasks = circular_tasks(cfg)
    if not tasks:
        return None
    per_task = cfg.circular * (circular.OPTIONS - 1)
    return {
        "items": cfg.circular,
        "tasks": tasks,
        "requests_per_task": per_task,
        "requests": per_task * len(tasks),
    }


def _circular_line(rotated: dict[str, Any]) -> str:
    n, more = rotated["items"], circular.OPTIONS - 1
    return (
        f"circular: {n} seeded items per task ({', '.join(rotated['tasks'])}), each asked again in {more} "
        f"rotations of its options: +{rotated['requests_per_task']} requests per task ({n} × {more}), "
        f"+{rotated['requests']} per checkpoint"
    )


def _rag_slice(cfg: EvalConfig) -> dict[str, Any]:
    """The ko_rag slice asked for: its items are cut to the base's tokenizer when the run prepares them."""
    return {
        "questions": cfg.rag_questions,
        "conditions": list(cfg.rag_conditions),
        "lengths": list(cfg.rag_lengths),
        "data": cfg.rag_data,
    }


def _rag_line(rag: dict[str, Any]) -> str:
    questions = f"{rag['questions']} questions (seeded)" if rag["questions"] else "every question"
    open_book = [name for name in rag["conditions"] if name != CLOSED_BOOK]
    where = f"{', '.join(open_book)} at {', '.join(rag['lengths'])}" if open_book else ""
    once = "closed-book once per question" if CLOSED_BOOK in rag["conditions"] else ""
    return (
        f"ko_rag: {questions} of {rag['data'] or 'the built-in set'}, "
        f"{'; '.join(part for part in (where, once) if part)}: a generated answer and a letter choice each"
    )


def _checkpoint(placement: Placement, mix: str | None, stages: Path, items: int | None) -> dict[str, Any]:
    planned, score = placement.target_plan, placement.score
    rate = _measured_rate(stages, placement.checkpoint, score.profile.key) if score else None
    return {
        "name": placement.checkpoint,
        "scheme": placement.scheme,
        "calibration": mix or "none",
        "fits_target": placement.fits_target,
        "pattern": planned.pattern if planned else None,
        "shortfall_gib": placement.shortfall_gib,
        "memory_source": placement.memory_source,
        "weights_gib": planned.weights_gib if planned else None,
        "kv_cache_tokens": planned.kv_cache_tokens if planned else None,
        "max_concurrency": planned.max_concurrency if planned else None,
        "score_placement": None
        if score is None
        else {
            "profile": score.profile.name,
            "device": score.device,
            "tensor_parallel_size": score.profile.tensor_parallel_size,
            "cpu_offload_gib": score.profile.cpu_offload_gib,
            "kv_cache_dtype": score.profile.kv_cache_dtype,
            "why": score.why,
        },
        "not_scored": placement.reason,
        "items_per_s": rate,
        "scoring_s": round(items / rate) if items and rate else None,
    }


def _measured_rate(stages: Path, checkpoint: str, profile_key: str) -> float | None:
    """Median items/s of the checkpoint's finished tasks under this scoring profile, on this machine."""
    rates = []
    for path in stages.glob(f"{checkpoint}.*.score.json"):
        try:
            run = ScoreRun.model_validate_json(path.read_text(encoding="utf-8-sig"))
        except (OSError, ValidationError):
            continue  # a record of another format: no rate from it
        if run.profile_key == profile_key and run.items_per_s:
            rates.append(run.items_per_s)
    return round(median(rates), 2) if rates else None


def lines(described: dict[str, Any]) -> list[str]:
    """The plan for a terminal: one line for the target, one per checkpoint."""
    target = described["target"]
    head = f"{described['model']} on this machine ({described['device']})"
    if target:
        head += f"; target {target['label']} ×{target['count']} under {target['profile']}"
    out = [head, *(f"  {line}" for line in described["items"]["lines"])]
    for c in described["checkpoints"]:
        fits = {
            True: "fits",
            False: f"does not fit ({c['pattern']}, short {c['shortfall_gib']} GiB)",
            None: "–",
        }
        memory = "not planned"
        if c["weights_gib"] is not None:
            memory = f"{c['weights_gib']} GiB weights, {c['kv_cache_tokens']:,} KV tokens"
            memory += f", {c['max_concurrency']}× concurrency"
        score = c["score_placement"]
        where = (
            c["not_scored"]
            if score is None
            else f"scored on {score['device']} under {score['profile']} ({score['why']})"
        )
        eta = f", ~{c['scoring_s'] / 60:.0f} min scoring" if c["scoring_s"] else ""
        out.append(
            f"  {c['name']}: {fits[c['fits_target']] if target else 'no target'}; {memory}; {where}{eta}"
        )
    return out
