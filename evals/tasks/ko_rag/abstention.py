"""Whether a generated answer declines to answer ("답할 수 없음", "문서에 나와 있지 않습니다", ...).

Looking for a substring is not enough both ways: models abstain in many phrasings, and an answer may
contain "알 수 없" or "답할 수 없" in another sense ("알 수 없는 패키지", "피고인은 답할 수 없다"). A
sentence abstains when, spaces removed, it is

    [lead-in words] + an abstention predicate + a closing ending

- lead-ins may only be words about the documents, the question or the answer ("주어진 문서에는",
  "해당 정보는", "죄송하지만"), so a sentence with its own subject ("국회의원은 ...") is a claim;
  between them and a predicate about information (INFO_PREDICATES: "정보가 없", "나와 있지 않") the
  sentence may name what is missing, as "X에 대한", "X에 관한", "X와 관련된", "X의" (SUBJECT):
  "제공된 문서에는 devscripts 메인테이너에 대한 정보가 없습니다";
- the predicate is one of ABSTAIN_PREDICATES ("답할 수 없", "알 수 없", "확인할 수 없", "나와 있지 않",
  "언급되지 않", "정보가 없", "모르겠", ...; a bare "없" only after a lead-in: "문서에 없습니다");
- the ending closes the statement (없음, 없습니다, 없다, 않아요, or a connective such as 없어서,
  않으므로; for 어렵-/곤란-/불가능- the 하 that follows); an adnominal or (but for 않았-) past ending
  makes the sentence a claim: "알 수 없는 오류", "답할 수 없었다".

Parenthetical remarks are left out of the sentence that holds them ("답할 수 없습니다 (문서에
해당 내용 없음)", or one cut off by the length limit: "알 수 없음 (문서에"); an answer in parentheses
alone is read as it is. English abstentions
("I cannot answer", "not mentioned in the document") count as well.
"""

from __future__ import annotations

import re
import unicodedata

LEAD_INS = (
    "죄송하지만", "죄송합니다", "유감스럽게도", "아쉽게도", "주어진", "제공된", "제시된", "위의", "위",
    "이", "그", "해당", "관련", "관련된", "문서", "자료", "본문", "지문", "글", "내용", "정보", "질문",
    "답", "정답", "답변", "근거", "이것", "그것", "에대한", "대한", "만으로는", "만으로", "으로는",
    "로는", "에서는", "에는", "에서", "에", "는", "은", "가", "을", "를", "의", "도", "로", "으로",
    "만", "상", "상으로는", ",",
)  # fmt: skip
"""Words that may precede an abstention predicate in its sentence (spaces removed)."""
ABSTAIN_PREDICATES = (
    r"(?:답|답변|대답|응답)(?:을|은|를)?(?:하|드리|해드리|해드|드)?(?:할|릴|드릴|을)수(?:가|는)?없",
    r"(?:답|답변|대답)(?:이|을|은|하기|하는것이)?(?:어렵|곤란|불가능|불가)",
    r"알(?:수|길)(?:가|는|이)?없",
    r"(?:확인|판단|파악|특정|추론|찾|찾을|알아낼)(?:할|을)?수(?:가|는)?없",
    r"(?:나와|나타나|언급되어|언급돼|명시되어|명시돼|기재되어|기재돼|포함되어|포함돼|제시되어|제시돼|적혀|쓰여)"
    r"(?:있지|있진)않",
    r"(?:나오|나타나|언급되|명시되|확인되|제시되|포함되|기재되|드러나)지(?:는)?않",
    r"(?:답|정답|답변|정보|내용|언급|근거|설명|자료)(?:이|가|은|는|도)?(?:없|존재하지않)",
    r"모르겠|모릅",
)
"""Abstention predicates as regular expressions over the sentence with spaces removed."""
INFO_PREDICATES = (
    r"(?:정보|내용|언급|설명|자료|기록|근거)(?:이|가|은|는|도)?(?:없|존재하지않|나와있지않|포함되어있지않)",
    r"(?:나와|언급되어|언급돼|명시되어|명시돼|기재되어|기재돼|포함되어|포함돼|제시되어|제시돼|적혀)(?:있지|있진)않",
    r"(?:나오|언급되|명시되|확인되|제시되|포함되|기재되)지(?:는)?않",
)
"""Predicates that say information is missing: the ones a named subject may precede."""
SUBJECT = (
    r".{1,60}?(?:에대한|에대해|에관한|와관련된|과관련된|와관련한|과관련한|관련|의.{1,12}?(?:이|가|은|는)|의)"
)
"""What a sentence names as missing, spaces removed ("devscripts메인테이너에대한", "헌법재판소의위치가")."""
ENDINGS = (
    "음", "습니다", "다", "어요", "아요", "네요", "어", "아", "어서", "아서", "으므로", "므로",
    "기때문에", "고", "으며", "며", "는데", "는데요", "지만", "습니다만", "으니", "니다", "음을",
    "니까", "요", "았습니다", "았음", "았다", "았어요", "합니다", "하다", "함", "해요", "해", "하여",
    "해서", "하고", "하므로", "하기때문에", "하며",
)  # fmt: skip
"""Endings that close an abstention predicate; anything else (없는, 없었다) makes the sentence a claim."""
ENGLISH = re.compile(
    r"\b(?:cannot|can't|can not|unable to) (?:be )?(?:answer|determine|find|tell)"
    r"|\bnot (?:mentioned|stated|given|provided|found|specified)\b|\bunanswerable\b|\bi don't know\b"
    r"|\bno (?:information|answer)\b"
)

_LEAD = "(?:" + "|".join(re.escape(word) for word in sorted(set(LEAD_INS), key=len, reverse=True)) + ")"
_ENDING = "|".join(sorted(ENDINGS, key=len, reverse=True))
_SENTENCE = re.compile(
    rf"^{_LEAD}*(?:(?:{'|'.join(ABSTAIN_PREDICATES)})|(?<=[에는은])없)(?:{_ENDING})?(?:(?<=[고며데만서니아어])|$)"
)
_NAMED = re.compile(
    rf"^{_LEAD}*{SUBJECT}{_LEAD}*(?:{'|'.join(INFO_PREDICATES)})(?:{_ENDING})?(?:(?<=[고며데만서니아어])|$)"
)
_PARENTHETICAL = re.compile(r"[(\[（][^()\[\]（）]*(?:[)\]）]|$)")
"""A parenthetical remark, closed or cut off at the end of the answer."""
_SENTENCE_BREAK = re.compile(r"[.!?。\n]+")
_NOISE = re.compile(r"[\s\"'“”‘’「」『』()\[\]*:~…-]+")


def _sentences(text: str) -> list[str]:
    """The sentences of `text` with spaces and quotes removed, parenthetical remarks left out (read
    instead when they are all the text holds)."""
    text = unicodedata.normalize("NFKC", text)
    outside = [_NOISE.sub("", part) for part in _SENTENCE_BREAK.split(_PARENTHETICAL.sub(" ", text))]
    if any(outside):
        return [part for part in outside if part]
    return [_NOISE.sub("", part) for part in _SENTENCE_BREAK.split(text) if _NOISE.sub("", part)]


def abstains(text: str) -> bool:
    """Whether an answer declines to answer (see the module docstring)."""
    if ENGLISH.search(text.lower()):
        return True
    sentences = _sentences(text)
    return any(_SENTENCE.match(sentence) or _NAMED.match(sentence) for sentence in sentences)
