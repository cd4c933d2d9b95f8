"""`ko_faq`: which English question is this Korean one? The Debian FAQ's questions in Korean (the
`debian-faq-ko` package), each with four English questions of the same chapter (the `debian-faq`
package, same version) to choose from; the right one carries the same section number.

A small Korean-reading task of our own, built offline from texts `make setup` fetches. Rows are MMLU's
shape ({item_id, subject, question, choices, answer}, answer 0-based); `subject` is the chapter, so the
statistics resample chapters.

The text files wrap lines at a fixed width, Korean ones inside words, so a heading is rebuilt from
two wrappings of it, the table of contents and the section title: a space belongs between two
characters when either copy has one there, or both break the line there.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from evals.tasks.benchmark_data import Row, Source, files_sha, offline_rows, with_item_ids
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace

FILES = {"ko": "ko/debian-faq/debian-faq.ko.txt", "en": "en/debian-faq/debian-faq.en.txt"}
"""The two FAQ texts, under `ws.sources()`."""
_NUMBERED = re.compile(r"^\s*(\d+(?:\.\d+)+)\.\s+(.*)$")
_CHAPTER = re.compile(r"^\d+\.\s")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")


def _entries(lines: list[str]) -> dict[str, str]:
    """Section number -> its title as wrapped in the table of contents (continuation lines joined with
    newlines); chapters (one number) are left out."""
    found: dict[str, str] = {}
    number = None
    for line in lines:
        match = _NUMBERED.match(line)
        if match:
            number = match.group(1)
            found[number] = match.group(2).rstrip()
        elif _CHAPTER.match(line):
            number = None
        elif number and line.strip():
            found[number] += "\n" + line.strip()
    return found


def _gaps(text: str) -> tuple[str, list[str]]:
    """The characters of `text` without whitespace, and what stood before each of them."""
    chars: list[str] = []
    gaps: list[str] = []
    pending = ""
    for char in text:
        if char.isspace():
            pending += char
        else:
            chars.append(char)
            gaps.append(pending)
            pending = ""
    return "".join(chars), gaps


def merge_wrappings(first: str, second: str) -> str:
    """One title from two wrappings of it (see the module's docs); `first` when they differ in text."""
    chars_a, gaps_a = _gaps(first)
    chars_b, gaps_b = _gaps(second)
    if chars_a != chars_b:
        return " ".join(first.split())
    out: list[str] = []
    for char, a, b in zip(chars_a, gaps_a, gaps_b, strict=True):
        spaced = " " in a.replace("\n", "") or " " in b.replace("\n", "") or ("\n" in a and "\n" in b)
        out.append((" " if spaced and out else "") + char)
    return "".join(out).replace("\xa0", " ")


def faq_questions(path: Path) -> dict[str, str]:
    """Section number -> question title of one FAQ text (table of contents merged with the body)."""
    text = path.read_text(encoding="utf-8").replace("\xa0", " ")
    start = text.find("\n1. ") + 1
    end = text.find("\n\n", start)
    if start == 0 or end < 0:
        raise UserError(f"{path}: no table of contents found: run `make setup` to fetch the FAQ again")
    contents = _entries(text[start:end].split("\n"))
    body_wrapped = _body_titles(text[end:])
    return {
        number: merge_wrappings(title, body_wrapped.get(number, title)) for number, title in contents.items()
    }


def _body_titles(body: str) -> dict[str, str]:
    """Section titles in the body: a numbered line at column 0 and the lines up to the next blank one."""
    titles: dict[str, str] = {}
    for block in body.split("\n\n"):
        match = re.match(r"(\d+(?:\.\d+)+)\.\s+(.*)", block.strip("\n"), re.S)
        if match and not block.startswith(" "):
            titles.setdefault(match.group(1), match.group(2))
    return titles


def ko_faq_rows(ko: Path, en: Path, task: str = "ko_faq") -> list[Row]:
    """Every Korean question with its English original and three English questions of its chapter."""
    korean, english = faq_questions(ko), faq_questions(en)
    by_chapter: dict[str, list[str]] = {}
    for number in english:
        by_chapter.setdefault(number.split(".")[0], []).append(number)
    rows = []
    for number, question in korean.items():
        chapter = number.split(".")[0]
        others = [n for n in by_chapter.get(chapter, []) if n != number]
        if number not in english or not _HANGUL.search(question) or len(others) < 3:
            continue  # untranslated headings and chapters too small for three distractors
        rng = random.Random(f"ko_faq/{number}")
        choices = [english[n] for n in rng.sample(others, 3)] + [english[number]]
        rng.shuffle(choices)
        rows.append(
            {
                "subject": f"chapter_{int(chapter):02d}",
                "question": question,
                "choices": choices,
                "answer": choices.index(english[number]),
                "section": number,
            }
        )
    return with_item_ids(task, rows)


def ko_faq_source(ws: Workspace, online: bool) -> Source:
    """The Debian FAQ questions fetched by `make setup` (offline, online or not)."""
    paths = {lang: ws.sources() / relative for lang, relative in FILES.items()}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise UserError(f"{', '.join(missing)} missing: run `make setup` to fetch the offline sources")
    return Source(
        "Debian FAQ KO→EN questions",
        "debian-faq-ko 11.1, offline",
        files_sha(list(paths.values())),
        "same",
        True,
        None,
        None,
        lambda task: offline_rows(ko_faq_rows(paths["ko"], paths["en"], task)),
    )
