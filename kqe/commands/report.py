"""`kqe report`: report.md, PNG plots and model cards for one model's leaderboard (thin shell over
`evals/reporting/report.py`)."""

from __future__ import annotations

from pathlib import Path

import click

from kqe.commands.console import echo, run_guarded


@click.command("report")
@click.option(
    "--leaderboard",
    "board",
    required=True,
    type=click.Path(path_type=Path),
    help="A model's leaderboard, results/<model>/leaderboard.csv (run.json beside it adds detail).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Folder for the report (new or empty) when the leaderboard is not in a run folder of kqe.",
)
def report_command(board: Path, out: Path | None) -> None:
    """Write results/<model>/report.md with plots (quality loss vs memory, Δ per task, flips,
    calibration effect) and a publishable model card per built checkpoint: into the leaderboard's
    run folder, or into --out DIR."""
    from evals.reporting.report import read_board, read_run_summary, render_report
    from evals.reporting.report_folder import report_folder

    def action() -> None:
        rows, run = read_board(board), read_run_summary(board)
        report = render_report(rows, run, report_folder(board, out, run))
        echo(f"report: {report}")
        for path in sorted((report.parent / "plots").glob("*.png")) + sorted(
            (report.parent / "cards").glob("*.md")
        ):
            echo(f"  {path}")

    run_guarded(action)
