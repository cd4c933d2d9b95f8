"""ko_rag questions: the shipped set and user sets, read and validated line by line.

`questions.jsonl`, one question per line:

    {"id": "num-001", "type": "numeric", "question": "국회의원의 임기는 몇 년인가?",
     "answers": ["4년"], "gold_passages": ["constitution/art-42"]}

- `id`: unique, stable (it names the scored items, so it must not change between runs)
- `type`: `factual` (look a fact up), `numeric` (a number or date), `multi` (needs two or more passages;
  the answer is in one of them) or `unanswerable` (the documents do not say: the right answer is to abstain)
- `answers`: accepted answers, the first is the reference; each must appear verbatim in one of the gold
  passages; empty exactly for `unanswerable`
- `gold_passages`: ids of the passages that answer it (at least two for `multi`; may be empty or list
  the nearest related passages for `unanswerable`)
- `overlap`, `near_copy` (optional): the measured share of the question's content morphemes in its best
  gold sentence and whether that makes it a near copy (`overlap.py`); the shipped set stores both

Every problem is a `UserError` naming the file and line: the shipped set is checked in the tests and a
user set when it is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.tasks.ko_rag.user_files import read_entries
from kqe.core.errors import UserError

QUESTIONS_PATH = Path(__file__).with_name("questions.jsonl")
"""The question set the project ships, grounded in the built-in documents (`evals/tasks/ko_rag/docs.py`)."""
TYPES = ("factual", "numeric", "multi", "unanswerable")
FIELDS = ("id", "type", "question", "answers", "gold_passages")
OPTIONAL_FIELDS = ("overlap", "near_copy")
"""Measured per item (`overlap.py`); a user set may leave them out."""


@dataclass(frozen=True)
class Question:
    """One ko_rag question with its gold answers and gold passages."""

    id: str
    type: str
    question: str
    answers: tuple[str, ...]
    gold_passages: tuple[str, ...]
    overlap: float | None = None
    """Share of the question's content morphemes in its best-matching gold sentence, when measured."""
    near_copy: bool | None = None
    """Whether the question restates a passage sentence (overlap at least `overlap.NEAR_COPY`)."""

    @property
    def answerable(self) -> bool:
        return self.type != "unanswerable"


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) and item.strip() for item in value)


def _parse(row: Any, where: str) -> Question:
    if not isinstance(row, dict):
        raise UserError(f"{where}: not a JSON object: write one question object per line")
    missing = [field for field in FIELDS if field not in row]
    if missing:
        raise UserError(
            f"{where}: missing field(s) {', '.join(missing)}: each question needs {', '.join(FIELDS)}"
        )
    extra = sorted(set(row) - set(FIELDS) - set(OPTIONAL_FIELDS))
    if extra:
        known = ", ".join(FIELDS + OPTIONAL_FIELDS)
        raise UserError(f"{where}: unknown field(s) {', '.join(extra)}: a question has only {known}")
    for field in ("id", "question"):
        if not isinstance(row[field], str) or not row[field].strip():
            raise UserError(f"{where}: field {field!r} must be a non-empty string")
    if row["type"] not in TYPES:
        raise UserError(f"{where}: type {row['type']!r} is not one of {', '.join(TYPES)}")
    for field in ("answers", "gold_passages"):
        if not _strings(row[field]):
            raise UserError(f"{where}: field {field!r} must be a list of non-empty strings")
    _check_measures(row, where)
    return Question(
        row["id"],
        row["type"],
        row["question"],
        tuple(row["answers"]),
        tuple(row["gold_passages"]),
        row.get("overlap"),
        row.get("near_copy"),
    )


def _check_measures(row: dict[str, Any], where: str) -> None:
    value = row.get("overlap")
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1
    ):
        raise UserError(f"{where}: field 'overlap' must be a number from 0 to 1 (or left out)")
    if row.get("near_copy") is not None and not isinstance(row["near_copy"], bool):
        raise UserError(f"{where}: field 'near_copy' must be true or false (or left out)")


def _check(question: Question, passages: Mapping[str, str], where: str) -> None:
    unknown = [pid for pid in question.gold_passages if pid not in passages]
    if unknown:
        raise UserError(f"{where}: gold passage {unknown[0]!r} does not exist in the documents: fix the id")
    if not question.answerable:
        if question.answers:
            raise UserError(f"{where}: an unanswerable question has no answers: leave `answers` empty")
        return
    if not question.answers:
        raise UserError(f"{where}: no answers: give at least one, or make the type `unanswerable`")
    if not question.gold_passages:
        raise UserError(f"{where}: no gold passages: list the passage ids that hold the answer")
    if question.type == "multi" and len(question.gold_passages) < 2:
        raise UserError(f"{where}: a `multi` question needs at least two gold passages")
    for answer in question.answers:
        if not any(answer in passages[pid] for pid in question.gold_passages):
            raise UserError(
                f"{where}: answer {answer!r} appears in none of its gold passages "
                f"{', '.join(question.gold_passages)}: quote the passage text exactly"
            )


def read_questions(path: Path, passages: Mapping[str, str]) -> list[Question]:
    """Questions of `path`, each validated against `passages` (id -> text)."""

    def check(question: Question, where: str) -> None:
        _check(question, passages, where)

    return read_entries(path, _parse, "question", check)
