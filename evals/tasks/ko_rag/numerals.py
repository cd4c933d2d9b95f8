"""Korean numbers written as words or with multipliers, rewritten to their values in digits.

The scorer compares numbers as exact spans (`normalise.py`), so every spelling of one value must reach
one string first:

- Sino-Korean numerals ("삼 년" -> "3년", "십오 세" -> "15세", "오십 퍼센트" -> "50 퍼센트"): a single
  digit word only before a unit it takes (SINO_UNITS), a longer word with 십/백/천 also on its own;
- the multipliers 십/백/천 and 만/억/조 after digits or numerals ("3억 5천만 원" -> "350000000 원",
  "350백만원" -> "350000000원", "1천 원" -> "1000 원", "137억원" -> "13700000000원"); 조 stays an
  article number ("제71조", "71조") unless money or another group follows it ("2조 원", "2조 3천억");
- native numerals before a counter, tens and units ("서른 개" -> "30개", "스물다섯 살" -> "25살",
  "두 번" -> "2번"), and the longer ones on their own ("다섯" -> "5");
- hedges next to a number dropped ("약 137억원", "10명 정도", "150명가량" read as the number).

A word that only looks like a numeral is left as it is: a numeral inside a longer Hangul word
("동일", "이번"), a bare multiplier ("만 18세" keeps 만), "이", "일", "사" without a unit.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

SINO_DIGITS = {"일": 1, "이": 2, "삼": 3, "사": 4, "오": 5, "육": 6, "칠": 7, "팔": 8, "구": 9}
"""Sino-Korean digit words."""
SMALL_MULTIPLIERS = {"십": 10, "백": 100, "천": 1000}
BIG_MULTIPLIERS = {"만": 10**4, "억": 10**8, "조": 10**12}
SINO_UNITS = (
    "개월", "학년", "퍼센트", "%", "년", "월", "일", "세", "원", "항", "호", "조", "회", "층", "분", "초",
    "배", "위", "등", "차", "인", "달러", "엔",
)  # fmt: skip
"""Units a Sino-Korean numeral of two or more syllables takes ("이십 회", "삼천 원")."""
SINGLE_UNITS = ("개월", "학년", "퍼센트", "%", "년", "월", "일", "세", "층")
"""Units a one-syllable Sino-Korean digit takes: the ones no common word is spelled as digit + unit
("사회", "구분", "사원", "이주" stay words)."""
PARTICLES = (
    "이다", "입니다", "이며", "이고", "이상", "이하", "이내", "미만", "초과", "이", "가", "은", "는", "을",
    "를", "의", "에", "에서", "도", "으로", "로", "까지", "부터", "만", "여",
)  # fmt: skip
"""Particles and endings that may follow a number written with multipliers ("5천이다", "3만 이상")."""
NATIVE_TENS = {
    "열": 10, "스무": 20, "스물": 20, "서른": 30, "마흔": 40, "쉰": 50, "예순": 60, "일흔": 70,
    "여든": 80, "아흔": 90,
}  # fmt: skip
NATIVE_UNITS = {
    "하나": 1, "한": 1, "둘": 2, "두": 2, "셋": 3, "세": 3, "석": 3, "넷": 4, "네": 4, "넉": 4,
    "다섯": 5, "여섯": 6, "일곱": 7, "여덟": 8, "아홉": 9,
}  # fmt: skip
NATIVE_ALONE = (
    "다섯", "여섯", "일곱", "여덟", "아홉", "하나", "스물", "서른", "마흔", "예순", "일흔", "여든", "아흔",
)  # fmt: skip
"""Native numerals read as numbers without a counter: words no common Korean word is spelled as."""
COUNTERS = (
    "번", "명", "개", "가지", "차례", "사람", "살", "달", "권", "곳", "군데", "시간", "장", "표", "해",
    "마리", "채", "척",
)  # fmt: skip
"""Counters that take native numerals ("두 번", "서른 개")."""
MONEY = ("원", "달러", "엔", "위안")
"""Units after which 조 is the multiplier (a trillion), not an article."""
HEDGES_BEFORE = ("대략", "약")
HEDGES_AFTER = ("정도", "가량", "쯤", "남짓")

_SINO_CHARS = "".join(SINO_DIGITS) + "".join(SMALL_MULTIPLIERS)
_ALL_CHARS = _SINO_CHARS + "".join(BIG_MULTIPLIERS)
_PART = re.compile(r"\d+(?:\.\d+)?|[" + _ALL_CHARS + "]")


def _alternatives(words: tuple[str, ...] | list[str]) -> str:
    return "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True))


_BIG = "[만억조]"
_START = rf"(?:\d+(?:\.\d+)?|[{_SINO_CHARS}])"
_BODY = rf"(?:\d+(?:\.\d+)?|[{_ALL_CHARS}]|(?<={_BIG})\s(?=[\d{_SINO_CHARS}]))*"
_CANDIDATE = re.compile(rf"(?:(?<![\d.])(?=\d)|(?<![가-힣\d.]))({_START}{_BODY})")
_UNIT_AHEAD = re.compile(rf"\s?(?:{_alternatives(SINO_UNITS + COUNTERS)})")
_SINGLE_UNIT_AHEAD = re.compile(rf"\s?(?:{_alternatives(SINGLE_UNITS)})")
_PARTICLE_AHEAD = re.compile(rf"(?:{_alternatives(PARTICLES)})")
_MONEY_AHEAD = re.compile(rf"\s?(?:{_alternatives(MONEY)})")
_NATIVE = re.compile(
    rf"(?<![가-힣])(?:({_alternatives(list(NATIVE_TENS))})\s?)?({_alternatives(list(NATIVE_UNITS))})?"
    rf"(?<=[가-힣])\s?(?=(?:{_alternatives(COUNTERS)}))"
)
_NATIVE_ALONE = re.compile(rf"(?<![가-힣])({_alternatives(NATIVE_ALONE)})(?![가-힣])")
_HEDGE_BEFORE = re.compile(rf"(?<![가-힣])(?:{_alternatives(HEDGES_BEFORE)})\s*(?=\d)")
_HEDGE_AFTER = re.compile(rf"(?<=[\d%가-힣])\s*(?:{_alternatives(HEDGES_AFTER)})(?![가-힣])")
_NUMBER_BEFORE = re.compile(r"\d[%가-힣]{0,3}$")


def value_of(text: str) -> Decimal | None:
    """The value of a numeral made of digits, Sino-Korean digit words and multipliers ("3억5천만",
    "350백만", "십오", "1.5억"), spaces ignored; None when the parts do not form one number
    ("이삼", "천백천", "3 4")."""
    parts = _PART.findall(text)
    if "".join(parts) != re.sub(r"\s", "", text) or not parts:
        return None
    total, section, pending = Decimal(0), Decimal(0), None
    last_small, last_big = 10**5, 10**13
    for part in parts:
        if part in SMALL_MULTIPLIERS or part in BIG_MULTIPLIERS:
            factor = SMALL_MULTIPLIERS.get(part) or BIG_MULTIPLIERS[part]
            if part in SMALL_MULTIPLIERS:
                if factor >= last_small:
                    return None
                section += (Decimal(1) if pending is None else pending) * factor
                last_small = factor
            else:
                section += Decimal(0) if pending is None else pending
                if factor >= last_big or section == 0:
                    return None
                total += section * factor
                section, last_small, last_big = Decimal(0), 10**5, factor
            pending = None
        elif pending is not None:
            return None
        else:
            pending = Decimal(part) if part[0].isdigit() else Decimal(SINO_DIGITS[part])
    return total + section + (Decimal(0) if pending is None else pending)


def _digits(value: Decimal) -> str:
    """`value` written in plain digits (no exponent, no trailing zeros after a point)."""
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _ends_word(ahead: str) -> bool:
    """Whether the text after a numeral lets it be a word of its own: nothing, no Hangul, a unit or
    counter, or a particle."""
    if not re.match(r"[가-힣]", ahead[:1]):
        return True
    return bool(_UNIT_AHEAD.match(ahead) or _PARTICLE_AHEAD.match(ahead))


def _accept(candidate: str, ahead: str) -> bool:
    """Whether a numeral-looking `candidate` followed by `ahead` is a number (module docstring)."""
    if candidate.endswith("조") and not _MONEY_AHEAD.match(ahead):
        return False  # an article number ("71조"), or 조 followed by no group or money
    if any(char.isdigit() for char in candidate):  # plain digits stay as they are
        return any(char in _ALL_CHARS for char in candidate) and _ends_word(ahead)
    if candidate in SINO_DIGITS:
        return bool(_SINGLE_UNIT_AHEAD.match(ahead))
    if _UNIT_AHEAD.match(ahead):
        return True
    has_small = any(char in SMALL_MULTIPLIERS for char in candidate)
    return has_small and len(candidate) > 1 and _ends_word(ahead)


def _candidate(match: re.Match[str]) -> str:
    candidate = match[1].rstrip()
    text, end = match.string, match.start(1) + len(candidate)
    while candidate:
        value = value_of(candidate)
        if value is not None and _accept(candidate, text[end:]):
            return _digits(value) + match[1][len(candidate) :]
        candidate, end = candidate[:-1].rstrip(), end - 1  # try the shorter reading ("5천이다": 5천)
    return match[1]


def _native(match: re.Match[str]) -> str:
    tens, units = match[1], match[2]
    if not tens and not units:
        return match[0]
    return str((NATIVE_TENS[tens] if tens else 0) + (NATIVE_UNITS[units] if units else 0))


def _hedge_after(match: re.Match[str]) -> str:
    before = match.string[max(0, match.start() - 4) : match.start()]
    return "" if _NUMBER_BEFORE.search(before) else match[0]


def numbers_as_digits(text: str) -> str:
    """`text` (NFKC, lower case, thousands commas dropped) with its numerals as digits and the hedges
    next to numbers dropped (see the module docstring)."""
    text = _NATIVE.sub(_native, text)
    text = _NATIVE_ALONE.sub(lambda m: str(NATIVE_TENS.get(m[1]) or NATIVE_UNITS[m[1]]), text)
    text = _CANDIDATE.sub(_candidate, text)
    text = _HEDGE_BEFORE.sub("", text)
    return _HEDGE_AFTER.sub(_hedge_after, text)


def as_number(text: str) -> Decimal | None:
    """The value of `text` when it is one number in digits ("1000", "2.5"); None otherwise."""
    try:
        return Decimal(text) if re.fullmatch(r"\d+(?:\.\d+)?", text) else None
    except InvalidOperation:
        return None
