"""`kqe tasks`: every task `kqe eval --tasks` can score."""

from __future__ import annotations

import json

import click

from kqe.commands.console import echo, run_guarded
from kqe.core.workspace import Workspace


@click.command("tasks")
@click.option(
    "--include-path",
    default=None,
    help="Folder of your own lm-eval task YAMLs: listed as source `user`, scored as lm-eval:<task>.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per task, one per line.")
def tasks_command(include_path: str | None, as_json: bool) -> None:
    """List the registry's tasks, lm-eval's Korean multiple-choice and generation tasks and a folder's
    own YAMLs: name, source, items, subjects, licence, offline or online, English twin; generation tasks
    with their metrics."""
    from evals.tasks.catalogue import listings

    def action() -> None:
        for task in listings(Workspace.from_env(), include_path):
            if as_json:
                echo(json.dumps(task.model_dump(mode="json"), ensure_ascii=False))
                continue
            counts = f"{_count(task.items)} items, {_count(task.subjects)} subjects"
            twin = f"; English twin {task.english}" if task.english else ""
            twin += f", matched by {task.pairing}" if task.pairing else (", unpaired" if twin else "")
            kind = f"; generation, scored by {task.metric}" if task.output_type == "generate_until" else ""
            echo(
                f"{task.name:40} {task.source:8} {counts:26} {task.licence}; {task.availability}{twin}{kind}"
            )

    run_guarded(action)


def _count(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"
