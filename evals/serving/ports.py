"""Where a vLLM server listens: the loopback host, a free port, or the one KQE_PORT forces."""

from __future__ import annotations

import os
import socket

from kqe.core.errors import UserError

HOST = "127.0.0.1"


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
