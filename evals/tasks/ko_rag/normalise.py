"""Answer normalisation that keeps numbers, units, dates, names and command-line options exact.

Morpheme bags give a wrong number most of the credit ("4년" vs "5년" shares "년"). Here an answer is
rewritten first (NFKC, lower case; escape sequences left in the text, a literal `\\n` or a terminal
colour code, to spaces; dates in every spelling to one; "N분의 M" to "M/N"; Korean numerals in any
form to their values in digits, `numerals.numbers_as_digits`: "삼 년", "서른 개", "3억 5천만 원",
"350백만원", "약 137억원"; 퍼센트 to %), then cut into *exact spans* and ordinary text:

- a date `2010-11-12` or `2010-11` (from "2010. 11. 12.", "2010년 11월 12일", "2010-11-12",
  "'24. 3. 1.", "’09. 12");
- a fraction `2/3` (from "3분의 2", "삼분의 이");
- a command-line option `--purge`, `-y`;
- a word mixing Latin letters and digits (`i386`, `ext4`), or Latin words joined by `-`, `.`, `+`
  or `_` (`debian-faq-de`, `apt-get`, `www.debian.org`): a package or file name is one name;
- a number with the unit written after it, `4년`, `8세`, `71조` (the article prefix 제 dropped),
  `50%`, `1000` (thousands commas dropped), equivalent counters as one (`2번` = `2회`).

An exact span is one token, so a different digit, unit or name suffix is a different token; the
scorer then gives F1 0 when the prediction lacks any of the reference's exact spans
(`answer_score.score_answer`). The text between spans goes through Kiwi (`korean.answer_tokens`):
particles, endings and punctuation dropped, negations (아니, 않, 안, 못, 없) counted.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from evals.tasks.ko_rag.korean import answer_tokens
from evals.tasks.ko_rag.numerals import numbers_as_digits

UNITS = (
    "개월", "주일", "시간", "가지", "차례", "사람", "퍼센트", "년", "월", "일", "세", "살", "명", "번", "회",
    "차", "개", "조", "항", "호", "장", "절", "관", "인", "분", "초", "시", "원", "억", "만", "천", "배",
    "주", "표", "건", "석", "위", "대", "쪽", "톤", "척", "학년", "%", "kb", "mb", "gb", "tb", "bit", "bps",
)  # fmt: skip
"""Units and counters a number keeps as part of its exact span (longest first where one prefixes
another: 개월 before 개)."""
UNIT_SYNONYMS = {"명": "인", "살": "세", "번": "회", "차례": "회"}
"""Counters that mean the same unit, written as the first in answers and as the second in the
documents ("10명" = "10인", "8살" = "8세", "2번" = "2차례" = "2회")."""
SINO_DIGITS = {"일": 1, "이": 2, "삼": 3, "사": 4, "오": 5, "육": 6, "칠": 7, "팔": 8, "구": 9, "십": 10}
"""Sino-Korean digits, rewritten only inside a spelled fraction ("삼분의 이" -> "3분의 2")."""

_SINO = "[" + "".join(SINO_DIGITS) + "]"
_SINO_FRACTION = re.compile(rf"(?<![가-힣])({_SINO})\s*분의\s*({_SINO})(?![가-힣])")
_FRACTION = re.compile(r"(\d+)\s*분의\s*(\d+)")
_DATE_DOTS = re.compile(r"(?<![\d.])(\d{4})\s*[.]\s*(\d{1,2})\s*[.]\s*(\d{1,2})\s*\.?(?!\d)")
_DATE_WORDS = re.compile(r"(\d{4})\s*년\s*(\d{1,2})\s*월(?:\s*(\d{1,2})\s*일)?")
_DATE_DASHES = re.compile(r"(?<!\d)(\d{4})[-/](\d{1,2})(?:[-/](\d{1,2}))?(?![\d/-])")
_SHORT_YEAR = r"['’‘`]\s?(\d{2})"
_SHORT_DATE = re.compile(_SHORT_YEAR + r"\s*[.]\s*(\d{1,2})(?:\s*[.]\s*(\d{1,2}))?\s*\.?(?!\d)")
_SHORT_YEAR_WORD = re.compile(_SHORT_YEAR + r"(?=\s*년)")
"""A year written with two digits after an apostrophe ("'24. 3. 1.", "’09. 12", "'11년도")."""
_MONTH_DOTS = re.compile(r"(?<![\d.])(\d{4})\s*\.\s*(\d{1,2})\s*\.(?!\s*\d)")
_MIDDLE_DOTS = str.maketrans(dict.fromkeys("\u2027\u30fb\u2219\u22c5\u318d", "\u00b7"))
"""The middle dots Korean documents join words with ("포괄적‧전략적", U+2027 in the bills), as one."""
_PERCENT_WORD = re.compile(r"(?<=\d)\s?프로(?![가-힣])")
"""The spoken 프로 after a number ("50프로" = "50%")."""
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ESCAPES = re.compile(r"\\[ntr]|\x1b\[[0-9;?]*[a-z]")
"""A literal `\\n`, `\\t`, `\\r` (an answer JSON-escaped twice) or an ANSI colour code (lower-cased): left
in, its letter would join the next number ("\\n5년" as the Latin-digit word `n5`) and hide the number."""
NAME = r"[a-z][a-z0-9]*(?:[-._+][a-z0-9]+)+"
"""Latin words joined by -, ., + or _ (a package, command or file name), one exact span."""
_UNIT = "|".join(re.escape(unit) for unit in sorted(UNITS, key=len, reverse=True))
EXACT_SPAN = re.compile(
    r"\d{4}-\d{1,2}(?:-\d{1,2})?(?![\d])"
    r"|\d+/\d+"
    r"|(?<![\w-])--?[a-z][\w-]*"
    r"|[a-z][a-z0-9._+-]*\d[a-z0-9._+-]*"
    rf"|{NAME}"
    rf"|(?:제\s?)?\d+(?:\.\d+)*(?:\s?(?:{_UNIT}))?"
)
"""What an exact span looks like in a rewritten answer (see the module docstring), first match wins."""
PLACEHOLDER = "qspan"
"""Stands for an exact span while Kiwi reads the answer (a Latin word Kiwi keeps whole)."""
_PLACEHOLDER_DIGITS = "abcdefghijklmnop"


def _date(year: str, month: str, day: str | None) -> str:
    return f"{int(year)}-{int(month)}" + (f"-{int(day)}" if day else "")


def _full_year(short: str) -> str:
    """A two-digit year as four: 00-69 in the 2000s, 70-99 in the 1900s ("'24" -> 2024, "'87" -> 1987)."""
    return f"{2000 + int(short) if int(short) < 70 else 1900 + int(short)}"


def _short_date(match: re.Match[str]) -> str:
    if not 1 <= int(match[2]) <= 12:  # a quoted decimal ("'12.5"), not a date
        return match[0]
    return _date(_full_year(match[1]), match[2], match[3])


def rewrite(text: str) -> str:
    """`text` in the one spelling the scorer compares: NFKC, lower case, escape sequences as spaces,
    dates as `Y-M-D`, fractions as `M/N`, numerals as their values in digits, 퍼센트 and 프로 as %."""
    text = unicodedata.normalize("NFKC", text).lower().translate(_MIDDLE_DOTS)
    text = _ESCAPES.sub(" ", text)
    text = _THOUSANDS.sub("", text)
    text = _SINO_FRACTION.sub(lambda m: f"{SINO_DIGITS[m[1]]}분의 {SINO_DIGITS[m[2]]}", text)
    text = _FRACTION.sub(lambda m: f"{m[2]}/{m[1]}", text)
    text = _SHORT_DATE.sub(_short_date, text)
    text = _SHORT_YEAR_WORD.sub(lambda m: _full_year(m[1]), text)
    text = numbers_as_digits(text)
    text = _DATE_WORDS.sub(lambda m: _date(m[1], m[2], m[3]), text)
    text = _DATE_DOTS.sub(lambda m: _date(m[1], m[2], m[3]), text)
    text = _MONTH_DOTS.sub(lambda m: _date(m[1], m[2], None), text)
    text = _DATE_DASHES.sub(lambda m: _date(m[1], m[2], m[3]), text)
    text = text.replace("퍼센트포인트", "%p").replace("퍼센트", "%")
    return _PERCENT_WORD.sub("%", text)


def _exact(span: str) -> str:
    """An exact span without spaces, the article prefix 제 ("제 71조" -> "71조") and unit synonyms."""
    span = re.sub(r"\s", "", span)
    span = span[1:] if span.startswith("제") else span
    for unit, same in UNIT_SYNONYMS.items():
        if span.endswith(unit) and span[: -len(unit)][-1:].isdigit():
            return span[: -len(unit)] + same
    return span


@dataclass(frozen=True)
class Normalised:
    """An answer as the scorer compares it."""

    items: tuple[tuple[str, ...], ...]
    """Its list items (split at commas, 와/과, 및), each a sequence of tokens."""
    exact: tuple[str, ...]
    """Its exact spans (numbers with units, dates, fractions, options, names), in order."""
    negations: int = 0
    """How many negations it holds (아니, 않, 안, 못, 없: `korean.NEGATIONS`)."""

    @property
    def tokens(self) -> list[str]:
        return [token for item in self.items for token in item]


@dataclass(frozen=True)
class _Holder:
    """Placeholders for the exact spans of one answer, and how to read them back out of Kiwi's tokens.

    Kiwi keeps a run of Latin letters as one token, so a placeholder next to letters is glued to them
    ("3D" -> placeholder + "d", "5GHz", "12PM", "1080p", a date + "abc"). Each placeholder
    therefore has the same number of index letters and a prefix the answer itself does not contain:
    a token splits into placeholders and its own letters unambiguously, whatever surrounds them."""

    prefix: str
    width: int
    pattern: re.Pattern[str]

    @classmethod
    def for_text(cls, text: str, count: int) -> _Holder:
        prefix = PLACEHOLDER
        while prefix in text:  # an answer that writes "qspan..." itself must not read as a span
            prefix += "z"  # z is no index letter: the answer's "qspanab" is not "qspanz" + index
        width = 1
        while len(_PLACEHOLDER_DIGITS) ** width < count:
            width += 1
        pattern = re.compile(re.escape(prefix) + f"([{_PLACEHOLDER_DIGITS}]{{{width}}})")
        return cls(prefix, width, pattern)

    def placeholder(self, index: int) -> str:
        letters = ""
        for _ in range(self.width):
            index, digit = divmod(index, len(_PLACEHOLDER_DIGITS))
            letters = _PLACEHOLDER_DIGITS[digit] + letters
        return self.prefix + letters

    def read(self, token: str, spans: list[str]) -> list[str]:
        """`token` with its placeholders (Kiwi may glue several, or letters, into one) as their spans;
        the text around them stays, as the tokens it would have been with a space between."""
        parts: list[str] = []
        start = 0
        for match in self.pattern.finditer(token):
            parts += [token[start : match.start()], spans[self._index(match[1])]]
            start = match.end()
        return [part for part in [*parts, token[start:]] if part]

    @staticmethod
    def _index(letters: str) -> int:
        index = 0
        for letter in letters:
            index = index * len(_PLACEHOLDER_DIGITS) + _PLACEHOLDER_DIGITS.index(letter)
        return index


@functools.lru_cache(maxsize=8192)  # distractor checks score the same few hundred answers again and again
def normalise(text: str) -> Normalised:
    """Tokens and exact spans of an answer (see the module docstring).

    Kiwi reads the whole answer with each exact span replaced by a Latin placeholder, so an ending
    after a span is still analysed as one ("5년입니다" -> 5년 + copula + ending, both dropped)."""
    rewritten = rewrite(text)
    matches = list(EXACT_SPAN.finditer(rewritten))
    spans = [_exact(match[0]) for match in matches]
    holder = _Holder.for_text(rewritten, len(spans))
    held, start = [], 0
    for index, match in enumerate(matches):
        held += [rewritten[start : match.start()], holder.placeholder(index)]
        start = match.end()
    items: list[list[str]] = [[]]
    negations = 0
    for token in answer_tokens("".join([*held, rewritten[start:]])):
        negations += token.negation
        if token.separator:
            items.append([])
            continue
        items[-1] += holder.read(token.form, spans)
    return Normalised(tuple(tuple(item) for item in items if item), tuple(spans), negations)
