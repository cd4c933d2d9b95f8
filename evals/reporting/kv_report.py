"""The report's KV-cache section (`--kv-cache-dtypes`): each row served with a non-auto KV dtype beside
the same weights at auto, on the same items, and ko_rag's answer F1 per context length side by side."""

from __future__ import annotations

from collections.abc import Sequence

from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.reporting.p_values import format_p
from kqe.core.defaults import RAG_LENGTHS

TITLE = "KV-cache precision"


def _effect(row: LeaderboardRow, prefix: str) -> str:
    effect = getattr(row, f"{prefix}_kv_effect")
    if effect is None:
        return "–"
    low, high = (getattr(row, f"{prefix}_kv_effect_ci_{end}") for end in ("low", "high"))
    p = format_p(getattr(row, f"{prefix}_kv_effect_p"), "p")
    return f"{100 * effect:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] {p}"


def _tokens(row: LeaderboardRow, auto: LeaderboardRow | None) -> str:
    if row.kv_cache_tokens is None:
        return "–"
    ratio = auto.kv_cache_tokens if auto and auto.kv_cache_tokens else None
    return f"{row.kv_cache_tokens:,}" + (f" ({row.kv_cache_tokens / ratio:.2f}×)" if ratio else "")


def _per_length(paired: list[tuple[LeaderboardRow, LeaderboardRow | None]]) -> list[str]:
    """ko_rag's retrieved-condition answer F1 per scored length: the auto row's, then the KV row's."""
    lengths = [n for n in RAG_LENGTHS if any(getattr(r, f"ko_rag_f1_{n}") is not None for r, _ in paired)]
    if not lengths:
        return []
    lines = [
        "",
        "ko_rag answer F1 (retrieved passages) per context length, the same weights at auto → this row:",
        "",
        "| row | " + " | ".join(lengths) + " |",
        "|---" * (1 + len(lengths)) + "|",
    ]
    for row, auto in paired:
        cells = []
        for n in lengths:
            mine, theirs = getattr(row, f"ko_rag_f1_{n}"), getattr(auto, f"ko_rag_f1_{n}") if auto else None
            cells.append(
                "–" if mine is None else f"{theirs:.3f} → {mine:.3f}" if theirs is not None else f"{mine:.3f}"
            )
        lines.append(f"| {row.checkpoint} | " + " | ".join(cells) + " |")
    return lines


def kv_section(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The section's lines; empty when no row was served with a non-auto KV dtype."""
    by_name = {row.checkpoint: row for row in rows}
    paired = [(row, by_name.get(row.kv_effect_vs)) for row in rows if row.kv_effect_vs]
    if not paired:
        return []
    tasks = scored_tasks(rows)
    lines = [
        "Each row served with another KV-cache dtype minus the same weights at auto, same items, points "
        "[95% CI] and exact McNemar p; KV tokens as vLLM counted them in the same pool:",
        "",
        "| row | KV dtype | vs | "
        + " | ".join(f"{label} KV effect" for label in tasks.values())
        + " | KV tokens |",
        "|---" * (4 + len(tasks)) + "|",
    ]
    for row, auto in paired:
        effects = " | ".join(_effect(row, prefix) for prefix in tasks)
        named = f"| {row.checkpoint} | {row.kv_cache_dtype} | {row.kv_effect_vs} |"
        lines.append(f"{named} {effects} | {_tokens(row, auto)} |")
    return lines + _per_length(paired)
