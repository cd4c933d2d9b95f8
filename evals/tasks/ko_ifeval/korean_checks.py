"""The Korean instructions of ko_ifeval: speech level of every sentence, and which scripts an answer uses.

- `ko:formal_ending`: every sentence ends in 합니다체 — a syllable with the final consonant ㅂ followed
  by 니다 or 니까 (…습니다, …ㅂ니다: 합니다, 입니다; …습니까, …ㅂ니까) or …십시오.
- `ko:polite_ending`: every sentence ends in 해요체 — on 요 (…아요, …어요, …예요, …에요, …네요, …까요)
  or on 죠, the contraction of 지요.

A sentence's ending is read after dropping what may close it: punctuation, quotes, brackets, tildes,
emoticon marks and spaces ("좋습니다!", "그렇죠~", "입니다 :)"); a digit or a Latin letter at its end
is part of it ("…입니다 (2024)" does not end in 합니다체). A line that is only a title in 《》 and a list
marker are not sentences (`sentences.split_sentences`); an answer without a sentence follows neither.

- `ko:no_latin`: no Latin letter (ASCII, accented or full-width); `ko:no_hanja`: no Han character (CJK
  unified or compatibility ideographs), both by `evals.tasks.language_fidelity.script`;
- `ko:answer_in_korean`: Hangul is at least 90% of the letters (Han and Latin letters count, digits and
  punctuation do not); an answer without letters is not in Korean.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evals.tasks.ko_ifeval.sentences import split_sentences
from evals.tasks.language_fidelity import HAN, LATIN, script
from kqe.core.hangul import hangul_letters

KOREAN_SHARE = 0.9
"""The least share of letters that must be Hangul for `ko:answer_in_korean`."""
_HANGUL_BASE, _FINALS, _FINAL_BIEUP = 0xAC00, 28, 17
"""Hangul syllables are U+AC00 + (initial × 21 + vowel) × 28 + final; final 17 is ㅂ."""


def sentence_ending(sentence: str) -> str:
    """`sentence` without the punctuation, quotes, brackets and spaces that close it."""
    end = len(sentence)
    while end > 0 and not sentence[end - 1].isalnum():
        end -= 1
    return sentence[:end]


def _final_bieup(syllable: str) -> bool:
    code = ord(syllable) - _HANGUL_BASE
    return 0 <= code < 11172 and code % _FINALS == _FINAL_BIEUP


def is_formal(sentence: str) -> bool:
    """Whether `sentence` ends in 합니다체 (…습니다, …ㅂ니다, …습니까, …ㅂ니까, …십시오)."""
    word = sentence_ending(sentence)
    if word.endswith("십시오"):
        return True
    return len(word) >= 3 and word.endswith(("니다", "니까")) and _final_bieup(word[-3])


def is_polite(sentence: str) -> bool:
    """Whether `sentence` ends in 해요체 (on 요, or on 죠 for 지요)."""
    return sentence_ending(sentence).endswith(("요", "죠"))


def _every_sentence(test: Callable[[str], bool]) -> Callable[[str, Mapping[str, Any]], bool]:
    def check(response: str, kwargs: Mapping[str, Any]) -> bool:
        sentences = split_sentences(response)
        return bool(sentences) and all(test(sentence) for sentence in sentences)

    return check


formal_ending = _every_sentence(is_formal)
"""`ko:formal_ending`."""
polite_ending = _every_sentence(is_polite)
"""`ko:polite_ending`."""


def no_latin(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`ko:no_latin`: no Latin letter anywhere."""
    return all(script(char) != LATIN for char in response)


def no_hanja(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`ko:no_hanja`: no Han character anywhere."""
    return all(script(char) != HAN for char in response)


def answer_in_korean(response: str, kwargs: Mapping[str, Any]) -> bool:
    """`ko:answer_in_korean`: Hangul is at least `KOREAN_SHARE` of the letters."""
    hangul, letters = hangul_letters(response)
    return letters > 0 and hangul / letters >= KOREAN_SHARE
