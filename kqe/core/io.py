"""Atomic writes and crash-tolerant JSON Lines: finished results are never half-written or lost."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from kqe.core.faults import pause_point

T = TypeVar("T", bound=BaseModel)
_UMASK = os.umask(0)
os.umask(_UMASK)


def sha256_of(data: str | bytes) -> str:
    """Hex sha256 of bytes, or of text as UTF-8."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (weights files are GBs)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            pause_point(f"write {path.name}")  # fault tests kill here: `path` must stay as it was
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(path: Path, record: BaseModel) -> None:
    write_atomic(path, record.model_dump_json(indent=2) + "\n")


def read_record(path: Path, kind: type[T]) -> T:
    return kind.model_validate_json(path.read_text(encoding="utf-8"))


def read_jsonl(path: Path, kind: type[T]) -> list[T]:
    """Read records; a torn last line (a crash mid-write) is dropped, any other bad line is an error."""
    if not path.exists():
        return []
    # split on "\n" only: str.splitlines() also breaks at U+2028 and U+0085, which text fields may hold
    lines = path.read_text(encoding="utf-8").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(kind.model_validate_json(line))
        except ValueError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a {kind.__name__} record") from None
    return records


class JsonlAppender:
    """Appends records one line at a time, flushed, so a crash loses at most the record in flight."""

    def __init__(self, path: Path, keep: Iterable[BaseModel] = ()) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Rewrite what is kept first, so a torn tail line from an earlier crash is gone.
        write_atomic(path, "".join(r.model_dump_json() + "\n" for r in keep))
        self._handle = path.open("a", encoding="utf-8")

    def append(self, record: BaseModel) -> None:
        self._handle.write(record.model_dump_json() + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
