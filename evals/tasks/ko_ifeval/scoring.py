"""ko_ifeval's scores: per prompt, one boolean per instruction and whether it followed all, strict and
loose; over prompts, prompt-level and instruction-level accuracy of each.

Strict reads the response as it is. Loose is IFEval's loose variant (Zhou et al. 2023,
`instructions_util`/`evaluation_lib.test_instruction_following_loose`): an instruction is followed when
any of eight readings follows it — the response, without its first line, without its last line, without
both, each of those also with markdown asterisks removed — so a preamble ("다음은 답변입니다:"), a
closing remark or bold markup does not fail an answer that otherwise follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evals.tasks.ko_ifeval.instructions import follows


@dataclass(frozen=True)
class PromptScore:
    """How one response followed its prompt's instructions."""

    follow_instruction_list: tuple[bool, ...]
    """One boolean per instruction of the prompt, strict, in the prompt's order."""
    follow_all: bool
    """Strict: every instruction followed."""
    loose_follow_instruction_list: tuple[bool, ...]
    """The same, loose."""
    loose_follow_all: bool
    """Loose: every instruction followed."""


@dataclass(frozen=True)
class IfevalTotals:
    """Accuracy over scored prompts (fractions; None when nothing was scored)."""

    prompts: int
    instructions: int
    prompt_strict: float | None
    """Share of prompts that followed every instruction, strict."""
    instruction_strict: float | None
    """Share of all instructions followed, strict."""
    prompt_loose: float | None
    instruction_loose: float | None


def loose_readings(response: str) -> list[str]:
    """The eight readings of `response` its loose score tries (IFEval's order)."""
    lines = response.split("\n")
    first_off = "\n".join(lines[1:]).strip()
    last_off = "\n".join(lines[:-1]).strip()
    both_off = "\n".join(lines[1:-1]).strip()
    plain = response.replace("*", "")
    return [
        response,
        plain,
        first_off,
        last_off,
        both_off,
        first_off.replace("*", ""),
        last_off.replace("*", ""),
        both_off.replace("*", ""),
    ]


def score_response(
    response: str, instruction_ids: Sequence[str], kwargs: Sequence[Mapping[str, Any]]
) -> PromptScore:
    """Strict and loose scores of one response (ids and kwargs checked by `instructions.check_kwargs`)."""
    pairs = list(zip(instruction_ids, kwargs, strict=True))
    strict = tuple(follows(i, response, k) for i, k in pairs)
    readings = loose_readings(response)
    loose = tuple(any(follows(i, reading, k) for reading in readings) for i, k in pairs)
    return PromptScore(strict, all(strict), loose, all(loose))


def _share(hits: int, total: int) -> float | None:
    return hits / total if total else None


def totals(scores: Sequence[PromptScore]) -> IfevalTotals:
    """Prompt-level and instruction-level accuracy, strict and loose."""
    instructions = sum(len(score.follow_instruction_list) for score in scores)
    return IfevalTotals(
        prompts=len(scores),
        instructions=instructions,
        prompt_strict=_share(sum(score.follow_all for score in scores), len(scores)),
        instruction_strict=_share(sum(sum(s.follow_instruction_list) for s in scores), instructions),
        prompt_loose=_share(sum(score.loose_follow_all for score in scores), len(scores)),
        instruction_loose=_share(sum(sum(s.loose_follow_instruction_list) for s in scores), instructions),
    )
