"""The generation signals as a reader sees them: the report's section (a table per generative prefix),
the model card's line and the terminal's cell, from a row's generation columns
(`evals/reporting/generation_columns.py`). Runs without generation get none of them."""

from __future__ import annotations

from collections.abc import Sequence

from evals.reporting.generation_columns import GENERATIVE_PREFIXES
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.reporting.plots import task_label
from evals.tasks.registry import LM_EVAL_COLUMNS
from kqe.core.schemes import BASE_SCHEME

TITLE = "Generation: divergence from the base and Korean fidelity"
"""The report's section on the generation columns."""
STATISTICS = "docs/statistics.md, section “Generation: divergence from the base and language fidelity”"
"""Where the signals and their intervals are explained (the report sits in results/, so not a link)."""
HOW_TO_READ = (
    "Each checkpoint's greedy output on an item against the base's output on the same prompt, items "
    "paired on their id, 95% CIs resampling whole subjects (ko_rag: gold passages). *Same as base* is "
    "the share of outputs identical character for character: strict, one changed particle counts, and it "
    "says nothing about whether the change matters. *chrF vs base* (0–100) is closeness to the base's "
    "output, not to a correct answer: a checkpoint that fixes a wrong base answer loses chrF. *First diff* "
    "is the median token where differing outputs part: how early, not how often. *Hangul share* is the "
    "share of an output's letters that are Hangul and *code-switch* the share of outputs with a Latin, "
    "Han or Kana run their prompt does not hold (a unit or name in Latin letters counts); each is shown "
    "as the checkpoint's level with its paired Δ against the base, in points. These move where accuracy "
    "does not: on a near-chance model, Δ accuracy is mostly noise while the outputs already show how far "
    "the model moved. Outputs are compared as the server returned them, before the task's filters, one "
    f"greedy path against another. See {STATISTICS}."
)


def generated_prefixes(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The generative column prefixes some row has generation columns for, in column order."""
    return [p for p in GENERATIVE_PREFIXES if any(getattr(r, f"{p}_gen_items") is not None for r in rows)]


def _triple(row: LeaderboardRow, column: str) -> tuple[float, float, float] | None:
    value, low, high = (getattr(row, name) for name in (column, f"{column}_ci_low", f"{column}_ci_high"))
    if value is None or low is None or high is None:
        return None
    return value, low, high


def share_ci(row: LeaderboardRow, column: str) -> str:
    """A share with its CI in percent (`62.5% [50.1, 73.0]`), `—` where the row has none."""
    found = _triple(row, column)
    if found is None:
        return "—"
    value, low, high = (100 * part for part in found)
    return f"{value:.1f}% [{low:.1f}, {high:.1f}]"


def points_ci(row: LeaderboardRow, column: str) -> str | None:
    """A Δ of fractions with its CI in points (`-1.2 [-3.0, +0.5]`), None where the row has none."""
    found = _triple(row, column)
    if found is None:
        return None
    value, low, high = (100 * part for part in found)
    return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]"


def _chrf(row: LeaderboardRow, prefix: str) -> str:
    found = _triple(row, f"{prefix}_chrf_vs_base")
    return "—" if found is None else "{:.1f} [{:.1f}, {:.1f}]".format(*found)


def _level_and_delta(row: LeaderboardRow, level: str, delta: str) -> str:
    """`93.1%, Δ -1.2 [-3.0, +0.5]` (level in percent, Δ in points); the level alone on the base."""
    value = getattr(row, level)
    if value is None:
        return "—"
    shown = points_ci(row, delta)
    return f"{100 * value:.1f}%" + (f", Δ {shown}" if shown else "")


def _metric(row: LeaderboardRow) -> str:
    """The lm-eval metric's mean and its paired Δ, in the metric's own units."""
    score = row.lmeval_score
    if score is None:
        return "—"
    found = _triple(row, f"{LM_EVAL_COLUMNS}_score_delta")
    return f"{score:.3g}" + ("" if found is None else ", Δ {:+.3g} [{:+.3g}, {:+.3g}]".format(*found))


def _label(rows: Sequence[LeaderboardRow], prefix: str) -> str:
    if prefix == LM_EVAL_COLUMNS:
        return f"{task_label(rows, prefix)} (lm-eval generation)"
    return "ko_rag answers (every condition)"


def _table(rows: Sequence[LeaderboardRow], prefix: str) -> list[str]:
    metric = next((r.lmeval_score_metric for r in rows if r.lmeval_score_metric), None)
    continuous = prefix == LM_EVAL_COLUMNS and metric is not None
    head = [
        "checkpoint",
        "items",
        "same as base [95% CI]",
        "chrF vs base [95% CI]",
        "first diff (token)",
        "Hangul share, Δ points [95% CI]",
        "code-switch rate, Δ points [95% CI]",
        *([f"`{metric}`, Δ [95% CI]"] if continuous else []),
    ]
    lines = [f"### {_label(rows, prefix)}", "", f"| {' | '.join(head)} |", "|---" * len(head) + "|"]
    for row in rows:
        items = getattr(row, f"{prefix}_gen_items")
        if items is None:
            continue
        base = row.scheme == BASE_SCHEME
        first_diff = getattr(row, f"{prefix}_first_diff_tokens")
        cells = [
            row.checkpoint,
            str(items),
            "(base)" if base else share_ci(row, f"{prefix}_same_as_base"),
            "(base)" if base else _chrf(row, prefix),
            "(base)" if base else "—" if first_diff is None else f"{first_diff:g}",
            _level_and_delta(row, f"{prefix}_hangul_share", f"{prefix}_hangul_share_delta"),
            _level_and_delta(row, f"{prefix}_code_switch_rate", f"{prefix}_code_switch_delta"),
            *([("(base)" if base else _metric(row))] if continuous else []),
        ]
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def generation_section(rows: Sequence[LeaderboardRow]) -> list[str]:
    """Markdown lines of the report's section: a table per generative prefix and how to read them;
    none when no row has generation columns."""
    tables = [line for prefix in generated_prefixes(rows) for line in ["", *_table(rows, prefix)]]
    return [HOW_TO_READ, *tables] if tables else []


def card_lines(row: LeaderboardRow) -> list[str]:
    """A checkpoint card's lines: one per generative prefix (same as base, Hangul share and code-switch
    Δ), then where they are explained; none without generation columns."""
    lines = []
    for prefix in generated_prefixes([row]):
        hangul = points_ci(row, f"{prefix}_hangul_share_delta") or "—"
        switch = points_ci(row, f"{prefix}_code_switch_delta") or "—"
        lines.append(
            f"Generation, {_label([row], prefix)}, {getattr(row, f'{prefix}_gen_items')} items: same output "
            f"as the base on {share_ci(row, f'{prefix}_same_as_base')} of them; Hangul share Δ {hangul} "
            f"points, code-switch rate Δ {switch} points (95% CIs)."
        )
    return [*lines, f"How to read the generation signals and their limits: {STATISTICS}."] if lines else []
