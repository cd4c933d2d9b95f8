"""ko_rag v3 scoring (issue 49) against a table of cases, each expected right or wrong
(`tests/data/ko_rag/scoring_cases.jsonl`): real answers of the committed default run's checkpoints
(results/gemma3-270m, read against their golds) and hand-written ones for each scoring gap the issue
names (numerals, multipliers, short-year dates, counters, contradictions, package names, negations,
abstentions that name their subject); and the numeral parser never raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evals.tasks.ko_rag.answer_score import score_answer
from evals.tasks.ko_rag.numerals import numbers_as_digits, value_of

CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "ko_rag" / "scoring_cases.jsonl")
    .read_text("utf-8")
    .splitlines()
    if line.strip()
]


def test_the_table_holds_enough_real_and_hand_written_cases() -> None:
    real = [case for case in CASES if case["source"] != "hand"]
    assert len(CASES) >= 100 and len(real) >= 50 and len(CASES) - len(real) >= 50
    assert {case["right"] for case in real} == {True, False}


@pytest.mark.parametrize("case", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_each_case_scores_as_read(case: dict[str, object]) -> None:
    answer, golds = str(case["answer"]), [str(gold) for gold in case["golds"]]  # type: ignore[attr-defined]
    score = score_answer(answer, golds, answerable=True)
    assert score.contains is case["right"], (answer, golds)
    if not case["right"] and case["source"] == "hand":
        assert not score.exact  # a wrong hand-written answer is never an exact match


@pytest.mark.parametrize(
    ("text", "value"),
    [("3억5천만", 350_000_000), ("350백만", 350_000_000), ("십오", 15), ("1.5억", 150_000_000), ("천", 1000)],
)
def test_numerals_have_their_values(text: str, value: int) -> None:
    assert value_of(text) == value


@pytest.mark.parametrize("text", ["이삼", "천백천", "억", "만만"])
def test_what_is_no_numeral_has_no_value(text: str) -> None:
    assert value_of(text) is None


NUMERAL_PIECES = [
    *list("일이삼사오육칠팔구십백천만억조 .,0123456789"),
    "서른",
    "두",
    "번",
    "원",
    "년",
    "약",
    "정도",
    "제",
]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(NUMERAL_PIECES), max_size=12).map("".join))
def test_the_numeral_parser_never_raises(text: str) -> None:
    value_of(text)
    numbers_as_digits(text)
    score = score_answer(text, [text or "0"], answerable=True)
    assert 0.0 <= score.f1 <= 1.0
