"""ko_ifeval's length, format, keyword and start/end instructions (kwargs as in `instructions.py`).

- `length:sentences` {relation: "exactly" | "at least" | "at most", num}: sentences as
  `sentences.split_sentences` counts them; `length:max_chars` {max_chars}: characters other than
  whitespace, at most `max_chars`.
- `format:numbered_list` {num}: the lines that start with a number and a full stop ("1.", "2." — not
  "1.5") are exactly 1., 2., …, `num`. in order; `format:paragraphs` {num}: exactly `num` paragraphs
  separated by blank lines; `format:json`: the whole answer parses as JSON (inside a ```json or ```
  fence if it has one); `format:title`: somewhere a title in 《》 with something in it.
- `keywords:include` / `keywords:exclude` {keywords}: every / none of the keywords occurs as a substring
  (Korean particles attach to words: "김치를" holds "김치"), Latin letters compared case-insensitively.
- `startend:end_phrase` {phrase}: the answer ends with the phrase (trailing whitespace ignored, Latin
  letters case-insensitive); `startend:quotation`: the whole answer, trimmed, is inside one pair of
  double quotes ("…" or “…”).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from evals.tasks.ko_ifeval.sentences import split_sentences

RELATIONS = ("exactly", "at least", "at most")
"""The relations `length:sentences` takes."""
_NUMBERED = re.compile(r"^\s*(\d+)\.(?!\d)")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\u3000]*\n")
_FENCE = re.compile(r"^```[A-Za-z]*[ \t]*\n(?P<body>.*)\n```$", re.DOTALL)
_TITLE = re.compile(r"《[^《》\n]*[^\s《》][^《》\n]*》")
_QUOTES = (('"', '"'), ("“", "”"))


def sentences(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`length:sentences`."""
    count, num = len(split_sentences(response)), int(kwargs["num"])
    relation = kwargs["relation"]
    if relation == "exactly":
        return count == num
    return count >= num if relation == "at least" else count <= num


def max_chars(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`length:max_chars`."""
    return sum(1 for char in response if not char.isspace()) <= int(kwargs["max_chars"])


def numbered_list(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`format:numbered_list`."""
    numbers = [int(match[1]) for line in response.splitlines() if (match := _NUMBERED.match(line))]
    return numbers == list(range(1, int(kwargs["num"]) + 1))


def paragraphs(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`format:paragraphs`."""
    pieces = [piece for piece in _PARAGRAPH_BREAK.split(response.strip()) if piece.strip()]
    return len(pieces) == int(kwargs["num"])


def json_format(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`format:json`."""
    text = response.strip()
    fenced = _FENCE.match(text)
    try:
        json.loads(fenced["body"] if fenced else text)
    except ValueError:
        return False
    return True


def title(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`format:title`."""
    return _TITLE.search(response) is not None


def include(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`keywords:include`."""
    text = response.casefold()
    return all(keyword.casefold() in text for keyword in kwargs["keywords"])


def exclude(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`keywords:exclude`."""
    text = response.casefold()
    return not any(keyword.casefold() in text for keyword in kwargs["keywords"])


def end_phrase(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`startend:end_phrase`."""
    return response.rstrip().casefold().endswith(str(kwargs["phrase"]).rstrip().casefold())


def quotation(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`startend:quotation`."""
    text = response.strip()
    return len(text) >= 2 and any(text[0] == left and text[-1] == right for left, right in _QUOTES)
