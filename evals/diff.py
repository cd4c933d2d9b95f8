"""What changed between two leaderboards (pure core of `kqe diff`): rows matched on model +
checkpoint (on checkpoint alone for two single-model leaderboards of different models), every cell
that changed and by how much, verdicts that flipped, rows only on one side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from evals.leaderboard import COLUMNS
from kqe.records import LeaderboardRow, Record

Cell = str | float | int | None


class CellChange(Record):
    """One cell that differs between the two leaderboards."""

    column: str
    a: Cell
    b: Cell
    change: float | None
    """b − a for numbers (fractions stay fractions), None for text."""


class RowDiff(Record):
    """A row present in both leaderboards."""

    key: str
    changes: list[CellChange]
    verdict_flips: list[str]
    """`<task>: <verdict in A> → <verdict in B>` for each task whose verdict changed."""


class LeaderboardDiff(Record):
    """What `kqe diff A B` found."""

    a: str
    b: str
    match_on: Literal["model+checkpoint", "checkpoint"]
    models_a: list[str]
    models_b: list[str]
    changed: list[RowDiff]
    unchanged: list[str]
    only_in_a: list[str]
    only_in_b: list[str]

    @property
    def nothing_changed(self) -> bool:
        return not (self.changed or self.only_in_a or self.only_in_b)


def _key(row: LeaderboardRow, match_on: str) -> str:
    return row.checkpoint if match_on == "checkpoint" else f"{row.model}/{row.checkpoint}"


def diff(
    a: Sequence[LeaderboardRow], b: Sequence[LeaderboardRow], a_name: str, b_name: str
) -> LeaderboardDiff:
    """Row-matched comparison: two single-model leaderboards of different models match on checkpoint."""
    models_a, models_b = sorted({r.model for r in a}), sorted({r.model for r in b})
    two_models = len(models_a) == len(models_b) == 1 and models_a != models_b
    match_on: Literal["model+checkpoint", "checkpoint"] = "checkpoint" if two_models else "model+checkpoint"
    rows_a = {_key(r, match_on): r for r in a}
    rows_b = {_key(r, match_on): r for r in b}
    skip = {"schema_version", "model"} if two_models else {"schema_version"}
    changed, unchanged = [], []
    for key in (k for k in rows_a if k in rows_b):
        row_a, row_b = rows_a[key], rows_b[key]
        changes = [
            _change(name, getattr(row_a, name), getattr(row_b, name)) for name in COLUMNS if name not in skip
        ]
        changes = [c for c in changes if c.a != c.b]
        if not changes:
            unchanged.append(key)
            continue
        verdicts = [
            (p, getattr(row_a, f"{p}_verdict"), getattr(row_b, f"{p}_verdict")) for p in ("kmmlu", "mmlu")
        ]
        flips = [f"{p}: {va} → {vb}" for p, va, vb in verdicts if va and vb and va != vb]
        changed.append(RowDiff(key=key, changes=changes, verdict_flips=flips))
    return LeaderboardDiff(
        a=a_name, b=b_name, match_on=match_on, models_a=models_a, models_b=models_b, changed=changed,
        unchanged=unchanged, only_in_a=[k for k in rows_a if k not in rows_b],
        only_in_b=[k for k in rows_b if k not in rows_a],
    )  # fmt: skip


def _change(column: str, a: Cell, b: Cell) -> CellChange:
    change = None
    if isinstance(a, int | float) and isinstance(b, int | float):
        change = round(float(b) - float(a), 9)
    return CellChange(column=column, a=a, b=b, change=change)
