"""LibreOffice help pages as plain text, and the Korean pages that pair with their English originals.

Debian's `libreoffice-help-ko` and `libreoffice-help-en-us` hold the same pages at the same paths
(`help/<lang>/text/<module>/…/<page>.html`), built from one XHP source: each paragraph and heading
carries the same id (`par_id3146957`, `hd_id3147291`) in both languages, and an untranslated one is
left in English on the Korean page. So two pages whose blocks carry the same ids in the same order pair
block for block (2,543 of the 2,560 pages of 7.4; the others are left out).

`parse_page` reads a page's content (the `DisplayArea`), without scripts, navigation, the related-topics
list or the variants the help's JavaScript hides (another OS's or module's menu path: the `default…`
variant is kept); each block element is a paragraph, its whitespace collapsed. `parallel_pages` keeps
the paragraphs translated on the Korean side (at least half of their letters Hangul) with their English
originals, cut to a budget of Korean letters per page, from every fourth page with enough of them in
path order: the same two packages always give the same pairs. `make setup` writes them as the
held-out perplexity sets lo_ko / lo_en (`kqe.core.sources`); `read_pages` reads a package's pages for
any other use (`parallel_pages(..., stride=1)`: all 705 that pair, `letters` another budget).
`rag_pages` keeps whole Korean pages of a few folders (options dialogs, Calc and Writer how-tos, shortcut
keys) for ko_rag's passage pool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from kqe.core.archives import read_matching
from kqe.core.errors import UserError
from kqe.core.hangul import hangul_letters

MIN_HANGUL_SHARE = 0.5
"""A Korean paragraph counts as translated when at least this share of its letters is Hangul."""
PAGE_LETTERS = 250
"""Hangul letters per page: a page pairs when its translated paragraphs hold at least this many, and
whole paragraphs are taken until they do (gemma-3's tokenizer: about 210 Korean and 170 English
tokens a page)."""
PAGE_STRIDE = 4
"""Every fourth pairing page in path order: 177 of the 705 pages of LibreOffice 7.4's help, spread over
its modules, about 37.7k Korean and 30.2k English tokens of gemma-3's tokenizer (the cost of scoring
them: docs/statistics.md)."""

RAG_FOLDERS = (
    "text/shared/optionen/",
    "text/scalc/guide/",
    "text/swriter/guide/",
    "text/shared/04/",
    "text/scalc/04/",
    "text/swriter/04/",
)
"""Folders whose whole Korean pages are ko_rag passages: option names, value ranges and defaults, menu
paths and key combinations that a page states and common knowledge does not (320 pages of 7.4)."""
RAG_MIN_LETTERS = 100
"""Hangul letters a page needs to be a ko_rag passage (fewer: an untranslated or empty page)."""
RAG_MAX_LATIN = 20
"""A paragraph left in English (this many Latin letters or more, under half of its letters Hangul) is
dropped from a ko_rag page; a key combination or a short name (`Ctrl+Shift+F5`) stays."""

_BLOCKS = frozenset(
    ("address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "h1", "h2", "h3", "h4",
     "h5", "h6", "header", "li", "ol", "p", "pre", "section", "table", "td", "th", "tr", "ul")
)  # fmt: skip
"""Elements that end the paragraph before them and start one of their own."""
_KEYED = frozenset(("h1", "h2", "h3", "h4", "h5", "h6", "li", "p", "pre", "td", "th"))
"""Blocks whose `id` names their paragraph."""
_SKIPPED = frozenset(("button", "img", "input", "nav", "noscript", "script", "style", "template"))
_VOID = frozenset(
    ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr")
)  # fmt: skip
"""Elements without an end tag."""
_SKIPPED_CLASSES = frozenset({"relatedtopics", "noteicon", "debug"})
"""Navigation in the content area: the related-topics list, note icons, the debug footer."""


@dataclass(frozen=True)
class Paragraph:
    """One block of a help page's text."""

    key: str
    """The element id (`par_id3146957`, `hd_id3147291`), the same in every language; else `#<n>`, the
    block's position on the page."""
    text: str
    """The block's text, whitespace collapsed to single spaces (line breaks kept in code)."""


@dataclass(frozen=True)
class HelpPage:
    """One help page's text."""

    path: str
    """Path under the language folder, e.g. `text/shared/optionen/01020000.html`."""
    title: str
    """The page's `<title>`."""
    paragraphs: tuple[Paragraph, ...]
    """The content blocks in page order, empty ones dropped."""

    @property
    def text(self) -> str:
        """The paragraphs, one blank line between two."""
        return "\n\n".join(p.text for p in self.paragraphs)


@dataclass(frozen=True)
class PagePair:
    """A Korean help page's translated paragraphs and their English originals, paragraph for paragraph."""

    path: str
    """Path of both pages under their language folders."""
    ko: HelpPage
    """The Korean paragraphs kept."""
    en: HelpPage
    """The English paragraphs with the same keys, in the same order."""


def hangul_share(text: str) -> float:
    """Share of Hangul (syllables and jamo) among the letters of `text`; 0.0 without letters."""
    hangul, letters = hangul_letters(text)
    return hangul / letters if letters else 0.0


class _PageParser(HTMLParser):
    """Collects the blocks of the `DisplayArea`, skipping hidden and navigation subtrees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.blocks: list[tuple[str | None, str]] = []
        self._stack: list[str] = []
        self._area_depth: int | None = None
        self._skip_depth: int | None = None
        self._in_title = False
        self._key: str | None = None
        self._text: list[str] = []
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "title":
            self._in_title = True
        if tag in _VOID:
            if tag == "br" and self._inside():
                self._text.append("\n")
            return
        self._stack.append(tag)
        if self._area_depth is None:
            if found.get("id") == "DisplayArea":
                self._area_depth = len(self._stack)
            return
        if self._skip_depth is None and _hidden(tag, found):
            self._skip_depth = len(self._stack)
        if not self._inside():
            return
        if tag in _BLOCKS:
            self._flush()
        if tag == "pre":
            self._pre += 1
        if found.get("id") and tag in _KEYED:
            self._key = found["id"]

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _VOID or tag not in self._stack:
            return
        while self._stack:  # close what was left open inside it
            depth = len(self._stack)
            closed = self._stack.pop()
            self._close(closed, depth)
            if closed == tag:
                break

    def _close(self, tag: str, depth: int) -> None:
        if self._inside() and tag in _BLOCKS:
            self._flush()
        if tag == "pre" and self._pre:
            self._pre -= 1
        if self._skip_depth == depth:
            self._skip_depth = None
        if self._area_depth == depth:
            self._flush()
            self._area_depth = -1  # the content area is over: nothing after it is read

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif self._inside():
            self._text.append(data)

    def _inside(self) -> bool:
        return self._area_depth not in (None, -1) and self._skip_depth is None

    def _flush(self) -> None:
        raw = "".join(self._text)
        text = _code_text(raw) if self._pre else " ".join(raw.split())
        if text:
            self.blocks.append((self._key, text))
        self._text, self._key = [], None


def _hidden(tag: str, attrs: Mapping[str, str | None]) -> bool:
    """Skipped with all it holds: scripts and controls, navigation, and a variant the help's JavaScript
    hides (another OS's or module's; the `default…` one is what a reader sees without a match)."""
    classes = set((attrs.get("class") or "").split())
    if tag in _SKIPPED or classes & _SKIPPED_CLASSES:
        return True
    return "hidden" in attrs and not (attrs.get("id") or "").startswith("default")


def _code_text(raw: str) -> str:
    lines = [line.rstrip() for line in raw.strip("\n").split("\n")]
    return "\n".join(line for line in lines if line.strip())


def parse_page(path: str, html: str) -> HelpPage:
    """The text of one help page (its content area only), paragraph by paragraph."""
    parser = _PageParser()
    parser.feed(html)
    parser.close()
    parser._flush()
    paragraphs = tuple(
        Paragraph(key or f"#{number}", text) for number, (key, text) in enumerate(parser.blocks, start=1)
    )
    return HelpPage(path=path, title=" ".join("".join(parser.title).split()), paragraphs=paragraphs)


def pair_page(ko: HelpPage, en: HelpPage, letters: int = PAGE_LETTERS) -> PagePair | None:
    """The first translated paragraphs of `ko` (together holding `letters` Hangul letters, the last one
    whole) with the English blocks at the same places; None when the two pages' blocks differ (another
    structure: no paragraph pairs safely) or the translation holds fewer than `letters`."""
    if ko.path != en.path or [p.key for p in ko.paragraphs] != [p.key for p in en.paragraphs]:
        return None
    kept: list[tuple[Paragraph, Paragraph]] = []
    found = 0
    for korean, english in zip(ko.paragraphs, en.paragraphs, strict=True):
        if found >= letters:
            break
        if hangul_share(korean.text) >= MIN_HANGUL_SHARE:
            kept.append((korean, english))
            found += hangul_letters(korean.text)[0]
    if found < letters:
        return None
    return PagePair(
        path=ko.path,
        ko=HelpPage(ko.path, ko.title, tuple(k for k, _ in kept)),
        en=HelpPage(en.path, en.title, tuple(e for _, e in kept)),
    )


def parallel_pages(
    ko_html: Mapping[str, str],
    en_html: Mapping[str, str],
    letters: int = PAGE_LETTERS,
    stride: int = PAGE_STRIDE,
) -> list[PagePair]:
    """Every `stride`-th page (path → HTML, paths under the language folders) that pairs, in path
    order from the first; `stride=1` keeps them all."""
    pairs = []
    for path in sorted(ko_html.keys() & en_html.keys()):
        pair = pair_page(parse_page(path, ko_html[path]), parse_page(path, en_html[path]), letters)
        if pair is not None:
            pairs.append(pair)
    return pairs[::stride]


def rag_pages(ko_html: Mapping[str, str]) -> list[HelpPage]:
    """Whole Korean pages (path → HTML) under `RAG_FOLDERS` that hold `RAG_MIN_LETTERS` Hangul
    letters, in path order."""
    pages = []
    for path in sorted(ko_html):
        if path.startswith(RAG_FOLDERS):
            page = parse_page(path, ko_html[path])
            kept = tuple(p for p in page.paragraphs if not _left_in_english(p.text))
            if sum(hangul_letters(p.text)[0] for p in kept) >= RAG_MIN_LETTERS:
                pages.append(HelpPage(page.path, page.title, kept))
    return pages


def _left_in_english(text: str) -> bool:
    hangul, letters = hangul_letters(text)
    return letters - hangul >= RAG_MAX_LATIN and hangul < letters / 2


def document_name(path: str) -> str:
    """A page's name as one file stem: `shared.optionen.01020000` for
    `text/shared/optionen/01020000.html` (page names repeat across modules, folders do not)."""
    return path.removeprefix("text/").removesuffix(".html").replace("/", ".")


@dataclass(frozen=True)
class HelpPackages:
    """The LibreOffice help pages that pair across a Korean and the English help package, one text file
    per page and language (`kqe.core.help_pages.parallel_pages`)."""

    korean: str
    """Debian `name=version` of the Korean help package."""
    english: str
    """Debian `name=version` of the English help package."""
    ko_folder: str
    """Member folder of the Korean pages in its data tar (`./usr/share/libreoffice/help/ko/`)."""
    en_folder: str
    """Member folder of the English pages."""
    target: str = "lo-help/{lang}/{name}.txt"
    """Path under the sources folder; `{lang}` is `ko` or `en`, `{name}` the page's document name."""
    rag_target: str = "lo-help/rag-ko/{name}.txt"
    """Path of a whole Korean page for ko_rag (`rag_pages`): its title on the first line, then one
    paragraph a line."""


HELP_PACKAGES = HelpPackages(
    "libreoffice-help-ko=4:7.4.7-1+deb12u14",
    "libreoffice-help-en-us=4:7.4.7-1+deb12u14",
    "./usr/share/libreoffice/help/ko/",
    "./usr/share/libreoffice/help/en-US/",
)


def read_pages(archive: Path, folder: str) -> dict[str, str]:
    """Path under `folder` → HTML of every help page of a help package (a .deb)."""
    found = read_matching(archive, re.escape(folder) + r"text/.+\.html")
    if not found:
        raise UserError(f"{archive.name} holds no help pages under {folder}: remove it and run `make setup`")
    pages = {}
    for member, data in found.items():
        try:
            pages[member.removeprefix(folder)] = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise ValueError(f"{archive.name}:{member}: not UTF-8 ({err})") from None
    return pages
