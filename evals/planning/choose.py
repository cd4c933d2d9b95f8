"""Which checkpoint to deploy on a GPU under a quality-loss budget (pure core of `kqe choose`).

- Quality: a checkpoint is within budget when the lower end of the 95% CI of its Δ accuracy on the
  chosen task is ≥ −max_loss: a loss larger than the budget is ruled out (one-sided, 97.5%). A real
  but small loss qualifies; a point estimate inside the budget with a CI reaching past it does not.
  Among checkpoints that qualify, quality ranks by that same lower bound, so noise never ranks a
  checkpoint up; the base's Δ is 0 by definition, so it wins whenever it fits and meets the concurrency.
  A checkpoint whose answers collapsed on the task (the verdict `collapsed: picks A on …`) is never
  within budget there: its Δ is letter preference, whatever its CI.
- Memory: measured or planned, as `candidates.py` says.
- Rank (`candidates.rank_key`): qualifies, fits, meets the concurrency, within budget, quality (CI
  lower bound), max concurrency, smaller weights; the runner-up is second in that order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from evals.planning.candidates import (
    Candidate,
    Deployment,
    concurrency,
    memory_on_target,
    plan_on_target,
    rank_key,
)
from evals.planning.planner import Plan
from evals.planning.scored_row import ScoredRow
from evals.planning.vllm_memory import Gpu, load_gpus
from evals.statistics.choice_bias import COLLAPSED
from evals.tasks.registry import COLUMN_LABELS, COLUMN_PREFIXES
from kqe.core.errors import UserError
from kqe.core.kv_cache import AUTO
from kqe.core.records import MemoryReport, Record, ServeProfile
from kqe.core.results import RunSummary
from kqe.core.schemes import BASE_SCHEME

MAX_TENSOR_PARALLEL = 8


def task_prefix(task: str) -> str:
    """The leaderboard column prefix a `--task` value reads."""
    if task not in COLUMN_PREFIXES:
        raise UserError(f"unknown --task {task!r}: use one of {', '.join(COLUMN_PREFIXES)}")
    return COLUMN_PREFIXES[task]


def points(fraction: float) -> str:
    """An accuracy fraction as signed points: -0.0123 → '-1.2'."""
    return f"{100 * fraction:+.1f}"


# --- choose ---------------------------------------------------------------------------------------


class Choice(Record):
    """The answer of `kqe choose`."""

    model: str
    gpu: str
    gpu_gib: float
    count: int
    task: str
    max_loss: float
    """Budget in accuracy points."""
    min_concurrency: float
    profile: str
    max_model_len: int
    chosen: Candidate | None
    runner_up: Candidate | None
    candidates: list[Candidate]
    """Every row, best first."""
    lines: list[str]
    """Why this one, its quality cost with CI, what it buys, the runner-up; or why nothing qualifies."""
    would_qualify: list[str]
    """When nothing qualifies: what would (a bigger GPU, more GPUs, a looser budget, more items)."""


def profile_for_gpu(gpu: Gpu, profiles: Iterable[ServeProfile]) -> str | None:
    """The serve profile that profiles.toml makes this GPU's default (`rtx4090` → `rtx4090-16k`), if any."""
    return next((p.name for p in profiles if p.gpu == gpu.name and p.default_for_gpu), None)


def measured_applies(run: RunSummary | None, gpu: Gpu, profile: ServeProfile, count: int) -> bool:
    """Whether the run's logged memory describes this target: a GPU engine, the same profile and GPU
    count, and a profile written for this GPU (the leaderboard does not record the card)."""
    if run is None or not run.memory or run.profile.key != profile.key:
        return False
    if count != profile.tensor_parallel_size:
        return False
    on_gpu = all(m.device == "gpu" and m.source == "vllm-log" for m in run.memory.values())
    return on_gpu and profile.gpu == gpu.name


def collapsed(verdict: str | None) -> bool:
    """Whether a task verdict names an answer collapse: never chosen for that task, whatever its Δ."""
    return verdict is not None and verdict.startswith(COLLAPSED)


def _judged_scores(row: ScoredRow, prefix: str) -> dict:
    """A row's scores on a task column prefix, as `Candidate` fields."""
    found = row.task_scores(prefix)
    scores = {
        "acc": found.acc,
        "delta": found.delta,
        "ci_low": found.ci_low,
        "ci_high": found.ci_high,
        "verdict": found.verdict,
    }
    if row.scheme == BASE_SCHEME and scores["acc"] is not None:
        # the leaderboard leaves the base's Δ empty: it is the reference, nothing lost by definition
        scores.update(delta=0.0, ci_low=0.0, ci_high=0.0)
    return scores


def _describe_delta(label: str, delta: float | None, low: float | None, high: float | None) -> str:
    if delta is None or low is None or high is None:
        return f"{label} not compared"
    return f"{label} Δ {points(delta)} points [{points(low)}, {points(high)}]"


def _other_tasks(row: ScoredRow, prefix: str) -> str:
    """The Δ of every other task column, for context."""
    described = []
    for other, label in COLUMN_LABELS.items():
        if other != prefix:
            o = _judged_scores(row, other)
            described.append(_describe_delta(label, o["delta"], o["ci_low"], o["ci_high"]))
    return "; ".join(described)


def judge(
    row: ScoredRow, deployment: Deployment, prefix: str, max_loss: float, min_concurrency: float
) -> Candidate:
    """One row against the quality budget (points) and the target's memory."""
    scores = _judged_scores(row, prefix)
    reasons: list[str] = []
    if row.status != "ok":
        reasons.append(f"status {row.status}")
    elif collapsed(scores["verdict"]):
        reasons.append(f"{prefix.upper()} answers {scores['verdict']}: its Δ is letter preference")
    elif scores["ci_low"] is None:
        reasons.append(f"no {prefix.upper()} comparison with the base")
    elif scores["ci_low"] < -max_loss / 100:
        reasons.append(
            f"{prefix.upper()} Δ CI reaches {points(scores['ci_low'])} points, past the -{max_loss:g} budget"
        )
    quality_ok = not reasons
    memory: MemoryReport | None = None
    try:
        memory = memory_on_target(row, deployment)
    except UserError as exc:
        reasons.append(f"planner: {exc}")
    if memory is not None and not memory.fits:
        reasons.append(memory.summary)
    elif memory is not None and concurrency(memory) < min_concurrency:
        reasons.append(
            f"{concurrency(memory):.1f} concurrent requests < --min-concurrency {min_concurrency:g}"
        )
    memory_ok = memory is not None and memory.fits and concurrency(memory) >= min_concurrency
    return Candidate(
        checkpoint=row.checkpoint,
        scheme=row.scheme,
        calibration=row.calibration,
        status=row.status,
        kv_cache_dtype=row.kv_cache_dtype or AUTO,
        other_task=_other_tasks(row, prefix),
        memory=memory,
        quality_ok=quality_ok,
        memory_ok=memory_ok,
        reasons=reasons,
        **scores,
    )


def choose(
    rows: Sequence[ScoredRow], deployment: Deployment, task: str, max_loss: float, min_concurrency: float
) -> Choice:
    """The checkpoint to deploy on the target, its runner-up, and the reasons."""
    if max_loss < 0:
        raise UserError(f"--max-loss {max_loss:g} is negative: give the accuracy points you accept losing")
    models = sorted({row.model for row in rows})
    if len(models) != 1:
        raise UserError(
            f"the leaderboard holds {len(models)} models ({', '.join(models)}): pass --model NAME"
        )
    prefix = task_prefix(task)
    ranked = sorted((judge(r, deployment, prefix, max_loss, min_concurrency) for r in rows), key=rank_key)
    if all(c.memory is None for c in ranked):  # the target itself is wrong (e.g. the GPU count)
        raise UserError(
            next(r for r in ranked[0].reasons if r.startswith("planner: ")).removeprefix("planner: ")
        )
    chosen = ranked[0] if ranked[0].qualifies else None
    runner_up = ranked[1] if chosen and len(ranked) > 1 else None
    base = next((c for c in ranked if c.scheme == BASE_SCHEME), None)
    target = deployment.target
    choice = Choice(
        model=models[0],
        gpu=target.gpu or target.label,
        gpu_gib=target.gpu_gib,
        count=target.count,
        task=prefix,
        max_loss=max_loss,
        min_concurrency=min_concurrency,
        profile=target.profile.name,
        max_model_len=target.profile.max_model_len,
        chosen=chosen,
        runner_up=runner_up,
        candidates=ranked,
        lines=[],
        would_qualify=[],
    )
    if chosen is None:
        lines = [f"no checkpoint qualifies on {_target_label(choice)}:"]
        lines += [f"  {c.checkpoint}: {'; '.join(c.reasons)}" for c in ranked]
        would = what_would_qualify(ranked, deployment, max_loss, min_concurrency)
        return choice.model_copy(update={"lines": lines, "would_qualify": would})
    return choice.model_copy(update={"lines": explain(choice, chosen, runner_up, base)})


def _target_label(choice: Choice) -> str:
    return f"{choice.gpu} ({choice.gpu_gib:g} GiB) × {choice.count}, {choice.max_model_len:,}-token requests"


def _memory_text(memory: MemoryReport) -> str:
    weights = "?" if memory.weights_gib is None else f"{memory.weights_gib:.2f}"
    kv = "" if memory.kv_cache_gib is None else f", KV cache {memory.kv_cache_gib:.2f} GiB"
    tokens = "" if memory.kv_cache_tokens is None else f" = {memory.kv_cache_tokens:,} tokens"
    return f"weights {weights} GiB{kv}{tokens}, {concurrency(memory):.1f} concurrent requests"


def _source_text(memory: MemoryReport) -> str:
    """Where the memory comes from, for people: measured under the profile, or planned for the target."""
    if memory.source == "vllm-log":
        return f"measured (vLLM log, profile {memory.profile})"
    return f"planner, profile {memory.profile}; the run did not measure this GPU"


def explain(
    choice: Choice, chosen: Candidate, runner_up: Candidate | None, base: Candidate | None
) -> list[str]:
    """Three lines (why, quality cost with CI, what it buys) and the runner-up."""
    label, memory = choice.task.upper(), chosen.memory
    assert memory is not None  # a qualifying candidate has memory
    calibrated = f", calibrated on {chosen.calibration}" if chosen.calibration != "none" else ""
    qualified = sum(c.qualifies for c in choice.candidates)
    why = (
        f"choose {chosen.checkpoint} ({chosen.scheme}{calibrated}): best {label} quality of the {qualified} "
        f"of {len(choice.candidates)} checkpoints that fit {_target_label(choice)} with >= "
        f"{choice.min_concurrency:g} concurrent and rule out a loss beyond the {choice.max_loss:g}-point "
        "budget (95% CI)"
    )
    if chosen.scheme == BASE_SCHEME:
        accuracy = "" if chosen.acc is None else f" ({label} accuracy {100 * chosen.acc:.1f}%)"
        cost = f"quality: the unquantized base, nothing lost{accuracy}"
    else:
        cost = (
            f"quality: {_describe_delta(label, chosen.delta, chosen.ci_low, chosen.ci_high)} vs "
            f"{BASE_SCHEME}, {chosen.verdict}; {chosen.other_task}"
        )
    buys = f"memory ({_source_text(memory)}): {_memory_text(memory)}"
    if base is not None and base is not chosen and base.memory is not None:
        buys += f"; {BASE_SCHEME}: " + (
            _memory_text(base.memory) if base.memory.fits else base.memory.summary
        )
    lines = [why, cost, buys]
    if runner_up is not None:
        status = (
            "qualifies too" if runner_up.qualifies else "does not qualify: " + "; ".join(runner_up.reasons)
        )
        mem = _memory_text(runner_up.memory) if runner_up.memory else "memory unknown"
        delta = _describe_delta(label, runner_up.delta, runner_up.ci_low, runner_up.ci_high)
        lines.append(f"runner-up: {runner_up.checkpoint}: {delta}, {mem} ({status})")
    return lines


def _first_fit(
    candidates: list[Candidate], deployment: Deployment, min_concurrency: float, gpu: Gpu | None, count: int
) -> tuple[Candidate, Plan] | None:
    """The best-ranked candidate that fits `count` × `gpu` (None: the target's) with the concurrency
    asked, and its plan."""
    for c in candidates:
        try:
            result = plan_on_target(deployment, c.scheme, gpu, count, c.kv_cache_dtype)
        except UserError:  # e.g. a tensor parallel size this model cannot be split into
            continue
        if result.fits and result.max_concurrency >= min_concurrency:
            return c, result
    return None


def _budget_needed(c: Candidate) -> float:
    """The smallest --max-loss (points, one decimal) that admits this candidate."""
    return max(math.ceil(round(-(c.ci_low or 0.0) * 1000, 6)) / 10, 0.0)


def what_would_qualify(
    ranked: list[Candidate], deployment: Deployment, max_loss: float, min_concurrency: float
) -> list[str]:
    """Each change that would make some checkpoint qualify (more GPUs, a bigger GPU, a lower concurrency,
    a looser budget, more items), re-planned with the planner."""
    scored = [c for c in ranked if c.status == "ok" and c.ci_low is not None and not collapsed(c.verdict)]
    in_budget = [c for c in scored if c.quality_ok]
    target = deployment.target
    hardware: list[tuple[str, Gpu | None, int]] = [
        (f"--count {n}", None, n) for n in range(target.count + 1, MAX_TENSOR_PARALLEL + 1)
    ]
    bigger = sorted(
        (g for g in load_gpus().values() if g.memory_gib > target.gpu_gib), key=lambda g: g.memory_gib
    )
    hardware += [(f"--gpu {g.name} ({g.memory_gib:g} GiB)", g, target.count) for g in bigger]
    lines: list[str] = []
    for kind in ("--count", "--gpu"):
        for option, gpu, count in (h for h in hardware if h[0].startswith(kind)):
            # nothing within budget: still say which hardware the least lossy checkpoint needs
            if found := _first_fit(in_budget or scored, deployment, min_concurrency, gpu, count):
                c, result = found
                budget = "" if c.quality_ok else f" with --max-loss {_budget_needed(c):.1f}"
                lines.append(
                    f"{option}: {c.checkpoint} fits, {result.max_concurrency:.1f} concurrent{budget}"
                )
                break
    short = [c for c in in_budget if c.memory and c.memory.fits and not c.memory_ok]
    if short and (best := short[0]).memory:
        lines.append(f"--min-concurrency {math.floor(concurrency(best.memory))}: admits {best.checkpoint}")
    lines += _looser_budget([c for c in scored if c.memory_ok and not c.quality_ok], max_loss)
    return lines or ["nothing on this leaderboard fits a named GPU, up to 8 of them: score other checkpoints"]


def _looser_budget(over_budget: list[Candidate], max_loss: float) -> list[str]:
    """For checkpoints that fit but lose too much: the budget that admits the best, or more items."""
    if not over_budget:
        return []
    best = over_budget[0]  # ranked: the highest CI lower bound first
    assert best.ci_low is not None and best.delta is not None
    needed = _budget_needed(best)
    lines = [f"--max-loss {needed:.1f}: admits {best.checkpoint} (95% CI to {points(best.ci_low)} points)"]
    if best.delta >= -max_loss / 100:
        lines.append(
            f"or more items (LIMIT=0): {best.checkpoint}'s Δ {points(best.delta)} points is within the "
            "budget, its CI too wide to rule out more"
        )
    return lines
