"""An lm-eval `generate_until` task scored through a running `vllm serve`.

Each item's context (lm-eval's own, evals/tasks/lm_eval_generation.py) is encoded the way lm-eval's `hf`
model encodes it and sent with the task's generation kwargs: its stop strings, `max_gen_toks`, greedy
or (a sampling task) its temperature with the run's seed and `repeats` generations. The answers go
through the task's own filters and metrics at once, and the item's line (raw generation, filtered
answer, every metric, token ids, finish reason, Hangul share and code-switching for Korean prompts) is
appended, so a re-run scores only what is missing. `correct` is the headline metric at 1 (exact match),
what McNemar and the flips compare; every metric value stays in `metrics` for the continuous ones.
"""

from __future__ import annotations

import logging
from collections.abc import Generator

from evals.scoring.generation_client import Generation, GenerationClient, GenerationSettings
from evals.scoring.job import ScoringJob
from evals.scoring.scoring_pass import results_as_done, score_missing
from evals.tasks.ko_rag.korean import hangul_share
from evals.tasks.language_fidelity import code_switches
from evals.tasks.lm_eval_generation import GenerationItem, GenerationJudge
from evals.tasks.prompt_tokens import ChoiceTokenizer, prompt_sha
from kqe.core.errors import UserError
from kqe.core.results import ItemResult, ScoreRun

log = logging.getLogger(__name__)

KOREAN_PROMPT_SHARE = 0.5
"""A prompt whose letters are at least this share Hangul is Korean: its outputs are checked for
Hangul share and code-switching."""


def item_settings(
    item: GenerationItem, prompt_tokens: int, max_model_len: int, seed: int
) -> GenerationSettings:
    """The item's generation kwargs as a request; UserError when its prompt leaves no room to answer."""
    room = max_model_len - prompt_tokens
    if room < 1:
        raise UserError(
            f"{item.item_id} has {prompt_tokens} prompt tokens, as many as the served max-model-len "
            f"{max_model_len}: serve under a profile with a longer max_model_len (--profile)"
        )
    return GenerationSettings(
        max_tokens=min(item.max_gen_toks, room),
        stop=item.until,
        temperature=item.temperature,
        n=item.repeats,
        seed=seed if item.temperature > 0 else None,
    )


def generation_result(item: GenerationItem, answers: list[Generation], judge: GenerationJudge) -> ItemResult:
    """One item's line: gold 0 is the reference, pred 0 when the headline metric is 1, else -1."""
    judgement = judge.judge(item.item_id, [answer.text for answer in answers])
    correct = judgement.metrics[judgement.headline] >= 1.0
    first = answers[0]
    korean = (hangul_share(item.prompt) or 0.0) >= KOREAN_PROMPT_SHARE
    return ItemResult(
        task=item.task,
        subject=item.subject,
        item_id=item.item_id,
        gold=0,
        pred=0 if correct else -1,
        correct=correct,
        choice_logprobs=[],
        prompt_sha=prompt_sha(item.prompt),
        generated=first.text,
        reference=item.reference,
        filtered=judgement.filtered,
        metrics=judgement.metrics,
        generated_ids=first.token_ids,
        finish_reason=first.finish_reason,
        hangul_share=hangul_share(first.text) if korean else None,
        code_switch=code_switches(first.text, item.prompt) if korean else None,
    )


def score_lm_eval_generation(
    items: list[GenerationItem], job: ScoringJob, judge: GenerationJudge, seed: int
) -> ScoreRun:
    """Generate, filter and score every item through the server, resuming from `job.items_path`."""
    shas = {item.item_id: prompt_sha(item.prompt) for item in items}

    def stale(result: ItemResult) -> bool:
        return result.item_id in shas and result.prompt_sha != shas[result.item_id]

    def start(todo: list[str]) -> Generator[ItemResult, None, None]:
        left = set(todo)
        tokenizer = ChoiceTokenizer(job.tokenizer_dir)
        encoded = [(item, tokenizer.tok_encode(item.prompt)) for item in items if item.item_id in left]
        client = GenerationClient(job.endpoint, job.concurrency)
        return _generate(encoded, client, judge, job.concurrency, seed)

    return score_missing([item.item_id for item in items], stale, start, job, items[0].task, generated=True)


def _generate(
    encoded: list[tuple[GenerationItem, list[int]]],
    client: GenerationClient,
    judge: GenerationJudge,
    concurrency: int,
    seed: int,
) -> Generator[ItemResult, None, None]:
    """Yield results as they finish, at most `concurrency` requests in flight."""
    served: list[int] = []
    clamped: list[str] = []

    def check_fits(max_model_len: int) -> None:
        served.append(max_model_len)
        for item, ids in encoded:
            settings = item_settings(item, len(ids), max_model_len, seed)
            if settings.max_tokens < item.max_gen_toks:
                clamped.append(item.item_id)
        if clamped:
            task = encoded[0][0].task
            log.warning(
                "%d items of %s: max_gen_toks cut to what the served max-model-len %d leaves (first: %s)",
                len(clamped),
                task,
                max_model_len,
                clamped[0],
            )

    def send(pair: tuple[GenerationItem, list[int]]) -> list[Generation]:
        item, ids = pair
        return client.generate(ids, item_settings(item, len(ids), served[0], seed), item.item_id)

    def results_of(pair: tuple[GenerationItem, list[int]], answers: list[Generation]) -> list[ItemResult]:
        return [generation_result(pair[0], answers, judge)]

    return results_as_done(client, encoded, send, results_of, check_fits, concurrency)
