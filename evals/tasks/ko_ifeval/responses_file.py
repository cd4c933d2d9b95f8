"""Responses produced anywhere, scored with ko_ifeval's verifiers: `RESPONSES.jsonl`, one line per
prompt,

    {"key": 1001, "response": "…"}

against the shipped prompts or a user's prompts file (`prompts.load_prompts`). Other fields on a line
are ignored (Google IFEval's response files carry the prompt along); every problem is one `UserError`
naming the file and line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evals.tasks.ko_ifeval.prompts import IfevalPrompt, key_text
from evals.tasks.ko_ifeval.scoring import IfevalTotals, PromptScore, score_response, totals
from evals.tasks.ko_rag.user_files import read_entries
from kqe.core.errors import UserError

_FIX = 'give a responses file: one {"key": ..., "response": ...} object per line'


@dataclass(frozen=True)
class IfevalResponse:
    """One line of a responses file."""

    key: str
    response: str

    @property
    def id(self) -> str:
        """The key: what the file reader keeps unique."""
        return self.key


@dataclass(frozen=True)
class ScoredResponse:
    """One response and how it followed its prompt."""

    key: str
    instruction_id_list: tuple[str, ...]
    response: str
    score: PromptScore


@dataclass(frozen=True)
class ScoredResponses:
    """A whole responses file scored: per prompt, the totals, and the prompts it left out."""

    label: str
    """Which prompt set it was scored against."""
    items: list[ScoredResponse]
    totals: IfevalTotals
    unanswered: list[str]
    """Keys of the set's prompts the file has no line for."""

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "prompts": self.label,
            "items": [
                {"key": i.key, "instruction_id_list": list(i.instruction_id_list), "response": i.response}
                | asdict(i.score)
                for i in self.items
            ],
            "totals": asdict(self.totals),
            "unanswered": self.unanswered,
        }
        return json.dumps(body, ensure_ascii=False, indent=2)


def _parse(value: Any, where: str) -> IfevalResponse:
    if not isinstance(value, dict):
        raise UserError(f'{where}: not a JSON object: write {{"key": ..., "response": ...}} per line')
    key = key_text(value.get("key"))
    if key is None:
        raise UserError(f"{where}: key must be an integer or a non-empty string: each line needs its key")
    if not isinstance(value.get("response"), str):
        raise UserError(f"{where}: field 'response' must be a string: each line needs key and response")
    return IfevalResponse(key, value["response"])


def score_responses(path: Path, prompts: list[IfevalPrompt], label: str) -> ScoredResponses:
    """Every line of `path` scored against its prompt in `prompts`."""
    by_key = {prompt.key: prompt for prompt in prompts}

    def check(response: IfevalResponse, where: str) -> None:
        if response.key not in by_key:
            example = ", ".join(list(by_key)[:3])
            raise UserError(
                f"{where}: no prompt with key {response.key!r} in {label}: use its keys ({example}, ...)"
            )

    responses = read_entries(path, _parse, "response", check, what="ko_ifeval responses file", fix=_FIX)
    items = []
    for response in responses:
        prompt = by_key[response.key]
        score = score_response(response.response, prompt.instruction_id_list, prompt.kwargs)
        items.append(ScoredResponse(prompt.key, prompt.instruction_id_list, response.response, score))
    answered = {response.key for response in responses}
    return ScoredResponses(
        label,
        items,
        totals([item.score for item in items]),
        [prompt.key for prompt in prompts if prompt.key not in answered],
    )
