"""Pause points for fault-injection tests: a run told to pause at a named point waits there, so that a
test can kill the run (or its server) at exactly that moment instead of racing it.

    KQE_PAUSE_AT="scored bf16 mmlu 8" kqe eval ...   # pauses once 8 mmlu items of bf16 are written

`KQE_PAUSE_S` bounds the wait (default: until killed). Unset, a pause point costs one dict look-up.
"""

from __future__ import annotations

import os
import time

PAUSE_AT = "KQE_PAUSE_AT"
PAUSE_S = "KQE_PAUSE_S"

_paused: set[str] = set()


def pause_point(name: str) -> None:
    """When KQE_PAUSE_AT is `name` (and this process has not paused there yet): say so on stderr, then
    wait KQE_PAUSE_S seconds, or until killed."""
    if os.environ.get(PAUSE_AT) != name or name in _paused:
        return
    _paused.add(name)
    os.write(2, f"kqe: paused at {name}\n".encode())
    deadline = time.monotonic() + float(os.environ.get(PAUSE_S, "inf"))
    while time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
