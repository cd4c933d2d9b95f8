"""The build child process: a lock per build key, the child run to completion with its layer
progress read from its own log, and what its exit status says.

The child leads its own process group and gets SIGKILL when its parent dies (`kqe.core.processes`),
so it cannot go on writing.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from kqe.core.io import open_writable
from kqe.core.processes import signal_group, start_in_group, wait_with_usage
from quantize.llmcompressor_child import OneshotJob

log = logging.getLogger(__name__)

_REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def build_lock(path: Path, name: str) -> Iterator[None]:
    """Exclusive lock on `path` for one build; another process building the same key waits."""
    with open_writable(path, append=True) as handle:  # a link planted at the lock's name is not followed
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s: another process is building it; waiting for it to finish", name)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_LAYER_PROGRESS = re.compile(rb"\((\d+)/(\d+)\): (?:Calibrating|Propagating)")
"""llmcompressor's sequential pipeline, per layer group: `(3/19): Calibrating`."""


def run_child(
    module: str, job: OneshotJob, log_path: Path, progress: Callable[[int, int], None] | None = None
) -> tuple[int, int]:
    """Run the build child to completion, reporting the layer groups it has done from its own log;
    return its exit code and its own peak RSS in bytes."""
    command = [sys.executable, "-m", module, job.model_dump_json()]
    # the parent-death signal follows the thread that forks: only the main thread lives long enough
    parent_death = signal.SIGKILL if threading.current_thread() is threading.main_thread() else None
    with open_writable(log_path) as log_file:
        # a progress frame every 5 s at most: enough to follow layers, not enough to bloat the log
        env = {**os.environ, "TQDM_MININTERVAL": "5", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("TQDM_DISABLE", None)
        child = start_in_group(
            command, parent_death, cwd=_REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
        try:  # reaped by wait4, so its returncode is set here: Popen must not wait for it again
            child.returncode, usage = wait_with_usage(child.pid, lambda: _report_layers(log_path, progress))
        except BaseException:
            signal_group(child.pid, signal.SIGKILL)
            child.wait()
            raise
    return child.returncode, usage.ru_maxrss * 1024


def _report_layers(log_path: Path, progress: Callable[[int, int], None] | None) -> None:
    """Tell `progress` the layer groups done so far, read from the build log, once there are any."""
    if progress is not None:
        found = layer_progress(log_path)
        if found is not None:
            progress(*found)


def layer_progress(log_path: Path) -> tuple[int, int] | None:
    """(layer groups done, total) from the last progress frame in the build log, if any yet."""
    with contextlib.suppress(OSError), log_path.open("rb") as handle:
        handle.seek(max(0, log_path.stat().st_size - 16384))
        frames = _LAYER_PROGRESS.findall(handle.read())
        if frames:
            current, total = map(int, frames[-1])
            return current - 1, total  # `(3/19): Calibrating` is the third group under way
    return None


def failure(returncode: int, log_path: Path) -> str | None:
    if returncode == 0:
        return None
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    last = (errors or [line for line in lines if line] or ["no output"])[-1]
    return f"exit {returncode}: {last[:300]}"
