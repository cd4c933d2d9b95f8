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
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path

from evals import (
    averages,
    doctor,
    generate,
    leaderboard,
    load,
    perplexity,
    prompts,
    rag_metrics,
    rag_prompts,
    rag_task,
    report,
    score,
    serve,
    stats,
)
from kqe.errors import UserError
from kqe.io import read_jsonl, read_record, sha256_of, write_record
from kqe.matrix import BASE, MatrixEntry, calibration_references, mix_label, plan_matrix
from kqe.modelstore import model_dir
from kqe.records import (
    CalibrationSet,
    Checkpoint,
    Comparison,
    ItemResult,
    LeaderboardRow,
    MemoryReport,
    Perplexity,
    Record,
    RunSummary,
    ScoreRun,
    ServeProfile,
    content_hash,
)
from kqe.registry import check_remote_code, resolve_model
from kqe.workspace import Workspace
from quantize import build, calibration, catalog, contamination, external, hardware, schemes
from quantize.recipes import resolve_recipes

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""Called with (what, done, total) as long work advances."""


class EvalConfig(Record):
    """Everything that decides what `make eval` computes; its fields make up the reproduce command."""

    model: str = "gemma3-270m"
    """Registry name, `hf:org/name[@rev]`, or a local model directory."""
    schemes: tuple[str, ...] = ("bf16", "awq-w4a16", "w4a16-rtn", "fp8-dynamic")
    """Checkpoints to build and score; `bf16` (the base) is always included."""
    calibrations: tuple[str, ...] = ("ko70", "en100")
    """Calibration mixes (`ko100`, `ko70`, `en100`, or `ko=0.6,en=0.4`): a scheme that needs one is
    built once per mix; the mix with the least Korean is the control the others are paired with."""
    calib_samples: int = 64
    """Calibration samples."""
    calib_seq_len: int = 384
    """Tokens per calibration sample."""
    tasks: tuple[str, ...] = ("kmmlu", "mmlu")
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
    rag_data: str | None = None
    """Folder with docs.jsonl + questions.jsonl that ko_rag scores instead of its built-in set."""
    recipes: str | None = None
    """TOML file of named recipes (`quantize.recipes`): its tables can be listed in `schemes`."""
    extra: tuple[str, ...] = ()
    """Pre-quantized checkpoints scored beside the built ones: model folders or `hf:org/name[@rev]`."""
    trust_remote_code: bool = False
    """Let vLLM run Python code shipped with the model (`auto_map`); refused without it."""

    def command(self) -> str:
        parts = ["kqe", "eval", "--model", self.model, "--schemes", ",".join(self.schemes)]
        parts += ["--calibration", ",".join(self.calibrations), "--calib-samples", str(self.calib_samples)]
        parts += ["--calib-seq-len", str(self.calib_seq_len), "--tasks", ",".join(self.tasks)]
        parts += ["--limit", str(self.limit or 0), "--profile", self.profile, "--seed", str(self.seed)]
        if self.load:
            parts += ["--load", "--load-duration-s", f"{self.load_duration_s:g}"]
        if self.rag_data:
            parts += ["--rag-data", self.rag_data]
        if self.trust_remote_code:
            parts.append("--trust-remote-code")
        if self.recipes:
            parts += ["--recipes", self.recipes]
        if self.extra:
            parts += ["--extra", ",".join(self.extra)]
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
    """Scheme (or recipe-file table) name → recipe."""
    calibs: dict[str, CalibrationSet]
    """Mix label → calibration set."""
    references: dict[str, str]
    """Checkpoint → the checkpoint of the same scheme it is paired with for the calibration effect."""
    prompts: dict[str, list[prompts.PromptItem]]
    sources: dict[str, str]
    """Task → what its items are (`KMMLU-HARD dev (offline, 225 items), 0-shot`), for every output."""
    out: Path
    progress: Progress
    rag: rag_task.PreparedRag | None = None
    """ko_rag's items when the run scores it (its choice items are also in `prompts`)."""
    extras: dict[str, str] = field(default_factory=dict)
    """Checkpoint name → a pre-quantized checkpoint given with `extra` (folder or hub id)."""


def _prepare(cfg: EvalConfig, ws: Workspace, progress: Progress) -> _Matrix:
    """Check every input first (cheap), then build the calibration sets and the task prompts."""
    spec = resolve_model(cfg.model, ws)
    base_dir = model_dir(spec, ws)
    check_remote_code(base_dir, cfg.trust_remote_code)
    profile = serve.load_profile(cfg.profile)
    recipes = resolve_recipes([BASE, *cfg.schemes], Path(cfg.recipes) if cfg.recipes else None)
    for name, recipe in recipes.items():  # a group size the layers cannot take fails before calibrating
        build.check_group_size(base_dir, recipe, f"{name} of {spec.name}")
    needs_calibration = {name: schemes.scheme_info(r.scheme).needs_calibration for name, r in recipes.items()}
    entries = plan_matrix(cfg.schemes, cfg.calibrations, needs_calibration.__getitem__)
    extras = {external.extra_name(reference): reference for reference in cfg.extra}
    entries += [MatrixEntry(name, external.EXTRA_SCHEME, None) for name in extras]
    if len({entry.name for entry in entries}) != len(entries):
        raise UserError(f"extra {','.join(cfg.extra)!r} repeats a checkpoint name: list each folder once")
    used = {entry.mix for entry in entries}
    labelled = {mix_label(mix): mix for mix in cfg.calibrations}
    parsed = {label: calibration.parse_mix(mix) for label, mix in labelled.items() if label in used}
    prompts.check_tasks(list(cfg.tasks))
    serve.check_serve_env(ws)
    choice_tasks = [task for task in cfg.tasks if task in prompts.TASK_SPECS]
    task_prompts: dict[str, list[prompts.PromptItem]] = {}
    sources: dict[str, str] = {}
    if choice_tasks:
        data_dir = prompts.prepare_tasks(ws, choice_tasks, cfg.limit, cfg.seed)
        task_prompts = {task: prompts.load_prompts(task, data_dir) for task in choice_tasks}
        sources = {task: prompts.source_label(task, data_dir) for task in choice_tasks}
    rag = None
    if rag_task.TASK in cfg.tasks:  # contexts are cut with the base's tokenizer, shared by its checkpoints
        rag_dir = Path(cfg.rag_data) if cfg.rag_data else None
        rag = rag_task.prepared(ws, base_dir, profile.max_model_len, cfg.limit, cfg.seed, rag_dir)
        task_prompts[rag_task.MC_TASK] = rag.choices
    calibs = {}
    # windows sharing a 13-gram with any knowledge item scored in this run are left out of every set;
    # ko_rag is not guarded: its contexts ARE the public documents Korean calibration reads, and it
    # hands the model the passages anyway (calibration only sets quantization scales)
    knowledge = [items for task, items in task_prompts.items() if task != rag_task.MC_TASK]
    eval_texts = contamination.item_texts(item for items in knowledge for item in items)
    for done, (label, mix) in enumerate(parsed.items()):
        progress("calibration sets", done, len(parsed))
        calibs[label] = calibration.build_calibration_set(
            ws, spec.name, base_dir, mix, cfg.calib_samples, cfg.calib_seq_len, cfg.seed, label,
            eval_items=eval_texts,
        )  # fmt: skip
        progress("calibration sets", done + 1, len(parsed))
    references = calibration_references(entries, {label: mix.get("ko", 0.0) for label, mix in parsed.items()})
    out = ws.results(spec.name)
    return _Matrix(
        cfg, ws, spec.name, base_dir, profile, entries, recipes, calibs, references, task_prompts, sources,
        out, progress, rag, extras,
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
        if ckpt is None:  # nothing was built or found: the row says why
            rows.append(_failed_row(matrix, outcome))
            continue
        # every task both hold; Holm across the tasks; the Korean task carries its gap to English.
        # The base is not compared with itself: its row keeps the Δ columns empty.
        vs_base = {} if name == BASE else stats.compare_tasks(BASE, name, base.items, outcome.items)
        reference = outcomes.get(matrix.references.get(name, ""))
        vs_reference = _calibration_effect(reference, outcome)
        base_items = None if name == BASE else base.items  # the base row keeps the macro Δ empty
        cells = averages.leaderboard_cells(outcome.items, base_items, matrix.sources)
        if matrix.rag is not None:
            cells |= rag_metrics.checkpoint_cells(outcome.items, base_items, matrix.rag.skipped)
        cells |= _perplexity_cells(matrix, ckpt, base.checkpoint)
        rows.append(_row(matrix, outcome, ckpt, vs_base, vs_reference, base.memory, cells))
        comparisons += [*vs_base.values(), *vs_reference.values()]
    if all(outcome.checkpoint is None for outcome in outcomes.values()):
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
    averages_cells: dict[str, object],
) -> LeaderboardRow:
    profile = f"{matrix.profile.name}:{matrix.profile.key}"
    engine = {"vllm": serve.engine_version(matrix.ws), "lm-eval": metadata.version("lm_eval")}
    load_path = _load_path(matrix, ckpt)
    capacity = read_record(load_path, load.LoadReport) if load_path.exists() else None
    return leaderboard.build_row(
        ckpt, outcome.entry.mix or "none", outcome.status, outcome.runs, vs_base, outcome.memory, profile,
        matrix.cfg.command(), engine, base_memory, capacity, matrix.references.get(ckpt.name), vs_reference,
        averages_cells, serving=_servability(matrix, ckpt).note,
    )  # fmt: skip


def _failed_row(matrix: _Matrix, outcome: _Outcome) -> LeaderboardRow:
    entry, recipe = outcome.entry, matrix.recipes.get(outcome.entry.scheme)
    return leaderboard.failed_row(
        matrix.model, entry.name, recipe.scheme if recipe else entry.scheme, entry.mix or "none",
        outcome.status, f"{matrix.profile.name}:{matrix.profile.key}", matrix.cfg.command(),
    )  # fmt: skip


def _evaluate_checkpoint(matrix: _Matrix, entry: MatrixEntry) -> _Outcome:
    """Build (or check an extra), serve and score one checkpoint; a failure, or a checkpoint this device
    cannot serve, becomes its status instead of stopping the run."""
    try:
        matrix.progress(f"build {entry.name}", 0, 1)
        ckpt = _checkpoint(matrix, entry)
        matrix.progress(f"build {entry.name}", 1, 1)
    except UserError as exc:
        return _failed(entry, exc, None)
    verdict = _servability(matrix, ckpt)
    if not verdict.servable:  # said up front instead of a server that would crash
        log.warning("%s: %s", entry.name, verdict.note)
        return _Outcome(entry, verdict.note, ckpt, {}, None, {})
    try:
        runs, memory = _score_checkpoint(matrix, ckpt)
    except UserError as exc:
        return _failed(entry, exc, ckpt)
    items = {task: read_jsonl(Path(run.items_path), ItemResult) for task, run in runs.items()}
    return _Outcome(entry, "ok", ckpt, runs, memory, items)


def _checkpoint(matrix: _Matrix, entry: MatrixEntry) -> Checkpoint:
    """The entry's checkpoint: a pre-quantized extra (checked against the base), or a build (reused)."""
    reference = matrix.extras.get(entry.name)
    if reference is not None:
        return external.external_checkpoint(matrix.ws, matrix.model, matrix.base_dir, reference)
    recipe, calib = matrix.recipes[entry.scheme], matrix.calibs.get(entry.mix or "")
    return build.build_checkpoint(
        matrix.ws, matrix.model, matrix.base_dir, recipe.scheme, recipe, calib, name=entry.name
    )


def _servability(matrix: _Matrix, ckpt: Checkpoint) -> hardware.Verdict:
    """Whether the engine and device of this machine serve `ckpt` under the run's profile, and how."""
    device = hardware.local_device(matrix.ws.serve_venv)
    return hardware.check_checkpoint(Path(ckpt.path), device, matrix.profile.dtype)


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
    task_items = {t: [p.item_id for p in ps] for t, ps in matrix.prompts.items()}
    task_items |= matrix.rag.stage_items() if matrix.rag else {}
    task_keys = {t: content_hash(stage_key, ids) for t, ids in task_items.items()}
    run_paths = {task: stages / f"{ckpt.name}.{task}.{key}.score.json" for task, key in task_keys.items()}
    runs = {task: read_record(path, ScoreRun) for task, path in run_paths.items() if path.exists()}
    runs = {task: run for task, run in runs.items() if Path(run.items_path).exists()}
    load_path = _load_path(matrix, ckpt)
    load_done = not matrix.cfg.load or load_path.exists()
    ppl_path, holdout = _perplexity_stage(matrix, ckpt)
    if memory_path.exists() and len(runs) == len(run_paths) and load_done and ppl_path.exists():
        log.info("%s: every task already scored, no server needed", ckpt.name)
        return runs, read_record(memory_path, MemoryReport)
    log_path = matrix.out / "logs" / f"{ckpt.name}.{stage_key}.log"
    matrix.progress(f"serve {ckpt.name}", 0, 1)
    try:
        trusted = matrix.cfg.trust_remote_code
        with serve.VllmServer(
            Path(ckpt.path), ckpt.name, profile, matrix.ws, log_path, trust_remote_code=trusted
        ) as server:
            matrix.progress(f"serve {ckpt.name}", 1, 1)
            memory = server.memory()
            write_record(memory_path, memory)
            for task in task_keys:
                if task not in runs:
                    items_path = matrix.out / "items" / ckpt.name / f"{task}.{task_keys[task]}.jsonl"
                    runs[task] = _score_restarting(matrix, ckpt, server, task, items_path)
                    write_record(run_paths[task], runs[task])
            if not load_done:
                write_record(load_path, _measure_load(matrix, ckpt, server))
            if not ppl_path.exists():
                write_record(ppl_path, _measure_perplexity(matrix, ckpt, server, holdout))
    except serve.ServeError as exc:  # the engine would not start: say which OOM pattern, if any
        verdict = doctor.diagnose(log_path.read_text(errors="replace"), profile).summary
        raise serve.ServeError(f"{exc}; doctor: {verdict}") from None
    return runs, memory


def _perplexity_stage(matrix: _Matrix, ckpt: Checkpoint) -> tuple[Path, dict[str, str]]:
    """Where the checkpoint's perplexity on the held-out text is cached, and that text by language."""
    holdout = catalog.holdout_texts(matrix.ws)
    texts = {lang: sha256_of(text) for lang, text in holdout.items()}
    window = [perplexity.WINDOW_TOKENS, perplexity.MAX_TOKENS]
    key = content_hash(ckpt.key, matrix.profile.key, texts, window)
    return matrix.out / "stages" / f"{ckpt.name}.{key}.perplexity.json", holdout


def _measure_perplexity(
    matrix: _Matrix, ckpt: Checkpoint, server: serve.VllmServer, holdout: dict[str, str]
) -> Perplexity:
    progress = partial(matrix.progress, f"perplexity {ckpt.name}")
    return perplexity.measure_perplexity(
        server.base_url, server.api_key, server.served_name, Path(ckpt.path), holdout,
        concurrency=matrix.cfg.concurrency, progress=progress,
    )  # fmt: skip


def _perplexity_cells(matrix: _Matrix, ckpt: Checkpoint, base: Checkpoint | None) -> dict[str, float | None]:
    """The perplexity columns of a row: this checkpoint's and its change against the base."""
    paths = {name: _perplexity_stage(matrix, c)[0] for name, c in (("ckpt", ckpt), ("base", base)) if c}
    found = {name: read_record(path, Perplexity) for name, path in paths.items() if path.exists()}
    return perplexity.leaderboard_cells(found.get("ckpt"), found.get("base"))


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


def _score_restarting(
    matrix: _Matrix, ckpt: Checkpoint, server: serve.VllmServer, task: str, out: Path
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
    matrix: _Matrix, ckpt: Checkpoint, server: serve.VllmServer, task: str, out: Path
) -> ScoreRun:
    """Letter-choice tasks by their choice log-probs; ko_rag's generated answers by generate.py."""
    where = (Path(ckpt.path), server.base_url, server.api_key, server.served_name, out, ckpt.name)
    concurrency, progress = matrix.cfg.concurrency, partial(matrix.progress, f"score {ckpt.name} {task}")
    if task == rag_task.TASK and matrix.rag is not None:
        items = matrix.rag.generation
        return generate.score_generation(items, *where, matrix.profile.key, concurrency, progress)
    return score.score_task(matrix.prompts[task], *where, matrix.profile.key, concurrency, progress)
