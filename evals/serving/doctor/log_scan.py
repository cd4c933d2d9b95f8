"""One pass over a vLLM log, line by line in bounded memory: what its last start shows.

Each line is cleaned of what surrounds a message (ANSI colours, CR, Docker timestamps, vLLM's
`(EngineCore pid=…) ERROR 06-15 14:02:43 [core.py:396]` or V0's `INFO 03-31 01:47:59 worker.py:267]`
prefix, torch.distributed's `[rank0]:`). Only lines holding a hint word (`vllm_messages.HINTS`) are
cleaned and matched against the shapes; one that is no whole log record (it has no log prefix, or
the line after it has none) is also tried joined with its neighbours, so a message the terminal
wrapped over several lines is read whole. A "non-default args" line starts a new server start and
the scan forgets what came before (a retried server appends to its log).
"""

from __future__ import annotations

import ast
import bisect
import functools
import itertools
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evals.serving.doctor import messages as msg
from evals.serving.memory import KV_CAPACITY, MODEL_LOADING
from kqe.core.records import ServeProfile

EVIDENCE_CHARS = 400
_EVENT_CHARS = 2000
"""What an event keeps of its message: enough for PyTorch's list of processes."""
WRAP_LINES = 6
"""How many physical lines a wrapped message may span."""
LOOK_BACK = 3
"""How many lines before a hinted line a wrapped message may start (its hint words may come late)."""
PRESSURE_USAGE = 95.0
"""KV cache usage (%) from which requests left waiting mean the cache, not the load, is the limit."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DOCKER = re.compile(r"^\s*(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+)?")
_PREFIX = re.compile(
    _DOCKER.pattern  # docker logs -t
    + r"(?:\([^()]*pid=\d+\)\s+)?"  # (EngineCore_DP0 pid=1234)
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:.]{8,}\s+(?:\[[^\]]*\]|[\w./-]+:\d+\])\s)?"
    r"(?:\[rank\d+\]:\s?)?"
)
_CONTEXT = (MODEL_LOADING, KV_CAPACITY, msg.GRAPH_CAPTURE)


def clean(line: str) -> str:
    """A physical log line without colours, CR and log prefix."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _PREFIX.sub("", line.rstrip("\r\n"), count=1).strip()


GpuProcesses = dict[str, tuple[str, float]]
"""nvidia-smi's processes: pid → (name, GiB)."""


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

    base: dict[str, Any]
    """The profile's settings."""
    args: str | None = None
    """The start's "non-default args" dict as logged; parsed only for the start judged."""
    first: dict[str, Event] = field(default_factory=dict)
    last: dict[str, Event] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    context: dict[re.Pattern[str], Event] = field(default_factory=dict)
    """The last model-loading, KV-capacity and graph-capture lines."""
    stats: Stats = field(default_factory=Stats)
    gpu_processes: GpuProcesses = field(default_factory=dict)
    """nvidia-smi's process table, the last table seen."""
    own_pids: set[str] = field(default_factory=set)

    @functools.cached_property
    def settings(self) -> dict[str, Any]:
        """The profile's settings overridden by the start's "non-default args" line."""
        try:
            args = ast.literal_eval(self.args) if self.args else {}
        except (ValueError, SyntaxError):  # a cut line: the profile still holds
            args = {}
        return {**self.base, **args} if isinstance(args, dict) else dict(self.base)

    def record(self, shape: msg.Shape, line: int, m: re.Match[str], text: str) -> None:
        if shape is msg.STATS and shape.name in self.first:  # the stats add up: no event each
            self.counts[shape.name] += 1
            self.stats.add(line, m, text)
            return
        event = Event(line, {k: v for k, v in m.groupdict().items() if v is not None}, text[:_EVENT_CHARS])
        self.first.setdefault(shape.name, event)
        self.last[shape.name] = event
        self.counts[shape.name] = self.counts.get(shape.name, 0) + 1
        if shape is msg.STATS:
            self.stats.add(line, m, text)

    def complete(self, shape: msg.Shape, line: int, m: re.Match[str], text: str) -> None:
        """The same message read again with the lines its wrap cut off: its groups as read whole."""
        event = Event(line, {k: v for k, v in m.groupdict().items() if v is not None}, text[:_EVENT_CHARS])
        for events in (self.first, self.last):
            if shape.name in events and events[shape.name].line == line:
                events[shape.name] = event


_HINT = re.compile("|".join(re.escape(hint) for hint in msg.HINTS))
_WORTH_READING = (*msg.HINTS, "MiB", "non-default args")
_BATCH_LINES = 4096


def _worth_reading(batch: list[str]) -> set[int]:
    """Indices of the lines of `batch` that hold a hint word, "MiB" or "non-default args"."""
    text = "\n".join(batch)
    found = []
    for word in _WORTH_READING:
        at = text.find(word)
        while at != -1:
            found.append(at)
            at = text.find(word, at + 1)
    if not found:
        return set()
    ends = list(itertools.accumulate(len(line) + 1 for line in batch))
    return {bisect.bisect_right(ends, at) for at in found}


_PID = re.compile(r"\([^()]*pid=(\d+)\)")
_RECORD_START = re.compile(r"\([^()]*pid=\d+\)|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s")


def _record_start(raw: str) -> bool:
    """Whether a physical line starts a log record (vLLM's prefix), not a wrapped line's rest."""
    return bool(_RECORD_START.match(_DOCKER.sub("", _ANSI.sub("", raw[:200]), count=1)))


class Scanner:
    """`feed_all(lines)`: the last start of the log."""

    def __init__(self, profile: ServeProfile | None = None) -> None:
        self.base = profile.model_dump() if profile else {}
        self.start = Start(self.base)
        self.recent: deque[tuple[int, str]] = deque(maxlen=LOOK_BACK + WRAP_LINES + 1)
        self.due: deque[int] = deque()
        """Hinted lines whose neighbours are still to be tried joined with them."""
        self.pending: int | None = None
        """A hinted line that matched alone: joined only if the next line continues it."""
        self.found_at: dict[int, set[str]] = {}
        """The shapes recent lines matched, so a window does not find them again."""
        self.lineno = 0

    def feed_all(self, lines: Iterable[str]) -> Start:
        """Every line, then `finish()`. Lines come in batches whose words worth reading are found
        with `str.find` on the batch joined (far faster than a regex per line); the others are only
        kept as neighbours."""
        iterator = iter(lines)
        while batch := list(itertools.islice(iterator, _BATCH_LINES)):
            worth = _worth_reading(batch)
            for index, raw in enumerate(batch):
                self.lineno += 1
                self.recent.append((self.lineno, raw))
                if self.pending is not None or self.due or index in worth:
                    self._take(raw)
        return self.finish()

    def _take(self, raw: str) -> None:
        """A line worth reading (or one after a hinted line): clean and match it."""
        if self.pending is not None:
            if not _record_start(raw):
                self.due.append(self.pending)  # the next line is no new record: maybe a wrap
            self.pending = None
        if "MiB" in raw:
            self._smi(clean(raw))
        if "non-default args" in raw:
            self._new_start(clean(raw))
        elif _HINT.search(raw):
            if "pid=" in raw and len(self.start.own_pids) < 64:
                self.start.own_pids.update(_PID.findall(raw))
            self._match_line(clean(raw), _record_start(raw))
        while self.due and self.due[0] + WRAP_LINES <= self.lineno:
            self._match_window(self.due.popleft())

    def finish(self) -> Start:
        if self.pending is not None:
            self.due.append(self.pending)
        while self.due:
            self._match_window(self.due.popleft())
        return self.start

    def _new_start(self, text: str) -> None:
        found = msg.NON_DEFAULT_ARGS.search(text)
        self.start = Start(self.base, found["args"] if found else None)
        self.due.clear()
        self.pending = None

    def _match_line(self, text: str, record_start: bool) -> None:
        """Match a hinted line alone; try it with its neighbours later unless it is a whole record:
        it starts with a log prefix and (`pending`) the next line does too."""
        found: set[str] = set()
        for stats in msg.STATS.regex.finditer(text):  # a line may hold several (lost newlines)
            self.start.record(msg.STATS, self.lineno, stats, text[stats.start() :])
            found.add(msg.STATS.name)
        for shape in () if found else msg.SHAPES:  # a stats line holds nothing else: the common case
            if m := shape.regex.search(text):
                self.start.record(shape, self.lineno, m, text)
                found.add(shape.name)
        for pattern in () if found else _CONTEXT:
            if m := pattern.search(text):
                self.start.context[pattern] = Event(self.lineno, m.groupdict(), text)
        if found:
            self._found(self.lineno, found)
        if record_start:
            self.pending = self.lineno
        else:
            self.due.append(self.lineno)

    def _found(self, line: int, names: set[str]) -> None:
        self.found_at.setdefault(line, set()).update(names)
        if len(self.found_at) > 4 * (LOOK_BACK + WRAP_LINES):
            horizon = self.lineno - LOOK_BACK - WRAP_LINES
            self.found_at = {n: shapes for n, shapes in self.found_at.items() if n >= horizon}

    def _match_window(self, hinted: int) -> None:
        """Try the lines around a hinted line joined: a message the terminal wrapped. A match within
        one line was found already; one that runs on completes a match its first line cut short."""
        lines = [(n, clean(raw)) for n, raw in self.recent if hinted - LOOK_BACK <= n <= hinted + WRAP_LINES]
        offsets = list(itertools.accumulate((len(text) for _, text in lines), initial=0))
        joined = "".join(text for _, text in lines)
        for shape in msg.SHAPES:
            for m in shape.regex.finditer(joined):
                first = bisect.bisect_right(offsets, m.start()) - 1
                if bisect.bisect_right(offsets, m.end() - 1) - 1 == first:
                    continue
                line, text = lines[first][0], joined[m.start() :]
                if shape.name not in self.found_at.get(line, set()):
                    self.start.record(shape, line, m, text)
                    self._found(line, {shape.name})
                elif shape is not msg.STATS:
                    self.start.complete(shape, line, m, text)

    def _smi(self, text: str) -> None:
        row = msg.SMI_PROCESS.search(text)
        if row:
            self.start.gpu_processes[row["pid"]] = (row["name"].strip(), int(row["mib"]) / 1024)


def scan(lines: Iterable[str], profile: ServeProfile | None = None) -> Start:
    """The last start of a log given as lines (a file object or a list)."""
    return Scanner(profile).feed_all(lines)
