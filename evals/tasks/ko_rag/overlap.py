"""How much of a question its passage already says: the share of the question's content morphemes
(`korean.content_morphemes`) found in the one sentence of its gold passages that holds the most of them.

A question that restates a passage sentence with the answer taken out scores near 1 (a near copy: a
lexical look-up, not a reading test); a paraphrase scores low. Every shipped question stores its
measure (`overlap`, two decimals) and whether it is a near copy (`near_copy`); the tests recompute both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from evals.tasks.ko_rag.korean import content_morphemes

NEAR_COPY = 0.7
"""Overlap from which a question counts as a near copy of a passage sentence."""
PARAPHRASE_BOUND = 0.5
"""Largest overlap a question written from the LibreOffice help pages may have (`lo-` items)."""

_SENTENCES = re.compile(r"\n+|(?<=[.?!])\s+")


def sentences(text: str) -> list[str]:
    """`text` cut at line breaks and sentence ends."""
    return [part.strip() for part in _SENTENCES.split(text) if part.strip()]


def overlap(question: str, passage_texts: Iterable[str]) -> float:
    """Share of the question's distinct content morphemes found in its best-matching single sentence
    of `passage_texts`, rounded to two decimals; 0.0 for a question without content morphemes."""
    wanted = set(content_morphemes(question))
    if not wanted:
        return 0.0
    best = 0
    for text in passage_texts:
        for sentence in sentences(text):
            best = max(best, len(wanted & set(content_morphemes(sentence))))
    return round(best / len(wanted), 2)
