"""ko_ifeval prompt files: the shipped set and user sets, in Google IFEval's JSONL layout, one prompt
per line:

    {"key": 1001, "prompt": "…", "instruction_id_list": ["ko:formal_ending", "length:sentences"],
     "kwargs": [{}, {"relation": "exactly", "num": 3}]}

- `key`: an integer or a string, unique in the file (responses name their prompt by it)
- `prompt`: the text sent to the model
- `instruction_id_list`: one or more ids of `instructions.INSTRUCTIONS`, none twice
- `kwargs`: one object per instruction, in the same order, with exactly the kwargs it takes

Every problem is a `UserError` naming the file and line: the shipped set is checked in the tests, a user
set when it is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.tasks.ko_ifeval.instructions import check_kwargs
from evals.tasks.ko_rag.user_files import read_entries
from kqe.core.errors import UserError

PROMPTS_PATH = Path(__file__).with_name("prompts.jsonl")
"""The prompt set the project ships (README.md beside it; REVIEW.md for how it was read)."""
FIELDS = ("key", "prompt", "instruction_id_list", "kwargs")
_FIX = "give a ko_ifeval prompts file (IFEval JSONL: key, prompt, instruction_id_list, kwargs)"


@dataclass(frozen=True)
class IfevalPrompt:
    """One ko_ifeval prompt and the instructions its response is checked against."""

    key: str
    """Its key as written (an integer key is kept as its decimal text)."""
    prompt: str
    instruction_id_list: tuple[str, ...]
    kwargs: tuple[dict[str, Any], ...]
    """One kwargs object per instruction, in the same order."""

    @property
    def id(self) -> str:
        """The key: what the file reader keeps unique."""
        return self.key


def key_text(value: Any) -> str | None:
    """A key as text: an integer or a non-empty string; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and value.strip() else None


def _instructions(value: dict[str, Any], where: str) -> tuple[tuple[str, ...], tuple[dict[str, Any], ...]]:
    ids, kwargs = value["instruction_id_list"], value["kwargs"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise UserError(f"{where}: instruction_id_list must be a non-empty list of instruction ids")
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        raise UserError(f"{where}: kwargs must be a list with one object per instruction ({len(ids)})")
    if len(set(ids)) != len(ids):
        raise UserError(f"{where}: an instruction id is listed twice: list each once")
    for instruction_id, given in zip(ids, kwargs, strict=True):
        problem = check_kwargs(instruction_id, given)
        if problem is not None:
            raise UserError(f"{where}: {problem}")
    return tuple(ids), tuple(kwargs)


def _parse(value: Any, where: str) -> IfevalPrompt:
    if not isinstance(value, dict):
        raise UserError(f"{where}: not a JSON object: write one IFEval prompt object per line")
    missing = [field for field in FIELDS if field not in value]
    if missing:
        raise UserError(f"{where}: missing {', '.join(missing)}: each line needs {', '.join(FIELDS)}")
    key = key_text(value["key"])
    if key is None:
        raise UserError(f"{where}: key must be an integer or a non-empty string, not {value['key']!r}")
    if not isinstance(value["prompt"], str) or not value["prompt"].strip():
        raise UserError(f"{where}: prompt must be a non-empty string")
    ids, kwargs = _instructions(value, where)
    return IfevalPrompt(key, value["prompt"], ids, kwargs)


def load_prompts(path: Path = PROMPTS_PATH) -> list[IfevalPrompt]:
    """Every prompt of `path` (default: the shipped set), checked line by line."""
    return read_entries(path, _parse, "prompt", what="ko_ifeval prompts file", fix=_FIX)
