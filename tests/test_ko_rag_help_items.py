"""ko_rag v3 (#49): the LibreOffice help pages as passages, the items written on them, and the measured
overlap every shipped item stores. The set's own checks (paraphrase bound, two-hop bridges, the share
of unanswerable near-misses) run over the shipped file; the loaders refuse bad measures in a user set."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from evals.tasks.ko_rag import task as rag_task
from evals.tasks.ko_rag.audit import audit, bridge_terms
from evals.tasks.ko_rag.docs import MAX_CHARS
from evals.tasks.ko_rag.help_docs import HELP_PAGES, help_passages
from evals.tasks.ko_rag.overlap import NEAR_COPY, PARAPHRASE_BOUND, overlap
from evals.tasks.ko_rag.questions import read_questions
from kqe.core.errors import UserError
from kqe.core.help_pages import rag_pages
from kqe.core.workspace import Workspace
from tests.helpers.help_pages import help_page
from tests.helpers.prose import english_prose, korean_prose


@pytest.fixture(scope="module")
def builtin() -> rag_task.RagSource:
    return rag_task.load_source(Workspace.from_env())


def _texts(source: rag_task.RagSource) -> dict[str, str]:
    return {passage.id: passage.text for passage in source.passages}


def test_every_shipped_item_stores_its_measured_overlap(builtin: rag_task.RagSource) -> None:
    texts = _texts(builtin)
    for question in builtin.questions:
        measured = overlap(question.question, [texts[pid] for pid in question.gold_passages])
        assert question.overlap == measured, question.id
        assert question.near_copy == (question.answerable and measured >= NEAR_COPY), question.id


def test_help_items_are_paraphrases_and_many_enough(builtin: rag_task.RagSource) -> None:
    items = [q for q in builtin.questions if q.id.startswith("lo")]
    answerable = [q for q in items if q.answerable]
    assert len(answerable) >= 200
    assert all(q.overlap is not None and q.overlap <= PARAPHRASE_BOUND for q in answerable)
    assert all(pid.startswith("lo-help/") for q in items for pid in q.gold_passages)
    unanswerable = len(items) - len(answerable)
    assert 0.15 <= unanswerable / len(items) <= 0.25  # about a fifth are near-misses


def test_two_hop_items_need_both_passages(builtin: rag_task.RagSource) -> None:
    texts = _texts(builtin)
    two_hop = [q for q in builtin.questions if q.id.startswith("lo2h")]
    assert len(two_hop) >= 40 and all(q.type == "multi" and len(q.gold_passages) == 2 for q in two_hop)
    for question in two_hop:
        holding = [pid for pid in question.gold_passages if question.answers[0] in texts[pid]]
        assert len(holding) == 1, question.id  # the other passage alone cannot give the answer
        assert bridge_terms(question, texts), question.id  # and the answer's passage alone lacks the link


def test_no_bridge_check_flags_a_one_passage_multi(builtin: rag_task.RagSource) -> None:
    by_id = {question.id: question for question in builtin.questions}
    # every term of this wording is on the paths page that holds the answer
    planted = replace(
        by_id["lo2h-006"], question="LibreOffice 경로에서 자동 텍스트가 저장되는 폴더의 유형은?"
    )
    kinds = {finding.kind for finding in audit([planted], builtin.passages)}
    assert kinds == {"no-bridge"}


def test_help_passages_join_the_pool_with_their_kind(builtin: rag_task.RagSource) -> None:
    help_ids = [p.id for p in builtin.passages if p.id.startswith("lo-help/")]
    assert len(help_ids) >= 300 and len(builtin.passages) - len(help_ids) >= 400
    assert all(len(p.text) <= MAX_CHARS for p in builtin.passages)
    pages = {pid.split("#")[0] for pid in help_ids}
    assert {"lo-help/shared.optionen.01010200", "lo-help/scalc.guide.filters"} <= pages
    assert help_passages(Workspace.from_env().sources()) == [
        p for p in builtin.passages if p.id.startswith("lo-help/")
    ]


def test_missing_help_pages_say_run_make_setup(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"rag-ko/\*\.txt are missing: run `make setup`"):
        help_passages(tmp_path)


def test_a_help_page_file_becomes_titled_passages_cut_at_paragraphs(tmp_path: Path) -> None:
    folder = tmp_path / HELP_PAGES
    folder.mkdir(parents=True)
    paragraphs = korean_prose(3, 12).split("\n\n")
    (folder / "shared.optionen.x.txt").write_text("보기\n" + "\n".join(paragraphs) + "\n", encoding="utf-8")
    passages = help_passages(tmp_path)
    assert passages[0].id == "lo-help/shared.optionen.x" and passages[0].title == "LibreOffice 도움말: 보기"
    assert [p.id for p in passages[1:]] == [
        f"lo-help/shared.optionen.x#{n}" for n in range(2, len(passages) + 1)
    ]
    assert "\n".join(p.text for p in passages).split("\n") == paragraphs


def test_rag_pages_keep_whole_pages_of_their_folders_without_english_leftovers() -> None:
    korean = korean_prose(5, 3).split("\n\n")
    english = english_prose(5, 1)
    keyed = [("par_1", korean[0]), ("par_2", english), ("par_3", "Ctrl+Shift+F5"), ("par_4", korean[1])]
    page = help_page("ko", "보기", [*keyed, ("par_5", korean[2])])
    html = {"text/shared/optionen/01040200.html": page, "text/sbasic/shared/x.html": page}
    (kept,) = rag_pages(html)
    texts = [p.text for p in kept.paragraphs]
    assert kept.path == "text/shared/optionen/01040200.html" and korean[0] in texts
    assert english not in texts and "Ctrl+Shift+F5" in texts  # a key combination is no leftover


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"overlap": 1.5}, r"'overlap' must be a number from 0 to 1"),
        ({"overlap": True}, r"'overlap' must be a number from 0 to 1"),
        ({"near_copy": "yes"}, r"'near_copy' must be true or false"),
        ({"closeness": 0.2}, r"unknown field\(s\) closeness: a question has only .*near_copy"),
    ],
)
def test_bad_measures_in_a_user_set_are_one_line_errors(
    tmp_path: Path, extra: dict[str, object], message: str
) -> None:
    row = {"id": "q1", "type": "factual", "question": "기본값은?", "answers": ["10"], "gold_passages": ["d1"]}
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps(row | extra, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=rf"questions\.jsonl:1: .*{message}"):
        read_questions(path, {"d1": "기본값은 10입니다."})
    path.write_text(json.dumps(row | {"overlap": 0.5, "near_copy": False}) + "\n", encoding="utf-8")
    (question,) = read_questions(path, {"d1": "기본값은 10입니다."})
    assert (question.overlap, question.near_copy) == (0.5, False)
