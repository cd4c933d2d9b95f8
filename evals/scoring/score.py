"""Fast multiple-choice scoring through a running `vllm serve`: one next-token read per item.

For a letter-choice item lm-eval's loglikelihood of each one-token continuation (" A".." D") is the
log-probability of that token at the position after the context. vLLM's completions endpoint returns
exactly that, over the full vocabulary, for listed token ids (`logprob_token_ids`), so one request with
`max_tokens: 1` scores an item, instead of prompt log-probs over the whole vocabulary at every position.

Tokenization follows lm-eval's HF backend (`HFLM.tok_encode` and `TemplateLM._encode_pair`): trailing
whitespace moves from the context to the continuation, the tokenizer's own special tokens are added
(BOS for Llama and Gemma tokenizers) unless the text already starts with BOS, and the continuation is
the tail of encode(context + continuation) after encode(context). Every continuation must be exactly
one token: multi-token continuations go through `evals/scoring/continuation.py` instead. The encoding
lives with the prompts (`evals/tasks/prompt_tokens.py`): ko_rag counts the same tokens to fit its contexts.

Request:  POST /v1/completions {"model", "prompt": [[context token ids], …], "max_tokens": 1,
          "temperature": 0, "logprobs": <n choices>, "logprob_token_ids": [choice ids],
          "return_tokens_as_token_ids": true}: several items per request (`BATCH_ITEMS`), all with the
          same choice tokens, so the engine's queue stays full with few HTTP round trips.
Response: choices[i] answers prompt i (its "index"); choices[i].logprobs.top_logprobs[0] ==
          {"token_id:<id>": logprob, …} holding the sampled token and every requested id (vLLM clamps
          -inf to -9999.0). A missing id or a missing answer is an error.

The log-probs are the raw model distribution (`--logprobs-mode raw_logprobs`, vLLM's default, which
evals.serving.serve passes explicitly). A prompt longer than the served max-model-len minus one is refused
up front (lm-eval's hf backend would silently cut its left end instead).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Generator
from typing import Any

import httpx

from evals.scoring.job import ScoringJob
from evals.scoring.scoring_pass import results_as_done, score_missing
from evals.serving.endpoint import Endpoint
from evals.tasks.prompt_tokens import EncodedItem, choice_tokenizer, prompt_sha
from evals.tasks.prompts import PromptItem
from kqe.core.errors import UserError
from kqe.core.results import ItemResult, ScoreRun

log = logging.getLogger(__name__)

RETRIES = 5
"""Attempts per request on connection errors, timeouts and 5xx answers."""
BACKOFF_S = 0.5
"""First wait between attempts; doubles after each failure."""
TIMEOUT_S = 300.0
"""Per-request timeout: generous, a cold CPU server queues `concurrency` x `BATCH_ITEMS` prompts."""
BATCH_TOKENS = 16_384
"""Prompt tokens per request at most: eight 16k-token ko_rag prompts in one request took a 2-core CPU
longer than TIMEOUT_S, so the request was retried and never answered."""
BATCH_ITEMS = 8
"""Items per request. With 8 requests in flight the engine always has prompts waiting; fewer items
per request left it idle between round trips (gemma3-270m, 2 cores: 8 items x 2 requests 7.9
items/s, 16 x 2 10.5, 1 x 8 7.0, 1 x 16 10.4)."""


def completion_request(served_name: str, batch: list[EncodedItem]) -> dict[str, Any]:
    """One request scoring every item of `batch`; they must share their choice tokens."""
    choice_ids = batch[0].choice_ids
    if any(encoded.choice_ids != choice_ids for encoded in batch):
        raise ValueError("a request's items must share their choice tokens")
    return {
        "model": served_name,
        "prompt": [encoded.context_ids for encoded in batch],
        "max_tokens": 1,
        "temperature": 0,
        # vLLM 0.32 ignores this when logprob_token_ids is set, but its sampler expects the two equal
        "logprobs": len(choice_ids),
        "logprob_token_ids": choice_ids,
        "return_tokens_as_token_ids": True,
    }


def choice_logprobs(response: dict[str, Any], batch: list[EncodedItem]) -> list[list[float]]:
    """The log-prob of each choice token of each item of `batch`; every one must be present."""
    reads: dict[int, dict[str, float]] = {}
    try:
        for choice in response["choices"]:
            reads[int(choice["index"])] = choice["logprobs"]["top_logprobs"][0]
    except (KeyError, IndexError, TypeError, ValueError):
        raise RuntimeError(f"{batch[0].item.item_id}…: response has no top_logprobs: {response}") from None
    if sorted(reads) != list(range(len(batch))):
        raise RuntimeError(f"{len(batch)} prompts sent, answers for indexes {sorted(reads)} came back")
    return [_item_logprobs(reads[index], encoded) for index, encoded in enumerate(batch)]


def _item_logprobs(read: dict[str, float], encoded: EncodedItem) -> list[float]:
    missing = [token for token in encoded.choice_ids if f"token_id:{token}" not in read]
    if missing:
        raise RuntimeError(
            f"{encoded.item.item_id}: server returned no log-prob for choice token(s) {missing}: {read}"
        )
    return [float(read[f"token_id:{token}"]) for token in encoded.choice_ids]


def batches(encoded: list[EncodedItem], size: int, max_tokens: int = BATCH_TOKENS) -> list[list[EncodedItem]]:
    """Items in groups of at most `size` items and `max_tokens` prompt tokens (a longer prompt goes
    alone) that share their choice tokens, in their order."""
    groups: dict[tuple[int, ...], list[list[EncodedItem]]] = {}
    for item in encoded:
        runs = groups.setdefault(tuple(item.choice_ids), [[]])
        tokens = sum(len(other.context_ids) for other in runs[-1]) + len(item.context_ids)
        if runs[-1] and (len(runs[-1]) == size or tokens > max_tokens):
            runs.append([])
        runs[-1].append(item)
    return [run for runs in groups.values() for run in runs]


def _argmax(values: list[float]) -> int:
    """The first index of the highest value (ties go to the lower index, as `np.argmax`)."""
    return max(range(len(values)), key=lambda index: (values[index], -index))


def item_result(item: PromptItem, logprobs: list[float]) -> ItemResult:
    """An item's result: pred the argmax of the log-likelihoods; pred_norm (items whose choices have
    texts) that of the log-likelihoods per character, lm-eval's acc_norm."""
    pred = _argmax(logprobs)
    chars = item.choice_chars
    pred_norm = _argmax([lp / n for lp, n in zip(logprobs, chars, strict=True)]) if chars else None
    return ItemResult(
        task=item.task,
        subject=item.subject,
        item_id=item.item_id,
        gold=item.gold,
        pred=pred,
        correct=pred == item.gold,
        choice_logprobs=logprobs,
        pred_norm=pred_norm,
        prompt_sha=prompt_sha(item.prompt),
    )


class CompletionsClient:
    """Thread-safe client of one vLLM OpenAI-compatible server, retrying transient failures."""

    def __init__(self, endpoint: Endpoint, concurrency: int) -> None:
        self.served_name = endpoint.model()
        self._http = httpx.Client(
            base_url=endpoint.base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {},
            timeout=TIMEOUT_S,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._closed = threading.Event()

    def close(self) -> None:
        """Close the connections; requests still in flight fail and are not retried."""
        self._closed.set()
        self._http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        wait = BACKOFF_S
        for attempt in range(1, RETRIES + 1):
            if self._closed.is_set():  # the run is stopping: a retry would only delay it
                raise RuntimeError(f"{method} {path}: the client was closed")
            try:
                response = self._http.request(method, path, json=body)
                if response.status_code < 400:
                    result: dict[str, Any] = response.json()
                    return result
                if response.status_code < 500:  # our request is wrong: retrying cannot help
                    raise RuntimeError(f"{method} {path}: HTTP {response.status_code}: {response.text[:500]}")
                failure = f"HTTP {response.status_code}: {response.text[:300]}"
            except httpx.TransportError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            if attempt == RETRIES:
                raise RuntimeError(f"{method} {path} failed {RETRIES} times, last: {failure}")
            log.warning("%s %s attempt %d: %s; retrying in %.1fs", method, path, attempt, failure, wait)
            time.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")

    def max_model_len(self) -> int:
        """The served model's max-model-len; fails if the server does not serve `served_name`."""
        models = self._call("GET", "/v1/models")["data"]
        for model in models:
            if model["id"] == self.served_name:
                return int(model["max_model_len"])
        served = [model["id"] for model in models]
        raise UserError(f"server serves {served}, not {self.served_name!r}: pass the served model name")

    def read_choices(self, batch: list[EncodedItem]) -> list[list[float]]:
        body = completion_request(self.served_name, batch)
        return choice_logprobs(self._call("POST", "/v1/completions", body), batch)


def _check_lengths(encoded: list[EncodedItem], max_model_len: int) -> None:
    longest = max(encoded, key=lambda e: len(e.context_ids))
    if len(longest.context_ids) + 1 > max_model_len:
        raise UserError(
            f"{longest.item.item_id} has {len(longest.context_ids)} prompt tokens, more than the served "
            f"max-model-len {max_model_len} allows with one answer token: raise max_model_len in the profile"
        )


def score_task(prompts: list[PromptItem], job: ScoringJob, batch_items: int = BATCH_ITEMS) -> ScoreRun:
    """Score every prompt of one task through the server, resuming from `job.items_path`.

    Finished items are appended to `job.items_path` one flushed line at a time, so a crash loses at
    most the requests in flight; a re-run scores only the items not there yet (or whose prompt or gold
    changed). `job.concurrency` requests of up to `batch_items` items each are in flight.
    """
    tasks = {item.task for item in prompts}
    if len(tasks) != 1:
        raise ValueError(f"score_task needs the prompts of exactly one task, got {sorted(tasks) or 'none'}")
    current = {item.item_id: item for item in prompts}

    def stale(result: ItemResult) -> bool:
        item = current.get(result.item_id)
        return item is not None and (result.prompt_sha != prompt_sha(item.prompt) or result.gold != item.gold)

    def start(todo: list[str]) -> Generator[ItemResult, None, None]:
        left = set(todo)
        tokenizer = choice_tokenizer(job.tokenizer_dir.resolve())
        encoded = [tokenizer.encode(item) for item in prompts if item.item_id in left]
        client = CompletionsClient(job.endpoint, job.concurrency)
        return _score_encoded(batches(encoded, batch_items), client, job.concurrency)

    ids = [item.item_id for item in prompts]
    return score_missing(ids, stale, start, job, tasks.pop())


def _score_encoded(
    requests: list[list[EncodedItem]], client: CompletionsClient, concurrency: int
) -> Generator[ItemResult, None, None]:
    """Yield results as their requests finish, at most `concurrency` requests in flight."""

    def results_of(batch: list[EncodedItem], logprobs: list[list[float]]) -> list[ItemResult]:
        return [item_result(encoded.item, read) for encoded, read in zip(batch, logprobs, strict=True)]

    check_fits = functools.partial(_check_lengths, [item for batch in requests for item in batch])
    return results_as_done(client, requests, client.read_choices, results_of, check_fits, concurrency)
