"""What every command shares: the console, the guard that turns errors into one line, progress bars."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import Progress

from kqe.core.errors import UserError
from kqe.core.workspace import Workspace

console = Console(stderr=True)


def split_list(value: str) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c")."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


class ProgressDisplay:
    """One bar per stage name, created on first report."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._bars: dict[str, Any] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if what not in self._bars:
            self._bars[what] = self._progress.add_task(what, total=total)
        self._progress.update(self._bars[what], completed=done, total=total)


def run_guarded(action: Callable[[], None]) -> None:
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
