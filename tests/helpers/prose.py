"""Random Korean and English paragraphs: text no deduplication removes and no two windows share by chance."""

from __future__ import annotations

import random

KO_WORDS = (
    "국민 법률 대통령 국회 정부 법원 헌법 자유 권리 의무 선거 지방 자치 경제 교육 환경 재산 노동 복지 평등 "
    "주권 행정 사법 조약 예산 국방 외교 문화 과학 기술 보건 농업 어업 산업 무역 금융 조세 통일 평화 안전"
)


KO_ENDINGS = ("은", "는", "을", "를", "의", "에", "과", "로")


EN_WORDS = (
    "the a river school teacher town boat morning letter money house road friend mountain window paper "
    "quiet angry small old new red long walked said found thought gave took never always soon"
)


def korean_prose(seed: int, count: int) -> str:
    """`count` paragraphs of random Korean sentences: no two windows alike by chance."""
    rng = random.Random(seed)
    sentences = (
        " ".join(rng.choice(KO_WORDS.split()) + rng.choice(KO_ENDINGS) for _ in range(rng.randint(5, 9)))
        + " 있다."
        for _ in range(3 * count)
    )
    lines = list(sentences)
    return "\n\n".join(" ".join(lines[i : i + 3]) for i in range(0, len(lines), 3))


def english_prose(seed: int, count: int) -> str:
    rng = random.Random(seed)
    lines = [
        " ".join(rng.choice(EN_WORDS.split()) for _ in range(rng.randint(8, 14))).capitalize() + "."
        for _ in range(3 * count)
    ]
    return "\n\n".join(" ".join(lines[i : i + 3]) for i in range(0, len(lines), 3))
