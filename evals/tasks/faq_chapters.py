"""`faq_chapter_ko` / `faq_chapter_en`: a parallel Korean/English pair built offline from the Debian FAQ.

Which chapter is this question in? Each translated section of the FAQ is one item in both languages:
its question (Korean from `debian-faq-ko`, English from `debian-faq`, same version) and four chapter
titles in the same language, the right one and three others picked and ordered the same way in both
(seeded by the section number). The two tasks hold the same questions item for item and share item
ids after the task name (`<task>/chapter_NN/<section>`), so the Korean-vs-English loss gap is taken on
matched items (evals/statistics/parallel.py). `subject` is the chapter: the bootstrap resamples chapters.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from evals.tasks.benchmark_data import Row, Source, files_sha, offline_rows
from evals.tasks.debian_faq import FILES, faq_questions
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace

_CHAPTER_LINE = re.compile(r"^(\d+)\.\s+(.*\S)\s*$")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
DISTRACTORS = 3


def faq_chapters(path: Path) -> dict[str, str]:
    """Chapter number -> title, from the table of contents of one FAQ text."""
    text = path.read_text(encoding="utf-8").replace("\xa0", " ")
    start = text.find("\n1. ") + 1
    end = text.find("\n\n", start)
    if start == 0 or end < 0:
        raise UserError(f"{path}: no table of contents found: run `make setup` to fetch the FAQ again")
    lines = (_CHAPTER_LINE.match(line) for line in text[start:end].split("\n"))
    return {match.group(1): match.group(2) for match in lines if match}


def faq_chapter_rows(ko: Path, en: Path, language: str, task: str) -> list[Row]:
    """Every translated section as an item in `language` (`ko` or `en`), the same items in both."""
    questions = {"ko": faq_questions(ko), "en": faq_questions(en)}
    chapters = {"ko": faq_chapters(ko), "en": faq_chapters(en)}
    both = sorted(set(chapters["ko"]) & set(chapters["en"]), key=int)
    rows = []
    for number, korean in questions["ko"].items():
        chapter = number.split(".")[0]
        if number not in questions["en"] or not _HANGUL.search(korean) or chapter not in both:
            continue  # untranslated headings
        rng = random.Random(f"faq_chapter/{number}")
        picked = [*rng.sample([c for c in both if c != chapter], DISTRACTORS), chapter]
        rng.shuffle(picked)
        subject = f"chapter_{int(chapter):02d}"
        rows.append(
            {
                "item_id": f"{task}/{subject}/{number}",
                "subject": subject,
                "question": questions[language][number],
                "choices": [chapters[language][c] for c in picked],
                "answer": picked.index(chapter),
            }
        )
    return rows


def faq_chapter_source(language: str, ws: Workspace, online: bool) -> Source:
    """The FAQ's translated sections in `language`, from the texts `make setup` fetches (always offline)."""
    paths = {lang: ws.sources() / relative for lang, relative in FILES.items()}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise UserError(f"{', '.join(missing)} missing: run `make setup` to fetch the offline sources")
    return Source(
        f"Debian FAQ chapters ({language.upper()}, parallel)",
        "debian-faq 11.1, offline",
        files_sha(list(paths.values())),
        "same",
        True,
        None,
        None,
        lambda task: offline_rows(faq_chapter_rows(paths["ko"], paths["en"], language, task)),
    )
