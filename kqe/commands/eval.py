"""`kqe eval` (`make eval`): the whole matrix for one model, as `kqe.pipeline.run.run_eval` runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kqe.commands.console import (
    ONLINE_HELP,
    Number,
    ProgressDisplay,
    RateColumn,
    console,
    echo,
    item_choice,
    run_guarded,
)
from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.text import json_text, printable
from kqe.core.workspace import Workspace


@click.command("eval")
@click.option(
    "--model",
    default=defaults.MODEL,
    show_default=True,
    help="Registry name (`kqe models`), hf:org/name[@rev], or a local model directory.",
)
@click.option(
    "--schemes",
    default=",".join(defaults.SCHEMES),
    show_default=True,
    help="Comma-separated checkpoints to build and score; bf16 is the base.",
)
@click.option(
    "--calibration",
    "calibrations",
    default=",".join(defaults.CALIBRATIONS),
    show_default=True,
    help="Calibration mixes, comma-separated: ko100, ko70, en100 or e.g. ko=0.6,en=0.4. Schemes that "
    "need calibration are built once per mix; the least Korean mix is the control.",
)
@click.option(
    "--calib-samples",
    default=defaults.CALIB_SAMPLES,
    show_default=True,
    type=click.IntRange(min=1),
    help="Calibration samples.",
)
@click.option(
    "--calib-seq-len",
    default=defaults.CALIB_SEQ_LEN,
    show_default=True,
    type=click.IntRange(min=1),
    help="Tokens per calibration sample.",
)
@click.option(
    "--tasks",
    default=",".join(defaults.TASKS),
    show_default=True,
    help="Comma-separated tasks: kmmlu (offline: the KMMLU-HARD dev items), kmmlu_5shot, kmmlu_hard, mmlu, "
    "mmlu_5shot, ko_faq, ko_rag, or any lm-eval multiple-choice task as lm-eval:<task> (kqe tasks).",
)
@click.option(
    "--limit",
    default=None,
    type=int,
    help=f"Items per task at most, subject-stratified; 0 scores every item. Default: every item online, "
    f"{defaults.LIMIT} offline.",
)
@click.option(
    "--online/--offline",
    default=None,
    help=ONLINE_HELP,
)
@click.option(
    "--profile",
    default=None,
    help="Serve profile: every checkpoint is scored under it, or, with --target-gpu, deployed with it. "
    "Default: cpu-small; with --target-gpu that GPU's default profile (rtx4090 → rtx4090-16k).",
)
@click.option(
    "--target-gpu",
    default="",
    help="GPU the checkpoints will be deployed on (kqe plan --help lists them; aliases such as 4090, "
    "h100, a100): memory is planned or measured for it, items are scored wherever each checkpoint fits.",
)
@click.option(
    "--gpu-gib",
    default=None,
    type=Number(0, above=True),
    help="The target as GiB per GPU instead of a named GPU.",
)
@click.option(
    "--score-profile",
    default="",
    help="Profile items are scored under when the target is not this machine: every checkpoint on a "
    "machine without a GPU (default cpu-small), the last fallback with GPUs.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan (fit, memory, placement, time); build nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as one JSON object.")
@click.option(
    "--seed", default=defaults.SEED, show_default=True, help="Seed of calibration and item sampling."
)
@click.option(
    "--concurrency",
    default=defaults.CONCURRENCY,
    show_default=True,
    type=click.IntRange(min=1),
    help="Scoring requests in flight (each of up to 8 items).",
)
@click.option(
    "--load/--no-load",
    default=None,
    help="Also measure serving capacity of each checkpoint with vllm bench serve at concurrency 1, half of "
    "max-num-seqs and max-num-seqs (kqe load). Default: on with a GPU, off on CPU (slow there).",
)
@click.option(
    "--load-duration-s",
    default=defaults.LOAD_DURATION_S,
    show_default=True,
    type=Number(0, above=True),
    help="Seconds of load per concurrency level.",
)
@click.option(
    "--include-path",
    default=None,
    help="Folder of your own lm-eval task YAMLs: their tasks are scored as lm-eval:<task> "
    "(kqe tasks --include-path DIR lists them).",
)
@click.option(
    "--rag-data",
    default=None,
    help="Folder with docs.jsonl + questions.jsonl for the ko_rag task instead of its built-in set "
    "(format: evals/tasks/ko_rag/README.md).",
)
@click.option(
    "--rag-conditions",
    default=",".join(defaults.RAG_DEFAULT_CONDITIONS),
    show_default=True,
    help="ko_rag conditions, comma-separated: retrieved (BM25's passages), oracle (the gold passages forced "
    "in), depth (the oracle at depths 0, 1/4, 1/2, 3/4, end: 5x its cost), closed_book (no documents).",
)
@click.option(
    "--rag-chat-template",
    is_flag=True,
    help="Wrap each ko_rag prompt in the model's chat template as a user turn (instruct checkpoints).",
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
    "--executor",
    type=click.Choice(defaults.EXECUTORS),
    default=defaults.EXECUTORS[0],
    show_default=True,
    help="Where checkpoints are evaluated: one after another here, or one Ray task each, in parallel as "
    "the cluster allows (needs `KQE_EXTRAS=ray make setup`; docs/gpu.md).",
)
@click.option(
    "--ray-address",
    default="",
    help="With --executor ray: the head's address as `ray start --head` prints it (host:6379); "
    "default: $RAY_ADDRESS if set, else a Ray instance started here for the run (make: RAY_HEAD=).",
)
@click.option(
    "--multiplicity",
    type=click.Choice(defaults.MULTIPLICITY),
    default=defaults.MULTIPLICITY[0],
    show_default=True,
    help="Adjust the accuracy p-values (and verdicts) by Holm across each checkpoint's tasks, or by Holm "
    "or Benjamini-Hochberg (bh) across every checkpoint x task of the run (recorded in run.json).",
)
@click.option(
    "--ppl-margin",
    "ppl_margin_pct",
    default=defaults.PPL_MARGIN_PCT,
    show_default=True,
    type=Number(0, above=True),
    help="Perplexity increase, percent, the perplexity verdicts take as acceptable.",
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
    from kqe.pipeline.executors import executor_named
    from kqe.pipeline.run import run_eval

    def action() -> None:
        dry_run, as_json, executor_name, ray_address = (options.pop(name) for name in CLI_ONLY)
        executor = executor_named(executor_name, ray_address)
        if as_json and not dry_run:
            raise UserError("--json prints the plan of --dry-run: give both, or neither")
        cfg = eval_config(options)
        if dry_run:
            _print_plan(cfg, as_json)
            return
        columns = (
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            RateColumn(), TextColumn("eta"), TimeRemainingColumn(),
        )  # fmt: skip
        with Progress(*columns, console=console) as progress:
            board = run_eval(cfg, Workspace.from_env(), ProgressDisplay(progress), executor)
        rows = read_leaderboard(board)
        _print_answer(cfg, board, rows)
        # a checkpoint this device cannot serve is a finding (its status says why), not a failure
        failed = [row.checkpoint for row in rows if row.status.startswith("failed")]
        if failed:
            raise UserError(
                f"{len(failed)} checkpoint(s) failed ({', '.join(failed)}): the status column of {board} "
                "says why and what to try; the other rows are complete"
            )

    run_guarded(action)


CLI_ONLY = ("dry_run", "as_json", "executor", "ray_address")
"""Options of `kqe eval` that say how to run, not what to compute: no field of `EvalConfig`."""


def eval_config(options: dict[str, Any]) -> EvalConfig:
    """The run's config from the options of its fields (`--online`/`--offline` gives `items`): the CLI
    adds the defaults that depend on the model, the target or the machine."""
    from evals.serving import hardware

    items = item_choice(options["online"], options["model"])
    given = {name: value for name, value in options.items() if name != "online"}
    if given["load"] is None:  # capacity under load is slow on CPU and means little there
        given["load"] = hardware.gpu_present()
    given.update(items=items, limit=items.limit(given["limit"]), profile=_profile(options))
    return EvalConfig(**given)


def _print_answer(cfg: EvalConfig, board: Path, rows: list[Any]) -> None:
    """The run's answer on the terminal: whether anything was new, one line per checkpoint, what
    `kqe choose` recommends for the target, and where the files are."""
    from evals.planning.choose import choose
    from evals.reporting.report import read_run_summary
    from evals.reporting.report_text import item_lines
    from evals.reporting.summary import summary_table
    from kqe.commands.choose import load_deployment

    run = read_run_summary(board)
    if run is not None and not run.built and not run.served:
        console.print(
            f"everything reused: no checkpoint built, no server started ({len(rows)} checkpoints); "
            "the answer of the earlier run:", highlight=False, markup=False,
        )  # fmt: skip
    echo("\n".join([*item_lines(rows), *summary_table(rows)]))
    if cfg.target_gpu:
        try:  # the run is done whatever choose says: its answer is a finding, not a failure
            deployment = load_deployment(board, rows, cfg.target_gpu, None, cfg.profile)
            echo("\n".join(choose(rows, deployment, "kmmlu", 1.0, 1.0).lines))
        except UserError as exc:
            echo(f"kqe choose: {exc}")
    else:
        echo(f"to choose for your GPU: kqe choose --leaderboard {board} --gpu rtx4090 (see kqe plan --help)")
    echo(f"leaderboard: {board}\nreport: {board.parent / 'report.md'}")


def _profile(options: dict[str, Any]) -> str:
    """The profile given; else, for a target GPU, its default profile (profiles.toml); else cpu-small."""
    from evals.planning.choose import profile_for_gpu
    from evals.planning.vllm_memory import gpu_named
    from evals.serving.serve import profile_names, serve_profiles

    if options["profile"]:
        return str(options["profile"])
    if options["target_gpu"]:
        named = profile_for_gpu(gpu_named(options["target_gpu"]), serve_profiles())
        if named is None:
            raise UserError(
                f"no serve profile is the default for --target-gpu {options['target_gpu']}: give --profile "
                f"(one of {', '.join(profile_names())})"
            )
        return named
    return defaults.CPU_PROFILE


def _print_plan(cfg: EvalConfig, as_json: bool) -> None:
    from kqe.core.registry import resolve_model
    from kqe.pipeline.config import plan_run
    from kqe.pipeline.dry_run import describe, lines

    ws = Workspace.from_env()
    described = describe(cfg, plan_run(cfg, ws, resolve_model(cfg.model, ws)), ws)
    if as_json:
        echo(json_text(described))
    else:
        for line in lines(described):
            console.print(printable(line), highlight=False, markup=False)
