"""`kqe`: the thin command-line shell over the pipeline stages (progress and messages live here)."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kqe.commands.calibrate import calibrate_command
from kqe.commands.choose import choose_command
from kqe.commands.diff import diff_command
from kqe.commands.doctor import doctor_command
from kqe.commands.load import load_command
from kqe.commands.plan import plan_command
from kqe.commands.quantize import quantize_command
from kqe.commands.report import report_command
from kqe.errors import UserError
from kqe.workspace import Workspace

console = Console(stderr=True)


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


class _ProgressDisplay:
    """One bar per stage name, created on first report."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._bars: dict[str, Any] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if what not in self._bars:
            self._bars[what] = self._progress.add_task(what, total=total)
        self._progress.update(self._bars[what], completed=done, total=total)


def _run_guarded(action: Callable[[], None]) -> None:
    """Run a command: user errors become one line and exit 2, never a traceback."""
    try:
        action()
    except UserError as exc:
        console.print(f"[bold red]kqe: error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except BrokenPipeError:  # `kqe … | head`: the reader left; nothing to report
        sys.stderr.close()
        sys.exit(0)
    except KeyboardInterrupt:
        console.print("kqe: interrupted; finished results are kept, re-run to resume", highlight=False)
        sys.exit(130)
    except Exception as exc:  # an internal bug: keep the traceback out of the terminal, in a file
        ws = Workspace.from_env()
        ws.cache.mkdir(parents=True, exist_ok=True)
        trace_file = ws.cache / "last-error.log"
        trace_file.write_text(traceback.format_exc(), encoding="utf-8")
        console.print(
            f"[bold red]kqe: internal error:[/] {type(exc).__name__}: {exc} (traceback in {trace_file}; "
            "please report it)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)


class _OneLineUsageErrors(click.Group):
    """A mistyped option or value is one line naming it, like every other kqe error (exit 2)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else ctx.command_path
            console.print(
                f"[bold red]kqe: error:[/] {exc.format_message()} (see `{where} --help`)",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(2)


@click.group(cls=_OneLineUsageErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail.")
def main(verbose: bool) -> None:
    """ko-quant-eval: how much Korean quality does AWQ/FP8 cost on vLLM, is the loss real, and what
    does it buy in memory?

    `kqe eval` runs the whole matrix for one model and writes results/<model>/leaderboard.csv.
    """
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False, show_time=False)],
    )
    for noisy in ("httpx", "urllib3", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # per-task chatter around our own progress bars
    os.environ.setdefault("TQDM_DISABLE", "1")  # library tqdm bars would tear the rich progress display


@main.command("eval")
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
    "(format: evals/ko_rag/README.md).",
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
    from evals.leaderboard import read_leaderboard
    from evals.processes import detect_gpu
    from kqe.matrix import split_mixes
    from kqe.pipeline import run_eval
    from kqe.run_config import EvalConfig

    def action() -> None:
        options.update(
            schemes=_split(options["schemes"]), tasks=_split(options["tasks"]),
            calibrations=split_mixes(options["calibrations"]), limit=options["limit"] or None,
            extra=_split(options["extra"]), recipes=options["recipes"] or None, run=options["run"] or None,
        )  # fmt: skip
        if options["load"] is None:
            options["load"] = detect_gpu()
        cfg = EvalConfig(**options)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            board = run_eval(cfg, Workspace.from_env(), _ProgressDisplay(progress))
        click.echo(board.read_text(encoding="utf-8"), nl=False)
        console.print(f"leaderboard: {board}", highlight=False)
        # a checkpoint this device cannot serve is a finding (its status says why), not a failure
        failed = [row.checkpoint for row in read_leaderboard(board) if row.status.startswith("failed")]
        if failed:
            raise UserError(
                f"{len(failed)} checkpoint(s) failed ({', '.join(failed)}): the status column of {board} "
                "says why and what to try; the other rows are complete"
            )

    _run_guarded(action)


@main.command("models")
def models_command() -> None:
    """List the models of the registry with their architecture facts."""
    from kqe.registry import load_registry

    def action() -> None:
        for spec in load_registry().values():
            where = "offline" if spec.offline else f"{spec.hub_id}@{spec.revision}"
            click.echo(f"{spec.name:18} {spec.params_b:6.2f}B  {spec.layers:3} layers  {where}")

    _run_guarded(action)


@main.command("compare")
@click.argument("base_items", type=click.Path(path_type=Path))
@click.argument("cand_items", type=click.Path(path_type=Path))
@click.option(
    "--margin",
    default=1.0,
    show_default=True,
    help="Non-inferiority margin in accuracy points (1.0 = a loss of 0.01 is acceptable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object keyed by task (fractions).")
def compare_command(base_items: Path, cand_items: Path, margin: float, as_json: bool) -> None:
    """Paired comparison of two per-item files (JSON Lines with task, item_id, correct, optionally
    subject, gold, choice_logprobs) task by task. Two candidate files give the calibration effect."""
    from evals.stats import compare_files

    def action() -> None:
        results = compare_files(base_items, cand_items, margin)
        if as_json:
            report = {task: r.model_dump(mode="json") for task, r in results.items()}
            click.echo(json.dumps(report, indent=2, ensure_ascii=False))
            return
        for task, r in results.items():
            kl = "" if r.mean_kl is None else f"  KL {r.mean_kl:.4f}"
            click.echo(
                f"{task}: n={r.n}  acc {r.acc_base:.3f} -> {r.acc_cand:.3f}  Δ {100 * r.delta:+.1f} pts "
                f"[{100 * r.ci_low:+.1f}, {100 * r.ci_high:+.1f}]  McNemar p={r.mcnemar_p:.3g} "
                f"(Holm {r.p_holm:.3g})  flips c→w {r.flips_c2w} w→c {r.flips_w2c}{kl}  "
                f"MDE {100 * r.mde:.1f} pts  => {r.verdict}"
            )
            if r.ko_en_gap is not None and r.ko_en_gap_ci_low is not None and r.ko_en_gap_ci_high is not None:
                click.echo(
                    f"{task} - {r.english_task} loss gap: {100 * r.ko_en_gap:+.1f} pts "
                    f"[{100 * r.ko_en_gap_ci_low:+.1f}, {100 * r.ko_en_gap_ci_high:+.1f}]"
                )

    _run_guarded(action)


for command in (plan_command, doctor_command, load_command, choose_command, diff_command, report_command):
    main.add_command(command)
main.add_command(calibrate_command)
main.add_command(quantize_command)

if __name__ == "__main__":
    main()
