"""`python server_guard.py COMMAND...`: run the vLLM server COMMAND as a child and take its whole process
group down with it. Standard library only: it is started by path, before anything else of kqe loads.

VllmServer starts this as the leader of the server's process group, under the parent-death signal
SIGTERM. On SIGTERM or SIGINT (VllmServer.stop, or its starter dying, even by SIGKILL) it passes SIGTERM
to COMMAND, gives it GRACE_S, then SIGTERMs and finally SIGKILLs what is left of the group: vLLM's
engine processes do not end when their API server is killed outright. When this process is itself
SIGKILLed (Ray kills a dead worker's children so), COMMAND's own parent-death signal stops it, which
vLLM handles by shutting its engine down. Exits with COMMAND's status when COMMAND ends by itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

GRACE_S = 20.0
"""How long COMMAND gets to shut down after SIGTERM (VllmServer.stop waits as long)."""


def others_in_group() -> list[int]:
    """Live processes of this process group other than this one, read from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        if fields[0] != "Z" and int(fields[2]) == os.getpgid(0) and pid != os.getpid():
            found.append(pid)
    return found


class Stop(Exception):
    """Raised by the signal handler, so that the main thread leaves `child.wait()` before taking the
    server down: a wait inside the handler could not reap the child while the interrupted wait holds
    Popen's wait lock, and would sit out GRACE_S beside a child that had long exited."""


def stop(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM in take_down reaches this process too
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stop


def take_down(child: subprocess.Popen[bytes] | None) -> None:
    if child is not None:  # None: the signal came while it was being started
        child.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=GRACE_S)
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while others_in_group() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(0, signal.SIGKILL)  # this process included: nothing of the server may outlive it


def main() -> int:
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    child = None
    try:
        child = subprocess.Popen(sys.argv[1:])
        return child.wait()
    except Stop:
        take_down(child)
        return 143  # as a shell reports SIGTERM, where the group's SIGKILL could not end this process


if __name__ == "__main__":
    sys.exit(main())
