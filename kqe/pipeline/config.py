"""What one `make eval` run is: its plan (decided from its config alone), and what its checkpoints share.

`prepare_matrix` checks every input first (cheap: model, profile, recipes, tasks, serve venv), then
builds the calibration sets and the task prompts, so a typo fails before any long work starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evals.planning.placement import PlacementPlan, check_profile, place, target_from
from evals.planning.vllm_memory import gpu_named
from evals.serving import hardware, serve
from evals.serving.hardware import Device
from evals.serving.ports import forced_port
from evals.statistics import resolution
from evals.tasks import circular, item_sets, lm_eval_bridge, prompts
from evals.tasks.ko_rag import task as rag_task
from evals.tasks.lm_eval_generation import GenerationTask, generation_task
from evals.tasks.registry import TASK_SPECS, is_lm_eval_task
from kqe.core import defaults, hub
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.modelstore import LocalModel, installed_dir, local_model
from kqe.core.records import CalibrationSet, ModelSpec, ServeProfile
from kqe.core.registry import check_remote_code, resolve_model
from kqe.core.schemes import BASE_SCHEME, scheme_info
from kqe.core.workspace import Workspace
from kqe.pipeline.matrix import (
    MatrixEntry,
    calibration_references,
    default_kv_checkpoints,
    kv_variants,
    mix_label,
    plan_matrix,
)
from quantize import build, calibration, contamination, external, schemes
from quantize.recipes import resolve_recipes

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""Called with (what, done, total) as long work advances."""
Prompts = dict[str, list[prompts.PromptItem]]
"""Task → its prompts."""


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, decided from its inputs alone: nothing downloaded, built or served."""

    spec: ModelSpec
    profile: ServeProfile
    """The run's serve profile (the target's, when there is a target)."""
    entries: list[MatrixEntry]
    recipes: dict[str, schemes.Recipe]
    """Scheme (or recipe-file table) name → recipe."""
    extras: dict[str, str]
    """Checkpoint name → a pre-quantized checkpoint given with `extra` (folder or hub id)."""
    placement: PlacementPlan
    """Per checkpoint: its target memory and where its items are scored."""
    build_dtype: str
    """What this machine's builds load the base and calibrate in (`hardware.native_dtype_on`)."""


@dataclass(frozen=True)
class RunMatrix:
    """What every checkpoint of one run shares."""

    cfg: EvalConfig
    ws: Workspace
    plan: RunPlan
    base: LocalModel
    """The base model and its folder here."""
    calibs: dict[str, CalibrationSet]
    """Mix label → calibration set."""
    references: dict[str, str]
    """Checkpoint → the checkpoint of the same scheme it is paired with for the calibration effect."""
    prompts: dict[str, list[prompts.PromptItem]]
    sources: dict[str, str]
    """Task → what its items are (`KMMLU-HARD dev (offline, 225 items), 0-shot`), for every output."""
    progress: Progress
    rag: rag_task.PreparedRag | None = None
    """ko_rag's items when the run scores it (its choice items are also in `prompts`)."""
    generation: dict[str, GenerationTask] = field(default_factory=dict)
    """lm-eval generation task → its items (multiple-choice tasks are in `prompts`)."""
    circular: Prompts = field(default_factory=dict)
    """Letter-choice task → its drawn items in rotations 1..k−1 (`--circular`); empty without it."""

    @property
    def model(self) -> str:
        return self.plan.spec.name

    @property
    def profile(self) -> ServeProfile:
        return self.plan.profile

    @property
    def out(self) -> Path:
        """`results/<model>/`: per-item files, stage records and server logs of every run of the model."""
        return self.ws.results(self.plan.spec.name)

    @property
    def board_dir(self) -> Path:
        """Where this run's leaderboard, run.json, report, cards and plots go."""
        return self.out / "runs" / self.cfg.run if self.cfg.run else self.out

    def score_profile(self, checkpoint: str) -> ServeProfile:
        """The profile `checkpoint` is served under for scoring (its placement's)."""
        score = self.plan.placement.of(checkpoint).score
        return score.profile if score else self.plan.profile


def plan_run(cfg: EvalConfig, ws: Workspace, spec: ModelSpec) -> RunPlan:
    """The checkpoints of `spec` (`cfg.model` resolved), their recipes and their placements: cheap
    checks of every input, no download."""
    named = serve.load_profile(cfg.profile)
    recipes = resolve_recipes([BASE_SCHEME, *cfg.schemes], Path(cfg.recipes) if cfg.recipes else None)
    needs_calibration = {name: scheme_info(r.scheme).needs_calibration for name, r in recipes.items()}
    entries = plan_matrix(cfg.schemes, cfg.calibrations, needs_calibration.__getitem__)
    for reference in cfg.extra:  # before the base is built and served, not after
        external.check_extra(ws, reference, cfg.trust_remote_code)
    extras = {external.extra_name(reference): reference for reference in cfg.extra}
    entries += [MatrixEntry(name, external.EXTRA_SCHEME, None) for name in extras]
    if len(extras) != len(cfg.extra) or len({entry.name for entry in entries}) != len(entries):
        raise UserError(f"extra {','.join(cfg.extra)!r} repeats a checkpoint name: list each folder once")
    entries += _kv_entries(cfg, entries, recipes)
    prompts.check_tasks(list(cfg.tasks))
    prompts.check_limit(cfg.limit)
    check_circular(cfg, ws)
    ws.check_writable(spec.name)  # a link in results/, calibration_data/ or the checkpoints: said now
    _check_model_inputs(cfg, ws, spec, recipes)
    lm_eval_tasks(cfg)  # an unknown lm-eval task, or one not scorable, is said before any build
    if cfg.rag_data and rag_task.TASK in cfg.tasks:  # a user's ko_rag folder reads, before any build
        rag_task.load_source(ws, Path(cfg.rag_data))
    serve.check_serve_env(ws)
    local = hardware.local_device(ws.serve_venv)
    profile = hardware.for_device(named, local)  # the dtype of a `native` CPU profile, for this CPU
    forced_port()  # a KQE_PORT in use is said now, not when the first server starts
    formats = {e.name: recipes[e.scheme].scheme if e.scheme in recipes else e.scheme for e in entries}
    kv_dtypes = {entry.name: entry.kv_cache_dtype for entry in entries}
    placement = _placement(cfg, local, spec, profile, formats, kv_dtypes)
    return RunPlan(spec, profile, entries, recipes, extras, placement, hardware.native_dtype_on(local))


def _check_model_inputs(
    cfg: EvalConfig, ws: Workspace, spec: ModelSpec, recipes: dict[str, schemes.Recipe]
) -> None:
    """What the run checks against the model before its first expensive step, said by the dry run too:
    where its results go, the calibration sample length, and, for a model already on this machine (a
    folder, the installed embedded model, a hub model in the hub's cache; one not downloaded yet is
    checked once it is), remote code and each recipe against its layers."""
    results = ws.results(spec.name)
    if results.exists() and not results.is_dir():
        raise UserError(
            f"{results} is a file: kqe files {spec.name}'s results in a folder there; move the file"
        )
    if cfg.calib_seq_len > spec.max_context and any(
        scheme_info(r.scheme).needs_calibration for r in recipes.values()
    ):
        raise UserError(
            f"--calib-seq-len {cfg.calib_seq_len:,} is longer than {spec.name}'s context "
            f"({spec.max_context:,} tokens): give at most {spec.max_context:,}, e.g. {defaults.CALIB_SEQ_LEN}"
        )
    folder = _model_folder_here(spec, ws)
    if folder is None or not (folder / "config.json").is_file():
        return  # not here yet: `prepare_matrix` checks it once installed or downloaded
    check_remote_code(folder, cfg.trust_remote_code)
    if not any(folder.glob("*.safetensors")):
        return  # a hub model's config alone (read to plan it): its layers are checked once downloaded
    for name, recipe in recipes.items():
        build.check_recipe(folder, recipe, f"{name} of {spec.name}")


def _model_folder_here(spec: ModelSpec, ws: Workspace) -> Path | None:
    """The model's folder where this machine already has it: given, installed, or in the hub's cache."""
    if spec.local_path:
        return Path(spec.local_path)
    if spec.offline:
        return installed_dir(spec, ws)
    return hub.cached_snapshot(spec.hub_id, spec.revision)


def _kv_entries(
    cfg: EvalConfig, entries: list[MatrixEntry], recipes: dict[str, schemes.Recipe]
) -> list[MatrixEntry]:
    """`--kv-cache-dtypes`' rows: the chosen checkpoints served again with each non-auto KV dtype."""
    if len(cfg.kv_cache_dtypes) == 1:
        if cfg.kv_checkpoints:
            raise UserError("--kv-checkpoints names what --kv-cache-dtypes varies: give both, e.g. auto,fp8")
        return []

    def bits(name: str) -> int | None:
        return scheme_info(recipes[name].scheme).bits if name in recipes else None

    chosen = cfg.kv_checkpoints or default_kv_checkpoints(entries, bits)
    return kv_variants(entries, cfg.kv_cache_dtypes, chosen)


def circular_tasks(cfg: EvalConfig) -> list[str]:
    """The tasks `--circular` rotates: the run's registry letter-choice tasks (none when it is 0)."""
    return [task for task in cfg.tasks if circular.rotatable(task)] if cfg.circular else []


def check_circular(cfg: EvalConfig, ws: Workspace) -> None:
    """A one-line UserError for `--circular` on a run with no task it rotates, or on more items than a
    task scores (where the count is known without reading the items; `circular_prompts` checks again)."""
    tasks = circular_tasks(cfg)
    if cfg.circular and not tasks:
        raise UserError(
            f"--circular {cfg.circular}: --tasks {','.join(cfg.tasks)} has no letter-choice task to rotate "
            f"({', '.join(TASK_SPECS)}): add one, or leave --circular out"
        )
    sources = prompts.task_sources(ws, tasks, cfg.items.online) if tasks else {}
    counts = {task: item_sets.scored_items(source, cfg.limit) for task, source in sources.items()}
    circular.check_circular(cfg.circular, counts)


def lm_eval_tasks(cfg: EvalConfig) -> list[lm_eval_bridge.BridgedTask]:
    """The run's `lm-eval:<task>` tasks, resolved against lm-eval's YAMLs and `cfg.include_path`."""
    include = lm_eval_bridge.check_include_path(cfg.include_path)
    return [lm_eval_bridge.resolve(task, include) for task in cfg.tasks if is_lm_eval_task(task)]


def _placement(
    cfg: EvalConfig,
    local: Device,
    spec: ModelSpec,
    profile: ServeProfile,
    formats: dict[str, str],
    kv_dtypes: dict[str, str],
) -> PlacementPlan:
    target = None
    if cfg.target_gpu or cfg.gpu_gib:
        gpu = gpu_named(cfg.target_gpu) if cfg.target_gpu else None
        check_profile(spec, profile, "gpu", "--profile")
        target = target_from(gpu, cfg.gpu_gib, profile)
    named = cfg.score_profile or (defaults.CPU_PROFILE if target and local.engine == "cpu" else None)
    score_profile = hardware.for_device(serve.load_profile(named), local) if named else None
    return place(spec, formats, target, local, profile, score_profile, kv_dtypes)


def _choice_prompts(
    cfg: EvalConfig, ws: Workspace, tasks: list[str]
) -> tuple[Prompts, dict[str, str], Prompts]:
    """The registry choice tasks' prompts, what their items are, and their rotations (`--circular`)."""
    if not tasks:
        return {}, {}, {}
    data_dir = prompts.prepare_tasks(ws, tasks, cfg.limit, cfg.seed, cfg.items.online)
    task_prompts = {task: prompts.load_prompts(task, data_dir) for task in tasks}
    sources = {task: prompts.source_label(task, data_dir) for task in tasks}
    rotated = {
        task: circular.circular_prompts(task, data_dir, cfg.circular, cfg.seed)
        for task in circular_tasks(cfg)
    }
    return task_prompts, sources, rotated


def prepare_matrix(cfg: EvalConfig, ws: Workspace, progress: Progress) -> RunMatrix:
    """Check every input first (cheap), then build the calibration sets and the task prompts."""
    spec = resolve_model(cfg.model, ws)
    base = local_model(spec, ws)  # a model not installed is said first (a hub model: downloaded)
    plan = plan_run(cfg, ws, spec)  # its files are here now: remote code and the layers checked there
    choice_tasks = [task for task in cfg.tasks if task in TASK_SPECS]
    downloads = prompts.to_download(ws, choice_tasks, cfg.limit, cfg.seed, cfg.items.online)
    item_sets.check_hub(downloads, cfg.items)  # before calibrating, building or serving anything
    entries = plan.entries
    used = {entry.mix for entry in entries}
    labelled = {mix_label(mix): mix for mix in cfg.calibrations}
    parsed = {label: calibration.parse_mix(mix) for label, mix in labelled.items() if label in used}
    include = lm_eval_bridge.check_include_path(cfg.include_path)
    # what will be scored, said once every cheap check passed: an error is never under a page of plan
    for line in item_sets.announce(ws, list(cfg.tasks), cfg.items, cfg.limit, resolution.unresolved):
        log.info("%s", line)
    task_prompts, sources, rotated = _choice_prompts(cfg, ws, choice_tasks)
    generation: dict[str, GenerationTask] = {}
    for bridged in lm_eval_tasks(cfg):
        if bridged.output_type == lm_eval_bridge.GENERATION:
            template_of = base.folder if cfg.apply_chat_template else None
            generation[bridged.name] = generation_task(bridged, include, cfg.limit, cfg.seed, template_of)
            count = len(generation[bridged.name].items)
        else:
            task_prompts[bridged.name] = lm_eval_bridge.load_prompts(bridged, include, cfg.limit, cfg.seed)
            count = len(task_prompts[bridged.name])
        sources[bridged.name] = lm_eval_bridge.source_label(bridged, count, cfg.limit)
    rag = None
    if rag_task.TASK in cfg.tasks:  # contexts are cut with the base's tokenizer, shared by its checkpoints
        rag_dir = Path(cfg.rag_data) if cfg.rag_data else None
        scored = [p.score.profile.max_model_len for p in plan.placement.checkpoints if p.score]
        longest = min(scored, default=plan.profile.max_model_len)  # every placement must hold every context
        options = rag_task.RagOptions(cfg.rag_conditions, cfg.rag_lengths, cfg.rag_chat_template)
        rag = rag_task.prepared(ws, base.folder, longest, cfg.rag_questions, cfg.seed, rag_dir, options)
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
            ws,
            base,
            mix,
            cfg.calib_samples,
            cfg.calib_seq_len,
            cfg.seed,
            label,
            eval_items=eval_texts,
        )
        progress("calibration sets", done + 1, len(parsed))
    references = calibration_references(entries, {label: mix.get("ko", 0.0) for label, mix in parsed.items()})
    return RunMatrix(
        cfg=cfg,
        ws=ws,
        plan=plan,
        base=base,
        calibs=calibs,
        references=references,
        prompts=task_prompts,
        sources=sources,
        progress=progress,
        rag=rag,
        generation=generation,
        circular=rotated,
    )
