"""Rewrite the leaderboard column table in README.md from `LeaderboardRow` (`make docs`).

The table lies between the `columns:start` / `columns:end` markers; tests/test_leaderboard.py fails
when it is out of date, so the README's schema is the one the code writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from evals.reporting.leaderboard import column_table, replace_column_table

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> int:
    text = README.read_text(encoding="utf-8")
    updated = replace_column_table(text, column_table())
    if updated != text:
        README.write_text(updated, encoding="utf-8")
        sys.stderr.write("README.md: column table rewritten\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
