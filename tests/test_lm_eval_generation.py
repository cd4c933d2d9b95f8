"""lm-eval `generate_until` tasks: resolved, their requests as lm-eval builds them, and their answers
judged per item exactly as lm-eval's own evaluator judges them (same filtered answer, same metrics),
checked against `lm_eval.simple_evaluate` on the same canned generations."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from evals.tasks import lm_eval_bridge
from evals.tasks.lm_eval_generation import GenerationJudge, generation_task
from kqe.core.errors import UserError
from tests.helpers.lm_eval_generation_tasks import write_generation_tasks
from tests.helpers.repo import REPO

TASKS = ("kqe_gen_medmcqa_local", "kqe_gen_short_local")
CANNED = ("정답: B", "C. 모르겠다", "정답은 A 입니다", "길이 젖었다.", "무릎이 hello 아팠다", "", "E", "흠")
"""Generations of every shape the filters meet: a cascade hit, a letter with a dot, none, raw text."""


def canned(prompt: str) -> str:
    """The same generation for the same prompt, different across prompts."""
    return CANNED[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(CANNED)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_generation_tasks(tmp_path_factory.mktemp("gen-tasks"))


def _lm_eval_samples(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """lm-eval's own evaluator on the canned generations, with its per-sample log."""
    import lm_eval
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    class CannedLM(LM):
        def generate_until(self, requests: list[Any]) -> list[str]:
            return [canned(request.args[0]) for request in requests]

        def loglikelihood(self, requests: list[Any]) -> list[Any]:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: list[Any]) -> list[Any]:
            raise NotImplementedError

    result = lm_eval.simple_evaluate(
        model=CannedLM(),
        tasks=list(TASKS),
        task_manager=TaskManager(include_path=str(folder)),
        log_samples=True,
    )
    assert result is not None
    return dict(result["samples"])


def test_judge_equals_lm_evals_evaluator_per_item(folder: Path) -> None:
    samples = _lm_eval_samples(folder)
    for task in TASKS:
        bridged = lm_eval_bridge.resolve(f"lm-eval:{task}", folder)
        assert bridged.output_type == "generate_until"
        items = {item.item_id: item for item in generation_task(bridged, folder, None, 0).items}
        judge = GenerationJudge(bridged, folder)
        filters_seen = {sample["filter"] for sample in samples[task]}
        assert len(items) * len(filters_seen) == len(samples[task]) > 10
        for sample in samples[task]:
            item = items[f"{task}/{sample['doc_id']}"]
            assert sample["arguments"][0][0] == item.prompt  # byte for byte
            assert sample["target"] == item.reference
            judgement = judge.judge(item.item_id, [canned(item.prompt)])
            key = f",{sample['filter']}"
            ours = {name: value for name, value in judgement.metrics.items() if name.endswith(key)}
            for name, value in ours.items():
                metric = name.removesuffix(key)
                theirs = sample[metric]
                expected = theirs if isinstance(theirs, float | int) else _sentence(metric, theirs)
                assert value == pytest.approx(expected), (item.item_id, name)
            if sample["filter"] == judgement.headline.split(",")[1]:
                assert judgement.filtered == sample["filtered_resps"][0]
        assert {name.split(",")[1] for name in judgement.metrics} == filters_seen


def _sentence(metric: str, passthrough: Any) -> float:
    """lm-eval's corpus aggregation over one item's (reference, prediction)."""
    from lm_eval.api.registry import get_aggregation

    return float(get_aggregation(metric)([passthrough]))


def test_requests_carry_the_tasks_generation_kwargs(folder: Path) -> None:
    medmcqa = generation_task(lm_eval_bridge.resolve("lm-eval:kqe_gen_medmcqa_local", folder), folder, 5, 3)
    assert len(medmcqa.items) == 5 and len({item.subject for item in medmcqa.items}) == 3
    item = medmcqa.items[0]
    assert item.until == ("Q:", "</s>", ".", "\n\n")
    assert (item.max_gen_toks, item.temperature, item.repeats) == (12, 0.0, 1)
    assert item.prompt.endswith("E. " + item.prompt.split("E. ")[1].split("\n")[0] + "\n정답：")
    again = generation_task(lm_eval_bridge.resolve("lm-eval:kqe_gen_medmcqa_local", folder), folder, 5, 3)
    assert again.items == medmcqa.items


def _write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.yaml").write_text(text, encoding="utf-8")


def test_tasks_not_scorable_are_refused_in_one_line(tmp_path: Path) -> None:
    folder = write_generation_tasks(tmp_path / "tasks")
    data = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'short.json'}\n"
    common = f"{data}test_split: test\ndoc_to_text: '{{{{question}}}}'\ndoc_to_target: answer\n"
    _write(folder, "kqe_code", f"task: kqe_code\n{common}output_type: generate_until\nunsafe_code: true\n")
    _write(
        folder,
        "kqe_judged",
        f"task: kqe_judged\n{common}output_type: generate_until\nmetric_list:\n  - metric: llm_judge_score\n",
    )
    _write(folder, "kqe_rolling", f"task: kqe_rolling\n{common}output_type: loglikelihood_rolling\n")
    letters = "output_type: multiple_choice\ndoc_to_choice: ['A', 'B']\n"
    _write(folder, "kqe_choice", f"task: kqe_choice\n{common.replace('answer', '0')}{letters}")
    _write(folder, "kqe_mixed", "group: kqe_mixed\ntask:\n  - kqe_choice\n  - kqe_gen_short_local\n")
    lm_eval_bridge.task_manager.cache_clear()
    expected = {
        "kqe_code": "runs generated code",
        "kqe_judged": "needs code execution or an external judge",
        "kqe_rolling": "is a loglikelihood_rolling task",
        "kqe_mixed": "mix multiple_choice and generate_until",
    }
    for task, words in expected.items():
        with pytest.raises(UserError, match=words) as caught:
            lm_eval_bridge.resolve(f"lm-eval:{task}", folder)
        assert "\n" not in str(caught.value)
    assert lm_eval_bridge.resolve("lm-eval:kqe_choice", folder).output_type == "multiple_choice"


def test_the_shipped_offline_generation_task_reads_kmmlu_hard_and_extracts_letters() -> None:
    folder = REPO / "evals" / "tasks" / "generation"
    bridged = lm_eval_bridge.resolve("lm-eval:kqe_kmmlu_hard_gen", folder)
    assert (bridged.source, bridged.local, bridged.metrics) == ("user", True, ("exact_match,extract_answer",))
    task = generation_task(bridged, folder, None, 0)
    assert len(task.items) == 225 and len({item.subject for item in task.items}) == 45
    assert {item.reference for item in task.items} == set("ABCD")
    item = task.items[0]
    judge = GenerationJudge(bridged, folder)
    answers = {
        "정답: " + item.reference: 1.0,
        f" {item.reference}. 입니다": 1.0,
        "정답은 E": 0.0,
        "모르겠다": 0.0,
    }
    for answer, expected in answers.items():
        assert judge.judge(item.item_id, [answer]).metrics["exact_match,extract_answer"] == expected, answer


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_chat_templated_prompts_are_what_lm_eval_apply_chat_template_builds(
    folder: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    import lm_eval
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager
    from transformers import AutoTokenizer

    bridged = lm_eval_bridge.resolve("lm-eval:kqe_gen_short_local", folder)
    with pytest.raises(UserError, match="has no chat template: drop --apply-chat-template"):
        generation_task(bridged, folder, None, 0, tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(tmp_path / "chat"))
    items = {
        item.item_id: item for item in generation_task(bridged, folder, None, 0, tmp_path / "chat").items
    }

    class ChatLM(LM):
        tokenizer_name = "chat"

        def apply_chat_template(
            self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
        ) -> str:
            return str(
                tokenizer.apply_chat_template(
                    chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
                )
            )

        def generate_until(self, requests: list[Any]) -> list[str]:
            return ["" for _ in requests]

        def loglikelihood(self, requests: list[Any]) -> list[Any]:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: list[Any]) -> list[Any]:
            raise NotImplementedError

    result = lm_eval.simple_evaluate(
        model=ChatLM(),
        tasks=["kqe_gen_short_local"],
        task_manager=TaskManager(include_path=str(folder)),
        log_samples=True,
        apply_chat_template=True,
    )
    assert result is not None
    for sample in result["samples"]["kqe_gen_short_local"]:
        prompt = items[f"kqe_gen_short_local/{sample['doc_id']}"].prompt
        assert prompt == sample["arguments"][0][0]
        assert prompt.startswith("<|user|>질문: ") and prompt.endswith("<|assistant|>")
