"""Scores of generated Korean answers, and the ko_rag leaderboard cells per context length.

An answer is normalised to its Kiwi morphemes without particles, endings, copula and punctuation
(`korean.answer_morphemes`), so "5년입니다." matches "5년" exactly and "국민에게" shares "국민"
with "국민". Exact match (EM) compares those sequences; F1 is the SQuAD-style overlap of the two bags
of morphemes. Against several accepted answers the best one counts. A question the documents do not
answer is right (EM = F1 = 1) exactly when the answer abstains, i.e. contains the stem of the ABSTAIN
phrase the instruction asks for ("답할 수 없", spacing ignored: "답할 수 없음", "답할 수 없습니다");
an answerable question answered so scores 0.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evals.statistics.stats import BOOTSTRAP_RESAMPLES, SEED, percentile_ci
from evals.tasks.ko_rag.context import ABSTAIN
from evals.tasks.ko_rag.korean import answer_morphemes, hangul_share
from evals.tasks.ko_rag.task import LENGTHS, MC_TASK, TASK
from kqe.core.results import ItemResult

_SPACE = re.compile(r"\s+")
ABSTAIN_STEM = _SPACE.sub("", ABSTAIN)[:-1]
"""ABSTAIN without spaces and its last syllable, so any ending of "답할 수 없-" counts."""


@dataclass(frozen=True)
class AnswerScore:
    """How one generated answer scored."""

    exact: bool
    f1: float
    hangul_share: float | None
    """Share of Hangul among the answer's letters; None when it has no letters."""
    abstained: bool


def abstains(text: str) -> bool:
    """Whether an answer says it cannot answer (ABSTAIN_STEM, spacing ignored)."""
    return ABSTAIN_STEM in _SPACE.sub("", text)


def token_f1(prediction: list[str], reference: list[str]) -> float:
    """Overlap F1 of two bags of morphemes (0 when either is empty)."""
    common = sum((Counter(prediction) & Counter(reference)).values())
    if not prediction or not reference or common == 0:
        return 0.0
    precision, recall = common / len(prediction), common / len(reference)
    return 2 * precision * recall / (precision + recall)


def score_answer(text: str, answers: Sequence[str], answerable: bool) -> AnswerScore:
    """EM, F1 and Hangul share of a generated answer (stripped) against the accepted answers."""
    answer = text.strip()
    abstained = abstains(answer)
    share = hangul_share(answer)
    if not answerable:
        return AnswerScore(abstained, float(abstained), share, abstained)
    if abstained:
        return AnswerScore(False, 0.0, share, True)
    predicted = answer_morphemes(answer)
    references = [answer_morphemes(reference) for reference in answers]
    exact = any(predicted and predicted == reference for reference in references)
    f1 = max(token_f1(predicted, reference) for reference in references)
    return AnswerScore(exact, f1, share, False)


def length_of(item_id: str) -> str:
    """The sweep label an item id ends with (`ko_rag/num-001/1k` -> `1k`)."""
    return item_id.rsplit("/", 1)[-1]


def paired_mean_ci(
    differences: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """95% percentile bootstrap CI of the mean of paired differences (questions resampled)."""
    rng = np.random.default_rng([seed, len(differences)])
    means = []
    block = max(1, 2_000_000 // max(1, len(differences)))  # bounds each draw to ~16 MB
    for start in range(0, resamples, block):
        picks = rng.integers(0, len(differences), size=(min(block, resamples - start), len(differences)))
        means.append(differences[picks].mean(axis=1))
    return percentile_ci(np.concatenate(means))


def _by_length(items: Sequence[ItemResult]) -> dict[str, dict[str, ItemResult]]:
    grouped: dict[str, dict[str, ItemResult]] = defaultdict(dict)
    for item in items:
        grouped[length_of(item.item_id)][item.item_id] = item
    return grouped


def leaderboard_cells(
    items: Sequence[ItemResult],
    base_items: Sequence[ItemResult] | None,
    choice_items: Sequence[ItemResult],
    skipped: dict[str, str],
) -> dict[str, float | str | None]:
    """The `ko_rag_*` leaderboard cells of one checkpoint: F1, EM and (against the base, on the same
    items) ΔF1 with a paired bootstrap 95% CI per length; Hangul share, abstention on unanswerable
    questions and multiple-choice accuracy over all scored lengths; the lengths skipped and why."""
    cells: dict[str, float | str | None] = {}
    ours, theirs = _by_length(items), _by_length(base_items or [])
    for label in LENGTHS:
        scored = ours.get(label, {})
        f1 = np.array([item.f1 or 0.0 for item in scored.values()])
        cells[f"ko_rag_f1_{label}"] = float(f1.mean()) if len(f1) else None
        cells[f"ko_rag_em_{label}"] = float(np.mean([i.correct for i in scored.values()])) if scored else None
        base = theirs.get(label, {})
        if scored and base_items is not None and set(base) == set(scored):
            differences = np.array([(scored[k].f1 or 0.0) - (base[k].f1 or 0.0) for k in sorted(scored)])
            low, high = paired_mean_ci(differences)
            cells |= {f"ko_rag_f1_delta_{label}": float(differences.mean())}
            cells |= {f"ko_rag_f1_ci_low_{label}": low, f"ko_rag_f1_ci_high_{label}": high}
    shares = [item.hangul_share for item in items if item.hangul_share is not None]
    cells["ko_rag_hangul"] = float(np.mean(shares)) if shares else None
    unanswerable = [item for item in items if item.reference == ABSTAIN]
    cells["ko_rag_abstain"] = float(np.mean([i.correct for i in unanswerable])) if unanswerable else None
    cells["ko_rag_mc_acc"] = float(np.mean([i.correct for i in choice_items])) if choice_items else None
    cells["ko_rag_skipped"] = "; ".join(f"{label}: {why}" for label, why in skipped.items()) or None
    return cells


def checkpoint_cells(
    items: Mapping[str, Sequence[ItemResult]],
    base_items: Mapping[str, Sequence[ItemResult]] | None,
    skipped: dict[str, str],
) -> dict[str, float | str | None]:
    """`leaderboard_cells` from a checkpoint's items by task (`base_items` None on the base row)."""
    base = None if base_items is None else base_items.get(TASK, [])
    return leaderboard_cells(items.get(TASK, []), base, items.get(MC_TASK, []), skipped)
