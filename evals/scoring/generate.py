"""Generative scoring through a running `vllm serve`: one greedy short answer per item, scored in Korean.

Requests go through evals/scoring/generation_client.py with `max_tokens` MAX_NEW_TOKENS, greedy, and
the stop string "\\n"; the answer is the text without the stop string (vLLM's default skips special
tokens), kept with its token ids and finish reason.

This is what lm-eval's `generate_until` does with `until: ["\\n"]` and `do_sample: false` (the ko_rag_gen
YAML): the prompt is encoded the way its hf model encodes (BOS added unless present), generation
stops at the tokenizer's EOS or the first newline, special tokens are dropped when decoding, and the
text is cut at the stop string. Answers are scored by evals/tasks/ko_rag/answer_score.py; each item's result
keeps the generated text, F1, contains and Hangul share, with `correct` = exact match for the paired
statistics, and (open-book items) whether the checkpoint answered the question closed-book.
"""

from __future__ import annotations

import logging
from collections.abc import Generator

from evals.scoring.generation_client import Generation, GenerationClient, GenerationSettings
from evals.scoring.job import ScoringJob
from evals.scoring.scoring_pass import results_as_done, score_missing
from evals.tasks.ko_rag.answer_score import score_answer
from evals.tasks.ko_rag.context import ABSTAIN, MAX_NEW_TOKENS
from evals.tasks.ko_rag.metrics import closed_book_flags
from evals.tasks.ko_rag.sweep import TASK
from evals.tasks.ko_rag.task import RagItem
from evals.tasks.language_fidelity import code_switches
from evals.tasks.prompt_tokens import ChoiceTokenizer, prompt_sha
from kqe.core.errors import UserError
from kqe.core.io import read_jsonl, write_atomic
from kqe.core.results import ItemResult, ScoreRun

log = logging.getLogger(__name__)

STOP = ("\n",)
"""Generation stops at the first newline: answers are one short line."""


SETTINGS = GenerationSettings(max_tokens=MAX_NEW_TOKENS, stop=STOP)


def generation_result(item: RagItem, generation: Generation) -> ItemResult:
    """An item's result: `correct` is exact match; gold 0 is the reference answer, pred 0 when it
    matched exactly and -1 otherwise."""
    text = generation.text
    score = score_answer(text, item.answers, item.answerable)
    return ItemResult(
        task=TASK,
        subject=item.subject,
        item_id=item.item_id,
        gold=0,
        pred=0 if score.exact else -1,
        correct=score.exact,
        choice_logprobs=[],
        prompt_sha=prompt_sha(item.prompt),
        generated=text,
        reference=item.answers[0] if item.answerable else ABSTAIN,
        f1=score.f1,
        contains=score.contains,
        hangul_share=score.hangul_share,
        generated_ids=generation.token_ids,
        finish_reason=generation.finish_reason,
        code_switch=code_switches(text, item.prompt),
    )


def score_generation(items: list[RagItem], job: ScoringJob) -> ScoreRun:
    """Generate and score every item through the server, resuming from `job.items_path` (one flushed
    line per finished item, so a crash loses at most the requests in flight); once all are in, each
    open-book item is flagged with whether its question was answered closed-book."""
    shas = {item.item_id: prompt_sha(item.prompt) for item in items}

    def stale(result: ItemResult) -> bool:
        return result.item_id in shas and result.prompt_sha != shas[result.item_id]

    def start(todo: list[str]) -> Generator[ItemResult, None, None]:
        left = set(todo)
        tokenizer = ChoiceTokenizer(job.tokenizer_dir)
        encoded = [(item, tokenizer.tok_encode(item.prompt)) for item in items if item.item_id in left]
        return _generate(encoded, GenerationClient(job.endpoint, job.concurrency), job.concurrency)

    ids = [item.item_id for item in items]
    run = score_missing(ids, stale, start, job, TASK, generated=True)
    flagged = closed_book_flags(read_jsonl(job.items_path, ItemResult))
    write_atomic(job.items_path, "".join(result.model_dump_json() + "\n" for result in flagged))
    return run


def _generate(
    encoded: list[tuple[RagItem, list[int]]], client: GenerationClient, concurrency: int
) -> Generator[ItemResult, None, None]:
    """Yield results as they finish, at most `concurrency` requests in flight."""

    def check_fits(served: int) -> None:
        longest = max(encoded, key=lambda pair: len(pair[1]))
        if len(longest[1]) + MAX_NEW_TOKENS > served:
            raise UserError(
                f"{longest[0].item_id} has {len(longest[1])} prompt tokens, more than the served "
                f"max-model-len {served} allows with {MAX_NEW_TOKENS} answer tokens: prepare ko_rag for it"
            )

    def send(pair: tuple[RagItem, list[int]]) -> list[Generation]:
        return client.generate(pair[1], SETTINGS, pair[0].item_id)

    def results_of(pair: tuple[RagItem, list[int]], answers: list[Generation]) -> list[ItemResult]:
        return [generation_result(pair[0], answers[0])]

    return results_as_done(client, encoded, send, results_of, check_fits, concurrency)
