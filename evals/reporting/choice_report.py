"""The report's letter-preference parts: the answer collapses, named before any Δ table, the accuracy
with each checkpoint's letter prior taken out (`evals/statistics/choice_bias.py`), and CircularEval's
where the run asked for it (`--circular`, `evals/statistics/circular.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.reporting.plots import collapsed_on, task_label
from evals.reporting.report_text import cell
from evals.reporting.task_columns import CIRCULAR_COLUMNS
from kqe.core.schemes import BASE_SCHEME

TITLE = "Letter preference"
CIRCULAR_TITLE = "CircularEval"


def _base_choice(rows: Sequence[LeaderboardRow], prefix: str) -> str:
    """`(bf16's most frequent choice: D, on 76% of items)`, empty where the base's is unknown."""
    base = next((r for r in rows if r.scheme == BASE_SCHEME), None)
    share = getattr(base, f"{prefix}_top_choice_share") if base else None
    if base is None or share is None:
        return ""
    top = getattr(base, f"{prefix}_top_choice")
    return f" ({base.checkpoint}'s most frequent choice: {top}, on {share:.0%})"


def collapse_notes(rows: Sequence[LeaderboardRow]) -> list[str]:
    """One paragraph per task and collapse, for the top of the report; empty where none collapsed."""
    notes = []
    for prefix in scored_tasks(rows):
        groups: dict[str, list[str]] = {}
        for row in rows:
            if (found := collapsed_on(row, prefix)) is not None:
                groups.setdefault(found, []).append(row.checkpoint)
        for what, names in groups.items():
            notes.append(
                f"**Answer collapse on {task_label(rows, prefix)}**: {', '.join(names)} "
                f"{'picks' if len(names) == 1 else 'each pick'} {what.removeprefix('picks ')}"
                f"{_base_choice(rows, prefix)}. Their accuracy there is that letter's share of the gold "
                "answers and their Δ letter preference, not quality: read the debiased accuracy below; "
                "`kqe choose` does not pick them for this task."
            )
    return [line for note in notes for line in (note, "")]


def _delta_cell(row: LeaderboardRow, prefix: str, stem: str) -> str:
    """`<prefix>_<stem>_delta` with its CI in points, `(base)` on the base row, `—` where absent."""
    delta, low, high = (getattr(row, f"{prefix}_{stem}_{end}") for end in ("delta", "ci_low", "ci_high"))
    if row.scheme == BASE_SCHEME:
        return "(base)"
    if delta is None or low is None or high is None:
        return "—"
    return f"{100 * delta:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def debiased_section(rows: Sequence[LeaderboardRow]) -> list[str]:
    """Per checkpoint and task: the top choice and its share, accuracy as scored and debiased, and the
    debiased Δ against the base with its 95% CI; empty where no row has them (boards before them)."""
    tasks = [p for p in scored_tasks(rows) if any(getattr(r, f"{p}_acc_debiased") is not None for r in rows)]
    if not tasks:
        return []
    lines = [
        "Which choice each checkpoint puts its highest log-prob on most often, and its accuracy once its "
        "letter prior (its mean log-prob per choice position over the task, cross-fitted over subject "
        "folds so an item never corrects itself) is subtracted before the argmax (Zheng et al. 2024). A Δ "
        "that the debiased Δ does not keep was letter preference.",
        "",
        "| checkpoint | task | top choice (share) | acc | debiased acc | debiased Δ [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for prefix in tasks:
        label = task_label(rows, prefix)
        for r in rows:
            share, top = getattr(r, f"{prefix}_top_choice_share"), getattr(r, f"{prefix}_top_choice")
            choice = "—" if share is None else f"{top} ({share:.0%})"
            acc, debiased = getattr(r, f"{prefix}_acc"), getattr(r, f"{prefix}_acc_debiased")
            lines.append(
                f"| {r.checkpoint} | {label} | {choice} | {cell(acc, '.1%')} | {cell(debiased, '.1%')} | "
                f"{_delta_cell(r, prefix, 'acc_debiased')} |"
            )
    return lines


def circular_section(rows: Sequence[LeaderboardRow]) -> list[str]:
    """Per checkpoint and task: accuracy as scored and CircularEval accuracy on the `--circular` items,
    and the circular Δ against the base with its 95% CI; empty where the run did not ask for it."""
    tasks = [
        p
        for p in scored_tasks(rows)
        if f"{p}_acc_circular" in CIRCULAR_COLUMNS  # registry tasks only: lm-eval tasks are not rotated
        and any(getattr(r, f"{p}_acc_circular") is not None for r in rows)
    ]
    if not tasks:
        return []
    lines = [
        "CircularEval (Liu et al. 2023, MMBench): each of N seeded items (the same for every checkpoint) is "
        "asked again in every cyclic rotation of its options, the gold answer moving with its option, and "
        "counts right only if it is right in all of them. A preference for a letter cannot score: it removes "
        "the letter prior by construction, where the debiased accuracy above estimates and subtracts it. "
        "Chance is 1/k^k for k options (0.4% for 4), so near-chance models score about 0.",
        "",
        "| checkpoint | task | items | acc as scored | circular acc | circular Δ [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for prefix in tasks:
        label = task_label(rows, prefix)
        for r in rows:
            plain, circular = getattr(r, f"{prefix}_acc_circular_plain"), getattr(r, f"{prefix}_acc_circular")
            lines.append(
                f"| {r.checkpoint} | {label} | {cell(getattr(r, f'{prefix}_circular_items'), 'd')} | "
                f"{cell(plain, '.1%')} | {cell(circular, '.1%')} | {_delta_cell(r, prefix, 'acc_circular')} |"
            )
    return lines
