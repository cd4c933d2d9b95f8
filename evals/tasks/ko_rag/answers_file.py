"""Answers produced anywhere, scored with ko_rag's metrics: `ANSWERS.jsonl`, one line per question,

    {"id": "num-001", "answer": "4년입니다."}

against the built-in question set or a user folder's (`task.load_source`). Other fields on a line are
ignored (a line may carry the question or the prompt along); every problem is one `UserError` naming
the file and line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evals.tasks.ko_rag.answer_score import AnswerScore, RagTotals, score_answer, totals
from evals.tasks.ko_rag.questions import Question
from evals.tasks.ko_rag.user_files import read_entries
from kqe.core.errors import UserError


@dataclass(frozen=True)
class Answer:
    """One line of an answers file."""

    id: str
    answer: str


@dataclass(frozen=True)
class ScoredAnswer:
    """One answered question and how it scored."""

    id: str
    type: str
    answer: str
    reference: str | None
    """The first accepted answer; None for an unanswerable question."""
    score: AnswerScore


@dataclass(frozen=True)
class ScoredAnswers:
    """A whole answers file scored: per question, the totals, and the questions it left out."""

    label: str
    """Which question set it was scored against."""
    items: list[ScoredAnswer]
    totals: RagTotals
    unanswered: list[str]
    """Ids of the set's questions the file has no line for."""

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "questions": self.label,
            "items": [
                {"id": i.id, "type": i.type, "answer": i.answer, "reference": i.reference} | asdict(i.score)
                for i in self.items
            ],
            "totals": asdict(self.totals),
            "unanswered": self.unanswered,
        }
        return json.dumps(body, ensure_ascii=False, indent=2)


def _parse(value: Any, where: str) -> Answer:
    if not isinstance(value, dict):
        raise UserError(f'{where}: not a JSON object: write {{"id": ..., "answer": ...}} per line')
    for field in ("id", "answer"):
        if not isinstance(value.get(field), str):
            raise UserError(f"{where}: field {field!r} must be a string: each line needs id and answer")
    return Answer(value["id"], value["answer"])


def score_answers(path: Path, questions: list[Question], label: str) -> ScoredAnswers:
    """Every line of `path` scored against its question in `questions`."""
    by_id = {question.id: question for question in questions}

    def check(answer: Answer, where: str) -> None:
        if answer.id not in by_id:
            example = ", ".join(list(by_id)[:3])
            raise UserError(f"{where}: no question {answer.id!r} in {label}: use its ids ({example}, ...)")

    answers = read_entries(path, _parse, "answer", check)
    items = []
    for answer in answers:
        question = by_id[answer.id]
        score = score_answer(answer.answer, question.answers, question.answerable)
        reference = question.answers[0] if question.answerable else None
        items.append(ScoredAnswer(answer.id, question.type, answer.answer, reference, score))
    answered = {answer.id for answer in answers}
    return ScoredAnswers(
        label,
        items,
        totals([(item.score, by_id[item.id].answerable) for item in items]),
        [question.id for question in questions if question.id not in answered],
    )
