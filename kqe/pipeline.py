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
from kqe.matrix import BASE, MatrixEntry, calibration_references, mix_label, plan_matrix
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


class EvalConfig(Record):
    """Everything that decides what `make eval` computes; its fields make up the reproduce command."""

    model: str = "gemma3-270m"
    """Registry name, `hf:org/name[@rev]`, or a local model directory."""
    schemes: tuple[str, ...] = ("bf16", "awq-w4a16", "fp8-dynamic")
    """Checkpoints to build and score; `bf16` (the base) is always included."""
    calibrations: tuple[str, ...] = ("ko70", "en100")
    """Calibration mixes (`ko100`, `ko70`, `en100`, or `ko=0.6,en=0.4`): a scheme that needs one is
    built once per mix; the mix with the least Korean is the control the others are paired with."""
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
        parts += ["--calibration", ",".join(self.calibrations), "--calib-samples", str(self.calib_samples)]
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
    entries: list[MatrixEntry]
    recipes: dict[str, schemes.Recipe]
    """Scheme → recipe."""
    calibs: dict[str, CalibrationSet]
    """Mix label → calibration set."""
    references: dict[str, str]
    """Checkpoint → the checkpoint of the same scheme it is paired with for the calibration effect."""
    prompts: dict[str, list[prompts.PromptItem]]
    out: Path
    progress: Progress


def _prepare(cfg: EvalConfig, ws: Workspace, progress: Progress) -> _Matrix:
    """Check every input first (cheap), then build the calibration sets and the task prompts."""
    spec = resolve_model(cfg.model, ws)
    base_dir = model_dir(spec, ws)
    profile = serve.load_profile(cfg.profile)
    entries = plan_matrix(cfg.schemes, cfg.calibrations, lambda s: schemes.scheme_info(s).needs_calibration)
    recipes = {entry.scheme: schemes.recipe_for(entry.scheme, {}) for entry in entries}
    used = {entry.mix for entry in entries}
    labelled = {mix_label(mix): mix for mix in cfg.calibrations}
    parsed = {label: calibration.parse_mix(mix) for label, mix in labelled.items() if label in used}
    data_dir = prompts.prepare_tasks(ws, list(cfg.tasks), cfg.limit, cfg.seed)
    task_prompts = {task: prompts.load_prompts(task, data_dir) for task in cfg.tasks}
    calibs = {}
    for done, (label, mix) in enumerate(parsed.items()):
        progress("calibration sets", done, len(parsed))
        calibs[label] = calibration.build_calibration_set(
            ws, spec.name, base_dir, mix, cfg.calib_samples, cfg.calib_seq_len, cfg.seed, label
        )
        progress("calibration sets", done + 1, len(parsed))
    references = calibration_references(entries, {label: mix.get("ko", 0.0) for label, mix in parsed.items()})
    out = ws.results(spec.name)
    return _Matrix(
        cfg, ws, spec.name, base_dir, profile, entries, recipes, calibs, references, task_prompts, out,
        progress,
    )  # fmt: skip


@dataclass(frozen=True)
class _Outcome:
    """What evaluating one checkpoint left: its status and whatever stages finished."""

    entry: MatrixEntry
    status: str
    checkpoint: Checkpoint | None
    runs: dict[str, ScoreRun]
    memory: MemoryReport | None
    items: dict[str, list[ItemResult]]


def run_eval(cfg: EvalConfig, ws: Workspace, progress: Progress) -> Path:
    """Run the whole matrix; write the leaderboard and `run.json` beside it; return the leaderboard path."""
    started = time.perf_counter()
    matrix = _prepare(cfg, ws, progress)
    outcomes = {entry.name: _evaluate_checkpoint(matrix, entry) for entry in matrix.entries}
    failures = {name: o.status for name, o in outcomes.items() if o.status != "ok"}
    base = outcomes[BASE]
    rows: list[LeaderboardRow] = []
    comparisons: list[Comparison] = []
    for name, outcome in outcomes.items():
        ckpt = outcome.checkpoint
        if ckpt is None:
            continue
        # every task both hold; Holm across the tasks; the Korean task carries its gap to English.
        # The base is not compared with itself: its row keeps the Δ columns empty.
        vs_base = {} if name == BASE else stats.compare_tasks(BASE, name, base.items, outcome.items)
        reference = outcomes.get(matrix.references.get(name, ""))
        vs_reference = _calibration_effect(reference, outcome)
        rows.append(_row(matrix, outcome, ckpt, vs_base, vs_reference, base.memory))
        comparisons += [*vs_base.values(), *vs_reference.values()]
    if not rows:
        raise UserError(f"no checkpoint of {matrix.model} could be built: see the errors above")
    board = matrix.out / "leaderboard.csv"
    leaderboard.write_leaderboard(board, rows)
    summary = RunSummary(
        config=cfg.model_dump(mode="json"), command=cfg.command(), wall_s=time.perf_counter() - started,
        calibrations=matrix.calibs, profile=matrix.profile, failures=failures, comparisons=comparisons,
        checkpoints=[o.checkpoint for o in outcomes.values() if o.checkpoint is not None],
        score_runs=[run for o in outcomes.values() for run in o.runs.values()],
        memory={name: o.memory for name, o in outcomes.items() if o.memory is not None},
    )  # fmt: skip
    write_record(matrix.out / "run.json", summary)
    report.write_report(board)
    leaderboard.write_aggregate(matrix.out.parent)
    return board


def _calibration_effect(reference: _Outcome | None, outcome: _Outcome) -> dict[str, Comparison]:
    """Per task: this checkpoint against the same scheme calibrated with less Korean, same items."""
    if reference is None or reference.checkpoint is None:
        return {}
    control, name = reference.entry.name, outcome.entry.name
    shared = [task for task in outcome.items if task in reference.items]
    return {task: stats.compare(control, name, reference.items[task], outcome.items[task]) for task in shared}


def _row(
    matrix: _Matrix,
    outcome: _Outcome,
    ckpt: Checkpoint,
    vs_base: dict[str, Comparison],
    vs_reference: dict[str, Comparison],
    base_memory: MemoryReport | None,
) -> LeaderboardRow:
    profile = f"{matrix.profile.name}:{matrix.profile.key}"
    engine = {"vllm": serve.engine_version(matrix.ws), "lm-eval": metadata.version("lm_eval")}
    load_path = _load_path(matrix, ckpt)
    capacity = read_record(load_path, load.LoadReport) if load_path.exists() else None
    return leaderboard.build_row(
        ckpt, outcome.entry.mix or "none", outcome.status, outcome.runs, vs_base, outcome.memory, profile,
        matrix.cfg.command(), engine, base_memory, capacity, matrix.references.get(ckpt.name), vs_reference,
    )  # fmt: skip


def _evaluate_checkpoint(matrix: _Matrix, entry: MatrixEntry) -> _Outcome:
    """Build, serve and score one checkpoint; a failure becomes its status instead of stopping the run."""
    recipe, calib = matrix.recipes[entry.scheme], matrix.calibs.get(entry.mix or "")
    try:
        matrix.progress(f"build {entry.name}", 0, 1)
        built = build.build_checkpoint(matrix.ws, matrix.model, matrix.base_dir, entry.scheme, recipe, calib)
        # the on-disk record is named by its scheme; in this run it is the matrix entry's checkpoint
        ckpt = built.model_copy(update={"name": entry.name})
        matrix.progress(f"build {entry.name}", 1, 1)
    except UserError as exc:
        return _failed(entry, exc, None)
    try:
        runs, memory = _score_checkpoint(matrix, ckpt)
    except UserError as exc:
        return _failed(entry, exc, ckpt)
    items = {task: read_jsonl(Path(run.items_path), ItemResult) for task, run in runs.items()}
    return _Outcome(entry, "ok", ckpt, runs, memory, items)


def _failed(entry: MatrixEntry, exc: UserError, ckpt: Checkpoint | None) -> _Outcome:
    log.error("%s: %s", entry.name, exc)
    return _Outcome(entry, f"failed: {exc}", ckpt, {}, None, {})


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
