"""ko_rag's user files (`docs.jsonl`, `questions.jsonl`, answers files): one JSON object per line,
each with an `id`, read with one-line errors that name the file and the line.

The files must be UTF-8 (a byte-order mark is dropped, as Windows editors write one). Korean text saved
from another program is often cp949 or UTF-16; such a file, or a binary one, is refused with the file,
the line and the fix rather than decoded into mojibake or left to raise deep in the reader."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kqe.core.errors import UserError
from kqe.core.io import loads_json, read_bytes, require_file


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


Entry = TypeVar("Entry", bound=_HasId)


_UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")
_MUST = "it must be UTF-8: save it as UTF-8"


_KO_RAG_FILE = "ko_rag file"
_KO_RAG_FIX = "a ko_rag data folder needs docs.jsonl and questions.jsonl"


def read_utf8(path: Path, what: str = _KO_RAG_FILE) -> str:
    """The text of `path` (a `what`), which must be UTF-8 (a leading byte-order mark dropped); anything
    else is a UserError naming the file, the line of the first bad byte and the encoding it must be."""
    data = read_bytes(path, what)  # bounded, and never a FIFO or device
    if data.startswith(_UTF16_MARKS):
        raise UserError(f"{path} is UTF-16 (byte-order mark {data[:2].hex()}): {_MUST}")
    if b"\0" in data:  # UTF-16 without a byte-order mark (or binary); never in UTF-8 text
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise UserError(f"{path}:{line}: holds NUL bytes (UTF-16 or binary?): {_MUST}")
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:  # cp949 (EUC-KR) Korean is the usual case
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[err.start]:02x}: cp949/EUC-KR or binary?): {_MUST}"
        ) from None
    return text


def read_entries(
    path: Path,
    parse: Callable[[Any, str], Entry],
    noun: str,
    check: Callable[[Entry, str], None] | None = None,
    *,
    what: str = _KO_RAG_FILE,
    fix: str = _KO_RAG_FIX,
) -> list[Entry]:
    """One entry per non-blank line: `parse(value, "path:line")` builds it from the line's JSON value,
    then its id must be new, then `check` may test it against other data. A missing file (a `what`;
    `fix` says what to give), a line that is not JSON, an id used twice or a file without entries is a
    UserError. (ko_ifeval's prompt and response files are read the same way.)"""
    require_file(path, what, fix)
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(read_utf8(path, what).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            value = loads_json(line)
        except ValueError as exc:
            raise UserError(f"{where}: not JSON ({exc}): write one JSON object per line") from None
        entry = parse(value, where)
        if entry.id in seen:
            raise UserError(f"{where}: {noun} id {entry.id!r} already used on line {seen[entry.id]}")
        seen[entry.id] = number
        if check is not None:
            check(entry, where)
        entries.append(entry)
    if not entries:
        raise UserError(f"{path} holds no {noun}s: write one JSON object per line")
    return entries
