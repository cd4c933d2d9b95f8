"""The instruction registry of ko_ifeval: each id with its checker and the kwargs it takes.

A prompt file names instructions by id (`instruction_id_list`) with one kwargs object each (`kwargs`,
Google IFEval's layout); `check_kwargs` refuses an unknown id, a missing or unexpected kwarg and a
value of the wrong kind before anything is scored. An empty answer (nothing but whitespace) follows no
instruction, not even the ones that forbid something.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evals.tasks.ko_ifeval import format_checks, korean_checks

Checker = Callable[[str, Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Kwarg:
    """One keyword argument an instruction takes."""

    name: str
    kind: str
    """"count" (an integer ≥ 1), "relation" (one of `format_checks.RELATIONS`), "text" (a non-empty
    string) or "words" (a non-empty list of non-empty strings)."""


@dataclass(frozen=True)
class Instruction:
    """One verifiable instruction."""

    id: str
    """Its id in prompt files (`ko:formal_ending`, `length:sentences`, …)."""
    checker: Checker
    """Whether a response follows it, given the prompt's kwargs for it."""
    kwargs: tuple[Kwarg, ...] = ()
    """What the prompt must give it (nothing more)."""


_COUNT = Kwarg("num", "count")
_WORDS = Kwarg("keywords", "words")
INSTRUCTIONS: dict[str, Instruction] = {
    instruction.id: instruction
    for instruction in (
        Instruction("ko:formal_ending", korean_checks.formal_ending),
        Instruction("ko:polite_ending", korean_checks.polite_ending),
        Instruction("ko:no_latin", korean_checks.no_latin),
        Instruction("ko:no_hanja", korean_checks.no_hanja),
        Instruction("ko:answer_in_korean", korean_checks.answer_in_korean),
        Instruction("length:sentences", format_checks.sentences, (Kwarg("relation", "relation"), _COUNT)),
        Instruction("length:max_chars", format_checks.max_chars, (Kwarg("max_chars", "count"),)),
        Instruction("format:numbered_list", format_checks.numbered_list, (_COUNT,)),
        Instruction("format:paragraphs", format_checks.paragraphs, (_COUNT,)),
        Instruction("format:json", format_checks.json_format),
        Instruction("format:title", format_checks.title),
        Instruction("keywords:include", format_checks.include, (_WORDS,)),
        Instruction("keywords:exclude", format_checks.exclude, (_WORDS,)),
        Instruction("startend:end_phrase", format_checks.end_phrase, (Kwarg("phrase", "text"),)),
        Instruction("startend:quotation", format_checks.quotation),
    )
}
"""Every instruction id ko_ifeval knows."""


def _kind_problem(kind: str, value: Any) -> str | None:
    """What is wrong with `value` as a kwarg of `kind`, or None."""
    if kind == "count":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else "an integer of at least 1"
    if kind == "relation":
        return None if value in format_checks.RELATIONS else " or ".join(map(repr, format_checks.RELATIONS))
    if kind == "text":
        return None if isinstance(value, str) and value.strip() else "a non-empty string"
    words = isinstance(value, list) and value and all(isinstance(w, str) and w.strip() for w in value)
    return None if words else "a non-empty list of non-empty strings"


def check_kwargs(instruction_id: str, kwargs: Any) -> str | None:
    """What is wrong with `kwargs` for `instruction_id` (one phrase naming the fix), or None."""
    instruction = INSTRUCTIONS.get(instruction_id)
    if instruction is None:
        return f"unknown instruction id {instruction_id!r}: use one of {', '.join(INSTRUCTIONS)}"
    if not isinstance(kwargs, dict):
        return f"kwargs of {instruction_id} must be a JSON object"
    names = {kwarg.name for kwarg in instruction.kwargs}
    wanted = ", ".join(sorted(names)) or "none"
    if set(kwargs) != names:
        return f"{instruction_id} takes kwargs {wanted}, not {', '.join(sorted(kwargs)) or 'none'}"
    for kwarg in instruction.kwargs:
        problem = _kind_problem(kwarg.kind, kwargs[kwarg.name])
        if problem is not None:
            return f"{instruction_id} kwarg {kwarg.name} must be {problem}, not {kwargs[kwarg.name]!r}"
    return None


def follows(instruction_id: str, response: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether `response` follows the instruction (checked kwargs; an empty response follows none)."""
    return bool(response.strip()) and INSTRUCTIONS[instruction_id].checker(response, kwargs)
