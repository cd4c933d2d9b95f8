"""Multiple-choice scoring of multi-token continuations through a running `vllm serve`.

A choice whose continuation is more than one token after the context (KoBEST COPA's sentences,
Belebele's full-text answers, any lm-eval `multiple_choice` task) cannot be read from one next-token
distribution. Its log-likelihood is lm-eval's: the sum of the log-probabilities of its continuation
tokens, each given everything before it, read from vLLM's prompt log-probs of context + continuation.

Request:  POST /v1/completions {"model", "prompt": [[context + continuation ids] per choice],
          "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}: one request per item.
Response: choices[i].prompt_logprobs[p] == {"<id>": {"logprob": …}} for every position p ≥ 1 of
          prompt i, holding its own token (the raw model distribution, `--logprobs-mode raw_logprobs`).

Tokenization is the letter scorer's (`ChoiceTokenizer.encode_pairs`, lm-eval's `_encode_pair`).
`acc` takes the argmax of the sums, `acc_norm` of the sums per character of each choice's text, as
lm-eval's `ConfigurableTask.process_results` does (first index on ties, as `np.argmax`).
vLLM 0.32 skips reading its prefix cache for requests that ask prompt log-probs
(`SamplingParams.skip_reading_prefix_cache`), so choices sharing a context do not share its prefill.
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.scoring import score
from evals.scoring.job import ScoringJob
from evals.scoring.perplexity import prompt_token_logprobs
from evals.scoring.scoring_pass import results_as_done, score_missing
from evals.tasks import prompt_tokens
from evals.tasks.prompts import PromptItem
from kqe.core.errors import UserError
from kqe.core.results import ItemResult, ScoreRun


@dataclass(frozen=True)
class EncodedChoices:
    """An item as token ids: the shared context and each choice's continuation."""

    item: PromptItem
    context_ids: list[int]
    continuation_ids: list[list[int]]


def encode(tokenizer: prompt_tokens.ChoiceTokenizer, item: PromptItem) -> EncodedChoices:
    """Context and continuation ids as lm-eval's hf model encodes them; UserError for an empty one."""
    context_ids, continuation_ids = tokenizer.encode_pairs(item.prompt, item.continuations)
    for continuation, ids in zip(item.continuations, continuation_ids, strict=True):
        if not ids:
            raise UserError(f"{item.item_id}: choice {continuation!r} encodes to no token after its context")
    return EncodedChoices(item, context_ids, continuation_ids)


def one_token_choices(prompts: list[PromptItem], tokenizer_dir: Path) -> bool:
    """Whether every choice of every item is one token after its context (the letter scorer's case)."""
    tokenizer = prompt_tokens.choice_tokenizer(tokenizer_dir.resolve())
    return all(
        len(ids) == 1
        for item in prompts
        for ids in tokenizer.encode_pairs(item.prompt, item.continuations)[1]
    )


def continuation_request(served_name: str, encoded: EncodedChoices) -> dict[str, Any]:
    """One request reading every choice's continuation log-probs of one item."""
    return {
        "model": served_name,
        "prompt": [encoded.context_ids + ids for ids in encoded.continuation_ids],
        "max_tokens": 1,
        "temperature": 0,
        "prompt_logprobs": 0,
    }


def continuation_logprobs(response: dict[str, Any], encoded: EncodedChoices) -> list[float]:
    """The summed continuation log-prob of each choice; every prompt must have come back whole."""
    try:
        answers = {int(choice["index"]): choice for choice in response["choices"]}
    except (KeyError, TypeError, ValueError):
        raise RuntimeError(
            f"{encoded.item.item_id}: response has no choices: {str(response)[:300]}"
        ) from None
    if sorted(answers) != list(range(len(encoded.continuation_ids))):
        raise RuntimeError(f"{encoded.item.item_id}: answers for prompts {sorted(answers)} came back")
    sums = []
    for index, ids in enumerate(encoded.continuation_ids):
        whole = encoded.context_ids + ids
        token_logprobs = prompt_token_logprobs({"choices": [answers[index]]}, whole)
        sums.append(sum(token_logprobs[-len(ids) :]))
    return sums


class ContinuationClient(score.CompletionsClient):
    """The scorer's retrying client, reading continuation log-likelihoods."""

    def read_continuations(self, encoded: EncodedChoices) -> list[float]:
        body = continuation_request(self.served_name, encoded)
        return continuation_logprobs(self._call("POST", "/v1/completions", body), encoded)


def _check_lengths(encoded: list[EncodedChoices], max_model_len: int) -> None:
    def tokens(item: EncodedChoices) -> int:
        return len(item.context_ids) + max(len(ids) for ids in item.continuation_ids)

    longest = max(encoded, key=tokens)
    if tokens(longest) + 1 > max_model_len:
        raise UserError(
            f"{longest.item.item_id} has {tokens(longest)} prompt tokens with its longest choice, more than "
            f"the served max-model-len {max_model_len} allows: raise max_model_len in the profile"
        )


def score_choices(prompts: list[PromptItem], job: ScoringJob) -> ScoreRun:
    """Score one multiple-choice task: one-token choices by the letter scorer's next-token read, any
    other task by its continuations' prompt log-probs; resumable from `job.items_path` either way."""
    if one_token_choices(prompts, job.tokenizer_dir):
        return score.score_task(prompts, job)
    tasks = {item.task for item in prompts}
    if len(tasks) != 1:
        raise ValueError(
            f"score_choices needs the prompts of exactly one task, got {sorted(tasks) or 'none'}"
        )
    current = {item.item_id: item for item in prompts}

    def stale(result: ItemResult) -> bool:
        item = current.get(result.item_id)
        return item is not None and (
            result.prompt_sha != prompt_tokens.prompt_sha(item.prompt) or result.gold != item.gold
        )

    def start(todo: list[str]) -> Generator[ItemResult, None, None]:
        left = set(todo)
        tokenizer = prompt_tokens.choice_tokenizer(job.tokenizer_dir.resolve())
        encoded = [encode(tokenizer, item) for item in prompts if item.item_id in left]
        client = ContinuationClient(job.endpoint, job.concurrency)
        check_fits = functools.partial(_check_lengths, encoded)

        def results_of(item: EncodedChoices, logprobs: list[float]) -> list[ItemResult]:
            return [score.item_result(item.item, logprobs)]

        return results_as_done(
            client, encoded, client.read_continuations, results_of, check_fits, job.concurrency
        )

    ids = [item.item_id for item in prompts]
    return score_missing(ids, stale, start, job, tasks.pop())
