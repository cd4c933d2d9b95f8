"""ko_ifeval's verifiers on Korean answers: every instruction id on at least five answers that follow it
and five that do not (one table), strict, plus what the loose reading forgives."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from evals.tasks.ko_ifeval.instructions import INSTRUCTIONS, check_kwargs, follows
from evals.tasks.ko_ifeval.scoring import score_response, totals

F, P = "ko:formal_ending", "ko:polite_ending"
NL, NH, AK = "ko:no_latin", "ko:no_hanja", "ko:answer_in_korean"
S3 = ("length:sentences", {"relation": "exactly", "num": 3})
S2_LEAST = ("length:sentences", {"relation": "at least", "num": 2})
S2_MOST = ("length:sentences", {"relation": "at most", "num": 2})
MC = ("length:max_chars", {"max_chars": 20})
NUM = ("format:numbered_list", {"num": 3})
PAR = ("format:paragraphs", {"num": 2})
INC = ("keywords:include", {"keywords": ["김치", "두부"]})
EXC = ("keywords:exclude", {"keywords": ["설탕", "MSG"]})
END = ("startend:end_phrase", {"phrase": "감사합니다."})
J, T, Q = "format:json", "format:title", "startend:quotation"

CASES: list[tuple[str | tuple[str, dict[str, Any]], str, bool]] = [
    (F, "오늘은 날씨가 맑습니다. 산책하기 좋습니다.", True),
    (F, "회의는 세 시에 시작합니까? 자료를 미리 준비하십시오.", True),
    (F, "이것은 사과입니다!", True),
    (F, "《안내》\n1. 물을 충분히 마십니다.\n2. 일찍 잡니다.", True),
    (F, '그는 "좋아요."라고 말했습니다. 저도 동의합니다.', True),
    (F, "오늘은 날씨가 맑아요. 산책하기 좋습니다.", False),
    (F, "산책하기 좋다.", False),
    (F, "감사합니다. 다음에 또 봐요!", False),
    (F, "정리하면 다음과 같습니다.\n1. 물 마시기", False),
    (F, "결과는 다음과 같습니다 (2024)", False),
    (P, "오늘은 날씨가 맑아요. 산책하기 좋네요.", True),
    (P, "이건 제 책이에요! 같이 읽을까요?", True),
    (P, "그렇죠~ 정말 맛있어요.", True),
    (P, "1. 물을 마셔요.\n2. 일찍 자요.", True),
    (P, "그렇군요... 이제 알겠어요.", True),
    (P, "오늘은 날씨가 맑습니다.", False),
    (P, "날씨가 좋아요. 산책 가자.", False),
    (P, "맛있어요. 최고", False),
    (P, "요약: 물 마시기", False),
    (P, "   ", False),
    (NL, "인공지능은 빠르게 발전하고 있습니다.", True),
    (NL, "에이피아이를 호출하면 결과가 나와요.", True),
    (NL, "가격은 3,000원이고 무게는 5킬로그램입니다.", True),
    (NL, "① 첫째, ② 둘째.", True),
    (NL, "『토지』는 박경리의 소설입니다.", True),
    (NL, "API를 호출하면 결과가 나와요.", False),
    (NL, "무게는 5kg입니다.", False),
    (NL, "ＡＩ가 발전합니다.", False),
    (NL, "카페(café)에 갔어요.", False),
    (NL, "정답은 B입니다.", False),
    (NH, "대한민국은 민주공화국이다.", True),
    (NH, "학교에 갑니다. 2024년입니다.", True),
    (NH, "Seoul은 한국의 수도입니다.", True),
    (NH, "ひらがな는 한자가 아닙니다.", True),
    (NH, "인공지능(에이아이)의 시대입니다.", True),
    (NH, "대한민국(大韓民國)은 민주공화국이다.", False),
    (NH, "학교(學校)에 갑니다.", False),
    (NH, "이것은 中입니다.", False),
    (NH, "겨울의 한자는 冬입니다.", False),
    (NH, "호환용 한자 豈도 한자입니다.", False),
    (AK, "오늘은 날씨가 맑습니다.", True),
    (AK, "인공지능은 영어로 AI라고 부르며 요즘 많은 곳에서 쓰입니다.", True),
    (AK, "가격은 3,000원이고 배송은 2일 걸립니다.", True),
    (AK, "서울특별시 종로구 세종대로 209는 정부서울청사의 주소입니다.", True),
    (AK, "한국어로만 답하기를 꾸준히 연습하고 있어요, OK.", True),
    (AK, "The weather is nice today.", False),
    (AK, "오늘 weather가 really nice합니다.", False),
    (AK, "大韓民國 헌법", False),
    (AK, "12345 !!!", False),
    (AK, "인공지능은 AI라고도 부릅니다.", False),
    (S3, "첫째입니다. 둘째입니다. 셋째입니다.", True),
    (S3, "정말요?! 네, 맞아요. 그럼 가요.", True),
    (S3, "《제목》\n하나다. 둘이다. 셋이다.", True),
    (S3, "1. 사과\n2. 배\n3. 감", True),
    (S3, '그는 "안녕. 잘 가."라고 말했다. 나는 웃었다. 끝이다.', True),
    (S3, "첫째입니다. 둘째입니다.", False),
    (S3, "첫째입니다. 둘째입니다. 셋째입니다. 넷째입니다.", False),
    (S3, "원주율은 3.14입니다.", False),
    (S3, "그런데... 잘 모르겠어요.", False),
    (S3, "그렇군요... 알겠어요. 고마워요. 안녕히 계세요.", False),
    (S2_LEAST, "하나입니다. 둘입니다.", True),
    (S2_LEAST, "하나입니다. 둘입니다. 셋입니다.", True),
    (S2_MOST, "하나입니다.", True),
    (S2_MOST, "하나입니다. 둘입니다.", True),
    (S2_MOST, "www.go.kr에서 확인하세요. 끝.", True),
    (S2_LEAST, "하나입니다.", False),
    (S2_MOST, "하나입니다. 둘입니다. 셋입니다.", False),
    (S2_LEAST, "", False),
    (S2_MOST, "가요. 와요. 봐요.", False),
    (S2_LEAST, "《제목만 있는 글》", False),
    (MC, "짧게 답합니다.", True),
    (MC, "공백 은 세지 않습니다 정말 로", True),
    (MC, "열 글자 이하의 답", True),
    (MC, "가" * 20, True),
    (MC, "가 " * 20, True),
    (MC, "가" * 21, False),
    (MC, "이 답은 공백을 빼고도 스무 자를 훌쩍 넘는 아주 긴 문장입니다.", False),
    (MC, "1234567890 1234567890 1", False),
    (MC, "가나다라마바사아자차카타파하가나다라마바사", False),
    (MC, "ABCDEFGHIJKLMNOPQRSTU", False),
    (NUM, "1. 사과\n2. 배\n3. 감", True),
    (NUM, "다음과 같습니다.\n1. 사과\n2. 배\n3. 감\n이상입니다.", True),
    (NUM, "  1. 사과\n  2. 배\n  3. 감", True),
    (NUM, "1.사과\n2.배\n3.감", True),
    (NUM, "1. 사과\n- 빨갛다\n2. 배\n3. 감 (3.5kg)", True),
    (NUM, "1. 사과\n2. 배", False),
    (NUM, "1. 사과\n2. 배\n3. 감\n4. 귤", False),
    (NUM, "1. 사과\n3. 배\n2. 감", False),
    (NUM, "- 사과\n- 배\n- 감", False),
    (NUM, "1) 사과\n2) 배\n3) 감", False),
    (PAR, "첫 문단입니다.\n\n둘째 문단입니다.", True),
    (PAR, "첫 문단입니다.\n이어지는 줄입니다.\n\n둘째 문단입니다.", True),
    (PAR, "\n첫 문단입니다.\n\n\n둘째 문단입니다.\n", True),
    (PAR, "첫 문단입니다.\n  \n둘째 문단입니다.", True),
    (PAR, "《제목》\n첫 문단입니다.\n\n둘째 문단입니다.", True),
    (PAR, "한 문단뿐입니다.", False),
    (PAR, "첫 줄입니다.\n둘째 줄입니다.", False),
    (PAR, "하나.\n\n둘.\n\n셋.", False),
    (PAR, "", False),
    (PAR, "하나.\n\n둘.\n\n셋.\n\n넷.", False),
    (J, '{"제목": "김치", "내용": "발효 음식입니다."}', True),
    (J, '```json\n{"요약": "좋아요"}\n```', True),
    (J, '```\n["사과", "배"]\n```', True),
    (J, '  {"핵심": ["하나", "둘"]}  \n', True),
    (J, "[1, 2, 3]", True),
    (J, '다음은 JSON입니다: {"제목": "김치"}', False),
    (J, '{"제목": "김치",}', False),
    (J, "{'제목': '김치'}", False),
    (J, '```json\n{"제목": "김치"}', False),
    (J, "제목: 김치", False),
    (T, "《봄의 노래》\n봄이 왔어요.", True),
    (T, "제목: 《가을 여행》", True),
    (T, "본문 뒤에 제목을 붙입니다. 《끝맺음》", True),
    (T, "《 첫눈 》\n눈이 와요.", True),
    (T, "《한강》과 《토지》를 읽었어요.", True),
    (T, "<<봄의 노래>>\n봄이 왔어요.", False),
    (T, "「봄의 노래」\n봄이 왔어요.", False),
    (T, "《》\n빈 제목입니다.", False),
    (T, "《   》\n빈 제목입니다.", False),
    (T, "제목 없는 글입니다.", False),
    (INC, "김치찌개에 두부를 넣어요.", True),
    (INC, "두부와 김치를 볶습니다.", True),
    (INC, "묵은지 김치, 그리고 두부.", True),
    (INC, "김치두부", True),
    (INC, "재료: 김치 한 포기, 두부 한 모.", True),
    (INC, "김치찌개를 끓여요.", False),
    (INC, "두부를 부쳐요.", False),
    (INC, "된장찌개를 끓여요.", False),
    (INC, "김 치와 두 부", False),
    (INC, "", False),
    (EXC, "김치찌개를 끓여요.", True),
    (EXC, "단맛은 꿀로 냅니다.", True),
    (EXC, "조미료 없이 끓입니다.", True),
    (EXC, "설 탕은 넣지 않아요.", True),
    (EXC, "소금을 조금 넣습니다.", True),
    (EXC, "설탕을 한 숟가락 넣어요.", False),
    (EXC, "msg는 넣지 않아요.", False),
    (EXC, "흑설탕이 좋아요.", False),
    (EXC, "조미료(MSG) 없이.", False),
    (EXC, "   ", False),
    (END, "도와주셔서 감사합니다.", True),
    (END, "질문해 주셔서 감사합니다.  \n", True),
    (END, "이상입니다.\n감사합니다.", True),
    (END, "감사합니다.", True),
    (END, "답변을 마칩니다. 감사합니다.\n\n", True),
    (END, "감사합니다. 다음에 또 만나요.", False),
    (END, "감사합니다", False),
    (END, "감사합니다!", False),
    (END, '"감사합니다."', False),
    (END, "고맙습니다.", False),
    (Q, '"오늘은 날씨가 맑습니다."', True),
    (Q, '  "여러 줄의\n답변입니다."  ', True),
    (Q, "“둥근 따옴표도 큰따옴표입니다.”", True),
    (Q, '"그는 \'안녕\'이라고 했어요."', True),
    (Q, '"하나." "둘."', True),
    (Q, "오늘은 날씨가 맑습니다.", False),
    (Q, "'작은따옴표입니다.'", False),
    (Q, '"앞에만 있습니다.', False),
    (Q, '뒤에만 있습니다."', False),
    (Q, '"', False),
]  # fmt: skip


def _instruction(case: str | tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    return (case, {}) if isinstance(case, str) else case


@pytest.mark.parametrize(("case", "response", "expected"), CASES)
def test_each_instruction_on_korean_answers(
    case: str | tuple[str, dict[str, Any]], response: str, expected: bool
) -> None:
    instruction_id, kwargs = _instruction(case)
    assert check_kwargs(instruction_id, kwargs) is None
    assert follows(instruction_id, response, kwargs) is expected


def test_the_table_holds_five_passing_and_five_failing_answers_per_instruction() -> None:
    counts = Counter((_instruction(case)[0], expected) for case, _, expected in CASES)
    assert {iid for iid, _ in counts} == set(INSTRUCTIONS)
    assert all(counts[(iid, verdict)] >= 5 for iid in INSTRUCTIONS for verdict in (True, False)), counts


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "needle"),
    [
        ("ko:formal", {}, "unknown instruction id"),
        (F, {"num": 3}, "takes kwargs none"),
        ("length:sentences", {"relation": "less than", "num": 3}, "'exactly' or 'at least' or 'at most'"),
        ("length:sentences", {"relation": "exactly"}, "takes kwargs num, relation"),
        ("format:numbered_list", {"num": 0}, "an integer of at least 1"),
        ("format:numbered_list", {"num": True}, "an integer of at least 1"),
        ("keywords:include", {"keywords": "김치"}, "a non-empty list"),
        ("keywords:exclude", {"keywords": [""]}, "a non-empty list of non-empty strings"),
        ("startend:end_phrase", {"phrase": " "}, "a non-empty string"),
        (J, [], "must be a JSON object"),
    ],
)
def test_bad_kwargs_are_named(instruction_id: str, kwargs: Any, needle: str) -> None:
    problem = check_kwargs(instruction_id, kwargs)
    assert problem is not None and needle in problem


def test_loose_forgives_a_preamble_a_closing_line_and_bold_markup() -> None:
    response = "다음은 답변입니다:\n**1. 일찍 잡니다.**\n**2. 물을 마십니다.**\n도움이 되었으면 해요!"
    score = score_response(response, [F, "format:numbered_list"], [{}, {"num": 2}])
    assert score.follow_instruction_list == (False, False)
    assert score.loose_follow_instruction_list == (True, True)
    assert (score.follow_all, score.loose_follow_all) == (False, True)


def test_loose_does_not_forgive_what_no_reading_follows() -> None:
    score = score_response("첫 줄\n날씨가 맑다.\n끝 줄", [F], [{}])
    assert score.loose_follow_instruction_list == (False,)


def test_totals_count_prompts_and_instructions_apart() -> None:
    follow_one = score_response("날씨가 맑습니다.", [F, NL], [{}, {}])
    follow_none = score_response("It is sunny.", [F, NL], [{}, {}])
    follow_half = score_response("It is sunny입니다.", [F, NL], [{}, {}])
    result = totals([follow_one, follow_none, follow_half])
    assert (result.prompts, result.instructions) == (3, 6)
    assert result.prompt_strict == pytest.approx(1 / 3)
    assert result.instruction_strict == pytest.approx(3 / 6)
    assert totals([]).prompt_strict is None
