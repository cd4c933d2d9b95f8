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
def report_command(board: Path) -> None:
    """Write results/<model>/report.md with plots (quality loss vs memory, Δ per task, flips,
    calibration effect) and a publishable model card per built checkpoint."""
    from evals.reporting.report import write_report

    def action() -> None:
        report = write_report(board)
        echo(f"report: {report}")
        for path in sorted((report.parent / "plots").glob("*.png")) + sorted(
            (report.parent / "cards").glob("*.md")
        ):
            echo(f"  {path}")

    run_guarded(action)
