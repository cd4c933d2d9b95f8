"""`kqe rag score ANSWERS.jsonl`: score answers produced anywhere with ko_rag's metrics (thin shell
over `evals/tasks/ko_rag/answers_file.py`)."""

from __future__ import annotations

from pathlib import Path

import click

from evals.tasks.ko_rag.answers_file import ScoredAnswers
from kqe.commands.console import echo, run_guarded


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render(result: ScoredAnswers) -> str:
    lines = [f"{'id':14} {'type':13} {'EM':>3} {'F1':>5} {'charF1':>6} {'contains':>8} abstained"]
    for item in result.items:
        score = item.score
        lines.append(
            f"{item.id:14} {item.type:13} {int(score.exact):>3} {score.f1:5.2f} {score.char_f1:6.2f} "
            f"{int(score.contains):>8} {'yes' if score.abstained else 'no'}"
        )
    t = result.totals
    lines += [
        f"answerable ({t.answerable}): EM {_share(t.em)}, F1 {_share(t.f1)}, "
        f"character F1 {_share(t.char_f1)}, contains {_share(t.contains)}",
        f"abstention: {t.abstained} answers abstained; precision {_share(t.abstain_precision)}, "
        f"recall {_share(t.abstain_recall)} over {t.unanswerable} unanswerable",
        f"scored against {result.label}; {len(result.unanswered)} of its questions have no answer line",
    ]
    return "\n".join(lines)


@click.group("rag")
def rag_command() -> None:
    """ko_rag outside the matrix."""


@rag_command.command("score")
@click.argument("answers", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (fractions).")
@click.option(
    "--rag-data",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder with docs.jsonl + questions.jsonl to score against instead of the built-in set.",
)
def score_command(answers: Path, as_json: bool, rag_data: Path | None) -> None:
    """Score ANSWERS.jsonl (lines `{"id": ..., "answer": ...}`) with ko_rag's metrics: per question EM,
    F1, character F1, contains and whether it abstained, then answerable totals and abstention
    precision/recall."""
    from evals.tasks.ko_rag.answers_file import score_answers
    from evals.tasks.ko_rag.task import load_source
    from kqe.core.workspace import Workspace

    def action() -> None:
        source = load_source(Workspace.from_env(), rag_data)
        result = score_answers(answers, source.questions, source.label)
        echo(result.to_json() if as_json else render(result))

    run_guarded(action)
