"""ko_rag's small user data folder (tests/data/ko_rag), and per-item results of its generation task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evals.tasks.ko_rag import task as rag_task
from kqe.core.results import ItemResult
from tests.helpers.repo import REPO

DATA = REPO / "tests" / "data" / "ko_rag"
"""A small user data folder (docs.jsonl + questions.jsonl) in the documented format."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


DOCS = read_rows(DATA / "docs.jsonl")
QUESTIONS = read_rows(DATA / "questions.jsonl")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def rag_item(question: str, length: str, f1: float, reference: str = "답") -> ItemResult:
    return ItemResult(
        task=rag_task.TASK,
        subject=f"factual/{question}",
        item_id=f"ko_rag/{question}/retrieved/{length}",
        gold=0,
        pred=0 if f1 == 1 else -1,
        correct=f1 == 1,
        choice_logprobs=[],
        prompt_sha="x",
        generated="답",
        reference=reference,
        f1=f1,
        hangul_share=1.0,
    )
