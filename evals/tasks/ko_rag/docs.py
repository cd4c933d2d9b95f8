"""ko_rag's document pool: real Korean documents cut into passages with stable ids.

Built-in documents, read from the offline sources folder (`ws.sources()`, filled by `make setup`):

- `ko/constitution.txt`, 대한민국헌법 (konlpy): one passage per article, `constitution/art-10`; the
  preamble `constitution/preamble`; the addenda `constitution/addenda-art-1`.
- `ko/bills/<n>.txt`, ten bills of 2010 (konlpy): one passage per section, `bill-<n>/reason`,
  `bill-<n>/main`, `bill-<n>/notes`, `bill-<n>/text`, `bill-<n>/addenda`, and the header (title,
  proposers, date) `bill-<n>/header`; the old/new comparison table at the end (its columns mangled by
  PDF extraction) is left out.
- `ko/debian-faq/debian-faq.ko.txt`, the Korean Debian FAQ (Debian package `debian-faq-ko`): one
  passage per numbered section, `debian-faq/8.1.2`; a chapter's lead text `debian-faq/8`.
- `lo-help/rag-ko/<page>.txt`, whole pages of LibreOffice's Korean help: one passage per page,
  `lo-help/shared.optionen.01040900` (`help_docs.py`; `task.load_source` joins them to the pool).

A passage longer than MAX_CHARS is cut at line (or, failing that, sentence) boundaries into parts
`<id>#2`, `<id>#3`, … after the first, which keeps the plain id. Lines that the source's text wrapper
broke mid-sentence are joined back (bills keep a trailing space where a word ended; the FAQ's breaks
between Hangul letters are decided by Kiwi's spacing model). Ids depend only on the document structure,
so they are stable across runs and machines; the texts are what the model reads and what gold answers
are checked against.

User documents come as `docs.jsonl`, one passage per line: {"id": "...", "title": "...", "text": "..."}.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evals.tasks.ko_rag.korean import is_hangul, space_between
from evals.tasks.ko_rag.user_files import read_entries
from kqe.core.errors import UserError

MAX_CHARS = 700
"""Longest passage text in characters (~400-700 tokens of Korean for most tokenizers)."""
PASSAGE_FIELDS = ("id", "title", "text")
CONSTITUTION = "ko/constitution.txt"
BILLS = "ko/bills"
DEBIAN_FAQ = "ko/debian-faq/debian-faq.ko.txt"

_ARTICLE = re.compile(r"^\s*제(\d+)조(?=\s|①|\()")
_CHAPTER = re.compile(r"^\s*(제\d+[장절관]\s.*)$")
_ADDENDA = re.compile(r"부칙")
_PAGE_MARK = re.compile(r"^\s*-\s*\d+\s*-\s*$")
_BILL_TABLE = re.compile(r"^\s*신\s*[·ㆍ]\s*구\s*조문\s*대비표")
_BILL_SECTIONS = {
    "제안이유및주요내용": "reason",
    "제안이유": "reason",
    "주요내용": "main",
    "참고사항": "notes",
    "부칙": "addenda",
}
_BILL_TEXT = re.compile(r"^\s*법률\s*제\s*호\s*$")
_NEW_LOGICAL_LINE = re.compile(r"^(\s|제\d+조|[①-⑳]|\d+\.\s|[가-하]\.\s|[○◦∙*□※]|첫째|둘째|셋째)")
_FAQ_CHAPTER = re.compile(r"^(\d+)장\. (.*)$")
_FAQ_SECTION = re.compile(r"^(\d+(?:\.\d+)+)\. (.*)$")
_SENTENCE_END = re.compile(r"(?<=[.?!다음함임])\s+")
_SPACES = re.compile(r"[ \t\u00a0\u3000]+")


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of text."""

    id: str
    """Stable identifier, e.g. `constitution/art-10`; gold passages of questions refer to it."""
    title: str
    """Document (and section) title shown with the passage in the prompt."""
    text: str
    """The passage text."""


def _squeeze(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def split_long(passage: Passage, max_chars: int = MAX_CHARS) -> list[Passage]:
    """`passage` cut into parts of at most `max_chars` at line, else sentence, else space boundaries."""
    if len(passage.text) <= max_chars:
        return [passage]
    pieces: list[str] = []
    for line in passage.text.split("\n"):
        pieces += _cut_line(line, max_chars)
    parts: list[str] = []
    for piece in pieces:
        if parts and len(parts[-1]) + 1 + len(piece) <= max_chars:
            parts[-1] += "\n" + piece
        else:
            parts.append(piece)
    return [
        Passage(passage.id if number == 1 else f"{passage.id}#{number}", passage.title, text)
        for number, text in enumerate(parts, start=1)
    ]


def _cut_line(line: str, max_chars: int) -> list[str]:
    if len(line) <= max_chars:
        return [line]
    out: list[str] = []
    for sentence in _SENTENCE_END.split(line):
        while len(sentence) > max_chars:  # no sentence end in reach: cut at the last space
            cut = sentence.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            out.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if out and len(out[-1]) + 1 + len(sentence) <= max_chars:
            out[-1] += " " + sentence
        else:
            out.append(sentence)
    return out


def constitution_passages(text: str) -> list[Passage]:
    """The constitution by article: chapter and section headings go into the title."""
    lines = [line for line in text.split("\n") if line.strip()]
    name = _squeeze(lines[0])
    levels = "장절관"  # chapter, section, subsection
    headings, prefix = dict.fromkeys(levels, ""), "art"
    current: tuple[str, str, list[str]] = ("preamble", name, [])
    found: list[tuple[str, str, list[str]]] = [current]
    for line in lines[1:]:
        heading = _CHAPTER.match(line)
        article = _ARTICLE.match(line)
        if heading:
            level = heading[1].split()[0][-1]
            headings |= dict.fromkeys(levels[levels.index(level) :], "") | {level: _squeeze(heading[1])}
        elif _ADDENDA.search(line) and not article:
            prefix, headings = "addenda-art", dict.fromkeys(levels, "") | {"장": "부칙"}
        elif article:
            title = _squeeze(" ".join([name, *headings.values()]))
            current = (f"{prefix}-{article[1]}", title, [_squeeze(line)])
            found.append(current)
        else:
            current[2].append(_squeeze(line))
    passages = [Passage(f"constitution/{pid}", title, "\n".join(body)) for pid, title, body in found]
    return [part for passage in passages for part in split_long(passage)]


def _logical_lines(raw: list[str], titles: set[str]) -> list[str]:
    """Join a bill's PDF-wrapped lines: a line continues the previous one unless it starts a new item
    or one of them is a line of the bill's title.

    The extraction keeps a trailing space where the wrap fell between words and none inside a word,
    so continuation lines are appended as they are."""
    logical: list[str] = []
    previous = ""
    for line in raw:
        starts = _NEW_LOGICAL_LINE.match(line) or line.strip() in titles or previous.strip() in titles
        previous = line
        if logical and not starts:
            logical[-1] += line
        else:
            logical.append(line)
    return [_squeeze(line) for line in logical if line.strip()]


def _is_bill_no(line: str) -> bool:
    return re.sub(r"\s+", "", line).startswith("의안")


def bill_passages(bill: str, text: str) -> list[Passage]:
    """One bill by section; the header keeps its lines, the sections are re-flowed."""
    raw = [line for line in text.split("\n") if line.strip() and not _PAGE_MARK.match(line)]
    table = next((i for i, line in enumerate(raw) if _BILL_TABLE.match(line)), len(raw))
    raw = raw[:table]
    title_line = raw[0].strip()
    sections: list[tuple[str, list[str]]] = [("header", [])]
    for line in raw:
        key = _BILL_SECTIONS.get(re.sub(r"\s+", "", line))
        if (
            key is None
            and sections[-1][0] not in ("header", "text")
            and (_BILL_TEXT.match(line) or line.strip() == title_line)
        ):
            key = "text"
        if key is not None and key != sections[-1][0]:
            sections.append((key, [line] if key == "text" else []))
        else:
            sections[-1][1].append(line)
    title_end = next(i for i, line in enumerate(raw) if line.lstrip().startswith("(") or _is_bill_no(line))
    title = _squeeze(" ".join(raw[:title_end]))
    titles = {line.strip() for line in raw[:title_end]}
    passages = []
    counts: dict[str, int] = {}
    for key, lines in sections:
        body = [_squeeze(line) for line in lines] if key == "header" else _logical_lines(lines, titles)
        if not body:
            continue
        counts[key] = counts.get(key, 0) + 1
        pid = key if counts[key] == 1 else f"{key}-{counts[key]}"
        passages += split_long(Passage(f"bill-{bill}/{pid}", title, "\n".join(body)))
    return passages


def _faq_join(lines: list[str]) -> str:
    """One FAQ paragraph from its wrapped lines (breaks between Hangul letters decided by Kiwi)."""
    text = lines[0].strip()
    for line in lines[1:]:
        line = line.strip()
        if text and line and is_hangul(text[-1]) and is_hangul(line[0]):
            text += space_between(text, line) + line
        else:
            text += " " + line
    return _squeeze(text)


def _faq_blocks(text: str) -> Iterator[tuple[str, list[str]]]:
    """(kind, lines) blocks of the FAQ body: `chapter`/`section` headings and `para` paragraphs."""
    lines = text.replace("\u00a0", " ").split("\n")
    start = next((i for i, line in enumerate(lines) if _FAQ_CHAPTER.match(line)), None)
    if start is None:
        raise UserError("the Debian FAQ text has no chapter headings (`1장.`): re-run `make setup`")
    block: list[str] = []
    for line in [*lines[start:], ""]:
        if line.strip():
            block.append(line)
            continue
        if block:
            kind = "para"
            if _FAQ_CHAPTER.match(block[0]):
                kind = "chapter"
            elif _FAQ_SECTION.match(block[0]):
                kind = "section"
            yield kind, block
            block = []


def faq_passages(text: str) -> list[Passage]:
    """The Debian FAQ by numbered section; a chapter's text before its first section is its own passage."""
    found: list[tuple[str, str, list[str]]] = []
    for kind, lines in _faq_blocks(text):
        if kind == "para":
            if found:
                found[-1][2].append(_faq_join(lines))
            continue
        heading = _faq_join(lines)
        match = _FAQ_CHAPTER.match(heading) or _FAQ_SECTION.match(heading)
        assert match is not None
        found.append((match[1], f"데비안 FAQ {heading}", []))
    passages = [Passage(f"debian-faq/{key}", title, "\n".join(body)) for key, title, body in found if body]
    return [part for passage in passages for part in split_long(passage)]


def builtin_passages(sources: Path) -> list[Passage]:
    """Every passage of the built-in documents under the offline sources folder."""
    constitution, bills, faq = sources / CONSTITUTION, sources / BILLS, sources / DEBIAN_FAQ
    for path in (constitution, faq):
        if not path.is_file():
            raise UserError(
                f"ko_rag document {path} is missing: run `make setup` to fetch the offline sources"
            )
    bill_files = sorted(bills.glob("*.txt"))
    if not bill_files:
        raise UserError(f"ko_rag documents {bills}/*.txt are missing: run `make setup`")
    passages = constitution_passages(constitution.read_text(encoding="utf-8"))
    for path in bill_files:
        passages += bill_passages(path.stem, path.read_text(encoding="utf-8"))
    passages += faq_passages(faq.read_text(encoding="utf-8"))
    _check_unique(passages, str(sources))
    return passages


def _check_unique(passages: list[Passage], where: str) -> None:
    seen: set[str] = set()
    for passage in passages:
        if passage.id in seen:
            raise ValueError(f"{where}: passage id {passage.id!r} occurs twice")
        seen.add(passage.id)


def _passage(row: object, where: str) -> Passage:
    if not isinstance(row, dict):
        raise UserError(f'{where}: not a JSON object: write {{"id", "title", "text"}} per line')
    for field in PASSAGE_FIELDS:
        if not isinstance(row.get(field), str) or not row[field].strip():
            raise UserError(f"{where}: missing or empty field {field!r}: a passage needs id, title, text")
    extra = sorted(set(row) - set(PASSAGE_FIELDS))
    if extra:
        raise UserError(f"{where}: unknown field(s) {', '.join(extra)}: a passage has only id, title, text")
    return Passage(row["id"], row["title"], row["text"])


def read_docs_jsonl(path: Path) -> list[Passage]:
    """User passages from `docs.jsonl`; a bad line is a one-line error naming the file and line."""
    return read_entries(path, _passage, "passage")
