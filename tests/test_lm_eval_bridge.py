"""The lm-eval bridge without a server: items from lm-eval's own task objects, the continuation
scorer's request and reading, acc_norm, `kqe tasks`, and bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.scoring import continuation
from evals.scoring.score import item_result
from evals.tasks import lm_eval_bridge
from evals.tasks.prompt_tokens import ChoiceTokenizer
from evals.tasks.prompts import PromptItem, check_tasks
from kqe.core.errors import UserError
from tests.helpers.cli import run_kqe
from tests.helpers.lm_eval_generation_tasks import write_generation_tasks
from tests.helpers.lm_eval_tasks import copa_rows, letter_rows, write_user_tasks


@pytest.fixture(scope="module")
def user_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_user_tasks(tmp_path_factory.mktemp("user-tasks"))


def _items(task: str, folder: Path, limit: int | None = None) -> list[PromptItem]:
    include = lm_eval_bridge.check_include_path(str(folder))
    return lm_eval_bridge.load_prompts(lm_eval_bridge.resolve(task, include), include, limit, 0)


def test_copa_items_are_lm_eval_kobest_prompts_with_gold_and_subjects(user_tasks: Path) -> None:
    bridged = lm_eval_bridge.resolve("lm-eval:kqe_copa_local", user_tasks)
    assert (bridged.source, bridged.local, bridged.leaves) == ("user", True, ("kqe_copa_local",))
    items, rows = _items("lm-eval:kqe_copa_local", user_tasks), copa_rows()
    assert len(items) == len(rows)
    for item, row in zip(items, rows, strict=True):
        connector = {"원인": " 왜냐하면", "결과": " 그래서"}[str(row["question"])]
        assert item.prompt == f"{row['premise']} {connector}"  # copa_doc_to_text: its two spaces too
        assert item.continuations == (f" {row['alternative_1']}", f" {row['alternative_2']}")
        assert item.gold == row["label"]  # doc_to_target is the right choice's text: read as its index
        assert item.subject == row["subject"]  # metadata kqe_subject_field
        assert item.choice_chars == (len(str(row["alternative_1"])), len(str(row["alternative_2"])))
    assert len({item.item_id for item in items}) == len(items)


def test_a_limit_samples_across_subjects_the_same_each_time(user_tasks: Path) -> None:
    first = _items("lm-eval:kqe_copa_local", user_tasks, limit=6)
    assert len(first) == 6 and {item.subject for item in first} == {"날씨", "생활", "학교"}
    assert first == _items("lm-eval:kqe_copa_local", user_tasks, limit=6)


def test_letter_task_goes_the_one_token_way_and_copa_the_continuation_way(
    user_tasks: Path, tiny_model_dir: Path
) -> None:
    letters = _items("lm-eval:kqe_letters_local", user_tasks)
    assert [item.gold for item in letters] == [row["answer"] for row in letter_rows()]
    assert continuation.one_token_choices(letters, tiny_model_dir)
    assert not continuation.one_token_choices(_items("lm-eval:kqe_copa_local", user_tasks), tiny_model_dir)


def test_continuation_request_and_sum_of_its_token_logprobs(user_tasks: Path, tiny_model_dir: Path) -> None:
    item = _items("lm-eval:kqe_copa_local", user_tasks)[0]
    encoded = continuation.encode(ChoiceTokenizer(tiny_model_dir), item)
    request = continuation.continuation_request("tiny", encoded)
    assert request["prompt_logprobs"] == 0 and request["max_tokens"] == 1
    assert request["prompt"] == [encoded.context_ids + ids for ids in encoded.continuation_ids]
    assert all(len(ids) > 1 for ids in encoded.continuation_ids)

    def answer(index: int, ids: list[int]) -> dict[str, Any]:  # each token's log-prob: -(its position)/10
        entries = [None] + [{str(token): {"logprob": -p / 10}} for p, token in enumerate(ids) if p]
        return {"index": index, "prompt_logprobs": entries}

    wholes = request["prompt"]
    response = {"choices": [answer(1, wholes[1]), answer(0, wholes[0])]}  # any order: matched by index
    sums = continuation.continuation_logprobs(response, encoded)
    for whole, ids, total in zip(wholes, encoded.continuation_ids, sums, strict=True):
        positions = range(len(whole) - len(ids), len(whole))  # the continuation's own positions only
        assert total == pytest.approx(sum(-p / 10 for p in positions))
    with pytest.raises(RuntimeError, match="came back"):
        continuation.continuation_logprobs({"choices": [answer(0, wholes[0])]}, encoded)


def test_acc_norm_divides_by_the_choice_text_length() -> None:
    item = PromptItem("lm-eval:t", "s", "t/0", "ctx", (" ab", " abcdef"), gold=1, choice_chars=(2, 6))
    result = item_result(item, [-4.0, -6.0])  # sums favour choice 0, per character choice 1
    assert (result.pred, result.pred_norm, result.correct) == (0, 1, False)
    letters = PromptItem("kmmlu", "s", "k/0", "ctx", (" A", " B"), gold=0)
    assert item_result(letters, [-1.0, -2.0]).pred_norm is None


def test_registry_and_lm_eval_names_share_one_check() -> None:
    check_tasks(["kmmlu", "lm-eval:kobest_copa"])
    with pytest.raises(UserError, match="lmeval"):
        check_tasks(["lm-eval:kobest_copa", "lm-eval:kobest_wic"])
    with pytest.raises(UserError, match="lm-eval:<task>"):
        check_tasks(["kobest_copa"])


def test_kqe_tasks_lists_registry_lm_eval_and_user_tasks(user_tasks: Path, tmp_path: Path) -> None:
    result = run_kqe("tasks", "--include-path", str(user_tasks), "--json", cwd=tmp_path, home=tmp_path / "h")
    assert result.returncode == 0, result.stderr
    listed = {row["name"]: row for row in map(json.loads, result.stdout.splitlines())}
    assert listed["kmmlu"]["source"] == "registry" and listed["kmmlu"]["english"] == "mmlu"
    copa = listed["lm-eval:kqe_copa_local"]
    assert (copa["source"], copa["items"], copa["subjects"], copa["availability"]) == (
        "user",
        24,
        3,
        "offline",
    )
    stock = listed["lm-eval:kobest_copa"]
    assert (stock["source"], stock["licence"]) == ("lm-eval", "CC-BY-SA-4.0")
    # lm-eval reads the hub's main branch, not the revision the dataset registry would pin (none confirmed)
    assert stock["availability"] == "online: skt/kobest_v1 (lm-eval reads main; revision None: unconfirmed)"
    assert listed["lm-eval:haerae"]["subjects"] == 5
    medmcqa = listed["lm-eval:kormedmcqa"]  # generation: listed with its output type and metric
    assert (medmcqa["output_type"], medmcqa["metric"], medmcqa["subjects"]) == (
        "generate_until",
        "exact_match,extract_answer",
        4,
    )
    assert listed["lm-eval:hrm8k"]["output_type"] == "generate_until"
    assert copa["output_type"] == "multiple_choice" and copa["metric"] == "acc,none, acc_norm,none"


def test_kqe_tasks_lists_a_users_generation_yaml_with_its_item_count(tmp_path: Path) -> None:
    folder = write_generation_tasks(tmp_path / "gen")
    result = run_kqe("tasks", "--include-path", str(folder), cwd=tmp_path, home=tmp_path / "h")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("lm-eval:kqe_gen_short_local ")]
    assert "16 items, 3 subjects" in line and "offline" in line
    assert line.endswith(
        "generation, scored by exact_match,raw, chrf,raw, exact_match,first-word, chrf,first-word"
    )
