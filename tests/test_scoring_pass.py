"""A stopping pass (error, Ctrl-C, SIGTERM) must not wait out requests in flight: each could take a
request timeout, and the server is only stopped after the pass returns."""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

import pytest

from evals.scoring.scoring_pass import results_as_done
from kqe.core.results import ItemResult


class HangingServer:
    """Answers the first request at once; the others hang until the client is closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.workers: list[int] = []

    def max_model_len(self) -> int:
        return 2048

    def close(self) -> None:
        self.closed.set()

    def send(self, request: int) -> int:
        self.workers.append(threading.get_ident())
        if request > 0 and not self.closed.wait(timeout=30):
            raise AssertionError("never released")
        return request


def result(request: int, answer: int) -> list[ItemResult]:
    return [
        ItemResult(
            task="t",
            subject="s",
            item_id=str(request),
            gold=0,
            pred=0,
            correct=True,
            choice_logprobs=[0.0],
            prompt_sha="p",
        )
    ]


@pytest.mark.parametrize("stop", ["error", "close"])
def test_a_stopped_pass_returns_at_once_and_closes_the_client(stop: str) -> None:
    server = HangingServer()
    results = results_as_done(server, [0, 1, 2, 3], server.send, result, lambda n: None, concurrency=4)
    assert next(results).item_id == "0"
    started = time.monotonic()
    if stop == "error":
        with pytest.raises(KeyboardInterrupt):
            results.throw(KeyboardInterrupt())
    else:
        results.close()
    assert time.monotonic() - started < 5 and server.closed.is_set()


def test_a_finished_pass_waits_for_its_pool_and_closes_the_client() -> None:
    server = HangingServer()
    server.closed.set()  # every request answers at once
    results = results_as_done(server, [0, 1, 2], server.send, result, lambda n: None, concurrency=2)
    assert sorted(r.item_id for r in results) == ["0", "1", "2"]
    assert server.closed.is_set()


def test_sigterm_caught_by_a_worker_thread_stops_the_pass_within_seconds() -> None:
    """The kernel may hand a process's SIGTERM to any thread; Python runs the handler in the main
    thread only when that thread wakes, so the pass must not sleep until a request finishes."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    server = HangingServer()
    try:
        results = results_as_done(server, [0, 1, 2], server.send, result, lambda n: None, concurrency=3)
        assert next(results).item_id == "0"
        while len(server.workers) < 3:
            time.sleep(0.01)
        threading.Timer(0.2, signal.pthread_kill, (server.workers[-1], signal.SIGTERM)).start()
        started = time.monotonic()
        with pytest.raises(SystemExit):
            list(results)
        assert time.monotonic() - started < 5 and server.closed.is_set()
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.closed.set()
