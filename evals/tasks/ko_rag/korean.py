"""Korean text helpers shared by ko_rag's chunker, retriever and scorer: one Kiwi morpheme analyzer.

Kiwi (`kiwipiepy`, pinned with its model in requirements/core.txt) splits Korean words into
morphemes, so "국민에게" and "국민은" share the content morpheme "국민" while their particles differ;
BM25 and answer F1 both work on these morphemes instead of on whitespace words.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any, NamedTuple

CONTENT_DROP = ("J", "E", "X", "S", "VCP", "VCN", "IC", "MM")
"""Tag prefixes left out of retrieval terms: particles, endings, affixes, symbols, copulas, interjections,
determiners; `_KEEP` overrides it for numbers, foreign words, hanja and word roots."""
ANSWER_DROP = ("J", "E", "VCP", "SF", "SP", "SS", "SE", "SO", "SW", "SB")
"""Tag prefixes left out of answer normalisation: particles, endings, the copula and punctuation, so
"5년입니다." and "5년" are the same answer."""
_KEEP = ("SN", "SL", "SH", "XR")


@functools.cache
def kiwi() -> Any:
    """The process's one Kiwi analyzer (loading its model takes ~3 s)."""
    from kiwipiepy import Kiwi

    return Kiwi()


def _forms(text: str, drop: tuple[str, ...], keep: tuple[str, ...] = ()) -> list[str]:
    tokens = kiwi().tokenize(text)
    return [
        token.form.lower() for token in tokens if token.tag.startswith(keep) or not token.tag.startswith(drop)
    ]


def content_morphemes(text: str) -> list[str]:
    """Content morphemes of `text` (nouns, verb and adjective stems, adverbs, numbers, foreign words),
    lower-cased: the terms BM25 indexes."""
    return _forms(text, CONTENT_DROP, keep=_KEEP)


LIST_SEPARATORS = ("및", "그리고", "또는", "혹은")
"""Words that join the items of a list answer, besides commas and the particles 와/과/하고 (tag JC)."""


NEGATIONS = {("VCN", "아니"), ("VX", "않"), ("MAG", "안"), ("MAG", "못"), ("VA", "없"), ("VX", "못하")}
"""(tag, morpheme) pairs that negate what they follow or precede: "국민이 아니다", "쓰지 않는다", "안
된다", "못 한다", "제한이 없다"."""


class AnswerToken(NamedTuple):
    """One morpheme of an answer as the scorer reads it."""

    form: str
    """The morpheme, lower-cased."""
    separator: bool
    """Whether it separates list items (comma, slash, 와/과, 및 ...)."""
    negation: bool
    """Whether it is a negation (NEGATIONS)."""


def answer_tokens(text: str) -> list[AnswerToken]:
    """The morphemes of an answer, without particles, endings, copula and punctuation; a separator is
    kept (marked) so lists can be split."""
    tokens = []
    for token in kiwi().tokenize(text):
        separator = token.tag in ("JC", "SP") or token.form in LIST_SEPARATORS
        if separator or not token.tag.startswith(ANSWER_DROP):
            negation = (token.tag, token.form) in NEGATIONS
            tokens.append(AnswerToken(token.form.lower(), separator, negation))
    return tokens


def is_hangul(char: str) -> bool:
    """Hangul syllable or jamo."""
    return unicodedata.name(char, "").startswith("HANGUL")


def hangul_share(text: str) -> float | None:
    """Share of Hangul among the letters of `text` (1.0 = all Korean); None when it has no letters."""
    letters = [char for char in text if char.isalpha()]
    if not letters:
        return None
    return sum(map(is_hangul, letters)) / len(letters)


def space_between(left: str, right: str) -> str:
    """ " " or "": whether two lines that a text wrapper broke between Hangul letters were one word.

    Kiwi's spacing model decides on the two lines joined without a space (97.6% agreement with the
    Debian FAQ's HTML on its 888 such breaks, where always joining gets 65%).
    """
    spaced = kiwi().space(left + right, reset_whitespace=False)
    letters_before = sum(1 for char in left if not char.isspace())
    seen = 0
    for char in spaced:
        if seen == letters_before:
            return " " if char == " " else ""
        if not char.isspace():
            seen += 1
    return ""
