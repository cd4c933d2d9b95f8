"""The vLLM server a dead run left behind: its process group, named in the server's pidfile, is stopped
by the next start with the same log, and only when it is still a vLLM server (a pid may be reused)."""

from __future__ import annotations

import logging
from pathlib import Path

from kqe.core.processes import group_members, stop_group

log = logging.getLogger(__name__)


def _is_vllm_process(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(b"vllm") for part in argv) or any(part.startswith(b"VLLM::") for part in argv)


def kill_stale_server(pidfile: Path, grace_s: float) -> bool:
    """Stop the process group named in `pidfile` (SIGTERM, then SIGKILL after `grace_s`) if a vLLM
    server of a dead run still holds it.

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
        stop_group(pgid, grace_s)
    pidfile.unlink(missing_ok=True)
    return bool(members)
