"""One pass over a vLLM log, line by line in bounded memory: what its last start shows.

Each line is cleaned of what surrounds a message (ANSI colours, CR, Docker timestamps, vLLM's
`(EngineCore pid=…) ERROR 06-15 14:02:43 [core.py:396]` or V0's `INFO 03-31 01:47:59 worker.py:267]`
prefix, torch.distributed's `[rank0]:`). Only lines holding a hint word (`vllm_messages.HINTS`) are
matched against the shapes; one that matches none is tried joined with its neighbours, so a message
the terminal wrapped over several lines is read whole. A "non-default args" line starts a new server
start and the scan forgets what came before (a retried server appends to its log).
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evals.serving import vllm_messages as msg
from evals.serving.memory import KV_CAPACITY, MODEL_LOADING
from kqe.core.records import ServeProfile

EVIDENCE_CHARS = 400
WRAP_LINES = 6
"""How many physical lines a wrapped message may span."""
PRESSURE_USAGE = 95.0
"""KV cache usage (%) from which requests left waiting mean the cache, not the load, is the limit."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PREFIX = re.compile(
    r"^\s*(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+)?"  # docker logs -t
    r"(?:\([^()]*pid=\d+\)\s+)?"  # (EngineCore_DP0 pid=1234)
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:.]{8,}\s+(?:\[[^\]]*\]|[\w./-]+:\d+\])\s)?"
    r"(?:\[rank\d+\]:\s?)?"
)
_CONTEXT = (MODEL_LOADING, KV_CAPACITY, msg.GRAPH_CAPTURE)


def clean(line: str) -> str:
    """A physical log line without colours, CR and log prefix."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _PREFIX.sub("", line.rstrip("\r\n"), count=1).strip()


@dataclass(frozen=True)
class Event:
    """A message found: its first physical line (1-based), its shape's groups and its text."""

    line: int
    groups: dict[str, str]
    text: str


@dataclass
class Stats:
    """What the periodic stats lines of one start add up to."""

    lines: int = 0
    peak_usage: float = 0.0
    peak_line: int = 0
    running_max: int = 0
    waiting_under_pressure: int = 0
    """Most requests waiting on a line whose KV cache usage was at least PRESSURE_USAGE."""
    first_pressure_line: int | None = None
    preemptions: int = 0
    """Sum of V1's per-interval "Preemptions: N"."""
    first_preemption_line: int | None = None
    evidence: Event | None = None
    """The first stats line that shows pressure (a preemption, or a full cache with requests waiting)."""

    def add(self, line: int, m: re.Match[str], text: str) -> None:
        usage, waiting, running = float(m["usage"]), int(m["waiting"]), int(m["running"])
        self.lines += 1
        self.running_max = max(self.running_max, running)
        if usage > self.peak_usage:
            self.peak_usage, self.peak_line = usage, line
        if usage >= PRESSURE_USAGE and waiting > 0:
            self.waiting_under_pressure = max(self.waiting_under_pressure, waiting)
            self.first_pressure_line = self.first_pressure_line or line
        count = msg.STATS_PREEMPTIONS.search(m["rest"])
        if count and int(count["n"]) > 0:
            self.preemptions += int(count["n"])
            self.first_preemption_line = self.first_preemption_line or line
        if self.evidence is None and (self.first_pressure_line or self.first_preemption_line):
            self.evidence = Event(line, {}, text[:EVIDENCE_CHARS])


@dataclass
class Start:
    """What one server start showed: the first and last event of each shape, settings, stats."""

    settings: dict[str, Any]
    first: dict[str, Event] = field(default_factory=dict)
    last: dict[str, Event] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    context: dict[re.Pattern[str], Event] = field(default_factory=dict)
    """The last model-loading, KV-capacity and graph-capture lines."""
    stats: Stats = field(default_factory=Stats)
    gpu_processes: dict[str, tuple[str, float]] = field(default_factory=dict)
    """nvidia-smi's process table: pid → (name, GiB), the last table seen."""
    own_pids: set[str] = field(default_factory=set)

    def record(self, shape: msg.Shape, line: int, m: re.Match[str], text: str) -> None:
        event = Event(line, {k: v for k, v in m.groupdict().items() if v is not None}, text[:EVIDENCE_CHARS])
        self.first.setdefault(shape.name, event)
        self.last[shape.name] = event
        self.counts[shape.name] = self.counts.get(shape.name, 0) + 1
        if shape is msg.STATS:
            self.stats.add(line, m, text)


_PID = re.compile(r"\([^()]*pid=(\d+)\)")


class Scanner:
    """Feed lines in order, then `finish()`: the last start of the log."""

    def __init__(self, profile: ServeProfile | None = None) -> None:
        self.base = profile.model_dump() if profile else {}
        self.start = Start(dict(self.base))
        self.recent: deque[tuple[int, str]] = deque(maxlen=2 * WRAP_LINES + 2)
        self.due: deque[int] = deque()
        self.consumed = 0
        """The last line a joined (wrapped) match took in."""
        self.matched: deque[int] = deque(maxlen=2 * WRAP_LINES + 2)
        """Recent lines that matched alone: no window starts there."""
        self.lineno = 0

    def feed(self, raw: str) -> None:
        self.lineno += 1
        text = clean(raw)
        self.recent.append((self.lineno, text))
        if "pid=" in raw and len(self.start.own_pids) < 64:
            self.start.own_pids.update(_PID.findall(raw))
        if "MiB" in text:
            self._smi(text)
        if "non-default args" in text:
            self._new_start(text)
        elif any(hint in text for hint in msg.HINTS):
            self._match_line(text)
        while self.due and self.due[0] + WRAP_LINES <= self.lineno:
            self._match_window(self.due.popleft())

    def feed_all(self, lines: Iterable[str]) -> Start:
        for line in lines:
            self.feed(line)
        return self.finish()

    def finish(self) -> Start:
        while self.due:
            self._match_window(self.due.popleft())
        return self.start

    def _new_start(self, text: str) -> None:
        settings = dict(self.base)
        found = msg.NON_DEFAULT_ARGS.search(text)
        try:
            args = ast.literal_eval(found["args"]) if found else {}
        except (ValueError, SyntaxError):  # a cut line: the profile still holds
            args = {}
        if isinstance(args, dict):
            settings.update(args)
        self.start = Start(settings)
        self.due.clear()
        self.consumed = self.lineno

    def _match_line(self, text: str) -> None:
        matched = False
        for shape in msg.SHAPES:
            if shape is msg.STATS:
                for m in shape.regex.finditer(text):  # a line may hold several (lost newlines)
                    self.start.record(shape, self.lineno, m, text)
                    matched = True
                continue
            m = shape.regex.search(text)
            if m:
                self.start.record(shape, self.lineno, m, text)
                matched = True
        for pattern in _CONTEXT:
            m = pattern.search(text)
            if m:
                self.start.context[pattern] = Event(self.lineno, m.groupdict(), text)
        if matched:
            self.matched.append(self.lineno)
        else:
            self.due.append(self.lineno)

    def _match_window(self, hinted: int) -> None:
        """Try the lines around a hinted line that matched nothing, joined: a wrapped message."""
        lines = [(n, text) for n, text in self.recent if hinted - 2 <= n <= hinted + WRAP_LINES]
        for offset, (first, head) in enumerate(lines):
            if first > hinted or first <= self.consumed or first in self.matched:
                continue
            joined = "".join(text for _, text in lines[offset : offset + WRAP_LINES])
            for shape in msg.SHAPES:
                m = shape.regex.search(joined)
                if m and m.start() < len(head):
                    self.start.record(shape, first, m, joined[m.start() :])
                    self._consume_through(lines, offset, m.end())
                    return

    def _consume_through(self, lines: list[tuple[int, str]], offset: int, end: int) -> None:
        """Mark the physical lines a joined match spans as read, so no later window reads it again."""
        length = 0
        for n, text in lines[offset:]:
            length += len(text)
            self.consumed = max(self.consumed, n)
            if length >= end:
                break

    def _smi(self, text: str) -> None:
        row = msg.SMI_PROCESS.search(text)
        if row:
            self.start.gpu_processes[row["pid"]] = (row["name"].strip(), int(row["mib"]) / 1024)


def scan(lines: Iterable[str], profile: ServeProfile | None = None) -> Start:
    """The last start of a log given as lines (a file object or a list)."""
    return Scanner(profile).feed_all(lines)
