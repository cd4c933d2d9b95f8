"""`kqe ifeval score RESPONSES.jsonl`: score responses produced anywhere with ko_ifeval's verifiers (thin
shell over `evals/tasks/ko_ifeval/responses_file.py`)."""

from __future__ import annotations

from pathlib import Path

import click

from evals.tasks.ko_ifeval.responses_file import ScoredResponses
from kqe.commands.console import echo, run_guarded


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _marks(follows: tuple[bool, ...]) -> str:
    return "".join("y" if followed else "n" for followed in follows)


def _yes(followed: bool) -> str:
    return "yes" if followed else "no"


def render(result: ScoredResponses) -> str:
    lines = [f"{'key':10} {'strict':>6} {'loose':>5}  instructions (y/n each, strict)"]
    for item in result.items:
        score = item.score
        marks, ids = _marks(score.follow_instruction_list), ", ".join(item.instruction_id_list)
        verdicts = f"{_yes(score.follow_all):>6} {_yes(score.loose_follow_all):>5}"
        lines.append(f"{item.key:10} {verdicts}  {marks} {ids}")
    t = result.totals
    lines += [
        f"prompt-level ({t.prompts}): strict {_share(t.prompt_strict)}, loose {_share(t.prompt_loose)}",
        f"instruction-level ({t.instructions}): strict {_share(t.instruction_strict)}, "
        f"loose {_share(t.instruction_loose)}",
        f"scored against {result.label}; {len(result.unanswered)} of its prompts have no response line",
    ]
    return "\n".join(lines)


@click.group("ifeval")
def ifeval_command() -> None:
    """ko_ifeval (Korean instruction following) outside the matrix."""


@ifeval_command.command("score")
@click.argument("responses", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (fractions).")
@click.option(
    "--prompts",
    "prompts_path",
    type=click.Path(path_type=Path),
    default=None,
    help="IFEval JSONL prompts file (key, prompt, instruction_id_list, kwargs) instead of the shipped set.",
)
def score_command(responses: Path, as_json: bool, prompts_path: Path | None) -> None:
    """Score RESPONSES.jsonl (lines `{"key": ..., "response": ...}`) with ko_ifeval's verifiers: per
    prompt, one verdict per instruction and whether it followed all, strict and loose; then prompt-level
    and instruction-level accuracy."""
    from evals.tasks.ko_ifeval.prompts import PROMPTS_PATH, load_prompts
    from evals.tasks.ko_ifeval.responses_file import score_responses

    def action() -> None:
        path = prompts_path or PROMPTS_PATH
        label = "the shipped ko_ifeval prompts" if prompts_path is None else str(prompts_path)
        result = score_responses(responses, load_prompts(path), label)
        echo(result.to_json() if as_json else render(result))

    run_guarded(action)
