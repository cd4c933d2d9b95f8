"""Which letters are Hangul, by code point: what calibration windows and the help pages measure a text's
Korean share with. (ko_rag's answer scoring has its own, by Unicode name: `evals.tasks.ko_rag.korean`.)"""

from __future__ import annotations


def is_hangul(char: str) -> bool:
    """A Hangul syllable (U+AC00–D7A3), jamo (U+1100–11FF) or compatibility jamo (U+3130–318F)."""
    code = ord(char)
    return 0xAC00 <= code <= 0xD7A3 or 0x1100 <= code <= 0x11FF or 0x3130 <= code <= 0x318F


def hangul_letters(text: str) -> tuple[int, int]:
    """(Hangul letters, all letters) in `text`."""
    letters = [c for c in text if c.isalpha()]
    return sum(1 for c in letters if is_hangul(c)), len(letters)
