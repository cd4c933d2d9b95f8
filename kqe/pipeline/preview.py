"""What a run will do, said before its first stage: per checkpoint what is reused and what is left,
the items per task, and the wall time that will take on this machine.

The estimate uses what earlier runs recorded here (build records, score runs, perplexity records,
server logs); what nothing recorded yet comes from the rates measured on the reference
machine, scaled by model size (and by the CPU kind, where it is slower).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from statistics import mean, median
from typing import TypeVar

from evals.serving import hardware
from evals.serving.cpu import CpuKernels
from evals.serving.vllm_log import startup_seconds
from evals.tasks.ko_rag import task as rag_task
from kqe.core.io import read_record
from kqe.core.records import Checkpoint, Record
from kqe.core.results import Perplexity, ScoreRun
from kqe.core.schemes import BASE_SCHEME, SCHEMES
from kqe.pipeline.config import RunMatrix
from kqe.pipeline.matrix import MatrixEntry
from kqe.pipeline.stage_files import stage_files
from quantize import build

T = TypeVar("T", bound=Record)

REFERENCE = {"items_per_s": 19.5, "server_start_s": 45.0, "perplexity_s": 198.0}
"""Measured on the reference machine (Xeon with AVX-512 BF16 + AMX, 2 cores, gemma3-270m, cpu-small
in bfloat16, 2026-12-01): scoring one run of 300 items with both cores computing; perplexity on bf16 on
2026-12-07, every held-out set (80.1k tokens, 68.2k of them the LibreOffice help pages). Server start:
cpu-small is eager since 2026-12-02, when its starts took 36 and 43 s on the AVX2 EPYC (120 s compiled
on the Xeon the day before)."""
REFERENCE_CALIB_TOKENS = 64 * 384
"""Calibration tokens of the reference builds: a calibrated build's time grows with them (AWQ's scale
search runs each layer over every token once per grid point)."""
REFERENCE_PARAMS_B = 0.27
REFERENCE_PROBE = {"bfloat16": (1.003, 19.5), "float32": (4.832, 4.6)}
"""Per serve dtype: the CPU probe's product (ms, `evals.serving.cpu`) and the base's scoring rate
(items/s, 150 + 150 items) measured beside it: bfloat16 on the reference machine, float32 on a real
AVX2-only AMD EPYC (2026-12-02, median of 4.70 / 4.59 and 4.22 / 4.65 on the two tasks; the reference
Xeon emulating AVX2 probed 3.36 ms yet scored 4.2, so the probe ranks CPUs of one kind only roughly).
A CPU's expected rate is that rate scaled by the probe's time there over here."""
REFERENCE_ITEM_TOKENS = 118
"""Prompt tokens that cost as much as one item of the reference rate's kind (short KMMLU/MMLU
questions): on an AMD EPYC Zen 4 (AVX-512 BF16, 2 cores, 2026-12-05) the base scored ko_rag at 0.655
items/s with prompts of 2,239 tokens on average (1,466 prompt tokens/s) where the probe expects 12.4
short items/s. A task of long prompts without a recorded rate (ko_rag) is estimated at that ratio."""
GENERATED_TOKEN_ITEMS = 1.0
"""Letter-choice items one generated token costs as much as, for a generation task without a recorded
rate: gemma3-270m on this suite's server (2 cores, 8 in flight, Intel Xeon with AMX, 2026-12-07)
generated kqe_kmmlu_hard_gen's answers (32 tokens at most, 14.6 on average) at 1.23 items/s where the
probe expects 43 short items/s, about one item per generated token allowed. An estimate takes
`max_gen_toks`, the most a task may generate."""
SLOW_ITEMS_PER_S = 4.0
"""Below this scoring rate a run says up front that the machine is slow."""


@dataclass(frozen=True)
class Rates:
    """How fast the stages of a run go on this machine, and where each number comes from."""

    items_per_s: float
    """Short multiple-choice items (KMMLU, MMLU, lm-eval tasks) per second."""
    task_items_per_s: dict[str, float]
    """Task → items/s that earlier runs of this task recorded here under this profile."""
    server_start_s: float
    perplexity_s: float
    build_s: dict[str, float]
    """Scheme → seconds to build it for this model."""
    source: str


def recorded_rates(matrix: RunMatrix) -> Rates:
    """Medians of what earlier runs of this model recorded here; the reference for the rest."""
    out, params = matrix.out, matrix.plan.spec.params_b or REFERENCE_PARAMS_B
    scale = params / REFERENCE_PARAMS_B
    kernels = hardware.local_device(matrix.ws.serve_venv).cpu_kernels
    probed = expected_items_per_s(kernels, matrix.profile.dtype) if kernels else None
    slower = (probed or REFERENCE["items_per_s"]) / REFERENCE["items_per_s"]
    key = matrix.profile.key  # another dtype or profile scores at another rate
    runs = _records(out / "stages", "*.score.json", ScoreRun)
    by_task: dict[str, list[float]] = {}
    generated = set()
    for run in runs:
        if run.items_per_s and run.profile_key == key:
            by_task.setdefault(run.task, []).append(run.items_per_s)
            generated |= {run.task} if run.generated else set()
    short = [task for task in by_task if task not in _LONG_PROMPT_TASKS and task not in generated]
    speeds = [speed for task in short for speed in by_task[task]]
    ppl = [r.wall_s for r in _records(out / "stages", "*.perplexity.json", Perplexity)]
    logs = (path.read_text(errors="replace") for path in _files(out / "logs", "*.log"))
    starts = [seconds for seconds in map(startup_seconds, logs) if seconds]
    built: dict[str, list[float]] = {}
    dtype = matrix.plan.build_dtype
    for ckpt in _records(matrix.ws.checkpoints(matrix.model), "*/checkpoint.json", Checkpoint):
        if ckpt.build_dtype == dtype:
            built.setdefault(ckpt.scheme, []).append(ckpt.wall_s)
    calib_tokens = matrix.cfg.calib_samples * matrix.cfg.calib_seq_len
    reference_builds = reference_build_s(kernels, dtype, scale, calib_tokens)
    measured = [name for name, found in (("score", by_task), ("start", starts), ("build", built)) if found]
    source = f"rates recorded here ({', '.join(measured)})" if measured else "reference-machine rates"
    if probed and not speeds:
        source += f"; scoring as this CPU's probe expects, {probed / scale:.1f} items/s"
    return Rates(
        items_per_s=median(speeds) if speeds else REFERENCE["items_per_s"] * slower / scale,
        task_items_per_s={task: median(speeds) for task, speeds in by_task.items()},
        server_start_s=median(starts) if starts else REFERENCE["server_start_s"] * max(1.0, scale**0.5),
        perplexity_s=median(ppl) if ppl else REFERENCE["perplexity_s"] * scale / slower,
        build_s=reference_builds | {scheme: median(times) for scheme, times in built.items()},
        source=source,
    )


_LONG_PROMPT_TASKS = (rag_task.TASK, rag_task.MC_TASK)
"""Tasks whose prompts are contexts of thousands of tokens: their rates say nothing about short items."""


def task_items_per_s(
    rates: Rates, task: str, prompt_tokens: float | None, generated_tokens: float | None = None
) -> float:
    """Items/s to expect for `task`: what it recorded here, else the short-item rate scaled down to
    prompts of `prompt_tokens` on average (`REFERENCE_ITEM_TOKENS`), where that is given, or to answers
    of `generated_tokens` at most (`GENERATED_TOKEN_ITEMS`) for a generation task."""
    if task in rates.task_items_per_s:
        return rates.task_items_per_s[task]
    if generated_tokens:
        return rates.items_per_s / max(1.0, GENERATED_TOKEN_ITEMS * generated_tokens)
    if prompt_tokens and task in _LONG_PROMPT_TASKS:
        return rates.items_per_s * min(1.0, REFERENCE_ITEM_TOKENS / prompt_tokens)
    return rates.items_per_s


def expected_items_per_s(kernels: CpuKernels, dtype: str) -> float | None:
    """The default model's base scoring rate to expect on this CPU in `dtype`, from the probe; None
    when the probe did not time that dtype."""
    ratio = _probe_ratio(kernels, dtype)
    return None if ratio is None else REFERENCE_PROBE[dtype][1] / ratio


def reference_build_s(
    kernels: CpuKernels | None, dtype: str, scale: float, calib_tokens: int
) -> dict[str, float]:
    """Seconds per scheme to build a model `scale` times the reference's size in `dtype` here, where
    no build was recorded: the reference's, scaled by size, by the probe (builds compute in `dtype`
    as the probe does; unscaled where it did not time `dtype`, e.g. on a GPU) and, for calibrated
    schemes, by `calib_tokens`. A dtype never timed (float16) takes bfloat16's time."""
    slower = _probe_ratio(kernels, dtype) or 1.0
    calibrated = calib_tokens / REFERENCE_CALIB_TOKENS
    return {
        scheme: seconds * scale * slower * (calibrated if info.needs_calibration else 1.0)
        for scheme, info in SCHEMES.items()
        if (seconds := info.reference_build_s.get(dtype, info.reference_build_s.get("bfloat16")))
    }


def _probe_ratio(kernels: CpuKernels | None, dtype: str) -> float | None:
    """How many times the reference machine's time the probe's product takes here in `dtype`; None
    where it was not timed."""
    here = kernels.linear_ms(dtype) if kernels else None
    if not here or dtype not in REFERENCE_PROBE:
        return None
    return here / REFERENCE_PROBE[dtype][0]


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
    left = dict(items)
    if found is not None:
        files = stage_files(matrix, found)
        if files.complete():
            return f"{building}; every task scored already", cost
        done = [*files.finished_runs(), *(f"{task}{ROTATIONS}" for task in files.finished_circular())]
        left = {task: n for task, n in items.items() if task not in done}
    n_items = sum(left.values())
    rag_tokens = (
        mean(i.prompt_tokens for i in matrix.rag.generation) if matrix.rag and matrix.rag.generation else None
    )
    answers = {
        task: mean(i.max_gen_toks for i in g.items) for task, g in matrix.generation.items() if g.items
    }
    score_s = sum(
        n / task_items_per_s(rates, task, rag_tokens, answers.get(task)) for task, n in left.items()
    )
    cost |= {"serve": rates.server_start_s, "score": score_s, "perplexity": rates.perplexity_s}
    return f"{building}, serve, score {n_items} items", cost


def _records(folder: Path, pattern: str, kind: type[T]) -> list[T]:
    found: list[T] = []
    for path in _files(folder, pattern):
        try:
            found.append(read_record(path, kind))
        except ValueError:  # another format or version: not a rate of this suite
            continue
    return found


def _files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
