"""Korean sentences of an answer, for the instructions that count or inspect sentences.

A sentence ends at `.`, `!`, `?` (and their full-width forms, `。`), with any run of them (`?!`, `!!`)
and the closing quotes or brackets after them kept in the sentence; at a line break (a list item or a
heading without a full stop is a sentence of its own); and at an ellipsis (`...`, `…`) only when the word
before it ends like a sentence (다, 요, 까, 죠, 네, 오, 지: "그렇군요... 알겠습니다." is two sentences,
"그런데... 모르겠다." one). A full stop followed at once by a digit or a Latin letter (3.14, v1.2,
www.go.kr, e.g.) ends nothing.

Quoted speech stays inside its sentence: nothing inside a matched pair of quotes or brackets ("…",
“…”, '…', ‘…’, 「…」, 『…』, (…)) ends a sentence, and a quotation that closes on a full stop ends the
sentence only when a space or the line's end follows ("좋아요."라고 말했다. is one sentence). A quote
mark without its partner on the line is an ordinary character.

An answer quoted as a whole (one pair of double quotes around all of it, as `startend:quotation` asks)
is split inside its quotes.

A list marker at the start of a line (`1.`, `2)`, `-`, `*`, `•`) is not a sentence; a line that is only a
title in 《》, and a piece with no letter or digit (`---`, `***`), is none either.
"""

from __future__ import annotations

import re

TERMINALS = ".!?。．！？"
"""Characters that end a sentence (a run of them ends it once)."""
ELLIPSES = ("...", "..", "…")
SENTENCE_FINAL = "다요까죠네오지"
"""Syllables a sentence ends on: an ellipsis after one of them ends the sentence."""
QUOTE_PAIRS = {'"': '"', "“": "”", "'": "'", "‘": "’", "「": "」", "『": "』", "(": ")", "（": "）"}
CLOSERS = "\"”'’」』)）]》>"
"""What may follow a sentence's last terminal and still belong to it."""
_LIST_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*•·])\s+")
_TITLE_LINE = re.compile(r"^\s*《[^《》]+》\s*$")


def _quote_spans(line: str) -> dict[int, int]:
    """Each opening quote's position mapped to its partner's, for the pairs that close on the line."""
    spans: dict[int, int] = {}
    position = 0
    while position < len(line):
        char = line[position]
        closer = QUOTE_PAIRS.get(char)
        if closer is not None:
            end = line.find(closer, position + 1)
            if end != -1:
                spans[position] = end
                position = end
        position += 1
    return spans


def _ellipsis_at(line: str, position: int) -> int:
    """The length of the ellipsis starting at `position` (0 when there is none)."""
    for mark in ELLIPSES:
        if line.startswith(mark, position):
            run = position + len(mark)
            while run < len(line) and line[run] in ".…":
                run += 1
            return run - position
    return 0


def _boundary_after(line: str, position: int) -> tuple[int | None, int]:
    """(where the sentence ends, or None when it goes on; where to look next) for `position`."""
    length = _ellipsis_at(line, position)
    if length:
        before = line[:position].rstrip()
        ends = bool(before) and before[-1] in SENTENCE_FINAL
        return (_closed(line, position + length) if ends else None), position + length
    char = line[position]
    if char not in TERMINALS:
        return None, position + 1
    if char in ".．" and position < len(line) - 1 and _inside_word(line[position + 1]):
        return None, position + 1
    end = _closed(line, position)
    return end, end


def _inside_word(after: str) -> bool:
    """A full stop followed by a digit or Latin letter is inside a number, an address or an abbreviation."""
    return after.isdigit() or (after.isascii() and after.isalpha())


def _closed(line: str, position: int) -> int:
    """The end of a sentence whose terminal starts at `position`: the run of terminals and closers."""
    end = position
    while end < len(line) and line[end] in TERMINALS + "…":
        end += 1
    while end < len(line) and line[end] in CLOSERS and line[end] not in QUOTE_PAIRS:
        end += 1
    return end


def _closing_quote_ends(line: str, close: int) -> bool:
    """Whether a quotation closing at `close` on a terminal ends the sentence: a space or the end follows."""
    inner_end = line[close - 1] if close > 0 else ""
    after = line[close + 1] if close + 1 < len(line) else " "
    return inner_end in TERMINALS and after.isspace()


def _line_sentences(line: str) -> list[str]:
    spans = _quote_spans(line)
    pieces: list[str] = []
    start = position = 0
    while position < len(line):
        if position in spans:
            position = spans[position]
            if _closing_quote_ends(line, position):
                pieces.append(line[start : position + 1])
                start = position + 1
            position += 1
            continue
        end, position = _boundary_after(line, position)
        if end is not None:
            pieces.append(line[start:end])
            start = end
    pieces.append(line[start:])
    return pieces


def _is_sentence(piece: str) -> bool:
    return any(char.isalnum() for char in piece)


def _unquoted(text: str) -> str:
    """`text` without a pair of double quotes around the whole of it (else unchanged)."""
    body = text.strip()
    for left, right in (('"', '"'), ("“", "”")):
        inner = body[1:-1]
        if (
            len(body) >= 2
            and body[0] == left
            and body[-1] == right
            and left not in inner
            and right not in inner
        ):
            return inner
    return text


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, stripped, in order (the module docstring's rules)."""
    sentences: list[str] = []
    for line in _unquoted(text).splitlines():
        if _TITLE_LINE.match(line):
            continue
        body = _LIST_MARKER.sub("", line, count=1)
        sentences += [piece.strip() for piece in _line_sentences(body) if _is_sentence(piece)]
    return sentences
