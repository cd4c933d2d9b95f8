"""`make docs`: rewrite the generated parts of the docs.

- the leaderboard column table in docs/leaderboard.md (between the `columns:start` / `columns:end`
  markers), from `LeaderboardRow` (evals/reporting/leaderboard_row.py);
- docs/performance.md, from results/measurements.jsonl (bench/measurements.py).

    .venv/bin/python scripts/docs.py [--check] [--root DIR]

`--check` writes nothing and exits 1 naming each file that is out of date (tests/test_docs.py fails
the same way), so the docs' schema is the one the code writes and the numbers are the file's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repository's packages

from bench.measurements import MEASUREMENTS, PERFORMANCE_PAGE, load, render
from evals.reporting.leaderboard import column_table, replace_column_table
from kqe.core.errors import UserError
from kqe.core.io import read_text, write_atomic

REPO = Path(__file__).resolve().parents[1]
LEADERBOARD_PAGE = Path("docs/leaderboard.md")


def generated(root: Path = REPO) -> dict[Path, str]:
    """Each generated file (relative to `root`) and the text it should hold."""
    page = root / LEADERBOARD_PAGE
    if not page.is_file():
        raise UserError(f"{page} not found: it holds the leaderboard column table `make docs` rewrites")
    leaderboard = replace_column_table(read_text(page, "docs page"), column_table(), str(LEADERBOARD_PAGE))
    return {LEADERBOARD_PAGE: leaderboard, PERFORMANCE_PAGE: render(load(root / MEASUREMENTS))}


def stale(root: Path = REPO, texts: dict[Path, str] | None = None) -> list[Path]:
    """The generated files (relative to `root`) whose text is not what `make docs` would write."""
    found = []
    for name, text in (texts if texts is not None else generated(root)).items():
        path = root / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            found.append(name)
    return found


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description="Rewrite the generated parts of docs/ (`make docs`).")
    cli.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")
    cli.add_argument("--root", type=Path, default=REPO, help="the repository (default: this one)")
    args = cli.parse_args(argv)
    try:
        texts = generated(args.root)
        out_of_date = stale(args.root, texts)
        for name in out_of_date:
            if args.check:
                sys.stderr.write(f"{name} is out of date: run `make docs`\n")
            else:
                write_atomic(args.root / name, texts[name])
                sys.stderr.write(f"{name}: rewritten\n")
    except UserError as err:  # a missing marker, a bad measurements row: one line each
        sys.stderr.write(f"{err}\n")
        return 2
    return 1 if args.check and out_of_date else 0


if __name__ == "__main__":
    raise SystemExit(main())
