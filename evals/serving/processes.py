"""Processes and ports for the serving engine: process groups, servers left behind, free ports.

Kept apart from `evals.serving.serve` so the server lifecycle reads top to bottom; nothing here knows vLLM's
API, only its processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from pathlib import Path

from kqe.core.errors import UserError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
STOP_GRACE_S = 20.0


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


def kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _is_vllm_process(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(b"vllm") for part in argv) or any(part.startswith(b"VLLM::") for part in argv)


def kill_stale_server(pidfile: Path) -> bool:
    """Kill the process group named in `pidfile` if a vLLM server of a dead run still holds it.

    Returns whether something was killed. The pid must still be a vLLM process group (leader or
    engine process) so that a reused pid is never killed.
    """
    try:
        pgid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    members = [pid for pid in group_members(pgid) if _is_vllm_process(pid)]
    if members:
        log.warning("killing vLLM server left behind by an earlier run (process group %d)", pgid)
        kill_group(pgid, signal.SIGTERM)
        if not wait_group_gone(pgid, STOP_GRACE_S):
            kill_group(pgid, signal.SIGKILL)
            wait_group_gone(pgid, 5)
    pidfile.unlink(missing_ok=True)
    return bool(members)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def forced_port() -> int | None:
    """The port from KQE_PORT, checked to be free; UserError when it is not."""
    raw = os.environ.get("KQE_PORT")
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise UserError(f"KQE_PORT={raw!r} is not a port number: set it to 1-65535 or unset it")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as vLLM binds: TIME_WAIT is free
        try:
            sock.bind((HOST, int(raw)))
        except OSError as error:
            raise UserError(
                f"KQE_PORT={raw} is not free on {HOST} ({error.strerror}): free it or unset KQE_PORT"
            ) from None
    return int(raw)
