"""Checks of a question set beyond what loading validates (questions.py already refuses duplicate ids,
unknown gold passages and answers not quoted from a gold passage): what a reviewer would flag item by
item, found by searching the documents.

- `covered`: an unanswerable question whose every content morpheme occurs in one passage, so the
  documents may well answer it;
- `single-hop`: a `multi` question whose reference answer sits in every one of its gold passages, so
  any one passage answers it;
- `no-bridge`: a `multi` question with no term (content morpheme, or pair of adjacent ones) that only a
  gold passage without the answer supplies (its bridge): the passage holding the answer then carries
  every term the question uses, so it alone answers it;
- `leak`: a non-`multi` question that contains its own answer (comparisons among named options are
  `multi` and name their answer by design);
- `unretrieved`: an answerable question none of whose gold passages BM25 ranks in the top k, so only
  a longer context's filler or memory can answer it (reported, not an error: the oracle condition
  measures reading apart from retrieval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from evals.tasks.ko_rag.docs import Passage
from evals.tasks.ko_rag.korean import content_morphemes
from evals.tasks.ko_rag.questions import Question
from evals.tasks.ko_rag.retrieval import TOP_K, Retriever


@dataclass(frozen=True)
class Finding:
    """One flagged question."""

    question: str
    kind: str
    """`covered`, `single-hop`, `no-bridge`, `leak` or `unretrieved`."""
    detail: str


def _covering_passage(question: Question, passages: Sequence[Passage], terms: list[set[str]]) -> str | None:
    wanted = set(content_morphemes(question.question))
    for passage, have in zip(passages, terms, strict=True):
        if wanted and wanted <= have:
            return passage.id
    return None


def _terms(text: str) -> set[str]:
    """Content morphemes of `text` and its pairs of adjacent ones (`감사원 원장`: a name spelt apart)."""
    morphemes = content_morphemes(text)
    return set(morphemes) | {f"{a} {b}" for a, b in pairwise(morphemes)}


def bridge_terms(question: Question, texts: dict[str, str]) -> set[str]:
    """Terms of a `multi` question (content morphemes and adjacent pairs) found in a gold passage without
    its reference answer and in none of the gold passages with it: what only the other hop tells."""
    reference = question.answers[0]
    terms = {pid: _terms(texts[pid]) for pid in question.gold_passages}
    holding = [pid for pid in question.gold_passages if reference in texts[pid]]
    bridges = [pid for pid in question.gold_passages if pid not in holding]
    answered = set().union(*(terms[pid] for pid in holding))
    bridged = set().union(*(terms[pid] for pid in bridges))
    return (_terms(question.question) & bridged) - answered


def _multi_findings(question: Question, texts: dict[str, str]) -> list[Finding]:
    reference = question.answers[0]
    if all(reference in texts[pid] for pid in question.gold_passages):
        return [Finding(question.id, "single-hop", f"{reference!r} is in every gold passage")]
    if not bridge_terms(question, texts):
        return [Finding(question.id, "no-bridge", "the answer's passage holds every question term")]
    return []


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
        if question.type == "multi":
            findings += _multi_findings(question, texts)
        if question.type != "multi" and any(answer in question.question for answer in question.answers):
            findings.append(Finding(question.id, "leak", "the question contains its answer"))
        if not set(retriever.search(question.question, top_k)) & set(question.gold_passages):
            findings.append(Finding(question.id, "unretrieved", f"no gold passage in the BM25 top {top_k}"))
    return findings
