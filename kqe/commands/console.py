"""What every command shares: the console, the guard that turns errors into one line, progress bars."""

from __future__ import annotations

import errno
import math
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.progress import Progress, ProgressColumn, Task
from rich.text import Text

from kqe.core.errors import UserError
from kqe.core.eval_config import option_help
from kqe.core.io import shown, write_atomic
from kqe.core.text import printable
from kqe.core.workspace import Workspace

if TYPE_CHECKING:
    from kqe.core.records import ItemChoice

console = Console(stderr=True)


class Number(click.ParamType):
    """A finite float option (`nan` and `inf` are refused: they would slip past every comparison),
    at least `minimum`, or above it when `above`."""

    name = "number"

    def __init__(self, minimum: float | None = None, *, above: bool = False) -> None:
        self.minimum, self.above = minimum, above

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        low = self.minimum
        if low is not None and (number <= low if self.above else number < low):
            self.fail(f"{value!r} must be {'above' if self.above else 'at least'} {low:g}", param, ctx)
        return number


ONLINE_DEFAULT = (
    "online for a hub model or KQE_ONLINE=1; offline for the embedded model, a model folder or "
    "KQE_OFFLINE=1, which wins over both"
)
"""What `item_choice` picks when neither --online nor --offline is given."""
ONLINE_HELP = f"{option_help('items')} Default: {ONLINE_DEFAULT}."
"""The help of --online/--offline where they pick the items as `kqe eval` does (`kqe calibrate`)."""


def item_choice(asked: bool | None, model: str) -> ItemChoice:
    """Online or offline items for a run of `model` (`evals.tasks.item_sets.choose`)."""
    from evals.tasks.item_sets import choose
    from kqe.core.registry import resolve_model

    return choose(resolve_model(model, Workspace.from_env()), asked)


class RateColumn(ProgressColumn):
    """Steps per second of a bar (items scored, windows read), once rich has measured it."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:.1f}/s")


class ProgressDisplay:
    """One bar per stage name, created on first report."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._bars: dict[str, Any] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if what not in self._bars:
            self._bars[what] = self._progress.add_task(what, total=total)
        self._progress.update(self._bars[what], completed=done, total=total)


def echo(text: str, *, nl: bool = True) -> None:
    """Print a command's answer on stdout, without the control sequences its inputs may carry; a
    closed or full standard output is a UserError (the answer would be lost with exit 0)."""
    if sys.stdout is None:  # `kqe … >&-`: Python starts without a stdout, and click would print nowhere
        raise UserError("standard output is closed, so the answer cannot be printed: run kqe with it open")
    try:
        click.echo(printable(text), nl=nl)
    except BrokenPipeError:
        raise  # `kqe … | head`: the reader left (run_guarded)
    except OSError as err:
        _drop_stdout()
        raise UserError(f"cannot print the answer to standard output: {err.strerror}") from None


def _drop_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that what is still buffered for a full or broken
    standard output goes nowhere at exit instead of raising a second error there."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def say(label: str, message: str) -> None:
    """One line on stderr: `label` in red, then `message` as it is (never read as console markup)."""
    line = Text(label, style="bold red")
    line.append(f" {printable(message)}")
    console.print(line, highlight=False, soft_wrap=True)


INTERRUPTED = "kqe: interrupted; finished results are kept, re-run to resume"
"""The one line Ctrl-C leaves, whenever it comes: before work (options, imports), during or after it."""


INTERRUPTED_STATUS = 130
"""128 + SIGINT, as shells report an interrupted command."""


def interrupted() -> NoReturn:
    """Ctrl-C: one line, no traceback, exit `INTERRUPTED_STATUS`, never click's "Aborted!" and exit 1."""
    console.print(INTERRUPTED, highlight=False, markup=False)
    sys.exit(INTERRUPTED_STATUS)


def run_guarded(action: Callable[[], None]) -> None:
    """Run a command: user errors become one line and exit 2, never a traceback."""
    try:
        action()
    except UserError as exc:
        say("kqe: error:", str(exc))
        sys.exit(2)
    except OSError as exc:
        if exc.errno not in PATH_ERRORS:
            _internal_error(exc)
        say("kqe: error:", path_error(exc))  # a path the user gave that no system call can use
        sys.exit(2)
    except BrokenPipeError:  # `kqe … | head`: the reader left; nothing to report
        sys.stderr.close()
        sys.exit(0)
    except KeyboardInterrupt:
        interrupted()
    except Exception as exc:  # an internal bug: keep the traceback out of the terminal, in a file
        _internal_error(exc)


PATH_ERRORS = {errno.ENAMETOOLONG: "shorten it", errno.ELOOP: "remove the loop of symbolic links"}
"""OS errors about a path's name rather than its file, and the fix: whatever check meets them, the
path is the user's input."""


def path_error(err: OSError) -> str:
    """The one line for an OS error of `PATH_ERRORS`, naming the path (its end, when it is long)."""
    fix = PATH_ERRORS.get(err.errno or 0, "check the path")
    return f"{shown(err.filename or 'a path given')}: {err.strerror}: {fix}"


def _internal_error(exc: BaseException) -> NoReturn:
    """An internal bug: one line, the traceback kept out of the terminal (in a file), exit 1."""
    where = _save_traceback()
    say("kqe: internal error:", f"{type(exc).__name__}: {exc} ({where}; please report it)")
    sys.exit(1)


def _save_traceback() -> str:
    """Where the traceback went: `$KQE_HOME/last-error.log`, or standard error when that cannot be written."""
    trace = traceback.format_exc()
    try:
        trace_file = Workspace.from_env().cache / "last-error.log"
        write_atomic(trace_file, trace)
    except Exception:  # the guard of last resort may not fail itself (a KQE_HOME no call can use)
        sys.stderr.write(trace)
        return "traceback above"
    return f"traceback in {trace_file}"
