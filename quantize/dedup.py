"""Duplicate removal for calibration text: exact repeats of paragraphs, near repeats of windows.

Text is compared as normalized words: NFKC, case-folded, runs of Unicode word characters (Hangul
syllables, Latin letters, digits); punctuation and spacing do not count. That suits Korean, whose
spacing varies, and English alike.

- Exact duplicates: a paragraph whose normalized words equal an earlier paragraph's of the same
  language is dropped, if it has at least `MIN_DEDUP_CHARS` word characters (short headings such as
  `부칙` or `Answer:` repeat legitimately and stay).
- Near duplicates: a window of which at least `NEAR_DUPLICATE_SHARE` of its word 5-grams already
  occur in the windows kept before it (same language, text order) is dropped. Containment in the
  union rather than pairwise Jaccard, because a repeated passage rarely lines up with the window
  grid: its copy straddles two earlier windows. Windows cut half-overlapping from a short text
  repeat half of their 5-grams, so only real repeats go (bills amending the same act, a FAQ
  quoting itself).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

SHINGLE_WORDS = 5
NEAR_DUPLICATE_SHARE = 0.8
MIN_DEDUP_CHARS = 32
_WORD = re.compile(r"\w+")


def normalized_words(text: str) -> list[str]:
    """NFKC, case-folded word runs of `text` (punctuation, spacing and line breaks ignored)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def ngrams(words: list[str], n: int) -> set[int]:
    """Hashes of the word n-grams of `words` (in-process hashes: the sets never leave the process)."""
    return {hash(" ".join(words[i : i + n])) for i in range(len(words) - n + 1)}


def unique_paragraphs(paragraphs: Iterable[str]) -> tuple[list[str], int]:
    """The paragraphs without exact repeats (long ones only), and how many were dropped."""
    seen: set[str] = set()
    kept: list[str] = []
    dropped = 0
    for paragraph in paragraphs:
        key = " ".join(normalized_words(paragraph))
        if len(key.replace(" ", "")) >= MIN_DEDUP_CHARS:
            if key in seen:
                dropped += 1
                continue
            seen.add(key)
        kept.append(paragraph)
    return kept, dropped


class NearDuplicates:
    """The 5-grams of the windows kept so far, to test a new window against all of them at once."""

    def __init__(self, threshold: float = NEAR_DUPLICATE_SHARE) -> None:
        self.threshold = threshold
        self._seen: set[int] = set()

    def is_near_duplicate(self, text: str) -> bool:
        """Whether most of `text` was already kept; if not, it is kept (indexed) from now on."""
        shingles = ngrams(normalized_words(text), SHINGLE_WORDS)
        if shingles and len(shingles & self._seen) >= self.threshold * len(shingles):
            return True
        self._seen |= shingles
        return False
