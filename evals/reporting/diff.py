"""What changed between two leaderboards (pure core of `kqe diff`): rows matched on model +
checkpoint (on checkpoint alone for two single-model leaderboards of different models), every cell
that changed and by how much, verdicts that flipped, rows only on one side.

Rows left unmatched pair up by model + scheme when each side has exactly one of that scheme: two
runs with different calibration mixes (`awq-w4a16-ko70` vs `awq-w4a16-en100`) compare cell by cell.
The `date` column is not compared: every run has its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from evals.reporting.leaderboard import COLUMNS
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.tasks.registry import COLUMN_LABELS
from kqe.core.records import Record

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
    pairs = {key: (rows_a[key], rows_b[key]) for key in rows_a if key in rows_b}
    pairs |= _pairs_by_scheme(
        [r for k, r in rows_a.items() if k not in rows_b], [r for k, r in rows_b.items() if k not in rows_a]
    )
    paired_a = {_key(row_a, match_on) for row_a, _ in pairs.values()}
    paired_b = {_key(row_b, match_on) for _, row_b in pairs.values()}
    skip = {"schema_version", "date", "model"} if two_models else {"schema_version", "date"}
    changed, unchanged = [], []
    for key, (row_a, row_b) in pairs.items():
        changes = [
            _change(name, getattr(row_a, name), getattr(row_b, name)) for name in COLUMNS if name not in skip
        ]
        changes = [c for c in changes if c.a != c.b]
        if not changes:
            unchanged.append(key)
            continue
        verdicts = [
            (p, getattr(row_a, f"{p}_verdict"), getattr(row_b, f"{p}_verdict")) for p in COLUMN_LABELS
        ]
        flips = [f"{p}: {va} → {vb}" for p, va, vb in verdicts if va and vb and va != vb]
        changed.append(RowDiff(key=key, changes=changes, verdict_flips=flips))
    return LeaderboardDiff(
        a=a_name,
        b=b_name,
        match_on=match_on,
        models_a=models_a,
        models_b=models_b,
        changed=changed,
        unchanged=unchanged,
        only_in_a=[k for k in rows_a if k not in paired_a],
        only_in_b=[k for k in rows_b if k not in paired_b],
    )


def _pairs_by_scheme(
    a: Sequence[LeaderboardRow], b: Sequence[LeaderboardRow]
) -> dict[str, tuple[LeaderboardRow, LeaderboardRow]]:
    """Unmatched rows whose model + scheme is unique on both sides, keyed `<A checkpoint> ↔ <B one>`."""
    pairs = {}
    for row_a in a:
        same_a = [r for r in a if (r.model, r.scheme) == (row_a.model, row_a.scheme)]
        same_b = [r for r in b if (r.model, r.scheme) == (row_a.model, row_a.scheme)]
        if len(same_a) == len(same_b) == 1:
            pairs[f"{row_a.checkpoint} ↔ {same_b[0].checkpoint}"] = (row_a, same_b[0])
    return pairs


def _change(column: str, a: Cell, b: Cell) -> CellChange:
    change = None
    if isinstance(a, int | float) and isinstance(b, int | float):
        change = round(float(b) - float(a), 9)
    return CellChange(column=column, a=a, b=b, change=change)
