"""ko_rag without a server: documents and passage ids, the shipped question set, the validator on bad
user files, BM25 recall, token budgets with the tiny model's real tokenizer, answer scoring, cells."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evals.reporting.row_cells import rag_cells
from evals.statistics import rag_findings
from evals.tasks.ko_rag import answer_score
from evals.tasks.ko_rag import context as rag_context
from evals.tasks.ko_rag import docs as rag_docs
from evals.tasks.ko_rag import rows as rag_rows
from evals.tasks.ko_rag import task as rag_task
from evals.tasks.ko_rag.choices import mc_choices
from evals.tasks.ko_rag.help_docs import help_passages
from evals.tasks.ko_rag.retrieval import Bm25, Retriever, plan_context, recall_at_k
from evals.tasks.ko_rag.source import RagSource
from evals.tasks.ko_rag.sweep import CLOSED_BOOK, RETRIEVED
from evals.tasks.prompt_tokens import ChoiceTokenizer
from evals.tasks.prompts import TASKS_DIR
from kqe.core.defaults import RAG_DEFAULT_CONDITIONS, RAG_LENGTHS
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace
from tests.helpers.cli import assert_one_line_error, run_kqe
from tests.helpers.ko_rag_data import DOCS, QUESTIONS, rag_item, read_rows, write_jsonl


@pytest.fixture()
def user_data(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "rag" / "docs.jsonl", DOCS)
    write_jsonl(tmp_path / "rag" / "questions.jsonl", QUESTIONS)
    return tmp_path / "rag"


@pytest.fixture(scope="module")
def builtin() -> RagSource:
    """The built-in documents and the shipped questions, from the offline sources `make setup` fetched."""
    return rag_task.load_source(Workspace.from_env())


def test_shipped_question_set_is_valid_and_covers_every_type(builtin: RagSource) -> None:
    types = Counter(question.type for question in builtin.questions)
    assert len(builtin.questions) - types["unanswerable"] >= 400  # issue 18: at least 400 answerable
    assert types["factual"] >= 250 and types["numeric"] >= 100 and types["multi"] >= 25
    assert types["unanswerable"] >= 0.15 * len(builtin.questions)  # ~20% abstention items
    texts = {passage.id: passage.text for passage in builtin.passages}
    for question in builtin.questions:  # the validator's own rule, stated once more from outside
        assert all(any(a in texts[p] for p in question.gold_passages) for a in question.answers), question.id
    documents = {
        passage.id.split("/")[0].split("-")[0]
        for q in builtin.questions
        for passage in [next(p for p in builtin.passages if p.id == gold) for gold in q.gold_passages]
    }
    assert documents == {"constitution", "bill", "debian", "lo"}


def test_builtin_passage_ids_follow_the_document_structure(builtin: RagSource) -> None:
    ids = [passage.id for passage in builtin.passages]
    assert len(ids) == len(set(ids))
    articles = [pid for pid in ids if pid.startswith("constitution/art-") and "#" not in pid]
    assert articles == [f"constitution/art-{n}" for n in range(1, 131)]
    assert [pid for pid in ids if "addenda-art" in pid] == [
        f"constitution/addenda-art-{n}" for n in range(1, 7)
    ]
    bills = sorted((Workspace.from_env().sources() / rag_docs.BILLS).glob("*.txt"))
    assert {f"bill-{path.stem}/header" for path in bills} | {
        f"bill-{path.stem}/reason" for path in bills
    } <= set(ids)
    assert {"debian-faq/1.2", "debian-faq/8.1.2", "debian-faq/8.1.6.1"} <= set(ids)
    assert all(len(passage.text) <= rag_docs.MAX_CHARS for passage in builtin.passages)
    sources = Workspace.from_env().sources()
    again = rag_docs.builtin_passages(sources) + help_passages(sources)
    assert again == builtin.passages  # deterministic: same ids, titles and texts


def test_chunker_cuts_long_articles_into_numbered_parts() -> None:
    long_item = "②" + "국가는 국민의 권리를 보장하여야 한다. " * 40
    text = (
        "시험헌법\n\n전문이다.\n       제1장 총강\n  제1조 ① 첫 조문이다.\n"
        + long_item
        + "\n  제2조 둘째 조문이다.\n"
    )
    text += " 펼침  부칙 <헌법 제1호>\n제1조 이 헌법은 공포한 날부터 시행한다.\n"
    passages = rag_docs.constitution_passages(text)
    assert [p.id for p in passages] == [
        "constitution/preamble",
        "constitution/art-1",
        "constitution/art-1#2",
        "constitution/art-2",
        "constitution/addenda-art-1",
    ]
    assert passages[1].title == "시험헌법 제1장 총강" and passages[-1].title == "시험헌법 부칙"
    assert passages[1].text.startswith("제1조 ① 첫 조문이다.\n②국가는")
    assert all(len(p.text) <= rag_docs.MAX_CHARS for p in passages)
    assert passages[1].text + " " + passages[2].text == "제1조 ① 첫 조문이다.\n" + long_item.strip()


def test_bill_lines_are_joined_where_the_pdf_wrapped_them() -> None:
    text = "시험법 일부개정법률안\n\n(홍길동의원 대표발의 )\n\n 의 안\n\n발의연월일 : 2010.  11.  12.\n\n"
    text += "제안이유 및 주요내용\n\n  현행법은 육아휴직이 가능한 자녀의 나이를 \n\n"
    text += "만 6세 이하로 하고 있어 문제가 있\n\n음.\n\n"
    text += "- 1 -\n\n부      칙\n\n이 법은 공포한 날부터 시행한다.\n\n신 ·구조문대비표\n\n현      행\n"
    passages = {p.id: p for p in rag_docs.bill_passages("7", text)}
    assert list(passages) == ["bill-7/header", "bill-7/reason", "bill-7/addenda"]
    assert (
        passages["bill-7/reason"].text
        == "현행법은 육아휴직이 가능한 자녀의 나이를 만 6세 이하로 하고 있어 문제가 있음."
    )
    assert passages["bill-7/header"].title == "시험법 일부개정법률안"


@pytest.mark.parametrize(
    ("file", "line", "edit", "needles"),
    [
        ("questions.jsonl", 2, lambda r: r.pop("answers"), ("missing field(s) answers",)),
        (
            "questions.jsonl",
            3,
            lambda r: r.update(gold_passages=["law/art-9"]),
            ("'law/art-9'", "does not exist"),
        ),
        ("questions.jsonl", 1, lambda r: r.update(answers=["위원장 선거"]), ("appears in none", "law/art-2")),
        ("questions.jsonl", 4, lambda r: r.update(id="q1"), ("'q1' already used on line 1",)),
        (
            "questions.jsonl",
            6,
            lambda r: r.update(answers=["없음"]),
            ("unanswerable question has no answers",),
        ),
        (
            "questions.jsonl",
            5,
            lambda r: r.update(gold_passages=["faq/1.1"]),
            ("at least two gold passages",),
        ),
        ("questions.jsonl", 2, lambda r: r.update(type="opinion"), ("'opinion'", "factual")),
        ("docs.jsonl", 3, lambda r: r.pop("title"), ("field 'title'",)),
        ("docs.jsonl", 2, lambda r: r.update(id="law/art-1"), ("'law/art-1' already used on line 1",)),
    ],
)
def test_bad_user_files_are_one_line_errors_naming_file_and_line(
    user_data: Path, file: str, line: int, edit: Any, needles: tuple[str, ...]
) -> None:
    rows = read_rows(user_data / file)
    edit(rows[line - 1])
    write_jsonl(user_data / file, rows)
    with pytest.raises(UserError) as error:
        rag_task.load_source(Workspace.from_env(), user_data)
    message = str(error.value)
    assert f"{user_data / file}:{line}:" in message and "\n" not in message
    for needle in needles:
        assert needle in message


def test_not_json_and_missing_files_are_user_errors(user_data: Path, tmp_path: Path) -> None:
    (user_data / "questions.jsonl").write_text('{"id": "q1",\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"questions\.jsonl:1: not JSON"):
        rag_task.load_source(Workspace.from_env(), user_data)
    with pytest.raises(UserError, match=r"needs docs\.jsonl and questions\.jsonl"):
        rag_task.load_source(Workspace.from_env(), tmp_path / "nowhere")


def test_missing_debian_faq_says_run_make_setup(workspace: Workspace) -> None:
    (workspace.sources() / "ko" / "bills").mkdir(parents=True)
    (workspace.sources() / "ko" / "constitution.txt").write_text("헌법\n제1조 조문이다.\n", encoding="utf-8")
    (workspace.sources() / "ko" / "bills" / "1.txt").write_text("법률안\n(의원 대표발의)\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"debian-faq\.ko\.txt is missing: run `make setup`"):
        rag_docs.builtin_passages(workspace.sources())


def test_bm25_ranks_by_rare_shared_terms() -> None:
    index = Bm25([["국회", "임기"], ["대통령", "임기", "임기"], ["국회", "의장"]])
    assert index.top(["대통령", "임기"], 2) == [1, 0]
    assert index.top(["없는말"], 3) == [0, 1, 2]  # no match: ties keep document order


def test_retriever_finds_the_gold_passage_for_most_questions(builtin: RagSource) -> None:
    retriever = Retriever(builtin.passages)
    recall: dict[str, list[float]] = {}
    for question in builtin.questions:
        if question.answerable:
            found = retriever.search(question.question, 4)
            recall.setdefault(question.type, []).append(recall_at_k(found, question.gold_passages))
    mean = {kind: float(np.mean(values)) for kind, values in recall.items()}
    # measured, 517 items: factual 0.991, numeric 0.990, multi 0.673 (share of gold passages in the top 4)
    assert mean["factual"] >= 0.9 and mean["numeric"] >= 0.9 and mean["multi"] >= 0.6, mean


def test_contexts_fill_the_budget_in_tokens_and_skip_what_does_not_fit(
    user_data: Path, tiny_model_dir: Path
) -> None:
    source = rag_task.load_source(Workspace.from_env(), user_data)
    budgeter = rag_context.hf_budgeter(tiny_model_dir)
    rows, manifest = rag_rows.build_rows(source, budgeter, 2048, None, 0, (RETRIEVED,))
    assert manifest["lengths"] == {"1k": 1024, "2k": 2048}
    assert set(manifest["skipped"]) == {"4k", "16k"} and manifest["recall_at_k"] == 1.0
    assert manifest["gold_in_context"] == {"1k": 1.0, "2k": 1.0}
    assert [row["length"] for row in rows] == ["1k"] * 6 + ["2k"] * 6
    encode = ChoiceTokenizer(tiny_model_dir).tok_encode
    for row in rows:
        length = RAG_LENGTHS[row["length"]]
        assert len(encode(row["prompt"])) == row["prompt_tokens"]
        assert row["prompt_tokens"] + rag_context.MAX_NEW_TOKENS <= length
        assert len(encode(row["mc_prompt"])) + 1 <= length
        assert row["prompt"].startswith(rag_context.INSTRUCTION) and row["prompt"].endswith("\n답:")
        assert row["mc_prompt"].endswith("\n정답:") and row["choices"][row["mc_gold"]] == row["reference"]
        assert 0.0 <= row["depth"] <= 1.0 and row["gold_in_context"] is True
    by_question: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_question.setdefault(row["question_id"], {})[row["length"]] = row
    for pair in by_question.values():  # the longer context holds the shorter one's passages
        assert set(pair["1k"]["passage_ids"]) <= set(pair["2k"]["passage_ids"])
    with pytest.raises(UserError, match="max-model-len 512 holds none"):
        rag_rows.build_rows(source, budgeter, max_model_len=512, limit=None, seed=0)
    slice_rows, slice_manifest = rag_rows.build_rows(
        source, budgeter, 2048, 2, 0, (RETRIEVED, CLOSED_BOOK), {"1k": RAG_LENGTHS["1k"]}
    )  # the default run's slice: two questions, retrieved at 1k and closed-book
    assert slice_manifest["lengths"] == {"1k": 1024} and slice_manifest["questions"] == 2
    assert sorted(str(row["length"]) for row in slice_rows) == ["1k", "1k", "None", "None"]
    with pytest.raises(UserError, match="--rag-lengths 1k"):
        rag_rows.build_rows(source, budgeter, 1500, None, 0, (RETRIEVED,), {"2k": RAG_LENGTHS["2k"]})


def test_mc_choices_are_four_distinct_with_abstention_and_stable(user_data: Path) -> None:
    source = rag_task.load_source(Workspace.from_env(), user_data)
    texts = {passage.id: passage.text for passage in source.passages}
    for question in source.questions:
        choices, gold = mc_choices(question, source.questions, texts, seed=3)
        assert len(set(choices)) == 4 and rag_context.ABSTAIN in choices
        assert choices[gold] == (question.answers[0] if question.answerable else rag_context.ABSTAIN)
        assert mc_choices(question, source.questions, texts, seed=3) == (choices, gold)


@pytest.mark.parametrize(
    ("text", "answers", "answerable", "exact", "f1"),
    [
        (" 5년입니다.\n", ["5년"], True, True, 1.0),
        ("국민에게", ["국민"], True, True, 1.0),
        ("대통령의 임기는 5년이다", ["5년"], True, False, 0.5),
        ("apt-get", ["apt-get"], True, True, 1.0),
        ("Bullseye", ["bullseye"], True, True, 1.0),
        ("답할 수 없음", ["5년"], True, False, 0.0),
        ("답할수 없습니다", [], False, True, 1.0),
        ("5년", [], False, False, 0.0),
        ("", ["5년"], True, False, 0.0),
        ("6년", ["4년", "6년"], True, True, 1.0),
    ],
)
def test_answers_are_scored_on_korean_morphemes(
    text: str, answers: list[str], answerable: bool, exact: bool, f1: float
) -> None:
    score = answer_score.score_answer(text, answers, answerable)
    assert (score.exact, score.f1) == (exact, pytest.approx(f1))


def test_hangul_share_tells_korean_answers_from_others() -> None:
    assert answer_score.score_answer("국민", ["국민"], True).hangul_share == 1.0
    assert answer_score.score_answer("the people", ["국민"], True).hangul_share == 0.0
    assert answer_score.score_answer("apt 명령", ["apt"], True).hangul_share == pytest.approx(2 / 5)
    assert answer_score.score_answer("1948", ["1948"], True).hangul_share is None


def test_leaderboard_cells_pair_the_same_items_per_length() -> None:
    base = [rag_item(f"q{i}", "1k", 1.0) for i in range(20)] + [
        rag_item(f"q{i}", "2k", 0.5) for i in range(20)
    ]
    cand = [rag_item(f"q{i}", "1k", 1.0 if i % 2 else 0.0) for i in range(20)]
    cand += [rag_item(f"q{i}", "2k", 0.5) for i in range(20)]
    skipped = {"4k": "over max-model-len 2048", "16k": "over max-model-len 2048"}
    cells = rag_cells(rag_findings.rag_findings(cand, base, [], skipped))
    assert cells["ko_rag_f1_1k"] == 0.5 and cells["ko_rag_em_1k"] == 0.5
    assert cells["ko_rag_f1_delta_1k"] == -0.5
    low, high = cells["ko_rag_f1_ci_low_1k"], cells["ko_rag_f1_ci_high_1k"]
    assert isinstance(low, float) and isinstance(high, float) and low < -0.5 < high < 0
    assert cells["ko_rag_f1_delta_2k"] == 0.0 and cells["ko_rag_f1_ci_low_2k"] == 0.0
    assert (
        cells["ko_rag_f1_4k"] is None
        and cells["ko_rag_skipped"] == "4k: over max-model-len 2048; 16k: over max-model-len 2048"
    )
    base_row = rag_cells(rag_findings.rag_findings(base, None, [], {}))
    assert base_row["ko_rag_f1_2k"] == 0.5 and "ko_rag_f1_delta_2k" not in base_row
    assert base_row["ko_rag_skipped"] is None


def test_unknown_task_and_bad_rag_file_through_the_cli(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = run_kqe(
        "eval", "--model", str(tiny_model_dir), "--tasks", "ko_rag,nope", cwd=tmp_path, home=tmp_path / "home"
    )
    assert_one_line_error(result, "nope", "ko_rag", "kmmlu_hard")
    data = tmp_path / "rag"
    write_jsonl(data / "docs.jsonl", DOCS)
    write_jsonl(data / "questions.jsonl", [*QUESTIONS[:2], {**QUESTIONS[2], "gold_passages": ["law/art-9"]}])
    result = run_kqe(
        "eval",
        "--model",
        str(tiny_model_dir),
        "--tasks",
        "ko_rag",
        "--rag-data",
        str(data),
        cwd=tmp_path,
        home=tmp_path / "home",
    )
    assert_one_line_error(result, "questions.jsonl:3:", "'law/art-9'", "does not exist")


def test_lm_eval_dataset_is_prepared_for_the_model_when_no_data_is_given(
    user_data: Path, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lm_eval --tasks ko_rag --model_args pretrained=DIR` without KQE_TASK_DATA: lm-eval passes the
    model arguments as metadata, and the rows are cut with that model's tokenizer and context size."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ko_rag_utils", TASKS_DIR / "ko_rag" / "lm_eval_hooks.py")
    assert spec is not None and spec.loader is not None
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    monkeypatch.setenv("KQE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KQE_TASK_DATA", raising=False)
    options = {"pretrained": str(tiny_model_dir), "ko_rag_data": str(user_data)}
    rows = utils.load_ko_rag(**options)["test"]
    assert sorted(set(rows["length"]) - {None}) == ["1k", "2k"]  # the tiny config holds 2,048 positions
    assert set(rows["condition"]) == set(RAG_DEFAULT_CONDITIONS) == {"retrieved", "closed_book"}
    one = utils.load_ko_rag(**options, ko_rag_max_length=1024, ko_rag_conditions="retrieved")["test"]
    assert len(one) == len(QUESTIONS) and set(one["length"]) == {"1k"}
    expected = {"em": 1.0, "f1": 1.0, "contains": 1.0}
    assert utils.process_generation(rows[0], [" " + rows[0]["reference"]]) == expected


def test_hard_negatives_come_first_and_the_depth_is_recorded() -> None:
    sizes = {f"p{i}": 10 for i in range(10)}
    plan = plan_context(["p0"], sizes, budget=40, seed="q", hard_negatives=["p7", "p3"])
    fillers = [pid for pid in plan.passage_ids if pid != "p0"]
    assert len(plan.passage_ids) == 4 and {"p7", "p3"} <= set(fillers)
    assert plan.depth == plan.passage_ids.index("p0") / 3
    wider = plan_context(["p0"], sizes, budget=100, seed="q", hard_negatives=["p7", "p3"])
    assert set(plan.passage_ids) <= set(wider.passage_ids)
    assert abs(wider.depth - plan.depth) <= 0.5  # the same drawn place, rounded to the filler count


def test_builtin_hard_negatives_share_the_source_and_rank_after_the_top_k(
    builtin: RagSource,
) -> None:
    retriever = Retriever(builtin.passages)
    question = "국회의원의 임기는 몇 년인가?"
    top, hard = retriever.search(question, 4), retriever.hard_negatives(question)
    assert hard and not set(hard) & set(top)
    assert all(pid.startswith("constitution/") for pid in hard)
    assert hard == [pid for pid in retriever.search(question, 20)[4:] if pid.startswith("constitution/")]
