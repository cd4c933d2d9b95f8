"""`kqe models`: the model registry."""

from __future__ import annotations

import click

from kqe.commands.console import echo, run_guarded


@click.command("models")
def models_command() -> None:
    """List the models of the registry with their architecture facts."""
    from kqe.core.registry import load_registry

    def action() -> None:
        for spec in load_registry().values():
            where = "offline" if spec.offline else f"{spec.hub_id}@{spec.revision}"
            echo(f"{spec.name:18} {spec.params_b:6.2f}B  {spec.layers:3} layers  {where}")

    run_guarded(action)
