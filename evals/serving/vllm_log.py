"""A vLLM log as text: the line that says why a start failed (`telling_line`, for `ServeError`), and
the view of a log that `kqe doctor` judges (`VllmLog`): its last start, the settings that start states,
and a line as evidence."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.serving.vllm_messages import NON_DEFAULT_ARGS
from kqe.core.errors import UserError
from kqe.core.records import ServeProfile

EVIDENCE_CHARS = 400

# "(EngineCore pid=7) ERROR 11-29 15:39:15 [core.py:1510] message"
_LEVEL_PREFIX = re.compile(r"^\(.*?\) (?P<level>[A-Z]+) \d\d-\d\d [\d:]{8} \[[^\]]*\] ")
# the same prefix with every part optional, and torch.distributed's "[rank0]: " after it
_ANY_PREFIX = re.compile(r"^(?:\(.*?\) )?(?:[A-Z]+ \d\d-\d\d [\d:]{8} \[[^\]]*\] )?(?:\[rank\d+\]: )?")
_EXCEPTION = re.compile(r"^(?:Value error, |[\w.]*(?:Error|Exception)\b: )")
_GENERIC_ERRORS = ("See root cause above", "See stack trace (above) for the root cause", "Traceback (most")


def read_log(path: Path) -> str:
    """The text of a log file; UserError when it is missing, empty or not text."""
    if not path.exists():
        raise UserError(f"log file {path} does not exist: give the file vLLM's output went to")
    if not path.is_file():
        raise UserError(f"log file {path} is not a file: give the file vLLM's output went to")
    data = path.read_bytes()
    if not data.strip():
        raise UserError(f"log file {path} is empty: give the output of the failed `vllm serve` run")
    text = data.decode("utf-8", errors="replace")
    if b"\x00" in data[:65536] or text.count("\ufffd") > len(text) / 100:
        raise UserError(f"log file {path} is binary, not a text log: give vLLM's text output")
    return text


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


@dataclass(frozen=True)
class VllmLog:
    """The log's lines and the serving settings it (or the profile) states."""

    lines: list[str]
    settings: dict[str, Any]

    @classmethod
    def last_start(cls, log_text: str, profile: ServeProfile | None = None) -> VllmLog:
        """The lines of the log's last start (a retried server appends to its log), with the profile's
        settings overridden by that start's "non-default args" line."""
        lines = log_text.splitlines()
        starts = [i for i, line in enumerate(lines) if NON_DEFAULT_ARGS.search(line)]
        return cls(lines[starts[-1] :] if starts else lines, _settings(lines, starts, profile))

    def last(
        self, pattern: re.Pattern[str], accept: Callable[[re.Match[str]], bool] = bool
    ) -> tuple[int, re.Match[str]] | None:
        """Index and match of the last line matching `pattern` (and `accept`)."""
        for index in range(len(self.lines) - 1, -1, -1):
            match = pattern.search(self.lines[index])
            if match and accept(match):
                return index, match
        return None

    def evidence(self, index: int) -> str:
        """Line `index` without its log prefix, cut to EVIDENCE_CHARS."""
        message = _ANY_PREFIX.sub("", self.lines[index].strip(), count=1)
        return message if len(message) <= EVIDENCE_CHARS else message[: EVIDENCE_CHARS - 1] + "…"


def _settings(lines: list[str], starts: list[int], profile: ServeProfile | None) -> dict[str, Any]:
    """The profile's settings overridden by the last start's "non-default args" line."""
    settings: dict[str, Any] = profile.model_dump() if profile else {}
    match = NON_DEFAULT_ARGS.search(lines[starts[-1]]) if starts else None
    if match:
        try:
            args = ast.literal_eval(match["args"])
        except (ValueError, SyntaxError):  # a cut line: the profile still holds
            args = {}
        if isinstance(args, dict):
            settings.update(args)
    return settings
