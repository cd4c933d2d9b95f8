"""One scoring pass of a task through a running server, shared by letter-choice scoring
(`evals/scoring/score.py`) and generation (`evals/scoring/generate.py`).

Results already in the per-item file are kept unless stale; the other items are sent with a bounded
number of requests in flight, and each result is appended as one flushed line as soon as it comes, so
a crash loses at most the requests in flight and a re-run scores only what is missing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Protocol, TypeVar

from evals.scoring.job import ScoringJob
from kqe.core.faults import pause_point
from kqe.core.io import JsonlAppender, read_jsonl
from kqe.core.results import ItemResult, ScoreRun

log = logging.getLogger(__name__)

Request = TypeVar("Request")
Answer = TypeVar("Answer")


class Server(Protocol):
    """The client side of a served model that a pass needs besides its requests."""

    def max_model_len(self) -> int: ...
    def close(self) -> None: ...


def resumable(items_path: Path, stale: Callable[[ItemResult], bool]) -> list[ItemResult]:
    """Results already in `items_path` worth keeping: one per item_id, none that `stale` rejects (an
    item whose prompt or gold changed since), so that item is scored again."""
    kept: dict[str, ItemResult] = {}
    for result in read_jsonl(items_path, ItemResult):
        if stale(result):
            log.warning("%s: %s was scored on another prompt; scoring it again", items_path, result.item_id)
            continue
        kept.setdefault(result.item_id, result)
    return list(kept.values())


def score_missing(
    item_ids: Sequence[str],
    stale: Callable[[ItemResult], bool],
    start: Callable[[list[str]], Generator[ItemResult, None, None]],
    job: ScoringJob,
    task: str,
    generated: bool = False,
) -> ScoreRun:
    """Score the items of `item_ids` that `job.items_path` does not hold yet and summarize them all
    (`generated`: the items are generated answers, said in the ScoreRun).

    `start` gets the ids left to score and returns their results as they finish; it is called before
    the clock starts, so encoding the prompts does not count against items/s. Results of items outside
    `item_ids` stay in the file untouched.
    """
    items_path, checkpoint, progress = job.items_path, job.checkpoint, job.progress
    kept = resumable(items_path, stale)
    wanted = set(item_ids)
    results = {result.item_id: result for result in kept if result.item_id in wanted}
    todo = [item_id for item_id in item_ids if item_id not in results]
    items_per_s = None
    if progress:
        progress(len(results), len(item_ids))
    with JsonlAppender(items_path, keep=kept) as appender:
        if todo:
            scored = start(todo)
            started = time.perf_counter()
            with contextlib.closing(scored):  # on any error: stop the pool, drop what is in flight
                for result in scored:
                    appender.append(result)
                    results[result.item_id] = result
                    pause_point(f"scored {checkpoint} {task} {len(results)}")
                    if progress:
                        progress(len(results), len(item_ids))
            items_per_s = len(todo) / (time.perf_counter() - started)
            log.info("%s %s: %d items at %.2f items/s", checkpoint, task, len(todo), items_per_s)
    summary = summarize(list(results.values()), checkpoint, task, items_path, job.profile_key, items_per_s)
    return summary.model_copy(update={"generated": generated})


def results_as_done(
    server: Server,
    requests: Sequence[Request],
    send: Callable[[Request], Answer],
    results_of: Callable[[Request, Answer], Iterable[ItemResult]],
    check_fits: Callable[[int], None],
    concurrency: int,
) -> Generator[ItemResult, None, None]:
    """Yield the results of each request as its answer comes, at most `concurrency` requests in
    flight, once `check_fits` has accepted the served max-model-len. Closing the generator (or an
    error, Ctrl-C, SIGTERM) closes the client and returns without waiting for requests in flight,
    which could take a request timeout each: stopping the server is what ends them."""
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kqe-score")
    finished = False
    try:
        check_fits(server.max_model_len())
        futures: dict[Future[Answer], Request] = {pool.submit(send, request): request for request in requests}
        pending = set(futures)
        while pending:
            # a timed wait: a signal (SIGTERM) that lands on a worker thread is only acted on once the
            # main thread wakes, which an untimed wait would put off until a request finishes
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                yield from results_of(futures[future], future.result())
        finished = True
    finally:
        server.close()  # first: requests still in flight fail without retrying
        pool.shutdown(wait=finished, cancel_futures=True)


def summarize(
    results: list[ItemResult],
    checkpoint: str,
    task: str,
    items_path: Path,
    profile_key: str,
    items_per_s: float | None = None,
) -> ScoreRun:
    """The ScoreRun of a task's item results (micro accuracy)."""
    if not results:
        raise ValueError(f"no results to summarize for {checkpoint} {task}")
    normed = [result.pred_norm == result.gold for result in results if result.pred_norm is not None]
    return ScoreRun(
        checkpoint=checkpoint,
        task=task,
        n_items=len(results),
        accuracy=sum(result.correct for result in results) / len(results),
        accuracy_norm=sum(normed) / len(normed) if len(normed) == len(results) else None,
        items_per_s=items_per_s,
        items_path=str(items_path),
        profile_key=profile_key,
    )
