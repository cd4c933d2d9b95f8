"""ko_rag's conditions without a server: contexts of each condition on the shipped passages (gold at
the stated depth in the oracle and the depth grid, no documents closed-book, the retrieved prompts
unchanged by the others), prompts in the tiny tokenizer's chat template, and the leaderboard columns
of each condition from saved per-item rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.reporting.leaderboard import read_leaderboard, write_leaderboard
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.reporting.rag_columns import RAG_COLUMNS
from evals.reporting.row_cells import rag_cells
from evals.statistics import rag_findings
from evals.tasks.ko_rag import context as rag_context
from evals.tasks.ko_rag import metrics as rag_metrics
from evals.tasks.ko_rag import rows as rag_rows
from evals.tasks.ko_rag import task as rag_task
from evals.tasks.ko_rag.sweep import DEPTH_GRID, RETRIEVED, coordinates, question_of
from evals.tasks.prompt_tokens import ChoiceTokenizer
from kqe.core.defaults import RAG_CONDITIONS, RAG_LENGTHS
from kqe.core.errors import UserError
from kqe.core.io import read_jsonl
from kqe.core.results import ItemResult
from kqe.core.workspace import Workspace
from tests.helpers.ko_rag_data import DOCS, QUESTIONS, write_jsonl

QUESTIONS_SAMPLED = 12


@pytest.fixture(scope="module")
def shipped(tiny_model_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, int]]:
    """Rows of every condition for a sample of the shipped questions at 1k and 2k, the manifest, and
    each passage's size in the tiny tokenizer's tokens."""
    source = rag_task.load_source(Workspace.from_env())
    budgeter = rag_context.hf_budgeter(tiny_model_dir)
    rows, manifest = rag_rows.build_rows(source, budgeter, 2048, QUESTIONS_SAMPLED, 0, RAG_CONDITIONS)
    return rows, manifest, budgeter.sizes(source.passages)


def _by_condition(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["condition"], []).append(row)
    return grouped


def _block_depth(row: dict[str, Any], sizes: dict[str, int]) -> tuple[float, float]:
    """(share of the distractor tokens before the block, largest distractor's share), recounted."""
    ids, block = row["passage_ids"], set(row["block"])
    start = min(ids.index(pid) for pid in block)
    others = [sizes[pid] for pid in ids if pid not in block]
    before = sum(sizes[pid] for pid in ids[:start] if pid not in block)
    return (before / sum(others), max(others) / sum(others)) if others else (0.0, 1.0)


def test_every_condition_has_its_rows_named_in_the_item_ids(shipped: Any) -> None:
    rows, manifest, _ = shipped
    grouped = _by_condition(rows)
    assert set(grouped) == {"retrieved", "oracle", "closed_book", *DEPTH_GRID}
    assert len(grouped["closed_book"]) == QUESTIONS_SAMPLED
    assert all(len(grouped[label]) == 2 * QUESTIONS_SAMPLED for label in ("retrieved", "oracle", *DEPTH_GRID))
    assert rows[0]["condition"] == "closed_book" and rows[-1]["length"] == "2k"
    for row in rows:
        assert coordinates(row["item_id"]) == (row["condition"], row["length"])
        assert coordinates(row["mc_item_id"]) == (row["condition"], row["length"])
        assert question_of(row["item_id"]) == row["question_id"]
    assert manifest["conditions"] == list(RAG_CONDITIONS) and manifest["chat_template"] is False
    retrieved = [row for row in grouped["retrieved"] if row["answerable"]]
    share = sum(row["gold_in_context"] for row in retrieved if row["length"] == "1k") / (len(retrieved) / 2)
    assert manifest["gold_in_context"]["1k"] == round(share, 4)  # the retrieved condition's, not the oracle's


def test_oracle_forces_in_every_gold_passage_that_fits_and_retrieved_prompts_do_not_change(
    shipped: Any, tiny_model_dir: Path
) -> None:
    rows, manifest, sizes = shipped
    source = rag_task.load_source(Workspace.from_env())
    questions = {question.id: question.question for question in source.questions}
    budgeter = rag_context.hf_budgeter(tiny_model_dir)
    grouped = _by_condition(rows)
    for row in grouped["oracle"]:
        gold, block = row["gold_passages"], row["block"]
        assert block == [pid for pid in gold if pid in block]  # the gold passages, in order
        assert row["gold_in_context"] == (block == gold)
        assert row["prompt_tokens"] + rag_context.MAX_NEW_TOKENS <= RAG_LENGTHS[row["length"]]
        missing = [pid for pid in gold if pid not in block]
        if missing:  # left out only when it cannot fit beside the question (the tiny tokenizer's Korean)
            question = questions[row["question_id"]]
            gen = rag_context.GEN_SUFFIX.format(question=question)
            mc = rag_context.MC_SUFFIX.format(*row["choices"], question=question)
            fixed = budgeter.need(rag_context.INSTRUCTION, gen, mc)[0]
            assert sum(sizes[pid] for pid in block) + sizes[missing[0]] > RAG_LENGTHS[row["length"]] - fixed
        if block:
            assert row["depth"] == round(_block_depth(row, sizes)[0], 4)
    fitted = [
        row["gold_in_context"] for row in grouped["oracle"] if row["answerable"] and row["length"] == "2k"
    ]
    assert manifest["oracle_gold_in_context"]["2k"] == round(sum(fitted) / len(fitted), 4)
    alone, _ = rag_rows.build_rows(source, budgeter, 2048, QUESTIONS_SAMPLED, 0, (RETRIEVED,))
    assert [row["prompt"] for row in alone] == [row["prompt"] for row in grouped["retrieved"]]


def test_depth_grid_puts_the_gold_block_where_it_says_by_token_count(shipped: Any) -> None:
    rows, _, sizes = shipped
    grouped = _by_condition(rows)
    checked = 0
    for label, target in DEPTH_GRID.items():
        for row in grouped[label]:
            if not row["block"] or len(row["block"]) == len(row["passage_ids"]):
                continue  # no gold passage fits (or none to place), or no distractor fits beside it
            depth, widest = _block_depth(row, sizes)
            assert row["depth"] == round(depth, 4), row["item_id"]
            if target in (0.0, 1.0):
                assert depth == target, row["item_id"]  # first or last, exactly
                edge = (
                    row["passage_ids"][: len(row["block"])]
                    if target == 0
                    else row["passage_ids"][-len(row["block"]) :]
                )
                assert edge == row["block"]
            else:  # the passage boundary nearest the target: within one distractor's share
                assert abs(depth - target) <= widest, row["item_id"]
            checked += 1
    # 70 of the 120 rows measured: the tiny byte-level tokenizer spends so many tokens on Korean that
    # long gold passages do not fit 1k beside any distractor; the rest must not be a vacuous loop
    assert checked >= 60


def test_closed_book_holds_no_document(shipped: Any) -> None:
    rows, _, _ = shipped
    texts = {pid for row in rows for pid in row["passage_ids"]}
    assert texts
    for row in _by_condition(rows)["closed_book"]:
        assert row["passage_ids"] == [] and row["length"] is None and row["depth"] is None
        assert row["prompt"].startswith(rag_context.CLOSED_BOOK_INSTRUCTION)
        assert "[문서]" not in row["prompt"] and "[문서]" not in row["mc_prompt"]
        assert row["prompt"].endswith("\n답:") and row["mc_prompt"].endswith("\n정답:")


CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|user|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def test_chat_template_wraps_each_prompt_as_a_user_turn(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = tmp_path / "chat-tiny"
    model.mkdir()
    for path in tiny_model_dir.iterdir():
        (model / path.name).write_bytes(path.read_bytes())
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": CHAT_TEMPLATE}))
    write_jsonl(tmp_path / "rag" / "docs.jsonl", DOCS)
    write_jsonl(tmp_path / "rag" / "questions.jsonl", QUESTIONS)
    source = rag_task.load_source(Workspace.from_env(), tmp_path / "rag")
    budgeter = rag_context.hf_budgeter(model, chat_template=True)
    rows, manifest = rag_rows.build_rows(source, budgeter, 2048, None, 0)
    tokenizer = ChoiceTokenizer(model)
    assert manifest["chat_template"] is True
    for row in rows:
        assert row["chat_template"] is True
        for prompt in (row["prompt"], row["mc_prompt"]):
            assert prompt.startswith("<|user|>\n") and prompt.endswith("<|end|>\n<|assistant|>\n")
            ids = tokenizer.tok_encode(prompt)
            assert ids.count(tokenizer.tokenizer.bos_token_id) == 1  # the template's BOS is the tokenizer's
        assert len(tokenizer.tok_encode(row["prompt"])) == row["prompt_tokens"]
        if row["length"] is not None:
            assert row["prompt_tokens"] + rag_context.MAX_NEW_TOKENS <= RAG_LENGTHS[row["length"]]
    with pytest.raises(UserError, match="has no chat template: drop --rag-chat-template"):
        rag_context.hf_budgeter(tiny_model_dir, chat_template=True)


def _result(question: str, label: str, length: str | None, f1: float, subject: str) -> ItemResult:
    item_id = f"ko_rag/{question}/{label}" + (f"/{length}" if length else "")
    return ItemResult(
        task="ko_rag",
        subject=subject,
        item_id=item_id,
        gold=0,
        pred=0 if f1 == 1 else -1,
        correct=f1 == 1,
        choice_logprobs=[],
        prompt_sha="x",
        generated="답",
        reference="답",
        f1=f1,
        hangul_share=1.0,
    )


def _checkpoint(closed: float, retrieved: float, oracle: float) -> list[ItemResult]:
    """Twenty questions on ten passages: closed-book, retrieved and oracle at 1k, depth50 at 1k."""
    items = []
    for i in range(20):
        subject = f"doc/{i // 2}"
        items.append(_result(f"q{i}", "closed_book", None, closed if i % 2 else 0.0, subject))
        items.append(_result(f"q{i}", "retrieved", "1k", retrieved, subject))
        items.append(_result(f"q{i}", "oracle", "1k", oracle, subject))
        items.append(_result(f"q{i}", "depth50", "1k", oracle, subject))
    return items


def test_leaderboard_columns_of_each_condition_from_saved_rows(tmp_path: Path) -> None:
    saved = {}
    for name, scores in {"base": (1.0, 1.0, 1.0), "cand": (1.0, 0.5, 1.0)}.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(r.model_dump_json() + "\n" for r in _checkpoint(*scores)))
        saved[name] = rag_metrics.closed_book_flags(read_jsonl(path, ItemResult))
    flagged = {r.item_id: r.closed_book for r in saved["cand"]}
    assert flagged["ko_rag/q1/retrieved/1k"] is True and flagged["ko_rag/q2/oracle/1k"] is False
    assert flagged["ko_rag/q1/closed_book"] is None
    cells = rag_cells(rag_findings.rag_findings(saved["cand"], saved["base"], [], {}, {"1k": 0.75}))
    assert set(cells) <= set(RAG_COLUMNS)
    assert cells["ko_rag_f1_1k"] == 0.5 and cells["ko_rag_oracle_f1_1k"] == 1.0
    assert cells["ko_rag_f1_delta_1k"] == -0.5 and cells["ko_rag_oracle_f1_delta_1k"] == 0.0
    assert cells["ko_rag_depth50_f1_1k"] == 1.0 and "ko_rag_depth25_f1_1k" not in cells
    assert cells["ko_rag_closed_book_em"] == 0.5 and cells["ko_rag_recall_1k"] == 0.75
    assert cells["ko_rag_gain_1k"] == pytest.approx(0.0)  # 0.5 open-book minus 0.5 closed-book
    assert cells["ko_rag_gain_delta_1k"] == pytest.approx(-0.5)  # the base gained 0.5
    low, high = cells["ko_rag_gain_delta_ci_low_1k"], cells["ko_rag_gain_delta_ci_high_1k"]
    assert isinstance(low, float) and isinstance(high, float) and low <= -0.5 <= high
    base_cells = rag_cells(rag_findings.rag_findings(saved["base"], None, [], {}, {"1k": 0.75}))
    assert base_cells["ko_rag_gain_1k"] == pytest.approx(0.5) and "ko_rag_gain_delta_1k" not in base_cells
    identity = {
        "model": "tiny",
        "checkpoint": "c",
        "scheme": "bf16",
        "calibration": "none",
        "status": "ok",
        "suite_version": "0",
        "date": "2026-01-01T00:00:00",
        "ko_en_gap": None,
        "ko_en_gap_ci_low": None,
        "ko_en_gap_ci_high": None,
        "weights_gib": None,
        "weights_saving_gib": None,
        "weights_saving_x": None,
        "kv_cache_gib": None,
        "kv_cache_tokens": None,
        "max_concurrency": None,
        "load_concurrency": None,
        "load_output_tokens_per_s": None,
        "load_preemptions": None,
        "disk_gib": None,
        "items_per_s": None,
        "serve_profile": "p",
        "checkpoint_key": "k",
        "versions": "v",
        "command": "kqe eval",
    }
    board = tmp_path / "leaderboard.csv"
    write_leaderboard(board, [LeaderboardRow(**identity, **cells)])
    header = board.read_text().splitlines()[0].split(",")
    assert {"ko_rag_oracle_f1_1k", "ko_rag_depth50_f1_1k", "ko_rag_gain_delta_1k"} <= set(header)
    assert "ko_rag_depth25_f1_1k" not in header  # a condition no row scored has no columns
    [back] = read_leaderboard(board)
    assert back.ko_rag_gain_delta_1k == pytest.approx(-0.5) and back.ko_rag_oracle_f1_2k is None


def test_the_reproduce_command_names_the_ko_rag_options() -> None:
    from kqe.core.eval_config import EvalConfig

    asked = EvalConfig(rag_conditions=("retrieved", "depth"), rag_chat_template=True).command()
    assert "--rag-conditions retrieved,depth --rag-lengths 1k --rag-questions 40 --rag-chat-template" in asked
    default = EvalConfig(tasks="kmmlu,mmlu").command()
    assert "--rag-conditions" not in default and "--rag-chat-template" not in default
