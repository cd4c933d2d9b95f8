"""Contamination guard: calibration windows that share a 13-gram with an evaluation item are dropped.

Unit: normalized words (`quantize.dedup.normalized_words`: NFKC, case-folded runs of word characters),
the unit of GPT-3's 13-gram overlap check. Words rather than characters because 13 characters are a
common phrase (`대통령령으로정하는바에따라` is 13 Hangul syllables) while 13 words of a question are
not; Korean words (eojeol) carry their particles, so the unit is if anything stricter in Korean.

An item is its prompt (question, choices, any template or few-shot text) followed by its answer
continuations. Items shorter than 13 words are checked with their whole word sequence as the
n-gram, down to `MIN_ITEM_WORDS`; shorter items are too generic to attribute and are only counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kqe.core.io import sha256_of
from quantize.dedup import ngrams, normalized_words

NGRAM_WORDS = 13
MIN_ITEM_WORDS = 8


class EvaluationItem(Protocol):
    """What the guard reads of an evaluation item (`evals.tasks.prompts.PromptItem` has it)."""

    @property
    def prompt(self) -> str: ...
    @property
    def continuations(self) -> tuple[str, ...]: ...


def item_texts(items: Iterable[EvaluationItem]) -> list[str]:
    """Each item as one text: its prompt, then its answer continuations, one per line."""
    return ["\n".join((item.prompt, *item.continuations)) for item in items]


class ContaminationGuard:
    """The word n-grams of a run's evaluation items, tested against calibration text."""

    def __init__(self, item_texts: Iterable[str], n: int = NGRAM_WORDS) -> None:
        texts = sorted(set(item_texts))
        self.n = n
        self.items = len(texts)
        """Distinct evaluation items indexed."""
        self.short_items = 0
        """Items with fewer than `MIN_ITEM_WORDS` words: not checked."""
        self.fingerprint = sha256_of("\0".join(texts))
        """Hash of the items: part of a calibration set's key."""
        self._grams: dict[int, set[int]] = {}
        for text in texts:
            words = normalized_words(text)
            length = min(n, len(words))
            if length < MIN_ITEM_WORDS:
                self.short_items += 1
                continue
            self._grams.setdefault(length, set()).update(ngrams(words, length))

    def overlaps(self, text: str) -> bool:
        """Whether `text` holds an n-gram of any indexed item."""
        words = normalized_words(text)
        return any(not grams.isdisjoint(ngrams(words, length)) for length, grams in self._grams.items())
