"""Per-item results of two checkpoints, read from disk and aligned item by item for `evals.statistics.stats`.

Pairing checks that both sides were scored on the same items (same ids, same gold) and turns them into
columns, so the statistics index arrays instead of looping over records.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError, model_validator

from kqe.core.errors import UserError
from kqe.core.io import NestingError, loads_json, read_text

log = logging.getLogger(__name__)


class Scored(Protocol):
    """What the statistics read from one scored item: an `ItemResult` or a `ScoredItem`."""

    @property
    def task(self) -> str: ...
    @property
    def item_id(self) -> str: ...
    @property
    def correct(self) -> bool: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def gold(self) -> int | None: ...
    @property
    def choice_logprobs(self) -> list[float] | None: ...


class ScoredItem(BaseModel):
    """One line of a per-item file as `kqe compare` reads it: the fields below, others ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    task: str
    """Task name; files are compared task by task."""
    item_id: str
    """Identifier that pairs an item across the two files."""
    correct: StrictBool
    """Whether the checkpoint answered correctly (a JSON boolean)."""
    subject: str | None = None
    """Subject the item was drawn in; the bootstrap resamples whole subjects."""
    gold: int | None = None
    """Index of the correct choice; where both files give it, it must agree."""
    choice_logprobs: list[float] | None = None
    """Log-probability of each choice, in choice order; enables choice KL and top-choice agreement."""

    @model_validator(mode="after")
    def _consistent(self) -> ScoredItem:
        """A record the statistics could read but would misread is refused: an empty task, a gold
        index outside the choices, a log-probability above 0 (a probability above 1)."""
        if not self.task.strip():
            raise ValueError("task is empty: name the task the item belongs to")
        logprobs = self.choice_logprobs
        if logprobs is not None and any(value > 0 for value in logprobs):
            raise ValueError("a choice log-probability is positive: log-probabilities are at most 0")
        if self.gold is not None and (self.gold < 0 or (logprobs is not None and self.gold >= len(logprobs))):
            choices = "" if logprobs is None else f" of {len(logprobs)} choices"
            raise ValueError(f"gold {self.gold} is not the index of a choice{choices}")
        return self


@dataclass(frozen=True)
class PairedItems:
    """Two checkpoints' results on the same items, aligned row by row."""

    base_ok: np.ndarray
    """Base correctness, bool (n,)."""
    cand_ok: np.ndarray
    """Candidate correctness, bool (n,)."""
    clusters: np.ndarray
    """Subject of each item (n,); a single label means items are resampled one by one."""
    base_logprobs: np.ndarray | None = None
    """Base choice log-probs (n, choices), padded with -inf; None when some item lacks them."""
    cand_logprobs: np.ndarray | None = None
    """Candidate choice log-probs, same shape as the base's."""
    gold: np.ndarray | None = None
    """Index of the correct choice per item (n,), -1 where a file gives none; None when not read."""


def read_items(path: Path) -> dict[str, list[ScoredItem]]:
    """Read a per-item JSON Lines file grouped by task; anything else is a one-line error.

    A torn last line (a crash mid-write) is dropped with a warning, as the pipeline's reader does.
    """
    lines = read_text(path, "per-item file").split("\n")  # bounded; never a FIFO or device
    while lines and not lines[-1].strip():
        lines.pop()
    grouped: dict[str, list[ScoredItem]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            loads_json(line)  # refuses one key twice (which of the two counts would be a guess)
        except NestingError as exc:
            raise UserError(f"{path}:{number}: not a per-item record ({exc}): give each key once") from None
        except ValueError:
            pass  # not JSON: the record's own parse below says where (or drops a torn last line)
        try:
            item = ScoredItem.model_validate_json(line)
        except ValidationError as exc:
            problem = exc.errors()[0]
            if number == len(lines) > 1 and problem["type"] == "json_invalid":
                log.warning("%s:%d: dropped a torn last line", path, number)
                break
            where = ".".join(str(part) for part in problem["loc"]) or "line"
            raise UserError(
                f"{path}:{number}: not a per-item record ({where}: {problem['msg']}): each line must be "
                "a JSON object with task, item_id and correct (true/false)"
            ) from None
        grouped.setdefault(item.task, []).append(item)
    if not grouped:
        raise UserError(f"per-item file {path} holds no items: score a checkpoint first")
    return grouped


@dataclass(frozen=True)
class Columns:
    """One side's items as columns (gold -1 where absent; log-probs padded with -inf, None where
    some item has none), so pairing is array indexing rather than a loop per item."""

    ids: list[str]
    correct: np.ndarray
    gold: np.ndarray
    subjects: np.ndarray
    logprobs: np.ndarray | None
    widths: np.ndarray | None


def item_columns(items: Sequence[Scored], role: str) -> Columns:
    # a pass per field allocates no per-item tuples: with 9 checkpoints × 35k records alive, new
    # containers trigger full garbage collections that cost more than all the statistics
    ids = [item.item_id for item in items]
    rows = [item.choice_logprobs for item in items]
    if len(set(ids)) != len(ids):
        duplicate = next(item_id for item_id, count in Counter(ids).items() if count > 1)
        raise UserError(f"item {duplicate!r} appears twice in the {role}: give each item one line")
    present = [row for row in rows if row]
    logprobs, widths = None, None
    if len(present) == len(rows):
        widths = np.array([len(row) for row in present])
        if np.all(widths == widths[0]):
            logprobs = np.asarray(present, dtype=float)
        else:
            logprobs = np.full((len(present), int(widths.max())), -np.inf)
            for index, row in enumerate(present):
                logprobs[index, : len(row)] = row
    return Columns(
        ids=ids,
        correct=np.array([item.correct for item in items], dtype=bool),
        gold=np.array([-1 if item.gold is None else item.gold for item in items], dtype=int),
        subjects=np.array([item.subject or "" for item in items]),
        logprobs=logprobs,
        widths=widths,
    )


def pair_items(base: Sequence[Scored], cand: Sequence[Scored]) -> PairedItems:
    """Align two result sets by item_id; sets that are not the same items are an error that counts them."""
    if not base or not cand:
        raise UserError(
            f"no items to compare ({len(base)} in base, {len(cand)} in candidate): score both first"
        )
    task = base[0].task
    b, c = item_columns(base, "base"), item_columns(cand, "candidate")
    position = {item_id: index for index, item_id in enumerate(c.ids)}
    order = np.fromiter((position.get(item_id, -1) for item_id in b.ids), dtype=int, count=len(b.ids))
    only_base = int(np.sum(order < 0))
    only_cand = len(c.ids) - (len(b.ids) - only_base)
    if only_base == len(b.ids) or only_cand == len(c.ids):
        raise UserError(
            f"base and candidate share no items of task {task} ({len(b.ids)} vs {len(c.ids)} items): "
            "compare results scored on the same items"
        )
    if only_base or only_cand:
        raise UserError(
            f"base and candidate were scored on different items of task {task} ({only_base} only in "
            f"base, {only_cand} only in candidate): re-run scoring so both cover the same items"
        )
    cand_gold = c.gold[order]
    clash = np.flatnonzero((b.gold >= 0) & (cand_gold >= 0) & (b.gold != cand_gold))
    if len(clash):
        first = clash[0]
        raise UserError(
            f"item {b.ids[first]!r} has gold {b.gold[first]} in base and {cand_gold[first]} in candidate: "
            "the two files were not scored on the same questions"
        )
    if b.widths is not None and c.widths is not None and not np.array_equal(b.widths, c.widths[order]):
        first = int(np.flatnonzero(b.widths != c.widths[order])[0])
        raise UserError(
            f"item {b.ids[first]!r} has {b.widths[first]} choice log-probs in base and "
            f"{c.widths[order][first]} in candidate: the two files were not scored on the same choices"
        )
    same_choices = b.widths is not None and c.widths is not None
    return PairedItems(
        base_ok=b.correct,
        cand_ok=c.correct[order],
        clusters=b.subjects,
        base_logprobs=b.logprobs if same_choices else None,
        cand_logprobs=c.logprobs[order] if same_choices and c.logprobs is not None else None,
        gold=b.gold,
    )
