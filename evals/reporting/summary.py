"""The answer on the terminal at the end of `kqe eval`: one compact line per checkpoint.

The leaderboard and the report hold everything; this is what a user reads before opening them:
the quality change per task (ko_rag: answer F1 at its longest context) with its CI and verdict, how
often a generative task's outputs stay the base's (its first, where several), the Korean perplexity
change, and what the checkpoint takes and buys in memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from evals.reporting.generation_report import generated_prefixes, share_ci
from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.reporting.rag_report import retrieved_delta, scored_lengths
from evals.reporting.report_text import cell, delta_ci
from kqe.core.schemes import BASE_SCHEME
from kqe.core.text import printable

HELP_PAGES = "ppl_lo_ko"


def summary_table(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The rows as an aligned plain-text table (Δ and CI in accuracy points)."""
    tasks = scored_tasks(rows)
    first = next(iter(tasks), None)  # the verdict shown is the first task's (Korean first, by registry order)
    rag_length = next(reversed(scored_lengths(rows)), None)  # ko_rag at its longest scored context
    generated = generated_prefixes(rows)[:1]  # one column: the table ends `make eval`, keep it narrow
    head = ["checkpoint", *(f"{label} Δ [95% CI]" for label in tasks.values())]
    head += [f"ko_rag F1 Δ {rag_length} [95% CI]"] if rag_length else []
    head += [f"{prefix} same as base [95% CI]" for prefix in generated]
    head += [f"{tasks[first]} verdict"] if first else []
    ppl = korean_perplexity(rows)
    head += [f"KO ppl Δ{' help pages' if ppl == HELP_PAGES else ''} [95% CI]", "weights GiB", "max conc."]
    table = [head] + [_cells(row, list(tasks), first, rag_length, generated, ppl) for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(head))]
    aligned = (
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)) for line in table
    )
    return [line.rstrip() for line in aligned]


def korean_perplexity(rows: Sequence[LeaderboardRow]) -> str:
    """The Korean perplexity set the table shows: the help pages (over a hundred pages as clusters)
    where the run measured them, else the `ko` documents."""
    return HELP_PAGES if any(row.ppl_lo_ko_delta_pct is not None for row in rows) else "ppl_ko"


def _cells(
    row: LeaderboardRow,
    prefixes: list[str],
    first: str | None,
    rag_length: str | None,
    generated: list[str],
    ppl_set: str,
) -> list[str]:
    rag = [rag_length] if rag_length else []
    if row.status != "ok":  # the reason in the last quality column (none: in the perplexity one)
        reason = printable(row.status)[:70]
        quality = len(prefixes) + len(rag) + len(generated) + (first is not None)
        if not quality:
            return [row.checkpoint, reason, cell(row.weights_gib, ".2f"), "—"]
        return [row.checkpoint, *["—"] * (quality - 1), reason, "—", cell(row.weights_gib, ".2f"), "—"]
    base = row.scheme == BASE_SCHEME
    deltas = ["(base)" if base else delta_ci(row, prefix) for prefix in prefixes]
    deltas += ["(base)" if base else retrieved_delta(row, length) for length in rag]
    deltas += ["(base)" if base else share_ci(row, f"{prefix}_same_as_base") for prefix in generated]
    verdict = [] if first is None else ["" if base else getattr(row, f"{first}_verdict") or "—"]
    change, low, high = (getattr(row, f"{ppl_set}_delta_pct{end}") for end in ("", "_ci_low", "_ci_high"))
    ppl = "—" if change is None else f"{change:+.1f}%"
    if low is not None and high is not None:
        ppl += f" [{low:+.1f}, {high:+.1f}]"
    return [
        printable(row.checkpoint),
        *deltas,
        *(v.split(" (")[0] for v in verdict),
        ppl,
        cell(row.weights_gib, ".2f"),
        cell(row.max_concurrency, ".1f"),
    ]
