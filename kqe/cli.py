"""The `kqe` command: one group, every command from `kqe/commands/` registered on it."""

from __future__ import annotations

import sys

try:  # kqe's imports take seconds: Ctrl-C among them is an interrupt like any other, not a traceback
    import atexit
    import contextlib
    import logging
    import os
    from collections.abc import Iterator
    from typing import Any

    import click
    from rich.logging import RichHandler

    from evals.serving.cpu import CPU_ISA_EMULATION
    from kqe.commands.calibrate import calibrate_command
    from kqe.commands.choose import choose_command
    from kqe.commands.compare import compare_command
    from kqe.commands.console import INTERRUPTED_STATUS, console, interrupted, say
    from kqe.commands.diff import diff_command
    from kqe.commands.doctor import doctor_command
    from kqe.commands.env import env_command
    from kqe.commands.eval import eval_command
    from kqe.commands.ifeval import ifeval_command
    from kqe.commands.load import load_command
    from kqe.commands.models import models_command
    from kqe.commands.plan import plan_command
    from kqe.commands.quantize import quantize_command
    from kqe.commands.rag import rag_command
    from kqe.commands.report import report_command
    from kqe.commands.tasks import tasks_command
    from kqe.core.text import printable
except KeyboardInterrupt:
    import os as _os

    sys.stderr.write("kqe: interrupted while starting; nothing was done\n")
    sys.stderr.flush()
    # not sys.exit: an interrupt that landed in code a C extension ran (PyRun_String) marks itself
    # unhandled for good, and the interpreter's exit then re-raises SIGINT (status -2, not 130);
    # nothing was started, so there is nothing for atexit to clean up
    _os._exit(130)


@contextlib.contextmanager
def _interrupt_is_one_line() -> Iterator[None]:
    """Ctrl-C outside a command's guarded work (while options are read, modules imported, checks run)
    exits 130 with one line, as within it (`console.interrupted`), not click's "Aborted!" and 1."""
    try:
        yield
    except KeyboardInterrupt:
        interrupted()


class _OneLineUsageErrors(click.Group):
    """A mistyped option or value is one line naming it, like every other kqe error (exit 2)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _interrupt_is_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with _interrupt_is_one_line():
                return super().invoke(ctx)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else ctx.command_path
            say("kqe: error:", f"{exc.format_message()} (see `{where} --help`)")
            sys.exit(2)


def _printable_record(record: logging.LogRecord) -> bool:
    """Log lines echo names and paths from input files: no control sequence of theirs reaches the terminal."""
    with contextlib.suppress(TypeError, ValueError):  # a malformed record is the handler's to report
        record.msg, record.args = printable(record.getMessage()), None
    return True


@click.group(cls=_OneLineUsageErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail.")
def main(verbose: bool) -> None:
    """ko-quant-eval: how much Korean quality does AWQ/FP8 cost on vLLM, is the loss real, and what
    does it buy in memory?

    `kqe eval` runs the whole matrix for one model and writes results/<model>/leaderboard.csv.
    """
    handler = RichHandler(console=console, show_path=False, show_time=False)
    handler.addFilter(_printable_record)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", handlers=[handler]
    )
    for noisy in ("httpx", "urllib3", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # per-task chatter around our own progress bars
    os.environ.setdefault("TQDM_DISABLE", "1")  # library tqdm bars would tear the rich progress display
    # an emulated CPU kind restricts every child's kernels (builds too), not only the engine's
    os.environ.update(CPU_ISA_EMULATION.get(os.environ.get("KQE_CPU_ISA", ""), {}))


COMMANDS = (
    eval_command, models_command, compare_command, calibrate_command, quantize_command, plan_command,
    doctor_command, load_command, choose_command, diff_command, report_command, env_command, rag_command,
    tasks_command, ifeval_command,
)  # fmt: skip
for command in COMMANDS:
    main.add_command(command)


def entry() -> None:
    """The process's entry point (`kqe`, `python -m kqe.cli`): `main`, leaving with 130 on Ctrl-C even
    where the interpreter would turn it into death by SIGINT. An interrupt that landed in code a C
    extension ran (torch's and transformers' lazy imports inside a command) marks itself unhandled for
    good, and the interpreter's exit then re-raises SIGINT (status -2) after kqe said its one line. The
    exit handlers run first (servers still up are stopped), then the process leaves directly."""
    try:
        main()
    except SystemExit as exit_:
        if exit_.code != INTERRUPTED_STATUS:
            raise
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        os._exit(INTERRUPTED_STATUS)


if __name__ == "__main__":
    entry()
