"""Checks of a question set beyond what loading validates (questions.py already refuses duplicate ids,
unknown gold passages and answers not quoted from a gold passage): what a reviewer would flag item by
item, found by searching the documents.

- `covered`: an unanswerable question whose every content morpheme occurs in one passage, so the
  documents may well answer it;
- `single-hop`: a `multi` question whose reference answer sits in every one of its gold passages, so
  any one passage answers it;
- `leak`: a non-`multi` question that contains its own answer (comparisons among named options are
  `multi` and name their answer by design);
- `unretrieved`: an answerable question none of whose gold passages BM25 ranks in the top k, so only
  a longer context's filler or memory can answer it (reported, not an error: the oracle condition
  measures reading apart from retrieval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evals.tasks.ko_rag.docs import Passage
from evals.tasks.ko_rag.korean import content_morphemes
from evals.tasks.ko_rag.questions import Question
from evals.tasks.ko_rag.retrieval import TOP_K, Retriever


@dataclass(frozen=True)
class Finding:
    """One flagged question."""

    question: str
    kind: str
    """`covered`, `single-hop`, `leak` or `unretrieved`."""
    detail: str


def _covering_passage(question: Question, passages: Sequence[Passage], terms: list[set[str]]) -> str | None:
    wanted = set(content_morphemes(question.question))
    for passage, have in zip(passages, terms, strict=True):
        if wanted and wanted <= have:
            return passage.id
    return None


def audit(questions: Sequence[Question], passages: Sequence[Passage], top_k: int = TOP_K) -> list[Finding]:
    """Every finding over the set, in question order."""
    retriever = Retriever(passages)
    texts = {passage.id: passage.text for passage in passages}
    terms = [set(content_morphemes(f"{p.title}\n{p.text}")) for p in passages]
    findings = []
    for question in questions:
        if not question.answerable:
            covering = _covering_passage(question, passages, terms)
            if covering:
                findings.append(Finding(question.id, "covered", f"{covering} holds every question term"))
            continue
        reference = question.answers[0]
        if question.type == "multi" and all(reference in texts[pid] for pid in question.gold_passages):
            findings.append(Finding(question.id, "single-hop", f"{reference!r} is in every gold passage"))
        if question.type != "multi" and any(answer in question.question for answer in question.answers):
            findings.append(Finding(question.id, "leak", "the question contains its answer"))
        if not set(retriever.search(question.question, top_k)) & set(question.gold_passages):
            findings.append(Finding(question.id, "unretrieved", f"no gold passage in the BM25 top {top_k}"))
    return findings
