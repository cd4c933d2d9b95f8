"""`kqe doctor`: the OOM pattern a vLLM log shows, the line that shows it, and the fix to try first.

Patterns (DESIGN.md §1): A the weights do not fit (loading fails); B the KV cache gets too little
memory (no cache blocks, the sampler warm-up, preemption or a full cache with requests waiting under
concurrency, an asked KV pool larger than the machine); C one request is longer than the KV cache or
than max_model_len; D another process holds or changes the device memory. None: the log shows no
out-of-memory failure.

The messages recognised are those of vLLM 0.5 to 0.32 and PyTorch's CUDA allocator
(`evals/serving/doctor/messages.py`, each kept with its version and source in
`tests/data/vllm_messages/corpus.toml`). When a start shows several patterns, the one that appeared
first is the cause; the others are listed after it, in the order they appeared.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pydantic import Field

from evals.serving.doctor import judges as judge
from evals.serving.doctor import messages as msg
from evals.serving.doctor.judges import Finding, Pattern
from evals.serving.doctor.kv_pressure import kv_pressure, metrics_finding
from evals.serving.doctor.log_scan import EVIDENCE_CHARS, Event, GpuProcesses, Start, scan
from kqe.core.records import Record, ServeProfile


class Diagnosis(Record):
    """What `kqe doctor` concludes from one log (or one `/metrics` page)."""

    pattern: Pattern | None
    """The OOM pattern (the cause when there are several), or None when none shows."""
    evidence: str | None
    """The log message that shows it (log prefix removed), None without a pattern."""
    line: int | None = None
    """The physical line (1-based) where that message starts, None without one."""
    advice: list[str]
    """Fixes in the guide's order, the first to try first, with numbers from the log."""
    summary: str
    """One line for an error message or a leaderboard row."""
    numbers: dict[str, float] = Field(default_factory=dict)
    """The figures the pattern was read from (e.g. free_gib, max_model_len, peak_kv_usage_pct)."""
    also: list[str] = Field(default_factory=list)
    """The other patterns the same start shows, in the order they appeared after the cause."""


@dataclass(frozen=True)
class _Rule:
    """A rule judges the last event of the first of its shapes the start shows."""

    shapes: tuple[msg.Shape, ...]
    judge: Callable[[Start, Event, GpuProcesses | None], Finding | None]

    def find(self, start: Start) -> tuple[int, Event] | None:
        """The first line any of its shapes appeared on, and the event to judge."""
        present = [shape.name for shape in self.shapes if shape.name in start.last]
        if not present:
            return None
        return min(start.first[name].line for name in present), start.last[present[0]]


@dataclass(frozen=True)
class _StatsRule(_Rule):
    """Runtime pressure: judged on the whole start's stats, first seen where they first showed it."""

    def find(self, start: Start) -> tuple[int, Event] | None:
        v0 = start.first.get(msg.V0_PREEMPTED.name)
        evidence = start.stats.evidence
        if v0 and (evidence is None or v0.line < evidence.line):
            evidence = v0
        return (evidence.line, evidence) if evidence else None


_PROMPT_SHAPES = (
    msg.LONG_PROMPT,
    msg.REQUEST_HAS,
    msg.MAX_TOKENS_TOO_LARGE,
    msg.REQUESTED_TOKENS,
    msg.PROMPT_LONGER,
    msg.PROMPT_LIMIT,
)
_RULES: tuple[_Rule, ...] = (
    _Rule((msg.FREE_AT_STARTUP, msg.CPU_AT_STARTUP), judge.shared_gpu),
    _Rule((msg.PROFILING_ERROR,), judge.memory_changed),
    _Rule((msg.CPU_KV_TOO_BIG,), judge.cpu_kv_pool),
    _Rule((msg.TORCH_OOM,), judge.torch_oom_of_other_process),
    _Rule((msg.SAMPLER_WARMUP,), judge.sampler_warmup),  # before A: its message says "CUDA out of memory"
    _Rule((msg.LOAD_FAILED, msg.ANY_CUDA_OOM), judge.weights_do_not_fit),
    _Rule((msg.ONE_REQUEST,), judge.one_request_does_not_fit),
    _Rule((msg.OLD_MAX_SEQ,), judge.old_engine_max_seq),
    _Rule((msg.BLOCK_MANAGER_FULL,), judge.prompt_beyond_kv_cache),
    _Rule(_PROMPT_SHAPES, judge.prompt_too_long),
    _Rule((msg.NO_CACHE_BLOCKS,), judge.no_cache_blocks),
    _Rule((msg.ANY_CUDA_OOM,), judge.oom_after_loading),
    _StatsRule((msg.STATS, msg.V0_PREEMPTED), kv_pressure),
)
"""Most specific first: on one line, the first rule that finds a pattern there speaks for it."""

NOT_AN_OOM = "not an OOM: no out-of-memory failure"


def diagnose(
    log: str | Iterable[str], profile: ServeProfile | None = None, gpu_processes: GpuProcesses | None = None
) -> Diagnosis:
    """The pattern a vLLM log shows (text, or lines read lazily from a file or stdin); `profile` fills
    in settings the log does not state, `gpu_processes` is nvidia-smi's table given apart from the log.
    A log that holds several starts (a retried server appends to its log) is judged by its last."""
    lines = log.splitlines() if isinstance(log, str) else log
    return judge_start(scan(lines, profile), gpu_processes)


def judge_start(start: Start, gpu_processes: GpuProcesses | None = None) -> Diagnosis:
    """Every rule's finding on one start, ordered by where it first appeared: the first is the cause."""
    found: list[tuple[int, int, Event, Finding]] = []
    judged_lines: set[int] = set()
    for order, rule in enumerate(_RULES):
        located = rule.find(start)
        finding = rule.judge(start, located[1], gpu_processes) if located else None
        if located and finding and located[1].line not in judged_lines:
            judged_lines.add(located[1].line)
            found.append((located[0], order, located[1], finding))
    if not found:
        return Diagnosis(pattern=None, evidence=None, advice=[], summary=NOT_AN_OOM)
    found.sort(key=lambda item: item[:2])
    first_line, _, event, cause = found[0]
    also = [f"then at line {line}: {finding.summary}" for line, _, _, finding in found[1:]]
    summary = cause.summary + (f" (the cause: first, at line {first_line})" if also else "")
    return Diagnosis(
        pattern=cause.pattern,
        evidence=evidence(event.text),
        line=event.line,
        advice=cause.advice,
        summary=summary,
        numbers=cause.numbers,
        also=also,
    )


def evidence(text: str) -> str:
    """A message cut to EVIDENCE_CHARS."""
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def diagnose_metrics(text: str, source: str) -> Diagnosis:
    """Whether a running server is under KV pressure now, from its `/metrics` text."""
    finding, gauges = metrics_finding(text, source)
    if finding is None:
        usage, waiting = gauges["kv_usage_pct"], gauges.get("waiting", 0)
        summary = f"no KV pressure now: KV cache {usage:g}% in use, {waiting:g} requests waiting"
        return Diagnosis(pattern=None, evidence=None, advice=[], summary=summary, numbers=gauges)
    return Diagnosis(
        pattern="B", evidence=None, advice=finding.advice, summary=finding.summary, numbers=finding.numbers
    )


def read_gpu_processes(output: str | Iterable[str]) -> GpuProcesses:
    """nvidia-smi's process table from its output (text or lines)."""
    return scan(output.splitlines() if isinstance(output, str) else output).gpu_processes


def live_gpu_processes() -> GpuProcesses | None:
    """nvidia-smi's process table on this machine now, None where nvidia-smi is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return read_gpu_processes(result.stdout) if result.returncode == 0 else None
