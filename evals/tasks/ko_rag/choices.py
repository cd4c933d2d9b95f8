"""The four choices of a ko_rag multiple-choice item: the answer, distractors of the answer's kind,
and the abstention phrase.

A distractor must look like the answer, or the item tests the format and not the reading: a bill's
sponsor among "dpkg --remove foo" and "italian" is found by elimination. So each answer has a *kind*
(`answer_kind`): `date`, `fraction`, `option`, a number's unit (`num:년`, `num:인`, `num:%`), or, for
answers without an exact span, Korean or Latin text asked for by 누구 (`korean:who`), 어디 (`:where`)
or otherwise (`:what`). Candidates come first from the gold passage itself (its other numbers of the
same unit: "30일" beside "100일" in art. 47), then answers of other questions of the same kind and
document, numbers of the unit elsewhere in the document, answers of the same kind anywhere, the
gold's number doubled, halved or moved by ten ("80세", "20세" for "40세"), answers of the same coarse
kind (any number; Korean or Latin text), then any answer. No candidate may score as right against
the question's accepted answers (F1 ≥ MAX_DISTRACTOR_F1 by `answer_score.score_answer`, e.g.
"60일 이내" for "60일") nor abstain.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from evals.tasks.ko_rag.abstention import abstains
from evals.tasks.ko_rag.answer_score import score_answer
from evals.tasks.ko_rag.context import ABSTAIN
from evals.tasks.ko_rag.korean import is_hangul
from evals.tasks.ko_rag.normalise import NAME, UNITS, normalise, rewrite
from evals.tasks.ko_rag.questions import Question
from kqe.core.errors import UserError

MAX_DISTRACTOR_F1 = 0.5
"""A candidate at least this close to an accepted answer counts as also right and is not offered."""
_DIGITS = re.compile(r"[\d.,]+")
_UNIT = "|".join(re.escape(unit) for unit in sorted(UNITS, key=len, reverse=True))
_NUMBER_IN_TEXT = re.compile(rf"(?<![\d.])\d[\d,]*(?:\.\d+)?\s?(?:{_UNIT})")


_ASKS = (("누구", "who"), ("누가", "who"), ("어디", "where"), ("어느 곳", "where"))
"""What a question asks for, by its question word; any other text question asks for a `what`."""


def answer_kind(answer: str, question: str = "") -> str:
    """What kind of thing an answer is (see the module docstring); `question` tells a text answer's
    `who` from its `where` and `what`."""
    exact = normalise(answer).exact
    spans = [span for span in exact if not re.fullmatch(NAME, span) or re.search(r"\d", span)]
    if spans:
        first = spans[0]
        if re.fullmatch(r"\d{4}-\d{1,2}(?:-\d{1,2})?", first):
            return "date"
        if "/" in first:
            return "fraction"
        if first.startswith("-"):
            return "option"
        return "num:" + _DIGITS.sub("", first)
    letters = [char for char in answer if char.isalpha()]
    script = "korean" if letters and sum(map(is_hangul, letters)) * 2 >= len(letters) else "latin"
    asks = next((kind for word, kind in _ASKS if word in question), "what")
    return f"{script}:{asks}"


def _coarse(kind: str) -> str:
    return "number" if kind.startswith(("num:", "date", "fraction")) else kind.split(":")[0]


def _document(pid: str) -> str:
    """The source a passage comes from: `constitution`, `bill` or `debian` for the built-in ones."""
    return pid.split("/")[0].split("-")[0]


def _shifted(gold: str, kind: str) -> list[str]:
    """The gold with its first number doubled, halved, and moved by ten: same unit, surely wrong
    (a gold spelled in words, "두 번", is shifted in digits)."""
    text = gold if re.search(r"\d", gold) else rewrite(gold)
    match = re.search(r"\d[\d,]*", text)
    if not kind.startswith("num:") or kind == "num:" or match is None:
        return []
    n = int(match[0].replace(",", ""))
    shifted = (2 * n, n // 2, n + 10, n - 10)
    return [text[: match.start()] + str(m) + text[match.end() :] for m in shifted if m > 0]


def _numbers_of_kind(kind: str, texts: Sequence[str]) -> list[str]:
    """Numbers of a `num:` kind's unit written in `texts`, as written there, first seen first."""
    if not kind.startswith("num:") or kind == "num:":
        return []
    found = [match[0].strip() for text in texts for match in _NUMBER_IN_TEXT.finditer(text)]
    return [candidate for candidate in dict.fromkeys(found) if answer_kind(candidate) == kind]


def _tiers(question: Question, pool: Sequence[Question], passages: Mapping[str, str]) -> list[list[str]]:
    gold = question.answers[0] if question.answerable else ""
    kind = answer_kind(gold, question.question) if gold else ""
    documents = {_document(pid) for pid in question.gold_passages}
    others = [q for q in pool if q.answerable and q.id != question.id]
    answers = [
        (q.answers[0], answer_kind(q.answers[0], q.question), _document(q.gold_passages[0])) for q in others
    ]
    same_document = [text for pid, text in passages.items() if _document(pid) in documents]
    return [
        _numbers_of_kind(kind, [passages[pid] for pid in question.gold_passages]),
        [a for a, k, doc in answers if k == kind and doc in documents],
        _numbers_of_kind(kind, same_document),
        [a for a, k, _ in answers if k == kind],
        _shifted(gold, kind),
        [a for a, k, _ in answers if gold and _coarse(k) == _coarse(kind)],
        [a for a, _, doc in answers if doc in documents],
        [a for a, _, _ in answers],
    ]


def also_right(candidate: str, question: Question) -> bool:
    """Whether a candidate would be a right answer too (or an abstention)."""
    if abstains(candidate) or candidate == ABSTAIN:
        return True
    if not question.answerable:
        return False
    return score_answer(candidate, question.answers, True).f1 >= MAX_DISTRACTOR_F1


def mc_choices(
    question: Question, pool: Sequence[Question], passages: Mapping[str, str], seed: int
) -> tuple[list[str], int]:
    """Four choices and the gold index: the answer (or ABSTAIN), type-matched distractors that are not
    also right, and ABSTAIN; candidates within a tier and the final order drawn per question."""
    gold = question.answers[0] if question.answerable else ABSTAIN
    rng = random.Random(f"{seed}/{question.id}/choices")
    wanted = 2 if question.answerable else 3
    distractors: list[str] = []
    for tier in _tiers(question, pool, passages):
        options = sorted(set(tier) - {gold, *question.answers, *distractors})
        rng.shuffle(options)
        distractors += [c for c in options if not also_right(c, question)][: wanted - len(distractors)]
    if len(distractors) < wanted:
        raise UserError(f"question {question.id}: too few other answers for multiple-choice distractors")
    choices = [gold, *distractors] + ([ABSTAIN] if question.answerable else [])
    rng.shuffle(choices)
    return choices, choices.index(gold)
