"""Korean language fidelity of outputs: foreign runs and code-switching, on hand-made strings for each
script and rule, and on the default model's real greedy answers to ko_rag's questions
(tests/data/gemma3_270m_korean_outputs.jsonl, made by scripts/gemma3_korean_outputs.py)."""

from __future__ import annotations

import json

import pytest

from evals.tasks.ko_rag.korean import hangul_share
from evals.tasks.language_fidelity import code_switches, foreign_runs, unsupplied_runs
from tests.helpers.repo import REPO

OUTPUTS = REPO / "tests" / "data" / "gemma3_270m_korean_outputs.jsonl"
SWITCHING = {
    "fact-057": ["Israel", "Pakistan", "Saudi", "Arabia"],  # lists countries in English after "UAE"
    "fact-064": ["GNU", "Linux"],  # "Debian GNU/Linux": the prompt says only "Debian"
    "fact-066": ["test"],  # the prompt's word is "testing"; "test" is a new English word
}
"""The real outputs that drift into English, and runs of each that the prompt did not supply."""
PROMPT_LATIN_ONLY = ("num-045", "num-057", "fact-067")
"""Real outputs whose only Latin words are the prompt's own: UAE, FAQ, PC."""


def _fixture() -> tuple[dict[str, object], dict[str, dict[str, str]]]:
    rows = [json.loads(line) for line in OUTPUTS.read_text(encoding="utf-8").splitlines()]
    return rows[0], {row["id"]: row for row in rows[1:]}


def test_foreign_runs_split_by_script_and_leave_hangul_digits_and_korean_punctuation_out() -> None:
    text = "GPU는 日本語です ｶﾀｶﾅ ＡＰＴ café 3km 국민·헌법・법률 〃 ㎞ \uf900 \u3400 ラーメン"
    assert foreign_runs(text) == [
        "GPU", "日本語", "です", "ｶﾀｶﾅ", "ＡＰＴ", "café", "km", "\uf900", "\u3400", "ラーメン"
    ]  # fmt: skip
    assert foreign_runs("대한민국의 주권은 국민에게 있다. 1945년, 10%") == []


@pytest.mark.parametrize(
    ("output", "prompt", "switches"),
    [
        ("A", "질문: 주권은 누구에게?\nA. 국민\nB. 정부\n정답:", False),  # the option letter it lists
        ("A", "질문: 주권은 누구에게 있는가?\n답:", True),
        ("apt로 설치합니다", "APT는 무엇의 약자인가?", False),  # case-insensitive
        ("apt-get으로 설치합니다", "APT는 무엇의 약자인가?", True),  # "get" is new
        ("the 답", "theory란 무엇인가?", True),  # whole words, not substrings
        ("ＦＡＱ에 따르면", "데비안 FAQ에 따르면?", False),  # full-width is the same word
        ("國民", "大韓國民의 주권은?", False),  # Han copied out of the prompt's run
        ("國家", "大韓國民의 주권은?", True),
        ("\uf900", "\u8c48는 무엇인가?", False),  # a compatibility ideograph reads as its unified form
        ("ｶﾀｶﾅ", "カタカナ란?", False),  # half-width katakana reads as full-width
        ("です", "답하세요", True),
        ("5km입니다", "거리는 몇 킬로미터인가?", True),  # a unit the prompt did not write
        ("5km입니다", "거리는 몇 km인가?", False),
        ("국민입니다. 1948년.", "주권은 누구에게?", False),
    ],
)
def test_code_switch_rule(output: str, prompt: str, switches: bool) -> None:
    assert code_switches(output, prompt) is switches


def test_fixture_says_what_made_it() -> None:
    header, rows = _fixture()
    assert header["hub_id"] == "google/gemma-3-270m" and header["revision"] and header["date"]
    assert "greedy" in str(header["decoding"]) and len(rows) == 40
    assert all(row["prompt"].endswith(f"질문: {row['question']}\n답:") for row in rows.values())


def test_hangul_share_of_real_outputs() -> None:
    _, rows = _fixture()
    shares = {key: hangul_share(row["output"]) for key, row in rows.items()}
    assert [key for key, share in shares.items() if share is None] == ["fact-007"]  # " 1. 2. 3. …"
    assert all(0.0 <= share <= 1.0 for share in shares.values() if share is not None)
    assert shares["fact-001"] == 1.0  # all-Korean answer
    assert shares["fact-057"] < 0.5  # mostly an English list of countries
    assert 0.8 < shares["num-045"] < 1.0  # "UAE" twice among Korean letters
    lowest = sorted((share, key) for key, share in shares.items() if share is not None)[:3]
    assert {key for _, key in lowest} == set(SWITCHING)  # the outputs that drift have the least Hangul


def test_code_switch_found_where_real_outputs_drift_into_english_and_nowhere_else() -> None:
    _, rows = _fixture()
    found = {key for key, row in rows.items() if code_switches(row["output"], row["prompt"])}
    assert found == set(SWITCHING)
    for key, runs in SWITCHING.items():
        missing = unsupplied_runs(rows[key]["output"], rows[key]["prompt"])
        assert set(runs) <= set(missing), (key, missing)


def test_real_outputs_that_repeat_the_prompts_latin_words_do_not_switch() -> None:
    _, rows = _fixture()
    for key in PROMPT_LATIN_ONLY:
        assert foreign_runs(rows[key]["output"]), key  # Latin is there…
        assert not code_switches(rows[key]["output"], rows[key]["prompt"]), key  # …and the prompt's
