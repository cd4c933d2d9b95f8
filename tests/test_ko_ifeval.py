"""ko_ifeval's sentence splitter, the shipped prompt set, prompt and response files, and
`kqe ifeval score`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from evals.tasks.ko_ifeval.instructions import INSTRUCTIONS
from evals.tasks.ko_ifeval.prompts import PROMPTS_PATH, load_prompts
from evals.tasks.ko_ifeval.sentences import split_sentences
from kqe.core.errors import UserError
from tests.helpers.cli import assert_one_line_error, run_kqe
from tests.helpers.repo import REPO

ISSUE_IDS = {
    "ko:formal_ending", "ko:polite_ending", "ko:no_latin", "ko:no_hanja", "ko:answer_in_korean",
    "length:sentences", "length:max_chars", "format:numbered_list", "format:paragraphs", "format:json",
    "format:title", "keywords:include", "keywords:exclude", "startend:end_phrase", "startend:quotation",
}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("안녕하세요. 반갑습니다!", ["안녕하세요.", "반갑습니다!"]),
        ("정말요?! 네, 맞아요.", ["정말요?!", "네, 맞아요."]),
        ("그럴까? 아니야.", ["그럴까?", "아니야."]),
        (
            '그는 "좋아요. 가요."라고 말했다. 나도 웃었다.',
            ['그는 "좋아요. 가요."라고 말했다.', "나도 웃었다."],
        ),
        ('"좋아요." 그가 말했다.', ['"좋아요."', "그가 말했다."]),
        ("그녀는 ‘곧 갈게.’라고 했다.", ["그녀는 ‘곧 갈게.’라고 했다."]),
        ("그렇군요... 알겠습니다.", ["그렇군요...", "알겠습니다."]),
        ("그런데… 잘 모르겠다.", ["그런데… 잘 모르겠다."]),
        ("1. 사과입니다.\n2. 배입니다.\n3) 감", ["사과입니다.", "배입니다.", "감"]),
        ("- 하나\n* 둘\n• 셋", ["하나", "둘", "셋"]),
        ("원주율은 3.14입니다. 버전은 v1.2입니다.", ["원주율은 3.14입니다.", "버전은 v1.2입니다."]),
        ("www.go.kr에서 확인하세요.", ["www.go.kr에서 확인하세요."]),
        ("《제목》\n\n본문입니다.", ["본문입니다."]),
        ("---\n무엇일까?", ["무엇일까?"]),
        ('"첫째입니다. 둘째입니다."', ["첫째입니다.", "둘째입니다."]),
        ("마침표 없는 마지막 문장", ["마침표 없는 마지막 문장"]),
        ("", []),
    ],
)
def test_korean_sentences_are_split_at_their_endings(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_the_shipped_set_is_large_varied_and_uses_the_issue_ids() -> None:
    prompts = load_prompts()
    ids = Counter(iid for prompt in prompts for iid in prompt.instruction_id_list)
    assert len(prompts) >= 200
    assert set(ids) == set(INSTRUCTIONS) and set(ids) >= ISSUE_IDS and len(ids) >= 15
    assert all(count >= 10 for count in ids.values()), ids
    assert {len(prompt.instruction_id_list) for prompt in prompts} == {1, 2, 3}
    assert len({prompt.prompt for prompt in prompts}) == len(prompts)


def test_the_shipped_set_never_asks_for_two_speech_levels_or_contradicting_formats() -> None:
    clashes = [
        {"ko:formal_ending", "ko:polite_ending"},
        {"format:json", "ko:no_latin"},  # a ```json fence holds Latin letters
        {"format:json", "startend:quotation"},
        {"startend:quotation", "startend:end_phrase"},
        {"format:numbered_list", "format:paragraphs"},
    ]
    for prompt in load_prompts():
        ids = set(prompt.instruction_id_list)
        assert not any(clash <= ids for clash in clashes), prompt.key


def _write(tmp_path: Path, name: str, *lines: object) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


PROMPT = {"key": 1, "prompt": "인사해 주세요.", "instruction_id_list": ["ko:formal_ending"], "kwargs": [{}]}


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ({**PROMPT, "key": 1.5}, "key must be an integer or a non-empty string"),
        ({**PROMPT, "prompt": ""}, "prompt must be a non-empty string"),
        ({**PROMPT, "instruction_id_list": []}, "instruction_id_list must be a non-empty list"),
        ({**PROMPT, "kwargs": []}, "one object per instruction (1)"),
        ({**PROMPT, "instruction_id_list": ["ko:formal"]}, "unknown instruction id 'ko:formal'"),
        ({k: v for k, v in PROMPT.items() if k != "kwargs"}, "missing kwargs"),
        (
            {**PROMPT, "instruction_id_list": ["ko:no_latin", "ko:no_latin"], "kwargs": [{}, {}]},
            "listed twice",
        ),
        (
            {**PROMPT, "instruction_id_list": ["length:sentences"], "kwargs": [{"num": 2}]},
            "takes kwargs num, relation",
        ),
    ],
)
def test_a_bad_prompt_line_is_one_error_naming_file_and_line(
    tmp_path: Path, line: dict[str, object], needle: str
) -> None:
    path = _write(tmp_path, "prompts.jsonl", {**PROMPT, "key": 0}, line)
    with pytest.raises(UserError) as caught:
        load_prompts(path)
    assert f"{path}:2:" in str(caught.value) and needle in str(caught.value)


def test_ifeval_score_prints_items_and_totals_strict_and_loose(tmp_path: Path) -> None:
    prompts = _write(
        tmp_path,
        "prompts.jsonl",
        PROMPT,
        {"key": "b", "prompt": "목록", "instruction_id_list": ["format:numbered_list", "ko:no_latin"],
         "kwargs": [{"num": 2}, {}]},
        {"key": 3, "prompt": "따옴표", "instruction_id_list": ["startend:quotation"], "kwargs": [{}]},
    )  # fmt: skip
    responses = _write(
        tmp_path,
        "responses.jsonl",
        {"key": 1, "response": "안녕하십니까. 반갑습니다.", "prompt": "ignored"},
        {"key": "b", "response": "Here:\n1. 사과\n2. 배"},
    )
    home = tmp_path / "home"
    result = run_kqe(
        "ifeval", "score", str(responses), "--prompts", str(prompts), "--json", cwd=tmp_path, home=home
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    items = {item["key"]: item for item in body["items"]}
    assert items["1"]["follow_instruction_list"] == [True] and items["1"]["follow_all"] is True
    assert items["b"]["follow_instruction_list"] == [True, False] and items["b"]["follow_all"] is False
    assert items["b"]["loose_follow_instruction_list"] == [True, True]
    totals = body["totals"]
    assert (totals["prompts"], totals["instructions"]) == (2, 3)
    assert (totals["prompt_strict"], totals["prompt_loose"]) == (0.5, 1.0)
    assert totals["instruction_strict"] == pytest.approx(2 / 3)
    assert body["unanswered"] == ["3"]
    text = run_kqe("ifeval", "score", str(responses), "--prompts", str(prompts), cwd=tmp_path, home=home)
    assert text.returncode == 0 and "prompt-level (2): strict 50.0%, loose 100.0%" in text.stdout
    assert "1 of its prompts have no response line" in text.stdout


def test_ifeval_score_defaults_to_the_shipped_prompts(tmp_path: Path) -> None:
    first = json.loads(PROMPTS_PATH.read_text(encoding="utf-8").splitlines()[0])
    responses = _write(tmp_path, "responses.jsonl", {"key": first["key"], "response": "네."})
    result = run_kqe("ifeval", "score", str(responses), "--json", cwd=tmp_path, home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert [item["key"] for item in body["items"]] == [str(first["key"])]
    assert len(body["unanswered"]) == len(load_prompts()) - 1


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        (["not json"], "responses.jsonl:1: not JSON"),
        (['{"key": 1}'], "responses.jsonl:1: field 'response' must be a string"),
        (['{"response": "네"}'], "responses.jsonl:1: key must be"),
        (
            ['{"key": 1000, "response": "네"}', '{"key": "1000", "response": "또"}'],
            "responses.jsonl:2: response id '1000' already used on line 1",
        ),
        (['{"key": 999999, "response": "네"}'], "responses.jsonl:1: no prompt with key '999999'"),
        (["[1, 2]"], "responses.jsonl:1: not a JSON object"),
    ],
)
def test_a_bad_responses_file_is_one_line_naming_file_and_line(
    tmp_path: Path, lines: list[str], needle: str
) -> None:
    path = tmp_path / "responses.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_kqe("ifeval", "score", str(path), cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, needle)


def test_a_missing_or_cp949_file_is_one_line(tmp_path: Path) -> None:
    missing = run_kqe("ifeval", "score", str(tmp_path / "none.jsonl"), cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(missing, "ko_ifeval responses file", "not found")
    path = tmp_path / "cp949.jsonl"
    path.write_bytes('{"key": 1, "response": "안녕"}\n'.encode("cp949"))
    result = run_kqe("ifeval", "score", str(path), cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, "cp949.jsonl:1: not UTF-8")


def test_the_lm_eval_task_scores_each_prompt_with_the_verifiers() -> None:
    from evals.tasks import lm_eval_bridge
    from evals.tasks.lm_eval_generation import GenerationJudge, generation_task

    folder = REPO / "evals" / "tasks" / "ko_ifeval"
    bridged = lm_eval_bridge.resolve("lm-eval:ko_ifeval", folder)
    assert bridged.output_type == "generate_until" and bridged.source == "user"
    assert bridged.metrics[0] == "prompt_level_strict_acc,none"
    task = generation_task(bridged, folder, None, 0)
    prompts = load_prompts()
    assert len(task.items) == len(prompts) and len({item.subject for item in task.items}) == len(prompts) // 3
    by_text = {prompt.prompt: prompt for prompt in prompts}
    formal = next(i for i in task.items if by_text[i.prompt].instruction_id_list == ("ko:formal_ending",))
    judge = GenerationJudge(bridged, folder)
    followed = judge.judge(formal.item_id, ["다음과 같습니다:\n일찍 잡니다. 알람을 멀리 둡니다."])
    assert followed.headline == "prompt_level_strict_acc,none"
    assert followed.metrics[followed.headline] == 1.0
    missed = judge.judge(formal.item_id, ["일찍 자요. 알람을 멀리 둬요."]).metrics
    assert missed["prompt_level_strict_acc,none"] == 0.0 and missed["inst_level_loose_acc,none"] == 0.0
