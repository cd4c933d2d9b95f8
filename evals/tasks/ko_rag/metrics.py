"""ko_rag's per-item metrics: scored items grouped by condition and context length, an answer's F1, the
per-question open-book gain over closed-book, and the closed-book flag of each open-book item
(`answer_score.py` scores each answer; `evals/statistics/rag_findings.py` turns these into a
checkpoint's findings with paired CIs)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from evals.tasks.ko_rag.sweep import CLOSED_BOOK, RETRIEVED, coordinates, question_of
from kqe.core.results import ItemResult

Grouped = dict[tuple[str, str | None], dict[str, ItemResult]]
"""(condition label, length label or None) -> item id -> result."""


def by_coordinates(items: Sequence[ItemResult]) -> Grouped:
    grouped: Grouped = defaultdict(dict)
    for item in items:
        grouped[coordinates(item.item_id)][item.item_id] = item
    return grouped


def answer_f1(item: ItemResult) -> float:
    return item.f1 or 0.0


def open_book_gains(grouped: Grouped, length: str) -> tuple[dict[str, float], dict[str, str]]:
    """Question -> retrieved F1 at `length` minus closed-book F1 (answerable questions scored in both),
    and each question's cluster."""
    closed = {question_of(key): answer_f1(item) for key, item in grouped.get((CLOSED_BOOK, None), {}).items()}
    gains, clusters = {}, {}
    for key, item in grouped.get((RETRIEVED, length), {}).items():
        question = question_of(key)
        if question in closed:
            gains[question], clusters[question] = answer_f1(item) - closed[question], item.subject
    return gains, clusters


def closed_book_flags(results: Sequence[ItemResult]) -> list[ItemResult]:
    """`results` with each open-book item's `closed_book` set: whether the same checkpoint answered its
    question exactly without documents (left None where no closed-book item of it was scored)."""
    answered = {
        question_of(r.item_id): r.correct for r in results if coordinates(r.item_id)[0] == CLOSED_BOOK
    }
    flagged = []
    for result in results:
        question = question_of(result.item_id)
        if coordinates(result.item_id)[0] != CLOSED_BOOK and question in answered:
            result = result.model_copy(update={"closed_book": answered[question]})
        flagged.append(result)
    return flagged
