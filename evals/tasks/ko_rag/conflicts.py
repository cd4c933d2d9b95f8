"""When the token a prediction differs in is the answer's content, so the shared rest earns nothing.

A bag of morphemes credits "systemctl disable" 0.5 against "systemctl enable", "국민이 아니다" 0.67
against "국민". A prediction *contradicts* an accepted answer (F1 0, and `contains` 0) when

- it holds the contrary of one of the answer's words (CONTRARIES: enable/disable, 허용/금지, 이상/미만
  ...), with or without the word itself;
- its negations differ in parity from the answer's (`Normalised.negations`: "국민이 아니다" vs "국민",
  "제한 있음" vs "제한 없음" through the 없 it lacks);
- it swaps a Latin word of the answer for another Latin word (a command, option or name:
  "systemctl start" for "systemctl enable"); a missing word alone is partial credit as before.

Package names with a suffix ("debian-faq" vs "debian-faq-de") are exact spans (`normalise.py`) and
score 0 the same way a wrong number does.

`conflicting_spans` is what `contains` adds: a prediction that also names a second value of the
kind the answer's span is (another number with the same unit, another date, another option) has not
committed to the answer ("5년 또는 4년"); nor has one that gives a one-item answer as one item of a
list of candidates (`lists_candidates`: "국민의 권리, 법률, 또는 법률적 의무" for "법률").
"""

from __future__ import annotations

import re

from evals.tasks.ko_rag.normalise import Normalised

CONTRARY_PAIRS = (
    ("enable", "disable"), ("install", "remove"), ("install", "uninstall"), ("start", "stop"),
    ("on", "off"), ("true", "false"), ("yes", "no"), ("allow", "deny"), ("mount", "umount"),
    ("load", "unload"), ("lock", "unlock"), ("hold", "unhold"), ("add", "remove"), ("upgrade", "downgrade"),
    ("허용", "금지"), ("허용", "불허"), ("찬성", "반대"), ("포함", "제외"), ("이상", "이하"),
    ("이상", "미만"), ("초과", "이하"), ("초과", "미만"), ("증가", "감소"), ("상승", "하락"),
    ("최대", "최소"), ("이전", "이후"),
    ("활성화", "비활성화"), ("가능", "불가능"), ("적용", "미적용"), ("설치", "제거"), ("켜", "끄"),
    ("유효", "무효"), ("합법", "불법"), ("동의", "거부"), ("가결", "부결"), ("상원", "하원"),
)  # fmt: skip
"""Words whose swap reverses an answer: each names the other as its contrary."""
CONTRARIES: dict[str, set[str]] = {}
for _left, _right in CONTRARY_PAIRS:
    CONTRARIES.setdefault(_left, set()).add(_right)
    CONTRARIES.setdefault(_right, set()).add(_left)

_LATIN = re.compile(r"[a-z][a-z0-9]*")


def _latin(tokens: list[str]) -> set[str]:
    return {token for token in tokens if _LATIN.fullmatch(token)}


def contradicts(predicted: Normalised, reference: Normalised) -> bool:
    """Whether `predicted` reverses or swaps the content of `reference` (module docstring)."""
    said, gold = set(predicted.tokens), set(reference.tokens)
    if any(CONTRARIES.get(word, set()) & (said - gold) for word in gold):
        return True
    if predicted.negations % 2 != reference.negations % 2:
        return True
    said_latin, gold_latin = _latin(predicted.tokens), _latin(reference.tokens)
    return bool(gold_latin - said_latin) and bool(said_latin - gold_latin)


def span_kind(span: str) -> str:
    """What kind of value an exact span is: `date`, `fraction`, `option`, `name`, or `number <unit>`
    (`number` for a bare number)."""
    if re.fullmatch(r"\d{4}-\d{1,2}(?:-\d{1,2})?", span):
        return "date"
    if re.fullmatch(r"\d+/\d+", span):
        return "fraction"
    if span.startswith("-"):
        return "option"
    number = re.fullmatch(r"\d+(?:\.\d+)*(.*)", span)
    return f"number {number[1]}".rstrip() if number else "name"


def conflicting_spans(predicted: Normalised, reference: Normalised) -> bool:
    """Whether `predicted` holds a value of the same kind as one of the reference's exact spans (names
    aside) that the reference does not hold: a second candidate answer."""
    kinds = {span_kind(span) for span in reference.exact} - {"name"}
    return any(span_kind(span) in kinds and span not in reference.exact for span in predicted.exact)


def lists_candidates(predicted: Normalised, reference: Normalised) -> bool:
    """Whether a one-item reference stands as a list item of its own among other items of the
    prediction (a list of candidates, not an answer)."""
    if len(reference.items) != 1 or len(predicted.items) < 2:
        return False
    return any(set(item) == set(reference.items[0]) for item in predicted.items)
