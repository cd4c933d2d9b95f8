"""The passages and questions ko_rag is built from: the built-in documents and question set, or a
user's folder, and the questions a run samples from them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from evals.tasks.ko_rag import docs as rag_docs
from evals.tasks.ko_rag import questions as rag_questions
from evals.tasks.ko_rag.docs import Passage
from evals.tasks.ko_rag.help_docs import help_passages
from evals.tasks.ko_rag.questions import Question
from evals.tasks.prompts import stratified_sample
from kqe.core.io import sha256_file, sha256_of
from kqe.core.records import content_hash
from kqe.core.workspace import Workspace


@dataclass(frozen=True)
class RagSource:
    """The passages and questions ko_rag is built from, and what identifies them."""

    passages: list[Passage]
    questions: list[Question]
    label: str
    """What they are, e.g. `built-in: constitution, 10 bills, Debian FAQ (203 questions)`."""
    identity: str
    """Hash of the documents and questions (part of the cache key)."""


def load_source(ws: Workspace, data_dir: Path | None = None) -> RagSource:
    """The built-in documents and question set, or a user folder with docs.jsonl + questions.jsonl."""
    if data_dir is None:
        passages = rag_docs.builtin_passages(ws.sources()) + help_passages(ws.sources())
        questions_path = rag_questions.QUESTIONS_PATH
        label = "built-in: constitution, 10 bills, Debian FAQ, LibreOffice help"
    else:
        passages = rag_docs.read_docs_jsonl(data_dir / "docs.jsonl")
        questions_path = data_dir / "questions.jsonl"
        label = f"user data {data_dir}"
    questions = rag_questions.read_questions(questions_path, {p.id: p.text for p in passages})
    documents = sha256_of(json.dumps([(p.id, p.title, p.text) for p in passages], ensure_ascii=False))
    identity = content_hash({"documents": documents, "questions": sha256_file(questions_path)})
    return RagSource(passages, questions, f"{label} ({len(questions)} questions)", identity)


def sample_questions(questions: list[Question], limit: int | None, seed: int) -> list[Question]:
    """`limit` questions spread over the types in proportion (all when limit is None or larger)."""
    rows = [{"subject": q.type, "index": i} for i, q in enumerate(questions)]
    return [questions[row["index"]] for row in stratified_sample(rows, limit, seed)]


def cluster_of(question: Question) -> str:
    """The item's subject, the cluster the paired bootstrap resamples: its first gold passage (questions
    on one passage succeed or fail together), or `unanswerable/<id>` for a question without one."""
    return question.gold_passages[0] if question.gold_passages else f"{question.type}/{question.id}"
