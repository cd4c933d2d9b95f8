"""Generation through a running `vllm serve`: one completions request per item, its prompt as token ids.

Request:  POST /v1/completions {"model", "prompt": [token ids], "max_tokens", "temperature", "stop",
          "n", "seed" (sampling only), "return_token_ids": true}
Response: choices[i].text (cut before the stop string, special tokens skipped), choices[i].token_ids (the
          tokens generated), choices[i].finish_reason (`stop` or `length`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evals.scoring.score import CompletionsClient


@dataclass(frozen=True)
class Generation:
    """One generated answer as the server returned it."""

    text: str
    """The text, without the stop string that ended it."""
    token_ids: list[int]
    """The tokens generated."""
    finish_reason: str | None
    """`stop` (a stop string or EOS) or `length` (max tokens)."""


@dataclass(frozen=True)
class GenerationSettings:
    """How one item is generated."""

    max_tokens: int
    """Most tokens generated."""
    stop: tuple[str, ...]
    """Stop strings."""
    temperature: float = 0.0
    """0: greedy."""
    n: int = 1
    """Generations of the same prompt (sampling tasks' repeats)."""
    seed: int | None = None
    """Sampling seed, so a sampled run repeats; None for greedy."""


def generation_request(
    served_name: str, prompt_ids: list[int], settings: GenerationSettings
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": served_name,
        "prompt": prompt_ids,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "stop": list(settings.stop),
        "n": settings.n,
        "return_token_ids": True,
    }
    if settings.seed is not None:
        body["seed"] = settings.seed
    return body


def generations(response: dict[str, Any], item_id: str, n: int) -> list[Generation]:
    """The `n` generations of a response, in choice order; RuntimeError when it is not one."""
    try:
        choices: Sequence[dict[str, Any]] = sorted(response["choices"], key=lambda choice: choice["index"])
        found = [_generation(choice) for choice in choices]
    except (KeyError, TypeError, ValueError):
        raise RuntimeError(f"{item_id}: response has no generated text: {str(response)[:500]}") from None
    if len(found) != n:
        raise RuntimeError(f"{item_id}: asked for {n} generations, the server returned {len(found)}")
    return found


def _generation(choice: dict[str, Any]) -> Generation:
    text, ids = choice["text"], choice.get("token_ids") or []
    if not isinstance(text, str) or not all(isinstance(token, int) for token in ids):
        raise ValueError("not text and token ids")
    return Generation(text, list(ids), choice.get("finish_reason"))


class GenerationClient(CompletionsClient):
    """The completions client, asking for generated text instead of choice log-probs."""

    def generate(self, prompt_ids: list[int], settings: GenerationSettings, item_id: str) -> list[Generation]:
        body = generation_request(self.served_name, prompt_ids, settings)
        return generations(self._call("POST", "/v1/completions", body), item_id, settings.n)
