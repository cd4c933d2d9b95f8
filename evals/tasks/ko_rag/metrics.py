"""Scores of generated Korean answers, and the ko_rag leaderboard cells per context length.

An answer is normalised by `normalise.normalise`: numbers with their units, dates, fractions and
command-line options become exact spans (both date spellings and Korean number words rewritten to one
form), the rest Kiwi morphemes without particles, endings, copula and punctuation, so "5년입니다."
matches "5년" exactly and "국민에게" shares "국민" with "국민". Against one accepted answer:

- a prediction that lacks any of the reference's exact spans scores 0 (EM, F1 and character F1):
  "5년" for "4년", "--remove" for "--purge", "제63조" for "제71조" get no credit for the shared rest;
- EM: the same list items, in any order ("국회의장과 대법원장" = "대법원장, 국회의장");
- F1: SQuAD-style overlap of the two bags of tokens; character F1 the same over their characters
  (a secondary score that forgives Kiwi cutting one word two ways).

Against several accepted answers the best one counts. Abstention is `abstention.abstains`; an
answerable question answered so scores 0, and an unanswerable one is right (EM = F1 = 1) exactly when
the answer abstains. `RagTotals` reports answerable F1/EM apart from abstention precision and recall.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evals.statistics.stats import BOOTSTRAP_RESAMPLES, SEED, percentile_ci
from evals.tasks.ko_rag.abstention import abstains
from evals.tasks.ko_rag.context import ABSTAIN
from evals.tasks.ko_rag.korean import hangul_share
from evals.tasks.ko_rag.normalise import Normalised, normalise
from evals.tasks.ko_rag.task import LENGTHS, MC_TASK, TASK
from kqe.core.results import ItemResult


@dataclass(frozen=True)
class AnswerScore:
    """How one generated answer scored."""

    exact: bool
    f1: float
    char_f1: float
    """F1 over the characters of the normalised tokens (secondary score)."""
    hangul_share: float | None
    """Share of Hangul among the answer's letters; None when it has no letters."""
    abstained: bool


def token_f1(prediction: Sequence[str], reference: Sequence[str]) -> float:
    """Overlap F1 of two bags of tokens (0 when either is empty)."""
    common = sum((Counter(prediction) & Counter(reference)).values())
    if not prediction or not reference or common == 0:
        return 0.0
    precision, recall = common / len(prediction), common / len(reference)
    return 2 * precision * recall / (precision + recall)


def _against(predicted: Normalised, reference: Normalised) -> tuple[bool, float, float]:
    """(EM, F1, character F1) of one prediction against one accepted answer."""
    if not Counter(reference.exact) <= Counter(predicted.exact):
        return False, 0.0, 0.0
    exact = bool(predicted.items) and sorted(predicted.items) == sorted(reference.items)
    chars = token_f1(list("".join(predicted.tokens)), list("".join(reference.tokens)))
    return exact, token_f1(predicted.tokens, reference.tokens), chars


def score_answer(text: str, answers: Sequence[str], answerable: bool) -> AnswerScore:
    """EM, F1, character F1 and Hangul share of a generated answer (stripped) against the accepted
    answers."""
    answer = text.strip()
    abstained = abstains(answer)
    share = hangul_share(answer)
    if not answerable:
        return AnswerScore(abstained, float(abstained), float(abstained), share, abstained)
    if abstained:
        return AnswerScore(False, 0.0, 0.0, share, True)
    predicted = normalise(answer)
    scores = [_against(predicted, normalise(reference)) for reference in answers]
    return AnswerScore(
        any(score[0] for score in scores), max(s[1] for s in scores), max(s[2] for s in scores), share, False
    )


@dataclass(frozen=True)
class RagTotals:
    """Totals over scored answers: answerable questions apart from abstention."""

    answerable: int
    em: float | None
    """Exact-match share over answerable questions; None without any."""
    f1: float | None
    char_f1: float | None
    unanswerable: int
    abstained: int
    """Answers that abstained, on any question."""
    abstain_precision: float | None
    """Share of the abstentions that were on unanswerable questions; None when none abstained."""
    abstain_recall: float | None
    """Share of the unanswerable questions the answer abstained on; None without any."""


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def totals(scored: Sequence[tuple[AnswerScore, bool]]) -> RagTotals:
    """`RagTotals` of (score, answerable) pairs."""
    answered = [score for score, answerable in scored if answerable]
    unanswerable = [score for score, answerable in scored if not answerable]
    abstained = [answerable for score, answerable in scored if score.abstained]
    return RagTotals(
        answerable=len(answered),
        em=_mean([float(s.exact) for s in answered]),
        f1=_mean([s.f1 for s in answered]),
        char_f1=_mean([s.char_f1 for s in answered]),
        unanswerable=len(unanswerable),
        abstained=len(abstained),
        abstain_precision=_mean([float(not answerable) for answerable in abstained]),
        abstain_recall=_mean([float(s.abstained) for s in unanswerable]),
    )


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
    items) ΔF1 with a paired bootstrap 95% CI per length, over answerable questions only; Hangul
    share, abstention on unanswerable questions and multiple-choice accuracy over all scored
    lengths; the lengths skipped and why."""
    cells: dict[str, float | str | None] = {}
    ours = _by_length([item for item in items if item.reference != ABSTAIN])
    theirs = _by_length([item for item in base_items or [] if item.reference != ABSTAIN])
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
    unanswerable = [item for item in items if item.reference == ABSTAIN]  # `correct`: it abstained
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
