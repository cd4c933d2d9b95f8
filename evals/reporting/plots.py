"""The report's figures, from leaderboard rows (matplotlib's object API: no pyplot state, Agg canvas).

Quality loss (Δ with 95% CIs, per task) against weights GiB and max concurrency; per-task Δ with CIs;
answers flipped each way; the calibration effect when rows carry several calibration mixes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from itertools import cycle
from pathlib import Path
from typing import TYPE_CHECKING

from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.statistics.choice_bias import COLLAPSED
from evals.tasks.registry import COLUMN_LABELS
from kqe.core.io import write_atomic
from kqe.core.results import RunSummary
from kqe.core.schemes import BASE_SCHEME

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_STYLES = (("tab:red", "o"), ("tab:blue", "s"), ("tab:green", "^"), ("tab:purple", "D"), ("tab:orange", "v"))
TASK_STYLE = dict(zip(COLUMN_LABELS, cycle(_STYLES), strict=False))
"""Column prefix → (colour, marker), in registry order."""


def _shifts(step: float, count: int) -> list[float]:
    """Offsets that put `count` bars (one per task) side by side around a point, `step` apart."""
    return [step * (i - (count - 1) / 2) for i in range(count)]


MARGIN_POINTS = 1.0
"""The verdicts' non-inferiority margin, drawn as a dashed line."""


def figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def write_png(fig: Figure, path: Path) -> Path:
    """Save a figure so that readers see the old plot or the new one, never a torn file."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_atomic(path, buffer.getvalue())
    return path


def task_values(row: LeaderboardRow, prefix: str) -> tuple[float, float, float] | None:
    """Δ, CI low, CI high in points, or None when the task was not compared."""
    delta, low, high = (getattr(row, f"{prefix}_{name}") for name in ("delta", "ci_low", "ci_high"))
    if delta is None or low is None or high is None:
        return None
    return 100 * delta, 100 * low, 100 * high


def collapsed_on(row: LeaderboardRow, prefix: str) -> str | None:
    """The row's answer collapse on a task (`picks A on 100% of items`), None where it did not."""
    verdict = getattr(row, f"{prefix}_verdict")
    if verdict is None or not verdict.startswith(COLLAPSED):
        return None
    return verdict.removeprefix(COLLAPSED)


def _interval(
    ax: Axes, at: float, values: tuple[float, float, float], prefix: str, vertical: bool, hollow: bool = False
) -> None:
    """One Δ with its CI bar: vertical (Δ on the y axis) or horizontal; `hollow` (a collapsed
    checkpoint's Δ, letter preference): an open marker on a dashed bar."""
    delta, low, high = values
    color, marker = TASK_STYLE[prefix]
    bar = [[delta - low], [high - delta]]
    face = "white" if hollow else color
    if vertical:
        drawn = ax.errorbar(at, delta, yerr=bar, color=color, marker=marker, capsize=4, markerfacecolor=face)
    else:
        drawn = ax.errorbar(delta, at, xerr=bar, color=color, marker=marker, capsize=4, markerfacecolor=face)
    for line in drawn.lines[2] if hollow else ():
        line.set_linestyle("--")


def _collapse_legend(ax: Axes, rows: Sequence[LeaderboardRow], tasks: dict[str, str]) -> None:
    """A legend entry for the open markers, where some row collapsed."""
    if any(collapsed_on(r, p) for r in rows for p in tasks):
        label = "open, dashed: answers collapsed (Δ is letter preference)"
        ax.plot([], [], color="grey", marker="o", markerfacecolor="white", linestyle="--", label=label)


def _legend_entries(ax: Axes, tasks: dict[str, str]) -> None:
    for prefix, label in tasks.items():
        color, marker = TASK_STYLE[prefix]
        ax.plot([], [], color=color, marker=marker, label=label)


def _loss_axis(ax: Axes) -> None:
    ax.axhline(0, color="black", linewidth=0.8)
    ax.axhline(-MARGIN_POINTS, color="grey", linewidth=0.8, linestyle="--", label="−1 point margin")
    ax.set_ylabel("Δ accuracy vs bf16 (points, 95% CI)")
    ax.grid(alpha=0.3)


def pareto_figure(rows: Sequence[LeaderboardRow], run: RunSummary | None) -> Figure:
    """Δ per task with CI bars against weights GiB, max concurrency and, where measured, output tokens/s
    at the target concurrency."""
    loaded = [r.load_concurrency or 0 for r in rows if r.load_output_tokens_per_s is not None]
    fig = figure(16 if loaded else 11, 4.8)
    tasks = scored_tasks(rows)
    engine = f" on {'/'.join(sorted({m.device for m in run.memory.values()}))}" if run and run.memory else ""
    source = f"as vLLM logged{engine}"
    if target := next((r.target for r in rows if r.memory_source == "planner" and r.target), None):
        source = f"planned for {target}"
    context = f"{run.profile.max_model_len:,}-token" if run else "max-model-len"
    panels = [
        ("weights_gib", f"weights (GiB, {source})"),
        ("max_concurrency", f"max concurrency ({context} requests, {source})"),
    ]
    if loaded:  # throughput at the target level, where `vllm bench serve` measured it
        panels.append(
            ("load_output_tokens_per_s", f"output tokens/s at {max(loaded)} in flight (vllm bench serve)")
        )
    axes = fig.subplots(1, len(panels), sharey=True)
    for ax, (column, xlabel) in zip(axes, panels, strict=True):
        placed = [(getattr(r, column), r) for r in rows if getattr(r, column) is not None]
        values = {x for x, _ in placed}
        if len(values) == 1:  # e.g. a fixed KV pool: spread the checkpoints out by name instead
            placed = [(float(i), r) for i, (_, r) in enumerate(placed)]
            ax.set_xticks(range(len(placed)), [r.checkpoint for _, r in placed])
            xlabel = f"checkpoint (every one: {xlabel.split(' (')[0]} {values.pop():g}, a fixed KV pool)"
        else:
            placed = _stagger(placed)
        spread = max(x for x, _ in placed) - min(x for x, _ in placed) if placed else 0.0
        for shift, prefix in zip(_shifts(0.024, len(tasks)), tasks, strict=True):  # side by side, not on top
            for x, row in placed:
                if bars := task_values(row, prefix):
                    hollow = collapsed_on(row, prefix) is not None
                    _interval(ax, x + shift * (spread or 1.0), bars, prefix, vertical=True, hollow=hollow)
        if len(values) > 1:  # name each point (collapsed ones together), left of its first bar
            _name_points(ax, placed, tasks, _shifts(0.024, len(tasks))[0] * (spread or 1.0))
        _legend_entries(ax, tasks)
        _collapse_legend(ax, rows, tasks)
        _loss_axis(ax)
        ax.set_xlabel(xlabel)
        ax.margins(x=0.12, y=0.1)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    fig.suptitle(f"{rows[0].model}: quality loss vs memory (bf16 = 0)")
    return fig


def _name_points(
    ax: Axes, placed: list[tuple[float, LeaderboardRow]], tasks: dict[str, str], shift: float
) -> None:
    """Each checkpoint's name left of its first bar; checkpoints that collapsed the same way on the
    same tasks (their Δ is then the same letter's share) share one label, above the first of them."""
    labels: dict[tuple[str, str], tuple[float, float, list[str]]] = {}
    shown = [row for _, row in placed]
    for x, row in placed:
        bars = [values for p in tasks if (values := task_values(row, p))]
        delta = bars[0][0] if bars else 0.0
        what = "; ".join(
            f"{task_label(shown, p)} {found.split(' of ')[0]}"
            for p in tasks
            if (found := collapsed_on(row, p))
        )
        key = (what, f"{delta:.6f}") if what else ("", row.checkpoint)
        at = max((high for _, _, high in bars), default=delta) if what else delta  # above its bars
        labels.setdefault(key, (x + shift, at, []))[2].append(row.checkpoint)
    for (what, _), (x, at, names) in labels.items():
        text = ", ".join(names) + (f"\ncollapsed: {what}" if what else "")
        ax.annotate(
            text,
            (x, at),
            textcoords="offset points",
            xytext=(0, 4) if what else (-5, 0),
            ha="left" if what else "right",
            va="bottom" if what else "baseline",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
        )


def _stagger(placed: list[tuple[float, LeaderboardRow]]) -> list[tuple[float, LeaderboardRow]]:
    """Checkpoints at the same x (same weights) moved apart a little so their bars stay readable."""
    if not placed:  # e.g. every checkpoint failed: an empty panel, not a crash
        return placed
    spread = (max(x for x, _ in placed) - min(x for x, _ in placed)) or 1.0
    seen: dict[float, int] = {}
    moved = []
    for x, row in placed:
        seen[x] = seen.get(x, -1) + 1
        moved.append((x + seen[x] * 0.06 * spread, row))
    return moved


def source_of(rows: Sequence[LeaderboardRow], prefix: str, label: str) -> str:
    """What a task's items were (`KMMLU-HARD dev (offline, 225 items), 0-shot`), else its label."""
    return next((source for r in rows if (source := getattr(r, f"{prefix}_source"))), label)


def task_label(rows: Sequence[LeaderboardRow], prefix: str) -> str:
    """Short name of what was scored: `KMMLU-HARD dev`, `KMMLU test`, `MMLU test`; else `KMMLU`."""
    return source_of(rows, prefix, COLUMN_LABELS[prefix]).split(" (")[0]


def deltas_figure(rows: Sequence[LeaderboardRow]) -> Figure:
    """One panel per task: each quantized checkpoint's Δ with its 95% CI and verdict."""
    quantized = [r for r in rows if r.scheme != BASE_SCHEME]
    tasks = scored_tasks(rows)
    fig = figure(10, 1.2 + 0.6 * max(len(quantized), 1) * len(tasks))
    axes = fig.subplots(len(tasks), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (prefix, label) in zip(axes, tasks.items(), strict=True):
        for y, row in enumerate(quantized):
            if values := task_values(row, prefix):
                _interval(ax, y, values, prefix, vertical=False, hollow=collapsed_on(row, prefix) is not None)
                verdict = getattr(row, f"{prefix}_verdict") or ""
                ax.annotate(verdict, (1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=8)
        ax.set_yticks(range(len(quantized)), [r.checkpoint for r in quantized])
        ax.set_ylim(-0.7, len(quantized) - 0.3)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.axvline(-MARGIN_POINTS, color="grey", linewidth=0.8, linestyle="--")
        title = f"{source_of(rows, prefix, label)}: Δ accuracy vs bf16, 95% CI (dashed: −1 point margin)"
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("Δ accuracy (points)")
    return fig


def flips_figure(rows: Sequence[LeaderboardRow], run: RunSummary | None = None) -> Figure:
    """Items flipped correct→wrong and wrong→correct per checkpoint, one panel per task."""
    items = {s.task: s.n_items for s in run.score_runs if s.checkpoint == BASE_SCHEME} if run else {}
    quantized = [r for r in rows if r.scheme != BASE_SCHEME]
    fig = figure(10, 3.8)
    tasks = scored_tasks(rows)
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    positions = range(len(quantized))
    for ax, prefix in zip(axes, tasks, strict=True):
        c2w = [getattr(r, f"{prefix}_flips_c2w") or 0 for r in quantized]
        w2c = [getattr(r, f"{prefix}_flips_w2c") or 0 for r in quantized]
        ax.bar([p - 0.2 for p in positions], c2w, width=0.4, color="tab:red", label="correct → wrong")
        ax.bar([p + 0.2 for p in positions], w2c, width=0.4, color="tab:green", label="wrong → correct")
        ax.set_xticks(list(positions), [r.checkpoint for r in quantized])
        ax.set_ylabel("items")
        n = next((count for task, count in items.items() if task.startswith(prefix)), None)
        of_n = f" (of {n} items)" if n else ""
        ax.set_title(f"{task_label(rows, prefix)}: answers flipped vs bf16{of_n}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def calibration_groups(rows: Sequence[LeaderboardRow]) -> dict[str, list[LeaderboardRow]]:
    """Scheme → its rows, for schemes scored with more than one calibration mix."""
    groups: dict[str, list[LeaderboardRow]] = {}
    for row in rows:
        if row.calibration != "none":
            groups.setdefault(row.scheme, []).append(row)
    return {s: g for s, g in groups.items() if len({r.calibration for r in g}) > 1}


def calibration_figure(rows: Sequence[LeaderboardRow]) -> Figure:
    """Δ with CIs per calibration mix and task, for each scheme scored with several mixes."""
    groups = calibration_groups(rows)
    tasks = scored_tasks(rows)
    fig = figure(5 * len(groups) + 1, 4.2)
    axes = fig.subplots(1, len(groups), squeeze=False, sharey=True)[0]
    for ax, (scheme, group) in zip(axes, groups.items(), strict=True):
        for shift, prefix in zip(_shifts(0.2, len(tasks)), tasks, strict=True):
            for x, row in enumerate(group):
                if values := task_values(row, prefix):
                    _interval(ax, x + shift, values, prefix, vertical=True)
        ax.set_xticks(range(len(group)), [f"{r.calibration}\n({r.checkpoint})" for r in group])
        ax.set_xlabel("calibration mix")
        ax.set_title(f"{scheme}: calibration effect", fontsize=10)
        _legend_entries(ax, tasks)
        _loss_axis(ax)
        ax.legend(fontsize=8)
    return fig
