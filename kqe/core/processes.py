"""Child processes that cannot outlive the run that started them (one helper for builds and servers)."""

from __future__ import annotations

import shutil
import signal


def with_parent_death_signal(command: list[str], sig: signal.Signals) -> list[str]:
    """`command` run under `setpriv --pdeathsig`, so it gets `sig` when the thread that started it
    ends, even by SIGKILL; unchanged where setpriv (util-linux) is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", sig.name.removeprefix("SIG"), "--", *command] if setpriv else command
