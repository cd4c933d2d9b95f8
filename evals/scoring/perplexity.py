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

import logging
import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evals.scoring.score import CompletionsClient
from evals.serving.endpoint import Endpoint
from kqe.core.io import sha256_of
from kqe.core.results import Perplexity

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


def measure_perplexity(
    endpoint: Endpoint,
    tokenizer_dir: Path,
    texts: Mapping[str, str],
    *,
    window_tokens: int = WINDOW_TOKENS,
    max_tokens: int = MAX_TOKENS,
    concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
) -> Perplexity:
    """Perplexity of the served checkpoint on each text (language → text), windows of `window_tokens`.

    The window shrinks to the served max-model-len minus one when that is shorter (one token is
    generated).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    prefix = _bos_prefix(tokenizer)
    client = PromptLogprobsClient(endpoint, concurrency)
    try:
        window_tokens = min(window_tokens, client.max_model_len() - 1)
        windows = {
            lang: token_windows(
                tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens], prefix, window_tokens
            )
            for lang, text in texts.items()
        }
        jobs = [(lang, ids) for lang, lang_windows in windows.items() for ids in lang_windows]
        started = time.perf_counter()
        nll = dict.fromkeys(texts, 0.0)
        tokens = dict.fromkeys(texts, 0)
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for done, ((lang, _), logprobs) in enumerate(
                zip(jobs, pool.map(lambda job: client.prompt_logprobs(job[1]), jobs), strict=True), start=1
            ):
                nll[lang] -= math.fsum(logprobs)
                tokens[lang] += len(logprobs)
                if progress is not None:
                    progress(done, len(jobs))
        wall_s = time.perf_counter() - started
    finally:
        client.close()
    result = Perplexity(
        checkpoint=endpoint.model(),
        window_tokens=window_tokens,
        tokens=tokens,
        nll={lang: round(value, 6) for lang, value in nll.items()},
        perplexity={lang: round(perplexity_of(nll[lang], tokens[lang]), 6) for lang in texts},
        text_sha256={lang: sha256_of(text) for lang, text in texts.items()},
        wall_s=round(wall_s, 2),
    )
    log.info("%s perplexity %s over %s tokens (%.1fs)", endpoint.model(), result.perplexity, tokens, wall_s)
    return result


def _bos_prefix(tokenizer: Any) -> list[int]:
    """[BOS] when the tokenizer puts one before text (Llama, Gemma), else nothing (Qwen)."""
    with_specials = tokenizer("a")["input_ids"]
    bos = tokenizer.bos_token_id
    return [bos] if bos is not None and with_specials[:1] == [bos] else []


def leaderboard_cells(result: Perplexity | None, base: Perplexity | None) -> dict[str, float | None]:
    """The `# perplexity columns` of a leaderboard row; Δ% only against another checkpoint (the base)
    scored on the same text with the same window."""
    cells: dict[str, float | None] = {}
    for lang in ("ko", "en"):
        value = result.perplexity.get(lang) if result is not None else None
        delta = None
        if (
            value is not None
            and result is not None
            and base is not None
            and base.checkpoint != result.checkpoint
            and base.window_tokens == result.window_tokens
            and lang in base.perplexity
            and base.text_sha256.get(lang) == result.text_sha256.get(lang)
        ):
            delta = round(100 * (value / base.perplexity[lang] - 1), 3)
        cells[f"ppl_{lang}"] = value
        cells[f"ppl_{lang}_delta_pct"] = delta
    return cells
