"""One checkpoint's work in a run: build it if missing, serve it, score every task, record its memory.

The unit an executor runs (`kqe.pipeline.executors`): everything it writes goes to the run's
workspace, keyed by its inputs, so the same checkpoint resumes on any executor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from evals.capacity import bench, session
from evals.reporting.outcome import CheckpointOutcome
from evals.scoring import continuation, generate, lm_eval_generate, perplexity
from evals.scoring.job import ScoringJob
from evals.serving import serve
from evals.serving.doctor.diagnose import diagnose
from evals.serving.memory import with_checkpoint_weights
from evals.tasks.ko_rag import task as rag_task
from evals.tasks.lm_eval_generation import cached_judge
from kqe.core.capacity import DEFAULT_SLO
from kqe.core.errors import UserError
from kqe.core.io import read_jsonl, write_record
from kqe.core.records import Checkpoint, MemoryReport
from kqe.core.results import ItemResult, Perplexity, ScoreRun
from kqe.pipeline.config import RunMatrix
from kqe.pipeline.matrix import MatrixEntry
from kqe.pipeline.stage_files import StageFiles, servability, stage_files
from quantize import build, catalog, dequantize, external

log = logging.getLogger(__name__)


def evaluate_checkpoint(matrix: RunMatrix, entry: MatrixEntry, usual_start_s: float) -> CheckpointOutcome:
    """Build (or check an extra), serve and score one checkpoint; a failure, or a checkpoint this device
    cannot serve, becomes its status instead of stopping the run."""
    placement = matrix.plan.placement.of(entry.name)
    if placement.score is None:  # fits nowhere here: said up front, nothing built
        log.warning("%s: %s", entry.name, placement.reason)
        return checkpoint_outcome(matrix, entry, placement.reason or "not scored")
    try:
        ckpt, built = _checkpoint(matrix, entry)
    except UserError as exc:
        return _failed(matrix, entry, exc, None)
    verdict = servability(matrix, ckpt)
    if not verdict.servable:  # said up front instead of a server that would crash
        log.warning("%s: %s", entry.name, verdict.note)
        return checkpoint_outcome(matrix, entry, verdict.note, ckpt, built=built)
    try:
        stages = _score_checkpoint(matrix, ckpt, usual_start_s)
    except UserError as exc:
        return _failed(matrix, entry, exc, ckpt)
    items = {task: read_jsonl(Path(run.items_path), ItemResult) for task, run in stages.runs.items()}
    rotated = stage_files(matrix, ckpt).finished_circular()
    circular = {task: read_jsonl(Path(run.items_path), ItemResult) for task, run in rotated.items()}
    return checkpoint_outcome(
        matrix,
        entry,
        "ok",
        ckpt,
        runs=stages.runs,
        memory=stages.memory,
        items=items,
        circular=circular,
        built=built,
        served=stages.served,
        load_failure=stages.load_failure,
    )


def checkpoint_outcome(
    matrix: RunMatrix, entry: MatrixEntry, status: str, ckpt: Checkpoint | None = None, **stages: Any
) -> CheckpointOutcome:
    """The outcome of `entry` with `status` (`ok`, or why not) and the stages that finished."""
    recipe = matrix.plan.recipes.get(entry.scheme)  # a --recipes table name stands for its scheme
    scheme = ckpt.scheme if ckpt else recipe.scheme if recipe else entry.scheme
    return CheckpointOutcome(matrix.model, entry.name, scheme, entry.mix or "none", status, ckpt, **stages)


def _checkpoint(matrix: RunMatrix, entry: MatrixEntry) -> tuple[Checkpoint, bool]:
    """The entry's checkpoint, and whether this run built it; a KV variant (`bf16+kv-fp8`) serves the
    checkpoint of the entry whose weights it names, under its own name."""
    if entry.weights is None:
        return _own_checkpoint(matrix, entry)
    source = next(e for e in matrix.plan.entries if e.name == entry.weights)
    ckpt, built = _own_checkpoint(matrix, source)
    return ckpt.model_copy(update={"name": entry.name}), built


def _own_checkpoint(matrix: RunMatrix, entry: MatrixEntry) -> tuple[Checkpoint, bool]:
    """A pre-quantized extra (checked against the base), a finished build of the same inputs, or a
    new build (progress by layer groups), and whether this run built it."""
    reference = matrix.plan.extras.get(entry.name)
    if reference is not None:
        return external.external_checkpoint(matrix.ws, matrix.base, reference), False
    recipe, calib = matrix.plan.recipes[entry.scheme], matrix.calibs.get(entry.mix or "")
    dtype = matrix.plan.build_dtype
    found = build.find_checkpoint(matrix.ws, matrix.base, recipe.scheme, recipe, calib, entry.name, dtype)
    if found is not None:
        return found, False
    progress = partial(matrix.progress, f"build {entry.name}")
    ckpt = build.build_checkpoint(
        matrix.ws, matrix.base, recipe.scheme, recipe, calib, progress, entry.name, dtype
    )
    return ckpt, True


def _failed(
    matrix: RunMatrix, entry: MatrixEntry, exc: UserError, ckpt: Checkpoint | None
) -> CheckpointOutcome:
    log.error("%s: %s", entry.name, exc)
    return checkpoint_outcome(matrix, entry, f"failed: {exc}", ckpt)


@dataclass(frozen=True)
class ServedStages:
    """What serving one checkpoint left (every stage is also in its stage file)."""

    runs: dict[str, ScoreRun]
    """Task → its score run."""
    memory: MemoryReport
    """What vLLM reserved for it."""
    served: bool
    """Whether a server was started (False: every stage was done already)."""
    load_failure: str | None = None
    """Why `vllm bench serve` did not measure it, when asked to: its scores stand without it."""


def _score_checkpoint(matrix: RunMatrix, ckpt: Checkpoint, usual_start_s: float) -> ServedStages:
    """Score every task through one server; no server is started when every task is already scored.

    A task's ScoreRun is written when its last item is in, so a finished task keeps the speed it
    was scored at, and a crash mid-task resumes from its per-item file.
    """
    profile, files = matrix.score_profile(ckpt.name), stage_files(matrix, ckpt)
    if files.complete():
        log.info("%s: every task already scored, no server needed", ckpt.name)
        return ServedStages(files.finished_runs(), files.memory_report(), served=False)
    runs, load_failure = files.finished_runs(), None
    dequantized = servability(matrix, ckpt).dequantize
    served_dir = (
        dequantize.dequantized_checkpoint(matrix.ws, ckpt, profile.dtype) if dequantized else Path(ckpt.path)
    )
    usual = usual_start_s  # said on the bar: a start that takes long is not a hang
    matrix.progress(f"serve {ckpt.name} (usually ~{usual:.0f} s here)", 0, 1)
    try:
        trusted = matrix.cfg.trust_remote_code
        with serve.VllmServer(
            served_dir, ckpt.name, profile, matrix.ws, files.log, trust_remote_code=trusted
        ) as server:
            matrix.progress(f"serve {ckpt.name} (usually ~{usual:.0f} s here)", 1, 1)
            memory = server.memory()
            if dequantized:  # what the engine would report for the real format, planned
                memory = with_checkpoint_weights(memory, ckpt.disk_bytes)
            write_record(files.memory, memory)
            for task, run_path in files.runs.items():
                if task not in runs:
                    runs[task] = _score_restarting(matrix, ckpt, server, task, files.items[task])
                    write_record(run_path, runs[task])
            _score_rotations(matrix, ckpt, server, files)
            if not files.load_done():
                load_failure = _measure_load(matrix, ckpt, server, files.load)
            if not files.perplexity.exists():
                write_record(files.perplexity, _measure_perplexity(matrix, ckpt, server))
    except serve.ServeError as exc:  # the engine would not start: say which OOM pattern, if any
        verdict = diagnose(files.log.read_text(errors="replace"), profile).summary
        raise serve.ServeError(f"{exc}; doctor: {verdict}") from None
    return ServedStages(runs, memory, served=True, load_failure=load_failure)


def _score_rotations(
    matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer, files: StageFiles
) -> None:
    """`--circular`: score each task's rotated items not yet scored, into their own per-item file."""
    done = files.finished_circular()
    for task, run_path in files.circular_runs.items():
        if task not in done:
            out = files.circular_items[task]
            write_record(run_path, _score_restarting(matrix, ckpt, server, task, out, rotated=True))


def _measure_perplexity(matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer) -> Perplexity:
    progress = partial(matrix.progress, f"perplexity {ckpt.name}")
    holdout = catalog.holdout_documents(matrix.ws)
    return perplexity.measure_perplexity(
        server.endpoint, Path(ckpt.path), holdout, concurrency=matrix.cfg.concurrency, progress=progress
    )


def _measure_load(matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer, out: Path) -> str | None:
    """Capacity with `vllm bench serve` at 1, half of max-num-seqs and max-num-seqs, long Korean RAG
    prompts, the engine's default SLO (`kqe load` for the other workload and the A/Bs), written to
    `out`; a benchmark that fails is said and returned, and the checkpoint's scores stand (a later run
    measures it again)."""
    profile = matrix.score_profile(ckpt.name)
    settings = bench.BenchSettings(
        bench.concurrency_levels(profile.max_num_seqs), matrix.cfg.load_duration_s, seed=matrix.cfg.seed
    )
    korean = sorted((matrix.ws.sources() / "ko").rglob("*.txt"))
    texts = {path.name: path.read_text(encoding="utf-8") for path in korean}
    slo = DEFAULT_SLO["gpu" if server.on_gpu else "cpu"]
    progress = partial(matrix.progress, f"load {ckpt.name}")
    try:
        report = session.measure_server(
            matrix.ws, server, session.WorkloadSpec("rag", texts), settings, slo, progress
        )
    except UserError as exc:
        log.warning("%s: load not measured: %s", ckpt.name, exc)
        return str(exc)
    write_record(out, report)
    return None


def _score_restarting(
    matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer, task: str, out: Path, rotated: bool = False
) -> ScoreRun:
    """`_score_task` (`rotated`: the task's `--circular` rotations); a server that dies on the way is
    started again and scoring resumes from the per-item file, at most `serve.RESTARTS` times."""
    for attempt in range(1, serve.RESTARTS + 2):
        try:
            return _score_task(matrix, ckpt, server, task, out, rotated)
        except Exception as exc:
            if server.alive():
                raise
            if attempt > serve.RESTARTS:
                raise serve.ServeError(
                    f"the vLLM server of {ckpt.name} died {attempt} times while scoring {task} "
                    f"(last: {type(exc).__name__}); see {server.log_path}"
                ) from None
            log.warning("%s: the vLLM server died while scoring %s; restarting it", ckpt.name, task)
            server.restart()
    raise AssertionError("unreachable")


def _score_task(
    matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer, task: str, out: Path, rotated: bool = False
) -> ScoreRun:
    """Choice tasks by their choices' log-likelihoods (`rotated`: their `--circular` rotations, the same
    way); ko_rag's generated answers by generate.py; lm-eval generation tasks by lm_eval_generate.py."""
    what = f"{task} circular" if rotated else task
    job = ScoringJob(
        tokenizer_dir=Path(ckpt.path),
        endpoint=server.endpoint,
        items_path=out,
        checkpoint=ckpt.name,
        profile_key=matrix.score_profile(ckpt.name).key,
        concurrency=matrix.cfg.concurrency,
        progress=partial(matrix.progress, f"score {ckpt.name} {what}"),
    )
    if rotated:
        return continuation.score_choices(matrix.circular[task], job)
    if task == rag_task.TASK and matrix.rag is not None:
        return generate.score_generation(matrix.rag.generation, job)
    if task in matrix.generation:
        gen = matrix.generation[task]
        judge = cached_judge(gen.bridged, gen.include_path)
        return lm_eval_generate.score_lm_eval_generation(list(gen.items), job, judge, matrix.cfg.seed)
    return continuation.score_choices(matrix.prompts[task], job)
