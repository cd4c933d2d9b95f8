"""The report's averages section: which items, micro vs macro with CIs, supercategories, macro Δ
(computed by `evals/statistics/averages.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.tasks.registry import CATEGORY_LABELS, COLUMN_SPECS


def _percent(value: float | None, low: float | None = None, high: float | None = None, sign: str = "") -> str:
    if value is None:
        return "—"
    text = f"{100 * value:{sign}.1f}"
    if low is not None and high is not None:
        text += f" [{100 * low:{sign}.1f}, {100 * high:{sign}.1f}]"
    return text


def _column(row: LeaderboardRow, name: str, sign: str = "") -> str:
    low, high = getattr(row, f"{name}_ci_low"), getattr(row, f"{name}_ci_high")
    return _percent(getattr(row, name), low, high, sign)


def markdown_section(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The report's averages: which items, micro vs macro with CIs, supercategories, macro Δ."""
    tasks = {prefix: COLUMN_SPECS[prefix] for prefix in scored_tasks(rows)}
    sources = [(spec.label, getattr(rows[0], f"{prefix}_source")) for prefix, spec in tasks.items()]
    named = [f"{name}: {source}" for name, source in sources if source]
    lines = [f"Items: {'; '.join(named)}.", ""] if named else []
    heads = [
        f"{spec.label} micro | {spec.label} macro | {spec.label} macro Δ"
        + "".join(f" | {CATEGORY_LABELS[key].split(' (')[0]}" for key in spec.categories)
        for spec in tasks.values()
    ]
    lines += [
        "Micro = share of all items right (lm-eval's score); macro = mean of the subjects' accuracies (the "
        "KMMLU paper's); a supercategory is the macro of its subjects. Percent [95% CI, items resampled "
        "within subjects]; macro Δ against bf16 in points, paired.",
        "",
        f"| checkpoint | {' | '.join(heads)} |",
        "|---" * (1 + sum(3 + len(spec.categories) for spec in tasks.values())) + "|",
    ]
    for r in rows:
        cells = []
        for prefix, spec in tasks.items():
            cells += [
                _column(r, f"{prefix}_acc"),
                _column(r, f"{prefix}_macro"),
                _column(r, f"{prefix}_macro_delta", "+"),
            ]
            cells += [_percent(getattr(r, f"{prefix}_{key}")) for key in spec.categories]
        lines.append(f"| {r.checkpoint} | " + " | ".join(cells) + " |")
    return lines
