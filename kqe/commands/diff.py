"""`kqe diff A.csv B.csv`: what changed between two leaderboards, row by row (thin shell over
`evals/reporting/diff.py`)."""

from __future__ import annotations

from pathlib import Path

import click

from evals.reporting.diff import CellChange, LeaderboardDiff, diff
from kqe.commands.console import echo, run_guarded

_POINT_COLUMNS = ("_acc", "_delta", "_ci_low", "_ci_high", "_mde", "ko_en_gap")
_GIB_COLUMNS = ("weights_gib", "kv_cache_gib", "disk_gib")


def _value(column: str, value: object) -> str:
    if value is None:
        return "(empty)"
    if isinstance(value, float) and column.endswith("_acc"):
        return f"{100 * value:.1f}%"
    if isinstance(value, float) and column.endswith("_mde"):
        return f"{100 * value:.1f} pts"
    if isinstance(value, float) and any(part in column for part in _POINT_COLUMNS):
        return f"{100 * value:+.1f} pts"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _line(change: CellChange) -> str:
    text = f"  {change.column:18} {_value(change.column, change.a)} → {_value(change.column, change.b)}"
    if change.change is None:
        return text
    if any(part in change.column for part in _POINT_COLUMNS):
        return f"{text} ({100 * change.change:+.1f} pts)"
    unit = " GiB" if change.column in _GIB_COLUMNS else ""
    return f"{text} ({change.change:+.4g}{unit})"


def render(result: LeaderboardDiff) -> str:
    models = (
        f" ({', '.join(result.models_a)} vs {', '.join(result.models_b)})"
        if result.match_on == "checkpoint"
        else ""
    )
    if result.nothing_changed:
        return f"nothing changed: {len(result.unchanged)} rows match on {result.match_on} and are identical"
    lines = [
        f"A = {result.a}, B = {result.b}: rows matched on {result.match_on}{models}; "
        f"{len(result.changed)} changed, {len(result.unchanged)} unchanged"
    ]
    for row in result.changed:
        lines.append(f"{row.key}: {len(row.changes)} cells changed")
        lines += [f"  VERDICT FLIPPED {flip}" for flip in row.verdict_flips]
        lines += [_line(change) for change in row.changes]
    if result.only_in_a:
        lines.append(f"only in A: {', '.join(result.only_in_a)}")
    if result.only_in_b:
        lines.append(f"only in B: {', '.join(result.only_in_b)}")
    return "\n".join(lines)


@click.command("diff")
@click.argument("board_a", type=click.Path(path_type=Path))
@click.argument("board_b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (fractions, not points).")
def diff_command(board_a: Path, board_b: Path, as_json: bool) -> None:
    """Compare two leaderboards row by row (model + checkpoint; checkpoint alone for two models): every
    cell that changed and by how much, verdicts that flipped, rows only on one side."""
    from evals.reporting.leaderboard import read_leaderboard

    def action() -> None:
        result = diff(read_leaderboard(board_a), read_leaderboard(board_b), str(board_a), str(board_b))
        echo(result.to_json() if as_json else render(result))

    run_guarded(action)
