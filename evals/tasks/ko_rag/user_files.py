"""ko_rag's user files (`docs.jsonl`, `questions.jsonl`): one JSON object per line, each with an `id`,
read with one-line errors that name the file and the line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kqe.core.errors import UserError


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


Entry = TypeVar("Entry", bound=_HasId)


def read_entries(
    path: Path,
    parse: Callable[[Any, str], Entry],
    noun: str,
    check: Callable[[Entry, str], None] | None = None,
) -> list[Entry]:
    """One entry per non-blank line: `parse(value, "path:line")` builds it from the line's JSON value,
    then its id must be new, then `check` may test it against other data. A missing file, a line
    that is not JSON, an id used twice or a file without entries is a UserError."""
    if not path.is_file():
        raise UserError(f"{path} not found: a ko_rag data folder needs docs.jsonl and questions.jsonl")
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            value = json.loads(line)
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
