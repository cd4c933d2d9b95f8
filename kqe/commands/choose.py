"""`kqe choose`: the checkpoint to deploy on a GPU under a quality-loss budget (thin shell over
`evals/planning/choose.py`, which documents the rule)."""

from __future__ import annotations

from pathlib import Path

import click

from evals.planning.candidates import Deployment
from evals.planning.choose import Choice, choose, measured_applies, profile_for_gpu
from evals.reporting.leaderboard_row import LeaderboardRow
from kqe.commands.console import Number, echo, run_guarded
from kqe.core.errors import UserError


def load_deployment(
    board: Path, rows: list[LeaderboardRow], gpu_name: str, count: int | None, profile_name: str | None
) -> Deployment:
    """The target from the options: the model through the registry, the GPU table, the serve profile
    (given, else the GPU's default one, else the run's), and whether the run measured it there."""
    from evals.planning.placement import target_from
    from evals.planning.vllm_memory import gpu_named
    from evals.reporting.report import read_run_summary
    from evals.serving.serve import load_profile, serve_profiles
    from kqe.core.registry import resolve_model
    from kqe.core.workspace import Workspace

    gpu = gpu_named(gpu_name)
    if count is not None and count < 1:
        raise UserError(f"--count {count}: give the number of GPUs (1 or more)")
    run = read_run_summary(board)
    model = resolve_model(rows[0].model, Workspace.from_env())
    if profile_name:
        profile = load_profile(profile_name)
    elif named := profile_for_gpu(gpu, serve_profiles()):
        profile = load_profile(named)
    else:
        profile = run.profile if run else load_profile(rows[0].serve_profile.split(":")[0])
    count = count or profile.tensor_parallel_size
    measured = measured_applies(run, gpu, profile, count)
    return Deployment(model, target_from(gpu, None, profile, count), measured)


def render(choice: Choice) -> str:
    lines = list(choice.lines)
    if choice.would_qualify:
        lines.append("would qualify:")
        lines += [f"  {line}" for line in choice.would_qualify]
    return "\n".join(lines)


@click.command("choose")
@click.option(
    "--leaderboard", "board", required=True, type=click.Path(path_type=Path), help="A leaderboard CSV."
)
@click.option(
    "--gpu", "gpu_name", required=True, help="A named GPU: rtx4090, a100-40g, h100-80g, … (gpus.toml)"
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    help="GPUs per replica (tensor parallel size; default: the profile's).",
)
@click.option(
    "--max-loss",
    type=Number(0),
    default=1.0,
    show_default=True,
    help="Accuracy points you accept losing; the 95% CI of the loss must stay within it.",
)
@click.option(
    "--min-concurrency",
    type=Number(0),
    default=1.0,
    show_default=True,
    help="Requests of max-model-len at once.",
)
@click.option("--task", default="kmmlu", show_default=True, help="Task the loss is judged on: kmmlu or mmlu.")
@click.option("--profile", help="Serve settings to plan under (default: the GPU's profile, else the run's).")
@click.option("--model", help="The model to choose for, when the leaderboard holds several.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def choose_command(
    board: Path,
    gpu_name: str,
    count: int | None,
    max_loss: float,
    min_concurrency: float,
    task: str,
    profile: str | None,
    model: str | None,
    as_json: bool,
) -> None:
    """Choose the checkpoint to deploy: within the loss budget (95% confidence), fits the GPU with the
    concurrency asked, best quality; prints why, its quality cost with CI, what it buys, the runner-up."""
    from evals.reporting.leaderboard import read_leaderboard

    def action() -> None:
        rows = read_leaderboard(board)
        if model is not None:
            rows = [row for row in rows if row.model == model]
            if not rows:
                raise UserError(f"leaderboard {board} has no rows of model {model!r}")
        result = choose(
            rows, load_deployment(board, rows, gpu_name, count, profile), task, max_loss, min_concurrency
        )
        echo(result.to_json() if as_json else render(result))

    run_guarded(action)
