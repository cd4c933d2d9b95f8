"""Perplexity of a served checkpoint on held-out text, through vLLM's completions endpoint.

It works for every checkpoint vLLM can serve (AWQ, FP8, …), with the kernels that serve it. The
text of each language is tokenized by the checkpoint's tokenizer (no special tokens), capped at
`max_tokens`, and cut into consecutive windows of `window_tokens` (BOS first when the tokenizer
adds one). Each window is one request whose prompt is the token ids:

Request:  POST /v1/completions {"model", "prompt": [ids], "max_tokens": 1, "temperature": 0,
          "prompt_logprobs": 0}
Response: choices[0].prompt_logprobs[i] == {"<id>": {"logprob": …, …}, …} for i ≥ 1, holding the
          prompt token at i (and its top-k, none with 0); entry 0 is null.

Every token of a window but the first is scored from the tokens before it in its window: the
perplexity of language L is exp(Σ −log p / n) over its n scored tokens. Windows do not overlap,
so a token early in a window sees little context: the numbers compare checkpoints of one model
with one window length, not models or window lengths. Perplexity is per token of the model's own
tokenizer, so it does not compare models with different tokenizers either.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.scoring.score import CompletionsClient
from evals.serving.endpoint import Endpoint
from kqe.core.defaults import PARALLEL_TEXT_SETS
from kqe.core.io import sha256_of
from kqe.core.results import Perplexity, WindowNll

log = logging.getLogger(__name__)

WINDOW_TOKENS = 512
MAX_TOKENS = 4096
"""Tokens scored per language at most: bounds the cost, since the server computes log-probs over the
whole vocabulary at every prompt position (gemma-3-270m, 262k vocabulary, 2 busy CPU cores: ≈ 27 s
for 2 × 2048 tokens, 112 s for 2 × 8192)."""


def token_windows(ids: list[int], prefix: list[int], window_tokens: int) -> list[list[int]]:
    """`prefix` (BOS or nothing) + consecutive chunks of `ids`, each window at most `window_tokens`."""
    size = window_tokens - len(prefix)
    if size < 1:
        raise ValueError(f"window of {window_tokens} tokens leaves no room after {len(prefix)} prefix tokens")
    return [prefix + ids[start : start + size] for start in range(0, len(ids), size)]


def prompt_token_logprobs(response: dict[str, Any], ids: list[int]) -> list[float]:
    """Log-prob of each prompt token after the first, from a completions response with prompt_logprobs."""
    try:
        entries = response["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise RuntimeError(f"response has no prompt_logprobs: {str(response)[:300]}") from None
    if entries is None or len(entries) != len(ids):
        got = "none" if entries is None else len(entries)
        raise RuntimeError(f"prompt_logprobs has {got} entries for a prompt of {len(ids)} tokens")
    logprobs = []
    for position in range(1, len(ids)):
        entry = entries[position] or {}
        found = entry.get(str(ids[position]))
        if found is None:
            raise RuntimeError(
                f"prompt_logprobs lacks the prompt token {ids[position]} at position {position}"
            )
        logprobs.append(float(found["logprob"]))
    return logprobs


def perplexity_of(nll: float, tokens: int) -> float:
    """exp(mean negative log-likelihood per token)."""
    return math.exp(nll / tokens)


class PromptLogprobsClient(CompletionsClient):
    """The scorer's retrying client, reading prompt log-probs."""

    def prompt_logprobs(self, ids: list[int]) -> list[float]:
        body = {
            "model": self.served_name,
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0,
            "prompt_logprobs": 0,
        }
        return prompt_token_logprobs(self._call("POST", "/v1/completions", body), ids)


@dataclass(frozen=True)
class Window:
    """One request: a window's token ids, its text set and document."""

    text_set: str
    document: str
    ids: list[int]


def document_windows(
    tokenizer: Any, documents: Mapping[str, Mapping[str, str]], window_tokens: int, max_tokens: int
) -> list[Window]:
    """Every window of every text set, in order. A set's token budget `max_tokens` is split evenly
    over its documents (whole windows each, so every document is represented); the parallel sets
    are scored whole, or their two languages would stop at different content."""
    prefix = _bos_prefix(tokenizer)
    parallel = {name for pair in PARALLEL_TEXT_SETS.values() for name in pair}
    payload = window_tokens - len(prefix)
    found = []
    for text_set, docs in documents.items():
        per_doc = max(1, max_tokens // max(len(docs), 1) // payload) * payload
        for name, text in docs.items():
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            ids = ids if text_set in parallel else ids[:per_doc]
            found += [Window(text_set, name, w) for w in token_windows(ids, prefix, window_tokens)]
    return found


def measure_perplexity(
    endpoint: Endpoint,
    tokenizer_dir: Path,
    documents: Mapping[str, Mapping[str, str]],
    *,
    window_tokens: int = WINDOW_TOKENS,
    max_tokens: int = MAX_TOKENS,
    concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
) -> Perplexity:
    """Perplexity of the served checkpoint on each held-out text set (set → document → text), in
    windows of `window_tokens`, each window's NLL kept for the paired CIs.

    The window shrinks to the served max-model-len minus one when that is shorter (one token is
    generated).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    client = PromptLogprobsClient(endpoint, concurrency)
    try:
        window_tokens = min(window_tokens, client.max_model_len() - 1)
        jobs = document_windows(tokenizer, documents, window_tokens, max_tokens)
        started = time.perf_counter()
        windows: dict[str, list[WindowNll]] = {text_set: [] for text_set in documents}
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            scored = pool.map(lambda job: client.prompt_logprobs(job.ids), jobs)
            for done, (job, logprobs) in enumerate(zip(jobs, scored, strict=True), start=1):
                scored_nll = round(-math.fsum(logprobs), 6)
                window = WindowNll(document=job.document, tokens=len(logprobs), nll=scored_nll)
                windows[job.text_set].append(window)
                if progress is not None:
                    progress(done, len(jobs))
        wall_s = time.perf_counter() - started
    finally:
        client.close()
    windows = {name: found for name, found in windows.items() if found}  # a set too short for a token
    tokens = {name: sum(w.tokens for w in found) for name, found in windows.items()}
    nll = {name: math.fsum(w.nll for w in found) for name, found in windows.items()}
    result = Perplexity(
        checkpoint=endpoint.model(),
        window_tokens=window_tokens,
        tokens=tokens,
        nll={name: round(value, 6) for name, value in nll.items()},
        perplexity={name: round(perplexity_of(nll[name], tokens[name]), 6) for name in windows},
        text_sha256={name: documents_sha(docs) for name, docs in documents.items()},
        windows=windows,
        wall_s=round(wall_s, 2),
    )
    log.info("%s perplexity %s over %s tokens (%.1fs)", endpoint.model(), result.perplexity, tokens, wall_s)
    return result


def documents_sha(documents: Mapping[str, str]) -> str:
    """sha256 of a text set's documents, names included."""
    return sha256_of(json.dumps(documents, sort_keys=True, ensure_ascii=False))


def _bos_prefix(tokenizer: Any) -> list[int]:
    """[BOS] when the tokenizer puts one before text (Llama, Gemma), else nothing (Qwen)."""
    with_specials = tokenizer("a")["input_ids"]
    bos = tokenizer.bos_token_id
    return [bos] if bos is not None and with_specials[:1] == [bos] else []
