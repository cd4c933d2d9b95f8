"""Scores of generated Korean answers (EM, F1, character F1, contains, abstention) and their totals.

An answer is normalised by `normalise.normalise`: numbers with their units, dates, fractions and
command-line options become exact spans (both date spellings and Korean number words rewritten to one
form), the rest Kiwi morphemes without particles, endings, copula and punctuation, so "5년입니다."
matches "5년" exactly and "국민에게" shares "국민" with "국민". Against one accepted answer:

- a prediction that lacks any of the reference's exact spans scores 0 (EM, F1 and character F1):
  "5년" for "4년", "--remove" for "--purge", "제63조" for "제71조", "debian-faq" for "debian-faq-de"
  get no credit for the shared rest; so does one that contradicts it (`conflicts.contradicts`: a
  contrary word, a negation, another command word);
- EM: the same list items, in any order ("국회의장과 대법원장" = "대법원장, 국회의장");
- F1: SQuAD-style overlap of the two bags of tokens; character F1 the same over their characters
  (a secondary score that forgives Kiwi cutting one word two ways);
- contains: the prediction holds every token and exact span of the reference, does not contradict
  it, names no second value of the same kind and is no list of candidates (`conflicts`): "대한민국은
  한반도와 그 부속도서로 한다." contains "한반도와 그 부속도서" (F1 0.8), "5년 또는 4년" does not
  contain "5년". It does not depend on how much else the answer says: the verbosity-robust headline.

Against several accepted answers the best one counts. Abstention is `abstention.abstains`; an
answerable question answered so scores 0, and an unanswerable one is right (EM = F1 = 1) exactly when
the answer abstains. `RagTotals` reports answerable F1/EM apart from abstention precision and recall.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evals.tasks.ko_rag.abstention import abstains
from evals.tasks.ko_rag.conflicts import conflicting_spans, contradicts, lists_candidates
from evals.tasks.ko_rag.korean import hangul_share
from evals.tasks.ko_rag.normalise import Normalised, normalise


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
    contains: bool
    """Whether the answer holds an accepted answer and no conflicting candidate (module docstring);
    on an unanswerable question, whether it abstained."""


def token_f1(prediction: Sequence[str], reference: Sequence[str]) -> float:
    """Overlap F1 of two bags of tokens (0 when either is empty)."""
    common = sum((Counter(prediction) & Counter(reference)).values())
    if not prediction or not reference or common == 0:
        return 0.0
    precision, recall = common / len(prediction), common / len(reference)
    return 2 * precision * recall / (precision + recall)


def _against(predicted: Normalised, reference: Normalised) -> tuple[bool, float, float, bool]:
    """(EM, F1, character F1, contains) of one prediction against one accepted answer."""
    if not Counter(reference.exact) <= Counter(predicted.exact) or contradicts(predicted, reference):
        return False, 0.0, 0.0, False
    exact = bool(predicted.items) and sorted(predicted.items) == sorted(reference.items)
    chars = token_f1(list("".join(predicted.tokens)), list("".join(reference.tokens)))
    holds = bool(reference.tokens) and set(reference.tokens) <= set(predicted.tokens)
    contains = (
        holds and not conflicting_spans(predicted, reference) and not lists_candidates(predicted, reference)
    )
    return exact, token_f1(predicted.tokens, reference.tokens), chars, contains


def score_answer(text: str, answers: Sequence[str], answerable: bool) -> AnswerScore:
    """EM, F1, character F1, contains and Hangul share of a generated answer (stripped) against the
    accepted answers."""
    answer = text.strip()
    abstained = abstains(answer)
    share = hangul_share(answer)
    if not answerable:
        return AnswerScore(abstained, float(abstained), float(abstained), share, abstained, abstained)
    if abstained:
        return AnswerScore(False, 0.0, 0.0, share, True, False)
    predicted = normalise(answer)
    scores = [_against(predicted, normalise(reference)) for reference in answers]
    return AnswerScore(
        exact=any(score[0] for score in scores),
        f1=max(score[1] for score in scores),
        char_f1=max(score[2] for score in scores),
        hangul_share=share,
        abstained=False,
        contains=any(score[3] for score in scores),
    )


@dataclass(frozen=True)
class RagTotals:
    """Totals over scored answers: answerable questions apart from abstention."""

    answerable: int
    em: float | None
    """Exact-match share over answerable questions; None without any."""
    f1: float | None
    char_f1: float | None
    contains: float | None
    """Share of answerable questions whose answer contains an accepted answer (`AnswerScore.contains`)."""
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
        contains=_mean([float(s.contains) for s in answered]),
        unanswerable=len(unanswerable),
        abstained=len(abstained),
        abstain_precision=_mean([float(not answerable) for answerable in abstained]),
        abstain_recall=_mean([float(s.abstained) for s in unanswerable]),
    )
