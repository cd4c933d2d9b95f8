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
    ONLINE_DEFAULT,
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
from kqe.core.eval_config import EvalConfig, option_help, option_name, split_list
from kqe.core.kv_cache import AUTO
from kqe.core.text import json_text, printable
from kqe.core.workspace import Workspace


@click.command("eval")
@click.option(
    "--model",
    default=defaults.MODEL,
    show_default=True,
    help=option_help("model"),
)
@click.option(
    "--schemes",
    default=",".join(defaults.SCHEMES),
    show_default=True,
    help=option_help("schemes"),
)
@click.option(
    "--calibration",
    "calibrations",
    default=",".join(defaults.CALIBRATIONS),
    show_default=True,
    help=option_help("calibrations"),
)
@click.option(
    "--calib-samples",
    default=defaults.CALIB_SAMPLES,
    show_default=True,
    type=click.IntRange(min=1, max=defaults.MAX_CALIB_SAMPLES),
    help=option_help("calib_samples"),
)
@click.option(
    "--calib-seq-len",
    default=defaults.CALIB_SEQ_LEN,
    show_default=True,
    type=click.IntRange(min=1),
    help=option_help("calib_seq_len"),
)
@click.option(
    "--tasks",
    default=",".join(defaults.TASKS),
    show_default=True,
    help=option_help("tasks"),
)
@click.option(
    "--limit",
    default=None,
    type=int,
    show_default=f"every item online, {defaults.LIMIT} offline",
    help=option_help("limit"),
)
@click.option(
    "--online/--offline",
    default=None,
    show_default=ONLINE_DEFAULT,
    help=option_help("items"),
)
@click.option(
    "--profile",
    default=None,
    show_default=f"{defaults.CPU_PROFILE}; with --target-gpu that GPU's default profile, e.g. "
    "rtx4090-16k for rtx4090",
    help=option_help("profile"),
)
@click.option(
    "--target-gpu",
    default="",
    help=option_help("target_gpu"),
)
@click.option(
    "--gpu-gib",
    default=None,
    type=Number(0, above=True),
    help=option_help("gpu_gib"),
)
@click.option(
    "--score-profile",
    default="",
    help=option_help("score_profile"),
)
@click.option("--dry-run", is_flag=True, help="Print the plan (fit, memory, placement, time); build nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as one JSON object.")
@click.option("--seed", default=defaults.SEED, show_default=True, help=option_help("seed"))
@click.option(
    "--concurrency",
    default=defaults.CONCURRENCY,
    show_default=True,
    type=click.IntRange(min=1),
    help=option_help("concurrency"),
)
@click.option(
    "--load/--no-load",
    default=None,
    show_default="on with a GPU, off on CPU, where it is slow",
    help=option_help("load"),
)
@click.option(
    "--load-duration-s",
    default=defaults.LOAD_DURATION_S,
    show_default=True,
    type=Number(0, above=True),
    help=option_help("load_duration_s"),
)
@click.option(
    "--include-path",
    default=None,
    help=option_help("include_path"),
)
@click.option(
    "--rag-data",
    default=None,
    help=option_help("rag_data"),
)
@click.option(
    "--rag-conditions",
    default=",".join(defaults.RAG_DEFAULT_CONDITIONS),
    show_default=True,
    help=option_help("rag_conditions"),
)
@click.option(
    "--rag-lengths",
    default=",".join(defaults.RAG_DEFAULT_LENGTHS),
    show_default=True,
    help=option_help("rag_lengths"),
)
@click.option(
    "--rag-questions",
    default=defaults.RAG_DEFAULT_QUESTIONS,
    show_default=True,
    type=click.IntRange(min=0),
    help=option_help("rag_questions"),
)
@click.option(
    "--kv-cache-dtypes",
    default=AUTO,
    show_default=True,
    help=option_help("kv_cache_dtypes"),  # names the config checks: one line for an unknown dtype
)
@click.option(
    "--kv-checkpoints",
    default="",
    help=option_help("kv_checkpoints"),
)
@click.option(
    "--circular",
    default="0",
    show_default=True,
    metavar="N",
    help=option_help("circular"),  # a count the config checks: one line naming --circular for 2.5 or -1
)
@click.option(
    "--rag-chat-template",
    is_flag=True,
    help=option_help("rag_chat_template"),
)
@click.option(
    "--apply-chat-template",
    is_flag=True,
    help=option_help("apply_chat_template"),
)
@click.option(
    "--recipes",
    default=None,
    help=option_help("recipes"),
)
@click.option(
    "--extra",
    default="",
    help=option_help("extra"),
)
@click.option(
    "--trust-remote-code",
    is_flag=True,
    help=option_help("trust_remote_code"),
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
    help=option_help("multiplicity"),
)
@click.option(
    "--ppl-margin",
    "ppl_margin_pct",
    default=defaults.PPL_MARGIN_PCT,
    show_default=True,
    type=Number(0, above=True),
    help=option_help("ppl_margin_pct"),
)
@click.option(
    "--run",
    default="",
    help=option_help("run"),
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
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            RateColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
        )
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

    _refuse_contradictions(options)
    items = item_choice(options["online"], options["model"])
    given = {name: value for name, value in options.items() if name != "online"}
    if given["load"] is None:  # capacity under load is slow on CPU and means little there
        given["load"] = hardware.gpu_present()
    given.update(items=items, limit=items.limit(given["limit"]), profile=_profile(options))
    return EvalConfig(**given)


RAG_OPTIONS = {
    "rag_data": None,
    "rag_conditions": ",".join(defaults.RAG_DEFAULT_CONDITIONS),
    "rag_lengths": ",".join(defaults.RAG_DEFAULT_LENGTHS),
    "rag_questions": defaults.RAG_DEFAULT_QUESTIONS,
    "rag_chat_template": False,
}
"""The `--rag-*` options by field, at their defaults: any other value says how to run ko_rag."""


def _refuse_contradictions(options: dict[str, Any]) -> None:
    """One line for options that contradict each other, instead of one silently ignored: a named GPU
    and a GPU size, a scoring profile for no target, `--rag-*` for a run without ko_rag."""
    if options["target_gpu"] and options["gpu_gib"] is not None:
        raise UserError(
            f"--target-gpu {options['target_gpu']} and --gpu-gib {options['gpu_gib']:g} both say the "
            "target's memory: give one (--gpu-gib for a GPU not in the table)"
        )
    if options["score_profile"] and not (options["target_gpu"] or options["gpu_gib"] is not None):
        raise UserError(
            f"--score-profile {options['score_profile']} says where a target's checkpoints are scored, and "
            "no target is given: add --target-gpu NAME, or leave --score-profile out"
        )
    tasks = split_list(options["tasks"]) if options["tasks"] else defaults.TASKS
    given = [name for name, default in RAG_OPTIONS.items() if options[name] != default]
    if given and "ko_rag" not in tasks:
        raise UserError(
            f"{option_name(given[0])} sets up ko_rag, which --tasks {','.join(tasks)} does not score: add "
            f"ko_rag to --tasks, or leave {option_name(given[0])} out"
        )


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
            "the answer of the earlier run:",
            highlight=False,
            markup=False,
        )
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
