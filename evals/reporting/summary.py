"""The answer on the terminal at the end of `kqe eval`: one compact line per checkpoint.

The leaderboard and the report hold everything; this is what a user reads before opening them:
the quality change per task with its CI and verdict, the Korean perplexity change, and what the
checkpoint takes and buys in memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from evals.planning.decide import BASE_SCHEME
from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.reporting.report_text import cell, delta_ci
from kqe.core.text import printable


def summary_table(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The rows as an aligned plain-text table (Δ and CI in accuracy points)."""
    tasks = scored_tasks(rows)
    first = next(iter(tasks), None)  # the verdict shown is the first task's (Korean first, by registry order)
    head = ["checkpoint", *(f"{label} Δ [95% CI]" for label in tasks.values())]
    head += [
        f"{tasks[first]} verdict" if first else "verdict",
        "KO ppl Δ [95% CI]",
        "weights GiB",
        "max conc.",
    ]
    table = [head] + [_cells(row, list(tasks), first) for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(head))]
    aligned = (
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)) for line in table
    )
    return [line.rstrip() for line in aligned]


def _cells(row: LeaderboardRow, prefixes: list[str], first: str | None) -> list[str]:
    if row.status != "ok":
        reason = printable(row.status)
        return [row.checkpoint, *("—" for _ in prefixes), reason[:70], "—", cell(row.weights_gib, ".2f"), "—"]
    deltas = ["(base)" if row.scheme == BASE_SCHEME else delta_ci(row, prefix) for prefix in prefixes]
    verdict = "" if row.scheme == BASE_SCHEME or first is None else getattr(row, f"{first}_verdict") or "—"
    ppl = "—" if row.ppl_ko_delta_pct is None else f"{row.ppl_ko_delta_pct:+.1f}%"
    if row.ppl_ko_delta_pct_ci_low is not None and row.ppl_ko_delta_pct_ci_high is not None:
        ppl += f" [{row.ppl_ko_delta_pct_ci_low:+.1f}, {row.ppl_ko_delta_pct_ci_high:+.1f}]"
    return [
        printable(row.checkpoint), *deltas, verdict.split(" (")[0], ppl, cell(row.weights_gib, ".2f"),
        cell(row.max_concurrency, ".1f"),
    ]  # fmt: skip
