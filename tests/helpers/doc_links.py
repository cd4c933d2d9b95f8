"""Relative links in Markdown files: each must name a file that exists and, with an `#anchor`, a heading
of that file (GitHub's slug of it) or an `<a id="...">` in it. Links inside code spans, code fences and
HTML comments are not links; external ones (http, https, mailto, any `scheme:`) are not checked."""

from __future__ import annotations

import html
import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_OR_COMMENT = re.compile(
    r"(?P<ticks>`+)(?:(?!\n[ \t]*\n).)+?(?<!`)(?P=ticks)(?!`)|<!--.*?-->", re.DOTALL
)
"""A code span (not across a blank line) or an HTML comment, whichever starts first."""
_INLINE = re.compile(
    r"\[(?:[^\[\]\n]|\n(?![ \t]*\n)|\[[^\[\]\n]*\])*\]"  # [text], one level of nested brackets
    r"\(\s*(?P<target><[^>\n]*>|[^)\s]*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*(?P<target><[^>\n]*>|\S+)", re.MULTILINE)
_HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*\"(?P<target>[^\"]*)\"", re.IGNORECASE)
_HTML_ID = re.compile(r"<[a-z][^>]*?\s(?:id|name)\s*=\s*\"([^\"]+)\"", re.IGNORECASE)
_ATX = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(?P<text>.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_SETEXT_TEXT = re.compile(r"^ {0,3}(?![-*+>|#]|\d+[.)]|\s*$)")
"""A line that can be a setext heading's text: not blank, not a list item, quote, table row or heading."""
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_LINE_ANCHOR = re.compile(r"^L\d+(?:-L\d+)?$")
"""GitHub's anchors of a line (range) in a source file."""


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def without_fences(text: str) -> str:
    """`text` with fenced code blocks and HTML comments blanked (offsets and line numbers kept)."""
    lines, fence = [], ""
    for line in text.split("\n"):
        opened = _FENCE.match(line)
        if fence:
            if opened and opened[1][0] == fence[0] and len(opened[1]) >= len(fence) and not line.strip(" `~"):
                fence = ""
            lines.append("")
        elif opened:
            fence = opened[1]
            lines.append("")
        else:
            lines.append(line)
    kept = "\n".join(lines)
    return re.sub(r"<!--.*?-->", lambda m: _blank(m[0]), kept, flags=re.DOTALL)


def without_code(text: str) -> str:
    """`text` with code fences, code spans and HTML comments blanked."""
    return _CODE_OR_COMMENT.sub(lambda m: _blank(m[0]), without_fences(text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its rendered text lowercased, characters other than letters, marks,
    digits, `_`, `-` and spaces dropped (Hangul kept), spaces made hyphens."""
    rendered = []
    for number, part in enumerate(re.split(r"(`+)(.+?)\1", heading)):
        if number % 3 == 2:  # a code span's text, `<task>` included, is shown as written
            rendered.append(part)
        elif number % 3 == 0:
            text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part)  # a link's text only
            rendered.append(html.unescape(re.sub(r"<[^>]+>", "", text)))
    text = "".join(rendered).lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a Markdown text: heading slugs (a repeated one gets -1, -2 ...) and HTML ids."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    lines = without_fences(text).split("\n")
    for number, line in enumerate(lines):
        heading = _ATX.match(line)
        if heading:
            title = heading["text"] or ""
        elif number and _SETEXT.match(line) and _SETEXT_TEXT.match(lines[number - 1]):
            if number >= 2 and lines[number - 2].strip():
                continue  # only a paragraph of one line: a longer one is rare and not worth parsing
            title = lines[number - 1].strip()
        else:
            continue
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found | set(_HTML_ID.findall(without_code(text)))


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every link of a Markdown text, outside code and comments."""
    plain = without_code(text)
    found = []
    for pattern in (_INLINE, _DEFINITION, _HTML_LINK):
        for match in pattern.finditer(plain):
            found.append((match.start("target"), match["target"].strip("<>")))
    return [(plain.count("\n", 0, at) + 1, target) for at, target in sorted(found)]


def broken_links(files: list[Path], root: Path) -> list[str]:
    """`file:line: target: why` for every relative link of `files` that does not resolve."""
    cache: dict[Path, set[str]] = {}
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for line, target in links(text):
            why = _problem(path, target, root, cache)
            if why:
                problems.append(f"{path.relative_to(root)}:{line}: {target}: {why}")
    return problems


def _problem(source: Path, target: str, root: Path, cache: dict[Path, set[str]]) -> str:
    if not target:
        return "empty link"
    if _SCHEME.match(target):
        return ""
    part, _, anchor = target.partition("#")
    part, anchor = unquote(part), unquote(anchor)
    base = root if part.startswith("/") else source.parent  # "/x": from the repository's root
    path = base / part.lstrip("/") if part else source
    if not path.exists():
        return "no such file"
    if not anchor:
        return ""
    if path.suffix.lower() != ".md":
        return (
            ""
            if path.is_file() and _LINE_ANCHOR.match(anchor)
            else f"no anchor #{anchor} in a non-Markdown file"
        )
    resolved = path.resolve()
    if resolved not in cache:
        cache[resolved] = anchors(path.read_text(encoding="utf-8"))
    return "" if anchor in cache[resolved] else f"no heading or <a id> #{anchor} in {part or source.name}"
