"""`kqe eval` (`make eval`): the whole matrix for one model, as `kqe.pipeline.run.run_eval` runs it."""

from __future__ import annotations

from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kqe.commands.guard import ProgressDisplay, console, run_guarded, split_list
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace


@click.command("eval")
@click.option(
    "--model",
    default="gemma3-270m",
    show_default=True,
    help="Registry name (`kqe models`), hf:org/name[@rev], or a local model directory.",
)
@click.option(
    "--schemes",
    default="bf16,awq-w4a16,w4a16-rtn,fp8-dynamic",
    show_default=True,
    help="Comma-separated checkpoints to build and score; bf16 is the base.",
)
@click.option(
    "--calibration",
    "calibrations",
    default="ko70,en100",
    show_default=True,
    help="Calibration mixes, comma-separated: ko100, ko70, en100 or e.g. ko=0.6,en=0.4. Schemes that "
    "need calibration are built once per mix; the least Korean mix is the control.",
)
@click.option(
    "--calib-samples", default=64, show_default=True, type=click.IntRange(min=1), help="Calibration samples."
)
@click.option(
    "--calib-seq-len",
    default=384,
    show_default=True,
    type=click.IntRange(min=1),
    help="Tokens per calibration sample.",
)
@click.option(
    "--tasks",
    default="kmmlu,mmlu",
    show_default=True,
    help="Comma-separated tasks: kmmlu (offline: the KMMLU-HARD dev items), kmmlu_5shot, kmmlu_hard, mmlu, "
    "mmlu_5shot, ko_rag.",
)
@click.option(
    "--limit",
    default=300,
    show_default=True,
    help="Items per task at most, subject-stratified; 0 scores every item.",
)
@click.option("--profile", default="cpu-small", show_default=True, help="Serve profile for every checkpoint.")
@click.option("--seed", default=1234, show_default=True, help="Seed of calibration and item sampling.")
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=click.IntRange(min=1),
    help="Scoring requests in flight (each of up to 8 items).",
)
@click.option(
    "--load/--no-load",
    default=None,
    help="Also measure serving capacity of each checkpoint at the profile's max-num-seqs (kqe load). "
    "Default: on with a GPU, off on CPU (slow there).",
)
@click.option(
    "--load-duration-s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds of load per checkpoint.",
)
@click.option(
    "--rag-data",
    default=None,
    help="Folder with docs.jsonl + questions.jsonl for the ko_rag task instead of its built-in set "
    "(format: evals/tasks/ko_rag/README.md).",
)
@click.option(
    "--recipes",
    default=None,
    help="TOML file of named recipes (group size, symmetry, …); its table names can be listed in --schemes.",
)
@click.option(
    "--extra",
    default="",
    help="Comma-separated pre-quantized checkpoints to score beside the built ones: model folders or "
    "hf:org/name@rev.",
)
@click.option(
    "--trust-remote-code",
    is_flag=True,
    help="Let vLLM run Python code shipped with the model (config.json auto_map): only for models you trust.",
)
@click.option(
    "--run",
    default="",
    help="Name this run: its leaderboard, report, cards and plots go to results/<model>/runs/<name>/ "
    "(per-item files and finished stages are shared with the model's other runs).",
)
def eval_command(**options: Any) -> None:
    """Calibrate, quantize, serve each checkpoint under one profile, score, compare with bf16, rank."""
    from evals.reporting.leaderboard import read_leaderboard
    from evals.serving.processes import detect_gpu
    from kqe.pipeline.config import EvalConfig
    from kqe.pipeline.matrix import split_mixes
    from kqe.pipeline.run import run_eval

    def action() -> None:
        options.update(
            schemes=split_list(options["schemes"]), tasks=split_list(options["tasks"]),
            calibrations=split_mixes(options["calibrations"]), limit=options["limit"] or None,
            extra=split_list(options["extra"]), recipes=options["recipes"] or None,
            run=options["run"] or None,
        )  # fmt: skip
        if options["load"] is None:
            options["load"] = detect_gpu()
        cfg = EvalConfig(**options)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            board = run_eval(cfg, Workspace.from_env(), ProgressDisplay(progress))
        click.echo(board.read_text(encoding="utf-8"), nl=False)
        console.print(f"leaderboard: {board}", highlight=False)
        # a checkpoint this device cannot serve is a finding (its status says why), not a failure
        failed = [row.checkpoint for row in read_leaderboard(board) if row.status.startswith("failed")]
        if failed:
            raise UserError(
                f"{len(failed)} checkpoint(s) failed ({', '.join(failed)}): the status column of {board} "
                "says why and what to try; the other rows are complete"
            )

    run_guarded(action)
