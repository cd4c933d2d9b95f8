"""CircularEval's items (Liu et al. 2023, MMBench): a seeded few items of a letter-choice task, each asked
again with its options rotated, so every option sits once at every letter (`--circular N`).

- Which items: the task's prepared items in a seeded order (`random.Random(f"{seed}/circular/{task}")`
  shuffles them), the first N of it: the same items for every checkpoint of a run, and a larger N keeps
  the smaller one's items. The file `<task>.jsonl` of the prepared folder is the pool, so N is at most
  its item count (after `--limit`).
- Rotation r of k options puts option (j + r) mod k at letter j: the gold answer moves from letter g
  to (g − r) mod k with its text. Rotation 0 is the item as scored, so only rotations 1..k−1 are new
  requests: N × (k − 1) per task and checkpoint. A rotated item's id is `<item_id>@rot<r>`.
- Only the item's own options rotate; the shots of a k-shot prompt keep theirs (their answers are
  part of the prompt, not the question).
- Registry letter-choice tasks only: ko_rag, lm-eval tasks (whose rows lm-eval's own YAML renders)
  and generation tasks are not rotated.

The rotated rows go through the same lm-eval YAML as the items (`prompts.load_prompts`), so a rotated
prompt is the text the task would send had the item's options come in that order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from evals.tasks.prompts import PromptItem, load_prompts
from evals.tasks.registry import TASK_SPECS
from kqe.core.errors import UserError
from kqe.core.io import write_atomic

ROTATION_MARK = "@rot"
"""What joins an item's id and its rotation in a rotated item's id (`kmmlu-law-3@rot2`)."""
OPTIONS = 4
"""Options of every registry letter-choice task (their YAMLs' `doc_to_choice` is A–D): the dry run's
count of rotations, before any item is read."""
KMMLU_LETTERS = ("A", "B", "C", "D")
"""The option fields of a KMMLU-family row (its `answer` is 1-based)."""


def rotatable(task: str) -> bool:
    """Whether `--circular` rotates `task`'s options: the registry's letter-choice tasks."""
    return task in TASK_SPECS


def check_circular(count: int, items: dict[str, int | None]) -> None:
    """A one-line UserError when `count` (> 0) exceeds the items of a rotated task (None: not yet counted)."""
    for task, available in items.items():
        if count and available is not None and count > available:
            raise UserError(
                f"--circular {count} is more than the {available} items {task} scores: give at most "
                f"{available} (or raise --limit), or 0 for no CircularEval"
            )


def rotated_id(item_id: str, rotation: int) -> str:
    """The id of `item_id` asked in `rotation`."""
    return f"{item_id}{ROTATION_MARK}{rotation}"


def base_id(rotated: str) -> tuple[str, int]:
    """(item id, rotation) of a rotated item's id."""
    item_id, _, rotation = rotated.rpartition(ROTATION_MARK)
    return item_id, int(rotation)


def rotate(options: list[Any], gold: int, rotation: int) -> tuple[list[Any], int]:
    """`options` with option (j + rotation) mod k at position j, and where the gold option went."""
    k = len(options)
    return [options[(j + rotation) % k] for j in range(k)], (gold - rotation) % k


def rotated_row(row: dict[str, Any], rotation: int) -> dict[str, Any]:
    """A prepared row (KMMLU's A–D fields with a 1-based answer, or MMLU's `choices` with a 0-based
    one) with its options rotated and its answer following them."""
    out = {**row, "item_id": rotated_id(row["item_id"], rotation)}
    if "choices" in row:
        out["choices"], out["answer"] = rotate(list(row["choices"]), int(row["answer"]), rotation)
        return out
    options, gold = rotate([row[key] for key in KMMLU_LETTERS], int(row["answer"]) - 1, rotation)
    return out | dict(zip(KMMLU_LETTERS, options, strict=True)) | {"answer": gold + 1}


def option_count(row: dict[str, Any]) -> int:
    """Options of a prepared row."""
    return len(row["choices"]) if "choices" in row else len(KMMLU_LETTERS)


def drawn(item_ids: list[str], count: int, seed: int, task: str) -> list[str]:
    """The first `count` of `item_ids` in the task's seeded order, in `item_ids`' order."""
    order = list(item_ids)
    random.Random(f"{seed}/circular/{task}").shuffle(order)
    chosen = set(order[:count])
    return [item_id for item_id in item_ids if item_id in chosen]


def _rows(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: MMLU text holds U+2028
    return [json.loads(line) for line in lines if line.strip()]


def circular_prompts(task: str, data_dir: Path, count: int, seed: int) -> list[PromptItem]:
    """Rotations 1..k−1 of the task's `count` drawn items, rendered by the task's YAML from rows written
    to `<data_dir>/circular-<count>/` (the prepared folder is keyed by the items, limit and seed)."""
    rows = _rows(data_dir / f"{task}.jsonl")
    check_circular(count, {task: len(rows)})
    chosen = set(drawn([row["item_id"] for row in rows], count, seed, task))
    rotated = [
        rotated_row(row, rotation)
        for row in rows
        if row["item_id"] in chosen
        for rotation in range(1, option_count(row))
    ]
    out = data_dir / f"circular-{count}"
    write_atomic(
        out / f"{task}.jsonl", "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rotated)
    )
    return load_prompts(task, out)
