"""Child processes that cannot outlive the run that started them: each starts as the leader of its own
process group under a parent-death signal, and stopping it stops the whole group.

One module for builds and servers alike; what is about vLLM (recognising its processes, the grace it
gets, the server a dead run left behind) stays in `evals.serving`. `evals/serving/server_guard.py`
repeats the reading of a group's members: it is started by path and imports nothing of kqe.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

KILL_WAIT_S = 5.0
"""How long a group's processes get to be gone after SIGKILL."""


def with_parent_death_signal(command: list[str], sig: signal.Signals) -> list[str]:
    """`command` run under `setpriv --pdeathsig`, so it gets `sig` when the thread that started it
    ends, even by SIGKILL; unchanged where setpriv (util-linux) is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", sig.name.removeprefix("SIG"), "--", *command] if setpriv else command


def start_in_group(
    command: list[str], parent_death: signal.Signals | None, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start `command` as the leader of a new session (its pid is its process group's id), under the
    parent-death signal `parent_death` unless None; `popen` is passed to subprocess.Popen."""
    if parent_death is not None:
        command = with_parent_death_signal(command, parent_death)
    return subprocess.Popen(command, start_new_session=True, **popen)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`, read from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send `sig` to every process of group `pgid`; nothing when the group is gone or not ours."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Whether every process of group `pgid` ended within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def stop_group(
    pgid: int,
    grace_s: float,
    leader: subprocess.Popen[bytes] | None = None,
    on_stubborn: Callable[[], None] = lambda: None,
) -> None:
    """Stop process group `pgid`: SIGTERM, `grace_s` for all of it to end, then SIGKILL what is left
    (after calling `on_stubborn`). `leader`, when it is this process's child, gets SIGTERM first and
    the grace to end by itself, so that it can shut down what it started; it is reaped."""
    deadline = time.monotonic() + grace_s
    if leader is not None:
        leader.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            leader.wait(timeout=grace_s)
    signal_group(pgid, signal.SIGTERM)  # whatever the leader left behind
    if not wait_group_gone(pgid, max(1.0, deadline - time.monotonic())):
        on_stubborn()
        signal_group(pgid, signal.SIGKILL)
        if leader is not None:
            leader.wait()
        wait_group_gone(pgid, KILL_WAIT_S)


def wait_with_usage(
    pid: int, on_poll: Callable[[], None], poll_s: float = 1.0
) -> tuple[int, resource.struct_rusage]:
    """Wait for child `pid`: its exit code (negative: the signal that ended it) and its own rusage
    (wait4: RUSAGE_CHILDREN would mix in every earlier child), calling `on_poll` every `poll_s`
    meanwhile."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), usage
        on_poll()
        time.sleep(poll_s)
