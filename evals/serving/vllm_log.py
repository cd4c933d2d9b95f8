"""A vLLM log as text: reading it line by line (`log_lines`, `stream_lines`), the line that says why a
start failed (`telling_line`, for `ServeError`) and how long a start took (`startup_seconds`).
`kqe doctor` scans logs with `evals/serving/doctor/log_scan.py`."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from kqe.core.errors import UserError
from kqe.core.io import require_file

# "(EngineCore pid=7) ERROR 11-29 15:39:15 [core.py:1510] message"
_LEVEL_PREFIX = re.compile(r"^\(.*?\) (?P<level>[A-Z]+) \d\d-\d\d [\d:]{8} \[[^\]]*\] ")
_EXCEPTION = re.compile(r"^(?:Value error, |[\w.]*(?:Error|Exception)\b: )")
_GENERIC_ERRORS = ("See root cause above", "See stack trace (above) for the root cause", "Traceback (most")


HEAD_BYTES = 65536
"""How much of a log is sniffed for being text before it is read line by line."""
_CHUNK_BYTES = 1 << 20


def log_lines(
    path: Path, what: str = "log file", fix: str = "give the file vLLM's output went to"
) -> Iterator[str]:
    """The lines of a log file (or of another text file, `what`), read lazily (bounded memory for any
    size); UserError when it is missing, empty or not text."""
    require_file(path, what, fix)  # a folder, a FIFO or a device is said to be one, never "missing"
    try:
        with path.open("rb") as stream:
            head = _checked_head(stream, f"{what} {path}")
    except OSError as error:
        reason = error.strerror
        raise UserError(f"{what} {path} cannot be read ({reason}): give a file you can read") from None
    return _file_lines(path, len(head))


def stream_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """The lines of a log arriving on `stream` (standard input), read lazily; UserError when it is
    empty or not text."""
    head = _checked_head(stream, name)
    return _decoded_lines(head, stream)


def _checked_head(stream: BinaryIO, name: str) -> bytes:
    head = stream.read(HEAD_BYTES)
    while head and not head.strip() and len(head) < 16 * HEAD_BYTES:  # leading blank lines
        more = stream.read(HEAD_BYTES)
        if not more:
            break
        head += more
    if not head.strip():
        raise UserError(f"{name} is empty: give the output of the failed `vllm serve` run")
    text = head.decode("utf-8", errors="replace")
    if b"\x00" in head or text.count("\ufffd") > len(text) / 100:
        raise UserError(f"{name} is binary, not a text log: give vLLM's text output")
    return head


def _file_lines(path: Path, skip: int) -> Iterator[str]:
    with path.open("rb") as stream:
        yield from _decoded_lines(stream.read(skip), stream)


def _decoded_lines(head: bytes, stream: BinaryIO) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending, chunk = "", head
    while chunk:
        *lines, pending = (pending + decoder.decode(chunk)).split("\n")
        yield from lines
        if len(pending) > _CHUNK_BYTES:  # a line without end: read it in pieces, memory stays bounded
            yield pending
            pending = ""
        chunk = stream.read(_CHUNK_BYTES)
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


_STAMP = re.compile(r" (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[")
_SERVING = "Starting vLLM server on "


def startup_seconds(log_text: str) -> float | None:
    """Seconds from a server log's first stamped line to `Starting vLLM server on …` (its start
    before it answers), None when the log never got there. Stamps hold no year: a start across New
    Year is not timed."""
    first = ready = None
    for line in log_text.splitlines():
        found = _STAMP.search(line)
        if found is None:
            continue
        month, day, hour, minute, second = map(int, found.groups())
        stamp = (((month * 31 + day) * 24 + hour) * 60 + minute) * 60 + second
        first = stamp if first is None else first
        if _SERVING in line:
            ready = stamp
            break
    return None if first is None or ready is None or ready < first else float(ready - first)


def telling_line(log_text: str, limit: int = 300) -> str | None:
    """The log message that best says why a start failed, cut to `limit` characters: the last
    exception that is not a generic wrapper ("See root cause above"), else the last ERROR message."""
    exceptions, errors = [], []
    for line in log_text.splitlines():
        prefix = _LEVEL_PREFIX.match(line)
        message = line[prefix.end() :] if prefix else line.strip()
        if any(text in message for text in _GENERIC_ERRORS):
            continue
        if _EXCEPTION.match(message):
            exceptions.append(message)
        elif prefix and prefix["level"] == "ERROR" and message[:1].strip() and message[:5] != "File ":
            errors.append(message)
    candidates = exceptions or errors
    if not candidates:
        return None
    return candidates[-1] if len(candidates[-1]) <= limit else candidates[-1][: limit - 1] + "…"
