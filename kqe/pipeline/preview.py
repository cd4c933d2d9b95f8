"""What a run will do, said before its first stage: per checkpoint what is reused and what is left,
the items per task, and the wall time that will take on this machine (at `rates.py`'s rates).
"""

from __future__ import annotations

from statistics import mean

from evals.tasks.ko_rag import task as rag_task
from kqe.core.schemes import BASE_SCHEME
from kqe.pipeline.config import RunMatrix
from kqe.pipeline.matrix import MatrixEntry
from kqe.pipeline.rates import Rates, recorded, serving_time, task_items_per_s
from kqe.pipeline.stage_files import stage_files
from quantize import build


def preview(matrix: RunMatrix, rates: Rates) -> list[str]:
    """The plan of the run in a few lines, its estimate last (at `rates`), with the stage that
    dominates it."""
    items = {task: len(prompts) for task, prompts in matrix.prompts.items()}
    if matrix.rag is not None:  # its generated answers, beside its choice items
        items[rag_task.TASK] = len(matrix.rag.generation)
    items |= {task: len(generation.items) for task, generation in matrix.generation.items()}
    items |= {f"{task}{ROTATIONS}": len(rotated) for task, rotated in matrix.circular.items()}
    lines = [
        f"plan: {len(matrix.plan.entries)} checkpoints; items per task: "
        + ", ".join(f"{task} {n}" for task, n in items.items())
    ]
    costs: dict[tuple[str, str], float] = {}
    for entry in matrix.plan.entries:
        what, cost = _entry_plan(matrix, entry, rates, items)
        lines.append(f"  {entry.name:<22} {what}")
        costs |= {(stage, entry.name): seconds for stage, seconds in cost.items()}
    total = sum(costs.values())
    if total < 1:
        return [*lines, "estimate: everything is done already; nothing to build or serve"]
    lines.append(
        f"estimate: about {_duration(total)} on this machine ({rates.source}); the most of it: "
        f"{dominant_stage(costs)}"
    )
    return lines


ROTATIONS = " circular"
"""What names a task's `--circular` rotations in the plan (`kmmlu circular 60`): short items, at its rate."""
_STAGE_WORDS = {"build": "building", "serve": "server starts", "score": "scoring", "perplexity": "perplexity"}
"""How the estimate names each stage of `_entry_plan`."""


def dominant_stage(costs: dict[tuple[str, str], float]) -> str:
    """The stage that takes the most of the estimate, summed over checkpoints (five scoring passes of 4
    minutes outweigh one 10-minute build), e.g. `scoring, 5 checkpoints (20 min)`."""
    per_stage: dict[str, list[float]] = {}
    for (stage, _), seconds in costs.items():
        per_stage.setdefault(stage, []).append(seconds)
    top, parts = max(per_stage.items(), key=lambda pair: sum(pair[1]))
    count = f"{len(parts)} checkpoint{'s' if len(parts) > 1 else ''}"
    return f"{_STAGE_WORDS[top]}, {count} ({_duration(sum(parts))})"


def _entry_plan(
    matrix: RunMatrix, entry: MatrixEntry, rates: Rates, items: dict[str, int]
) -> tuple[str, dict[str, float]]:
    """What the run will do for one checkpoint, in words and in seconds per stage."""
    placement = matrix.plan.placement.of(entry.name)
    if placement.score is None:
        return f"not scored: {placement.reason}", {}
    found, building = None, ""
    recipe = matrix.plan.recipes.get(entry.scheme)
    if recipe is None:  # an extra: checked, never built
        building = "check the given checkpoint"
    else:
        calib = matrix.calibs.get(entry.mix or "")
        found = build.find_checkpoint(
            matrix.ws, matrix.base, recipe.scheme, recipe, calib, entry.name, matrix.plan.build_dtype
        )
        building = (
            "the base weights" if recipe.scheme == BASE_SCHEME else "reuse the build" if found else "build"
        )
    if entry.weights is not None:  # a KV row: its weights' entry builds them
        building = f"{entry.weights}'s weights, KV cache {entry.kv_cache_dtype}"
    cost: dict[str, float] = {}
    if not (found or recipe is None or recipe.scheme == BASE_SCHEME or entry.weights):  # the base as it is
        cost["build"] = rates.build_s.get(recipe.scheme, 0.0)
    left, perplexity_done = dict(items), False
    if found is not None:
        files = stage_files(matrix, found)
        if files.complete():
            return f"{building}; every task scored already", cost
        done = [*files.finished_runs(), *(f"{task}{ROTATIONS}" for task in files.finished_circular())]
        left = {task: n for task, n in items.items() if task not in done}
        perplexity_done = files.perplexity.exists()
    cost |= _serving_cost(matrix, entry, rates, items, left, perplexity_done) | {
        "serve": rates.server_start_s
    }
    return f"{building}, serve, score {sum(left.values())} items", cost


def _serving_cost(
    matrix: RunMatrix,
    entry: MatrixEntry,
    rates: Rates,
    items: dict[str, int],
    left: dict[str, int],
    perplexity_done: bool,
) -> dict[str, float]:
    """Seconds to score the items `left` of the run's `items` on `entry`'s server, and its perplexity
    stage unless that is recorded already."""
    rag_tokens = (
        mean(i.prompt_tokens for i in matrix.rag.generation) if matrix.rag and matrix.rag.generation else None
    )
    answers = {
        task: mean(i.max_gen_toks for i in g.items) for task, g in matrix.generation.items() if g.items
    }
    score_s = sum(
        n / task_items_per_s(rates, task, rag_tokens, answers.get(task), entry) for task, n in left.items()
    )
    first = next(iter(items), None)  # the task a fresh server scores first: its rate holds the warm-up
    if left and not (first in left and recorded(rates, entry, first)):
        score_s += rates.first_request_s
    if perplexity_done:
        return {"score": score_s, "perplexity": 0.0}
    perplexity_s = rates.checkpoint_perplexity_s.get(entry.name)
    if perplexity_s is None:
        perplexity_s = rates.perplexity_s * serving_time(entry.scheme, rates.cpu_kind)[1]
    return {"score": score_s, "perplexity": perplexity_s}


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
