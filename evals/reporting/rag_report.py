"""The report's ko_rag section, from leaderboard rows: answer F1 per condition and context length (on a
quantized row, ΔF1 against the base with its CI over gold passages), the closed-book control with the
open-book gain, then retrieval recall, abstention and multiple choice."""

from __future__ import annotations

from collections.abc import Sequence

from evals.reporting.leaderboard_row import LeaderboardRow
from evals.reporting.rag_columns import CONDITION_TEXT, READING, column_prefix
from evals.reporting.report_text import cell
from evals.tasks.ko_rag.sweep import open_book_labels
from kqe.core.defaults import RAG_CONDITIONS, RAG_LENGTHS
from kqe.core.schemes import BASE_SCHEME

HOW_TO_READ = (
    "F1 is ko_rag's number-exact answer F1 on answerable questions, in points (a wrong digit or unit "
    "scores 0 on its span). On a quantized row, Δ is its F1 minus the base's on the same prompts, with a "
    "95% paired bootstrap CI that resamples whole gold passages (their questions are not independent)."
)


def _value(row: LeaderboardRow, column: str) -> float | None:
    value = getattr(row, column, None)
    return value if isinstance(value, float | int) else None


def _points(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f}"


def percent(value: float | None) -> float | None:
    """A fraction in points (percent), None kept."""
    return None if value is None else 100 * value


def _with_ci(row: LeaderboardRow, estimate: str, low: str, high: str) -> str | None:
    """`-1.4 [-5.0, +2.0]` in points from the row's three columns; None where it has no estimate."""
    value = _value(row, estimate)
    if value is None:
        return None
    return f"{_points(value)} [{_points(_value(row, low))}, {_points(_value(row, high))}]"


def _estimate(row: LeaderboardRow, prefix: str, length: str) -> str:
    """`41.2` on the base; `39.8, Δ -1.4 [-5.0, +2.0]` where the row has a Δ."""
    value = _value(row, f"{prefix}_f1_{length}")
    if value is None:
        return "—"
    delta = _with_ci(row, *(f"{prefix}_f1_{part}_{length}" for part in ("delta", "ci_low", "ci_high")))
    return f"{100 * value:.1f}" + (f", Δ {delta}" if delta else "")


def _condition_table(rows: Sequence[LeaderboardRow], lengths: list[str]) -> list[str]:
    lines = [f"| checkpoint | context | {' | '.join(lengths)} |", "|---|---" + "|---" * len(lengths) + "|"]
    for label in open_book_labels(RAG_CONDITIONS):
        prefix = column_prefix(label)
        if not any(_value(r, f"{prefix}_f1_{length}") is not None for r in rows for length in lengths):
            continue
        for row in rows:
            cells = [_estimate(row, prefix, length) for length in lengths]
            lines.append(f"| {row.checkpoint} | {CONDITION_TEXT[label]} | {' | '.join(cells)} |")
    return lines


def _figure(row: LeaderboardRow, prefix: str, metric: str, length: str) -> str:
    """`41.2` or `39.8 (Δ -1.4 [-5.0, +2.0])` in points for one metric of one column group."""
    value = _value(row, f"{prefix}_{metric}_{length}")
    if value is None:
        return "—"
    delta = _with_ci(row, *(f"{prefix}_{metric}_{part}_{length}" for part in ("delta", "ci_low", "ci_high")))
    return f"{100 * value:.1f}" + (f" (Δ {delta})" if delta else "")


def _headline_table(rows: Sequence[LeaderboardRow], lengths: list[str]) -> list[str]:
    """The reading headline: retrieved-condition F1 and contains over the questions the base did not
    answer closed-book, beside the same over all answerable questions."""
    lengths = [n for n in lengths if any(_value(r, f"{READING}_f1_{n}") is not None for r in rows)]
    if not lengths:
        return []
    lines = [
        "Headline (reading): retrieved-condition F1 and contains over the answerable questions the base "
        "did not answer exactly closed-book, beside all answerable questions; contains does not depend "
        "on how long the answer is.",
        "",
        "| checkpoint | context | items | F1 | contains | F1, all items | contains, all items |",
        "|---|---|---|---|---|---|---|",
    ]
    for length in lengths:
        for row in rows:
            n = _value(row, f"{READING}_n_{length}")
            figures = [_figure(row, READING, "f1", length), _figure(row, READING, "contains", length)]
            figures += [_figure(row, "ko_rag", "f1", length), _figure(row, "ko_rag", "contains", length)]
            count = "—" if n is None else f"{int(n)}"
            lines.append(f"| {row.checkpoint} | {length} | {count} | {' | '.join(figures)} |")
    return ["", *lines]


def _closed_book_table(rows: Sequence[LeaderboardRow], lengths: list[str]) -> list[str]:
    if all(r.ko_rag_closed_book_f1 is None for r in rows):
        return []
    lines = [
        "Closed-book (no documents) and the open-book gain (retrieved F1 minus closed-book F1, same "
        "questions, with its CI; on a quantized row, Δ of that gain against the base's):",
        "",
        f"| checkpoint | closed-book F1 | closed-book EM | {' | '.join(f'gain {n}' for n in lengths)} |",
        "|---|---|---" + "|---" * len(lengths) + "|",
    ]
    for row in rows:
        gains = [_gain(row, length) for length in lengths]
        lines.append(
            f"| {row.checkpoint} | {cell(percent(row.ko_rag_closed_book_f1), '.1f')} | "
            f"{cell(percent(row.ko_rag_closed_book_em), '.1f')} | {' | '.join(gains)} |"
        )
    return ["", *lines]


def _gain(row: LeaderboardRow, length: str) -> str:
    """The open-book gain with its CI, and its Δ against the base's where the row has one."""
    gain = _with_ci(row, *(f"ko_rag_gain_{part}{length}" for part in ("", "ci_low_", "ci_high_")))
    delta = _with_ci(row, *(f"ko_rag_gain_delta_{part}{length}" for part in ("", "ci_low_", "ci_high_")))
    return (gain or "—") + (f"; Δ {delta}" if delta else "")


def _behaviour_table(rows: Sequence[LeaderboardRow]) -> list[str]:
    lines = [
        "| checkpoint | multiple choice acc | abstains on unanswerable | abstentions that were right | "
        "Hangul share of answers |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        shares = (row.ko_rag_mc_acc, row.ko_rag_abstain, row.ko_rag_abstain_precision, row.ko_rag_hangul)
        lines.append(f"| {row.checkpoint} | " + " | ".join(cell(v, ".1%") for v in shares) + " |")
    return lines


def scored_lengths(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The context lengths at which some row has a retrieved-condition ko_rag F1, shortest first."""
    return [n for n in RAG_LENGTHS if any(_value(r, f"ko_rag_f1_{n}") is not None for r in rows)]


def retrieved_delta(row: LeaderboardRow, length: str) -> str:
    """ΔF1 against the base at `length` with its CI in points (`—` where the row has none)."""
    parts = (f"ko_rag_f1_{part}_{length}" for part in ("delta", "ci_low", "ci_high"))
    return _with_ci(row, *parts) or "—"


def rag_section(rows: Sequence[LeaderboardRow]) -> list[str]:
    """Markdown lines; none when no row scored ko_rag."""
    lengths = scored_lengths(rows)
    if not lengths:
        return []
    base = next((r for r in rows if r.scheme == BASE_SCHEME), rows[0])
    recall = ", ".join(f"{n} {cell(_value(base, f'ko_rag_recall_{n}'), '.1%')}" for n in lengths)
    skipped = [f"Not scored: {base.ko_rag_skipped}."] if base.ko_rag_skipped else []
    return [
        HOW_TO_READ,
        "",
        *_condition_table(rows, lengths),
        *_headline_table(rows, lengths),
        *_closed_book_table(rows, lengths),
        "",
        f"Retrieval recall (every gold passage in the retrieved prompt, answerable questions): {recall}.",
        *skipped,
        "",
        *_behaviour_table(rows),
    ]
