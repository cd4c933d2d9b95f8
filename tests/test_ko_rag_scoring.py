"""ko_rag's answer scoring: numbers, units, dates and options exact; list answers in any order;
abstention detected in its common Korean phrasings and not in sentences that merely contain them;
answerable totals apart from abstention precision and recall."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evals.reporting.row_cells import rag_cells
from evals.statistics import paired_means, rag_findings
from evals.tasks.ko_rag import answer_score
from evals.tasks.ko_rag.abstention import abstains
from evals.tasks.ko_rag.context import ABSTAIN
from evals.tasks.ko_rag.normalise import normalise
from tests.helpers.cli import run_kqe
from tests.helpers.ko_rag_data import rag_item


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [  # the examples: each scored 0.50-0.89 by the morpheme bag
        ("5년", "4년"),
        ("3분의 1 이상", "3분의 2 이상"),
        ("만 6세 이하", "만 8세 이하"),
        ("dpkg --remove foo", "dpkg --purge foo"),
        ("제63조제2항제4호", "제71조제2항제4호"),
        ("제71조제2항제3호", "제71조제2항제4호"),
        ("5개월", "5년"),  # the right digit with the wrong unit
        ("i486", "i386"),
        ("2010. 11. 13.", "2010년 11월 12일"),
        ("1,001원", "1000원"),
        ("대통령의 임기는 6년이다", "5년"),
    ],
)
def test_a_wrong_digit_unit_or_option_scores_zero(prediction: str, gold: str) -> None:
    score = answer_score.score_answer(prediction, [gold], answerable=True)
    assert (score.exact, score.f1, score.char_f1) == (False, 0.0, 0.0)
    assert answer_score.score_answer(gold, [gold], answerable=True).exact  # the gold itself is EM 1


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("2010년 11월 12일", "2010. 11. 12."),
        ("2010. 11. 12.", "2010년 11월 12일"),
        ("2010-11-12", "2010. 11. 12."),
        ("2010년 11월", "2010. 11."),
        ("두 번", "2번"),
        ("세 명", "3명"),
        ("삼분의 이", "3분의 2"),
        ("50퍼센트", "50%"),
        ("1,000원", "1000원"),
        ("제 71조", "제71조"),
        ("10명", "10인"),
        ("만 8살 이하", "만 8세 이하"),
        ("5년입니다.", "5년"),
        ("대법원장, 국회의장", "국회의장과 대법원장"),
        ("apt-get 및 dselect", "dselect, apt-get"),
        ("국민에게", "국민"),
    ],
)
def test_equivalent_spellings_and_list_orders_are_exact(prediction: str, gold: str) -> None:
    score = answer_score.score_answer(prediction, [gold], answerable=True)
    assert (score.exact, score.f1, score.char_f1) == (True, 1.0, 1.0)


def test_the_rest_of_a_right_number_answer_still_earns_partial_credit() -> None:
    score = answer_score.score_answer("대통령의 임기는 5년이다", ["5년"], answerable=True)
    assert not score.exact and score.f1 == pytest.approx(0.5)  # 대통령, 임기, 5년 against 5년
    assert 0 < score.char_f1 < 1
    assert normalise("대통령의 임기는 5년이다").exact == ("5년",)
    near = answer_score.score_answer("국회 의장", ["국회의장"], answerable=True)
    assert near.exact  # Kiwi cuts both into 국회 + 의장


def test_list_order_is_free_but_list_content_is_not() -> None:
    assert not answer_score.score_answer("국회의장", ["국회의장과 대법원장"], answerable=True).exact
    assert normalise("국회의장과 대법원장").items == (("국회", "의장"), ("대법원장",))


ABSTENTIONS = [
    "답할 수 없음", "답할수 없습니다", "답변할 수 없습니다.", "대답할 수 없어요", "답을 할 수 없어요",
    "죄송하지만, 답변드릴 수 없습니다.", "이 질문에는 답할 수 없습니다", "답변이 어렵습니다",
    "답변이 불가능합니다", "알 수 없음", "알 수 없습니다", "알 수 없다", "제공된 문서로는 알 수 없습니다",
    "문서에 나와 있지 않습니다", "문서에 나와 있지 않아 답할 수 없습니다", "확인할 수 없습니다",
    "주어진 문서에서는 해당 정보를 찾을 수 없습니다.", "문서에 없습니다", "문서에 언급되지 않았습니다",
    "해당 내용은 문서에 명시되어 있지 않습니다.", "정보가 없습니다", "관련 내용이 없습니다",
    "모르겠습니다", "모릅니다", '"답할 수 없음"', "I cannot answer this from the documents.",
    "Not mentioned in the document",
]  # fmt: skip
NOT_ABSTENTIONS = [
    "알 수 없는 패키지",  # "unknown package", an answer about the FAQ
    "피고인은 답할 수 없다",  # a claim with its own subject
    "그는 질문에 답할 수 없었다",  # past tense: narration
    "답할 수 없는 질문에도 국무위원은 출석해야 한다",  # adnominal
    "대통령은 답할 수 없는 경우 국회에 알린다",
    "답할 수 없는 것은 아니다",
    "국회의원은 연임할 수 없다", "국민은 알 수 없었다", "알 수 있다", "확인할 수 있습니다",
    "정보가 없는 경우에는 apt-cache를 쓴다", "내용이 없는 파일", "없음", "없습니다", "5년",
    "dpkg --purge foo",
]  # fmt: skip


@pytest.mark.parametrize("text", ABSTENTIONS)
def test_common_korean_abstentions_are_detected(text: str) -> None:
    assert abstains(text)
    assert answer_score.score_answer(text, [], answerable=False).exact
    assert answer_score.score_answer(text, ["5년"], answerable=True).f1 == 0.0


@pytest.mark.parametrize("text", NOT_ABSTENTIONS)
def test_sentences_merely_containing_an_abstention_phrase_are_answers(text: str) -> None:
    assert not abstains(text)
    assert not answer_score.score_answer(text, [], answerable=False).exact


def test_totals_keep_answerable_scores_apart_from_abstention() -> None:
    scored = [
        (answer_score.score_answer("5년", ["5년"], True), True),
        (answer_score.score_answer("답할 수 없음", ["4년"], True), True),
        (answer_score.score_answer("답할 수 없음", [], False), False),
        (answer_score.score_answer("4년", [], False), False),
    ]
    totals = answer_score.totals(scored)
    assert (totals.answerable, totals.em, totals.f1) == (2, 0.5, 0.5)
    assert (totals.unanswerable, totals.abstained) == (2, 2)
    assert totals.abstain_precision == 0.5 and totals.abstain_recall == 0.5
    always = answer_score.totals(
        [(answer_score.score_answer("알 수 없음", a, bool(a)), bool(a)) for a in (["5년"], ["4년"], [])]
    )
    assert always.em == 0.0 and always.abstain_recall == 1.0
    assert always.abstain_precision == pytest.approx(1 / 3)
    assert answer_score.totals([]).em is None


def test_leaderboard_f1_and_em_leave_unanswerable_questions_out() -> None:

    answered = [rag_item(f"q{i}", "1k", 0.5) for i in range(4)]
    declined = [rag_item(f"u{i}", "1k", 1.0, reference=ABSTAIN) for i in range(4)]
    cells = rag_cells(rag_findings.rag_findings(answered + declined, answered + declined, [], {}))
    assert cells["ko_rag_f1_1k"] == 0.5 and cells["ko_rag_em_1k"] == 0.0
    assert cells["ko_rag_abstain"] == 1.0 and cells["ko_rag_f1_delta_1k"] == 0.0


DATA = Path(__file__).resolve().parent / "data" / "ko_rag"


def _answers(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_rag_score_prints_items_and_totals(tmp_path: Path) -> None:
    path = _answers(
        tmp_path,
        '{"id": "q3", "answer": "2030. 1. 1.", "question": "ignored"}',
        '{"id": "q2", "answer": "4년"}',
        '{"id": "q6", "answer": "문서에 나와 있지 않습니다."}',
    )
    result = run_kqe(
        "rag", "score", str(path), "--json", "--rag-data", str(DATA), cwd=tmp_path, home=tmp_path / "home"
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    scores = {item["id"]: (item["exact"], item["f1"], item["abstained"]) for item in body["items"]}
    assert scores == {"q3": (True, 1.0, False), "q2": (False, 0.0, False), "q6": (True, 1.0, True)}
    totals = body["totals"]
    assert (totals["answerable"], totals["em"], totals["abstain_recall"]) == (2, 0.5, 1.0)
    assert body["unanswered"] == ["q1", "q4", "q5"]
    text = run_kqe("rag", "score", str(path), "--rag-data", str(DATA), cwd=tmp_path, home=tmp_path / "home")
    assert text.returncode == 0 and "answerable (2): EM 50.0%" in text.stdout
    assert "3 of its questions have no answer line" in text.stdout


def test_delta_ci_resamples_whole_passages() -> None:
    """Ten questions on one passage that all lost, ten on others that did not: the passage is one unit
    of evidence, so its CI is wider than the one that counts twenty independent questions."""
    differences = np.array([-1.0] * 10 + [0.0] * 10)
    one_passage = ["constitution/art-47"] * 10 + [f"p{i}" for i in range(10)]
    low, high = paired_means.paired_mean_ci(differences, one_passage, resamples=4000)
    item_low, item_high = paired_means.paired_mean_ci(
        differences, [f"q{i}" for i in range(20)], resamples=4000
    )
    assert low <= -0.5 <= high and item_low <= -0.5 <= item_high
    assert high - low > 1.5 * (item_high - item_low)
    assert paired_means.paired_mean_ci(differences, one_passage, resamples=4000) == (low, high)  # seeded


def test_abstention_precision_counts_abstentions_on_answerable_questions_against_it() -> None:

    answered = [rag_item("q0", "1k", 0.0).model_copy(update={"generated": "문서에 나와 있지 않습니다"})]
    answered += [rag_item(f"q{i}", "1k", 1.0) for i in range(1, 4)]
    declined = [
        rag_item(f"u{i}", "1k", 1.0, reference=ABSTAIN).model_copy(update={"generated": "알 수 없음"})
        for i in range(3)
    ]
    cells = rag_cells(rag_findings.rag_findings(answered + declined, None, [], {}))
    assert cells["ko_rag_abstain"] == 1.0 and cells["ko_rag_abstain_precision"] == 0.75
