"""`make eval`: calibrate, build checkpoints, serve each under one profile, score, compare, rank.

Every stage's output is keyed by the hash of its inputs, so a second run reuses finished work and a
crashed run resumes; a checkpoint that fails to build, serve or score gets a `failed: …` row while
the others go on.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path

from evals import doctor, leaderboard, load, prompts, rag_prompts, report, score, serve, stats
from kqe.errors import UserError
from kqe.io import read_jsonl, read_record, write_record
from kqe.modelstore import model_dir
from kqe.records import (
    CalibrationSet,
    Checkpoint,
    Comparison,
    ItemResult,
    LeaderboardRow,
    MemoryReport,
    Record,
    RunSummary,
    ScoreRun,
    ServeProfile,
    content_hash,
)
from kqe.registry import resolve_model
from kqe.workspace import Workspace
from quantize import build, calibration, schemes

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""Called with (what, done, total) as long work advances."""

BASE = "bf16"


class EvalConfig(Record):
    """Everything that decides what `make eval` computes; its fields make up the reproduce command."""

    model: str = "gemma3-270m"
    """Registry name, `hf:org/name[@rev]`, or a local model directory."""
    schemes: tuple[str, ...] = ("bf16", "awq-w4a16", "fp8-dynamic")
    """Checkpoints to build and score; `bf16` (the base) is always included."""
    calibration: str = "ko70"
    """Calibration mix for schemes that need one (`ko100`, `ko70`, `en100`, or `ko=0.6,en=0.4`)."""
    calib_samples: int = 64
    """Calibration samples."""
    calib_seq_len: int = 384
    """Tokens per calibration sample."""
    tasks: tuple[str, ...] = ("kmmlu_hard", "mmlu")
    """Tasks to score."""
    limit: int | None = 300
    """Items per task at most (subject-stratified); None scores every item."""
    profile: str = "cpu-small"
    """Serve profile applied to every checkpoint."""
    seed: int = 1234
    """Seed of calibration sampling and item sampling."""
    concurrency: int = 8
    """Scoring requests in flight."""
    load: bool = False
    """Also measure serving capacity (`kqe load` at the profile's max-num-seqs) of every checkpoint."""
    load_duration_s: float = 30.0
    """Seconds of load per checkpoint when `load` is on."""

    def command(self) -> str:
        parts = ["kqe", "eval", "--model", self.model, "--schemes", ",".join(self.schemes)]
        parts += ["--calibration", self.calibration, "--calib-samples", str(self.calib_samples)]
        parts += ["--calib-seq-len", str(self.calib_seq_len), "--tasks", ",".join(self.tasks)]
        parts += ["--limit", str(self.limit or 0), "--profile", self.profile, "--seed", str(self.seed)]
        if self.load:
            parts += ["--load", "--load-duration-s", f"{self.load_duration_s:g}"]
        return shlex.join(parts)


@dataclass(frozen=True)
class _Matrix:
    """What every checkpoint of one run shares."""

    cfg: EvalConfig
    ws: Workspace
    model: str
    base_dir: Path
    profile: ServeProfile
    recipes: dict[str, schemes.Recipe]
    calib: CalibrationSet | None
    prompts: dict[str, list[prompts.PromptItem]]
    out: Path
    progress: Progress


def _prepare(cfg: EvalConfig, ws: Workspace, progress: Progress) -> _Matrix:
    """Check every input first (cheap), then build the calibration set and the task prompts."""
    spec = resolve_model(cfg.model, ws)
    base_dir = model_dir(spec, ws)
    profile = serve.load_profile(cfg.profile)
    names = [BASE, *(s for s in cfg.schemes if s != BASE)]
    recipes = {name: schemes.recipe_for(name, {}) for name in names}
    needs_calib = any(schemes.SCHEMES[name].needs_calibration for name in names)
    mix = calibration.parse_mix(cfg.calibration) if needs_calib else None
    data_dir = prompts.prepare_tasks(ws, list(cfg.tasks), cfg.limit, cfg.seed)
    task_prompts = {task: prompts.load_prompts(task, data_dir) for task in cfg.tasks}
    calib = None
    if mix is not None:
        progress("calibration set", 0, 1)
        calib = calibration.build_calibration_set(
            ws, spec.name, base_dir, mix, cfg.calib_samples, cfg.calib_seq_len, cfg.seed, cfg.calibration
        )
        progress("calibration set", 1, 1)
    out = ws.results(spec.name)
    return _Matrix(cfg, ws, spec.name, base_dir, profile, recipes, calib, task_prompts, out, progress)


def run_eval(cfg: EvalConfig, ws: Workspace, progress: Progress) -> Path:
    """Run the whole matrix; write the leaderboard and `run.json` beside it; return the leaderboard path."""
    started = time.perf_counter()
    matrix = _prepare(cfg, ws, progress)
    rows: list[LeaderboardRow] = []
    checkpoints: list[Checkpoint] = []
    failures: dict[str, str] = {}
    all_runs: list[ScoreRun] = []
    all_comparisons: list[Comparison] = []
    memories: dict[str, MemoryReport] = {}
    base_items: dict[str, list[ItemResult]] = {}
    for name, recipe in matrix.recipes.items():
        status, ckpt, runs, memory = _evaluate_checkpoint(matrix, name, recipe)
        if status != "ok":
            log.error("%s: %s", name, status)
            failures[name] = status
        if memory is not None:
            memories[name] = memory
        items = {task: read_jsonl(Path(run.items_path), ItemResult) for task, run in runs.items()}
        if name == BASE:
            base_items = items
        if ckpt is None:
            continue
        # every task both hold; Holm across the tasks; the Korean task carries its gap to English.
        # The base is not compared with itself: its row keeps the Δ columns empty.
        comparisons = {} if name == BASE else stats.compare_tasks(BASE, name, base_items, items)
        rows.append(_row(matrix, ckpt, status, runs, comparisons, memory, memories.get(BASE)))
        checkpoints.append(ckpt)
        all_runs += runs.values()
        all_comparisons += comparisons.values()
    if not rows:
        raise UserError(f"no checkpoint of {matrix.model} could be built: see the errors above")
    board = matrix.out / "leaderboard.csv"
    leaderboard.write_leaderboard(board, rows)
    summary = RunSummary(
        config=cfg.model_dump(mode="json"), command=cfg.command(), wall_s=time.perf_counter() - started,
        calibration=matrix.calib, profile=matrix.profile, checkpoints=checkpoints, failures=failures,
        score_runs=all_runs, comparisons=all_comparisons, memory=memories,
    )  # fmt: skip
    write_record(matrix.out / "run.json", summary)
    report.write_report(board)
    leaderboard.write_aggregate(matrix.out.parent)
    return board


def _row(
    matrix: _Matrix,
    ckpt: Checkpoint,
    status: str,
    runs: dict[str, ScoreRun],
    comparisons: dict[str, Comparison],
    memory: MemoryReport | None,
    base_memory: MemoryReport | None,
) -> LeaderboardRow:
    needs_calib = matrix.calib is not None and schemes.SCHEMES[ckpt.name].needs_calibration
    calib_name = matrix.calib.name if needs_calib and matrix.calib else "none"
    profile = f"{matrix.profile.name}:{matrix.profile.key}"
    engine = {"vllm": serve.engine_version(matrix.ws), "lm-eval": metadata.version("lm_eval")}
    command = matrix.cfg.command()
    load_path = _load_path(matrix, ckpt)
    capacity = read_record(load_path, load.LoadReport) if load_path.exists() else None
    return leaderboard.build_row(
        ckpt, calib_name, status, runs, comparisons, memory, profile, command, engine, base_memory, capacity
    )


def _evaluate_checkpoint(
    matrix: _Matrix, name: str, recipe: schemes.Recipe
) -> tuple[str, Checkpoint | None, dict[str, ScoreRun], MemoryReport | None]:
    """Build, serve and score one checkpoint; a failure becomes its status instead of stopping the run."""
    try:
        matrix.progress(f"build {name}", 0, 1)
        ckpt = build.build_checkpoint(matrix.ws, matrix.model, matrix.base_dir, name, recipe, matrix.calib)
        matrix.progress(f"build {name}", 1, 1)
    except UserError as exc:
        return f"failed: {exc}", None, {}, None
    try:
        runs, memory = _score_checkpoint(matrix, ckpt)
    except UserError as exc:
        return f"failed: {exc}", ckpt, {}, None
    return "ok", ckpt, runs, memory


def _score_checkpoint(matrix: _Matrix, ckpt: Checkpoint) -> tuple[dict[str, ScoreRun], MemoryReport]:
    """Score every task through one server; no server is started when every task is already scored.

    A task's ScoreRun is written when its last item is in, so a finished task keeps the speed it
    was scored at, and a crash mid-task resumes from its per-item file.
    """
    profile, stages = matrix.profile, matrix.out / "stages"
    stage_key = content_hash(ckpt.key, profile.key)
    memory_path = stages / f"{ckpt.name}.{stage_key}.memory.json"
    # keyed by the items too: another --limit or seed scores (and resumes) a different file
    task_keys = {t: content_hash(stage_key, [p.item_id for p in ps]) for t, ps in matrix.prompts.items()}
    run_paths = {task: stages / f"{ckpt.name}.{task}.{key}.score.json" for task, key in task_keys.items()}
    runs = {task: read_record(path, ScoreRun) for task, path in run_paths.items() if path.exists()}
    runs = {task: run for task, run in runs.items() if Path(run.items_path).exists()}
    load_path = _load_path(matrix, ckpt)
    load_done = not matrix.cfg.load or load_path.exists()
    if memory_path.exists() and len(runs) == len(run_paths) and load_done:
        log.info("%s: every task already scored, no server needed", ckpt.name)
        return runs, read_record(memory_path, MemoryReport)
    log_path = matrix.out / "logs" / f"{ckpt.name}.{stage_key}.log"
    matrix.progress(f"serve {ckpt.name}", 0, 1)
    try:
        with serve.VllmServer(Path(ckpt.path), ckpt.name, profile, matrix.ws, log_path) as server:
            matrix.progress(f"serve {ckpt.name}", 1, 1)
            memory = server.memory()
            write_record(memory_path, memory)
            for task, task_prompts in matrix.prompts.items():
                if task not in runs:
                    items_path = matrix.out / "items" / ckpt.name / f"{task}.{task_keys[task]}.jsonl"
                    runs[task] = _score_task(matrix, ckpt, server, task_prompts, items_path)
                    write_record(run_paths[task], runs[task])
            if not load_done:
                write_record(load_path, _measure_load(matrix, ckpt, server))
    except serve.ServeError as exc:  # the engine would not start: say which OOM pattern, if any
        verdict = doctor.diagnose(log_path.read_text(errors="replace"), profile).summary
        raise serve.ServeError(f"{exc}; doctor: {verdict}") from None
    return runs, memory


def _load_path(matrix: _Matrix, ckpt: Checkpoint) -> Path:
    return matrix.out / "stages" / f"{ckpt.name}.{content_hash(ckpt.key, matrix.profile.key)}.load.json"


def _measure_load(matrix: _Matrix, ckpt: Checkpoint, server: serve.VllmServer) -> load.LoadReport:
    """Serving capacity at the profile's max-num-seqs with long Korean RAG prompts (`kqe load`)."""
    profile = matrix.profile
    settings = load.LoadSettings(
        concurrency=(profile.max_num_seqs,), duration_s=matrix.cfg.load_duration_s,
        prompt_tokens=min(1500, profile.max_model_len - 65), max_tokens=64, seed=matrix.cfg.seed,
    )  # fmt: skip
    korean = sorted((matrix.ws.sources() / "ko").rglob("*.txt"))
    texts = {path.name: path.read_text(encoding="utf-8") for path in korean}
    rag = rag_prompts.rag_prompts(Path(ckpt.path), texts, settings.seed, shared_prefix=False)
    target = load.Target(server.base_url, server.api_key, server.served_name)
    matrix.progress(f"load {ckpt.name}", 0, 1)
    report = load.run_load(target, rag, settings, profile)
    matrix.progress(f"load {ckpt.name}", 1, 1)
    return report


def _score_task(
    matrix: _Matrix, ckpt: Checkpoint, server: serve.VllmServer, items: list[prompts.PromptItem], out: Path
) -> ScoreRun:
    return score.score_task(
        items,
        Path(ckpt.path),
        server.base_url,
        server.api_key,
        server.served_name,
        out,
        ckpt.name,
        matrix.profile.key,
        concurrency=matrix.cfg.concurrency,
        progress=partial(matrix.progress, f"score {ckpt.name} {items[0].task}"),
    )
