"""Build evals/tasks/ko_ifeval/prompts.jsonl: 72 Korean requests, each asked three times with a different
combination of one to three verifiable instructions, phrased in Korean with kwargs that agree with each
other (a closing phrase in the register asked for, keywords in Hangul under ko:no_latin, no JSON fence
under ko:no_latin, list items as full sentences under a speech-level instruction).

    .venv/bin/python scripts/ko_ifeval_prompts.py   # rewrites the file; REVIEW.md says how it was read
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ko_ifeval_requests import REQUESTS

OUT = Path(__file__).resolve().parents[1] / "evals" / "tasks" / "ko_ifeval" / "prompts.jsonl"
SEED = 50

F, P, NL, NH, AK = "ko:formal_ending", "ko:polite_ending", "ko:no_latin", "ko:no_hanja", "ko:answer_in_korean"
S, MC = "length:sentences", "length:max_chars"
NUM, PAR, J, T = "format:numbered_list", "format:paragraphs", "format:json", "format:title"
INC, EXC, END, Q = "keywords:include", "keywords:exclude", "startend:end_phrase", "startend:quotation"

PATTERNS = [
    [F], [P], [NL], [NH], [AK], [S], [MC], [NUM], [PAR], [J], [T], [INC], [EXC], [END], [Q],
    [F, S], [P, S], [F, END], [P, END], [F, INC], [P, EXC], [NL, S], [NH, PAR], [AK, MC], [T, PAR],
    [T, S], [NUM, INC], [NUM, NL], [J, INC], [J, MC], [Q, MC], [Q, P], [EXC, S], [INC, END], [PAR, F],
    [MC, NH], [AK, T], [NUM, F], [NUM, P], [EXC, NL],
    [F, S, INC], [P, PAR, END], [T, PAR, EXC], [NL, NH, S], [F, MC, END], [NUM, EXC, AK], [J, EXC, NH],
    [Q, P, S], [T, F, S], [P, INC, MC], [PAR, INC, NL], [NUM, T, F], [AK, EXC, END], [J, AK, MC],
]  # fmt: skip

END_PHRASES = {
    F: ["이상입니다.", "감사합니다.", "도움이 되기를 바랍니다.", "참고하시기 바랍니다."],
    P: [
        "도움이 되었으면 좋겠어요.",
        "오늘도 좋은 하루 보내세요.",
        "궁금한 점은 언제든 물어보세요.",
        "이상이에요.",
    ],
    None: ["이상입니다.", "즐거운 하루 되세요!", "감사합니다.", "끝."],
}
PERSONAL = ("편지", "축하", "수필", "시를", "일기", "이야기", "응원")
"""Letters, poems, stories: a set closing phrase ("도움이 되기를 바랍니다.") does not fit them."""


def _batchim(word: str) -> bool:
    """Whether the last letter of `word` is a Hangul syllable with a final consonant (picks 이라는/라는)."""
    code = ord(word[-1]) - 0xAC00
    return 0 <= code < 11172 and code % 28 != 0


def _josa(word: str, with_final: str, without: str) -> str:
    return with_final if _batchim(word) else without


def _say(rng: random.Random, *options: str) -> str:
    return rng.choice(options)


def _register(ids: list[str]) -> str | None:
    return F if F in ids else P if P in ids else None


def _phrase(iid: str, kw: dict, ids: list[str], personal: bool, rng: random.Random) -> str:
    listed = NUM in ids
    if iid == F:
        options = [
            "모든 문장을 '-습니다', '-ㅂ니다'로 끝나는 합니다체로 써 주세요.",
            "격식을 갖춘 합니다체로만 답해 주세요. 모든 문장이 '~습니다'나 '~ㅂ니다'로 끝나야 합니다.",
            "공식 안내문처럼 합니다체를 쓰고, 해요체나 반말로 끝나는 문장이 없게 해 주세요.",
        ]
        text = _say(rng, *options[: 2 if personal else 3])
        return text + (" 목록의 각 항목도 합니다체 문장으로 끝맺어 주세요." if listed else "")
    if iid == P:
        text = _say(
            rng,
            "모든 문장을 해요체로, '~요'로 끝나게 써 주세요.",
            "친구에게 이야기하듯 부드러운 해요체로 써 주시되, 모든 문장이 '~요'로 끝나야 해요.",
            "'~습니다' 대신 '~해요', '~예요'처럼 해요체로만 써 주세요.",
        )
        return text + (" 목록의 각 항목도 '~요'로 끝나는 문장으로 써 주세요." if listed else "")
    if iid == NL:
        return _say(
            rng,
            "영어 알파벳은 한 글자도 쓰지 마세요.",
            "로마자를 전혀 쓰지 말고, 외래어도 한글로 적어 주세요.",
            "영문자를 하나도 넣지 말고 답해 주세요.",
        )
    if iid == NH:
        return _say(rng, "한자는 쓰지 말아 주세요.", "한자를 병기하지 말고 모두 한글로 써 주세요.")
    if iid == AK:
        return _say(
            rng,
            "반드시 한국어로 답해 주세요.",
            "영어 표현을 섞지 말고 한국어로 답해 주세요.",
            "답변은 한국어로만 작성해 주세요.",
        )
    if iid == S:
        n, rel = kw["num"], kw["relation"]
        if rel == "exactly":
            return _say(rng, f"정확히 {n}문장으로 답해 주세요.", f"딱 {n}개의 문장으로만 써 주세요.")
        if rel == "at least":
            return _say(rng, f"적어도 {n}문장 이상 써 주세요.", f"최소 {n}개의 문장으로 자세히 써 주세요.")
        return _say(rng, f"{n}문장 이내로 짧게 답해 주세요.", f"길어도 {n}문장을 넘기지 마세요.")
    if iid == MC:
        return _say(
            rng,
            f"공백을 빼고 {kw['max_chars']}자 이내로 써 주세요.",
            f"띄어쓰기를 제외한 글자 수가 {kw['max_chars']}자를 넘지 않게 해 주세요.",
        )
    if iid == NUM:
        n = kw["num"]
        return _say(
            rng,
            f"'1.', '2.'처럼 번호를 매긴 목록으로 정확히 {n}개 항목을 적어 주세요.",
            f"번호 목록(1. 2. 3. …) 형식으로 딱 {n}가지만 들어 주세요.",
        )
    if iid == PAR:
        n = kw["num"]
        return _say(
            rng,
            f"빈 줄로 구분한 {n}개의 문단으로 써 주세요.",
            f"문단 사이에 빈 줄을 하나씩 넣어 정확히 {n}문단으로 구성해 주세요.",
        )
    if iid == J:
        return _say(
            rng,
            '답 전체를 JSON 형식으로만 출력해 주세요. 키는 "제목"과 "내용"으로 해 주세요.',
            'JSON 객체 하나로만 답해 주세요(예: {"요약": "...", "핵심": ["...", "..."]}).',
            "다른 설명 없이 JSON으로만 답하고, 키 이름은 한글로 써 주세요.",
        )
    if iid == T:
        return _say(
            rng,
            "글의 맨 위에 《제목》처럼 겹화살괄호로 감싼 제목을 달아 주세요.",
            "제목을 하나 붙이고, 그 제목은 《 》 안에 넣어 주세요.",
        )
    if iid == INC:
        words, last = ", ".join(f"'{w}'" for w in kw["keywords"]), kw["keywords"][-1]
        called, object_ = _josa(last, "이라는", "라는"), _josa(last, "을", "를")
        return _say(
            rng, f"답에 {words}{called} 낱말을 꼭 넣어 주세요.", f"{words}{object_} 반드시 포함해 주세요."
        )
    if iid == EXC:
        word = kw["keywords"][0]
        called = _josa(word, "이라는", "라는")
        return _say(
            rng, f"'{word}'{called} 낱말은 쓰지 마세요.", f"'{word}'{called} 말은 한 번도 쓰지 말아 주세요."
        )
    if iid == END:
        phrase = kw["phrase"]
        last = next(char for char in reversed(phrase) if char.isalnum())
        return _say(
            rng,
            f'답변의 마지막은 정확히 "{phrase}"{_josa(last, "이라는", "라는")} 문구로 끝내 주세요.',
            f'글을 "{phrase}"{_josa(last, "으로", "로")} 마무리하고 그 뒤에는 아무것도 쓰지 마세요.',
        )
    return _say(rng, '답변 전체를 큰따옴표(")로 감싸 주세요.', "답 전체를 큰따옴표 한 쌍 안에 넣어 주세요.")


def _kwargs(iid: str, ids: list[str], request: tuple, rng: random.Random) -> dict:
    _, include, exclude, _ = request
    if iid == S:
        relation = rng.choice(["exactly", "at least", "at most"])
        low, high = {"exactly": (2, 5), "at least": (3, 6), "at most": (2, 4)}[relation]
        return {"relation": relation, "num": rng.randint(low, high)}
    if iid == MC:
        return {"max_chars": rng.choice([120, 150, 200, 250, 300]) if S not in ids else 300}
    if iid == NUM:
        return {"num": rng.randint(3, 6)}
    if iid == PAR:
        return {"num": rng.randint(2, 4)}
    if iid == INC:
        return {"keywords": list(include) if rng.random() < 0.6 else [include[0]]}
    if iid == EXC:
        return {"keywords": [exclude]}
    if iid == END:
        return {"phrase": rng.choice(END_PHRASES[_register(ids)])}
    return {}


def _personal(request: tuple) -> bool:
    return any(word in request[0] for word in PERSONAL)


def _patterns_for(index: int, request: tuple) -> list[list[str]]:
    personal = _personal(request)
    chosen: list[list[str]] = []
    step = 0
    while len(chosen) < 3:
        pattern = PATTERNS[(index * 3 + step * 7) % len(PATTERNS)]
        step += 1
        if (NUM in pattern and not request[3]) or (END in pattern and personal) or pattern in chosen:
            continue
        chosen.append(pattern)
    return chosen


def build() -> list[dict]:
    rng = random.Random(SEED)
    rows = []
    for index, request in enumerate(REQUESTS):
        for variant, ids in enumerate(_patterns_for(index, request)):
            kwargs = [_kwargs(iid, ids, request, rng) for iid in ids]
            asks = " ".join(
                _phrase(iid, kw, ids, _personal(request), rng) for iid, kw in zip(ids, kwargs, strict=True)
            )
            key = 1000 + index * 10 + variant
            rows.append(
                {"key": key, "prompt": f"{request[0]} {asks}", "instruction_id_list": ids, "kwargs": kwargs}
            )
    return rows


if __name__ == "__main__":
    lines = [json.dumps(row, ensure_ascii=False) for row in build()]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
