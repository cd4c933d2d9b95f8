"""The shipped ko_rag question set, reviewed: the audit's searches find nothing to flag, each of its
checks fires on a planted faulty item, and the scorer gives no credit for any wrong number in it."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from evals.tasks.ko_rag import metrics as rag_metrics
from evals.tasks.ko_rag import task as rag_task
from evals.tasks.ko_rag.audit import audit
from kqe.core.workspace import Workspace


@pytest.fixture(scope="module")
def builtin() -> rag_task.RagSource:
    return rag_task.load_source(Workspace.from_env())


def test_shipped_questions_pass_every_audit(builtin: rag_task.RagSource) -> None:
    assert audit(builtin.questions, builtin.passages) == []


def test_each_audit_check_flags_a_planted_fault(builtin: rag_task.RagSource) -> None:
    by_id = {question.id: question for question in builtin.questions}
    planted = [
        # answerable from art-42 ("국회의원의 임기는 4년으로 한다"): not an unanswerable question
        replace(by_id["unans-001"], question="국회의원의 임기는 몇 년으로 하는가?"),
        # the 2010. 11. 15. date stands in both headers: one passage answers it
        replace(by_id["num-065"], type="multi"),
        replace(by_id["num-001"], question="국회의원의 임기는 4년인가?"),
        # the preamble is ranked 13th for this wording (the num-026)
        replace(by_id["num-026"], question="헌법 전문에 따르면 헌법이 처음 제정된 날은 언제인가?"),
    ]
    kinds = {(finding.question, finding.kind) for finding in audit(planted, builtin.passages)}
    assert kinds == {
        ("unans-001", "covered"), ("num-065", "single-hop"), ("num-001", "leak"), ("num-026", "unretrieved"),
    }  # fmt: skip


def _plus_one(text: str) -> str:
    return re.sub(r"\d+", lambda match: str(int(match[0]) + 1), text)


def test_no_wrong_number_earns_credit_on_any_shipped_answer(builtin: rag_task.RagSource) -> None:
    """The issue measured mean F1 0.55 for every numeric gold with each number raised by one."""
    numbered = [q for q in builtin.questions if q.answerable and re.search(r"\d", q.answers[0])]
    assert len(numbered) >= 60
    for question in numbered:
        wrong = rag_metrics.score_answer(_plus_one(question.answers[0]), question.answers, True)
        assert (wrong.exact, wrong.f1, wrong.char_f1) == (False, 0.0, 0.0), question.id
        assert rag_metrics.score_answer(question.answers[0], question.answers, True).exact, question.id
