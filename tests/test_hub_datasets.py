"""The hub dataset registry and its parallel pairs, on small offline copies in the hub layout written here:
the same loaders, lm-eval YAMLs and pairing as the real datasets; the one-line refusals."""

from __future__ import annotations

import json
import random

import pytest

from evals.statistics import parallel, stats
from evals.statistics.pairing import ScoredItem
from evals.tasks.hub_datasets import HUB_DATASETS, lm_eval_availability, offline_copy
from evals.tasks.parallel_sources import BELEBELE_FILES, BELEBELE_PAIRING, MMMLU_KO_FILE, MMMLU_PAIRING
from evals.tasks.prompts import PromptItem, load_prompts, prepare_tasks
from evals.tasks.registry import TASK_SPECS
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace

SUBJECTS = ("anatomy", "virology")
PER_SUBJECT = 3


def mmlu_rows() -> list[dict]:
    return [
        {
            "question": f"English {subject} question {i}?",
            "subject": subject,
            "choices": [f"{subject} choice {c} {i}" for c in "wxyz"],
            "answer": (i + len(subject)) % 4,
        }
        for subject in SUBJECTS
        for i in range(PER_SUBJECT)
    ]


def write_mmlu_copy(ws: Workspace) -> None:
    """cais/mmlu's test parquet (all/test-*.parquet) in the hub layout."""
    import pandas as pd

    folder = offline_copy(ws, "cais/mmlu") / "all"
    folder.mkdir(parents=True)
    pd.DataFrame(mmlu_rows()).to_parquet(folder / "test-00000-of-00001.parquet")


def write_mmmlu_copy(ws: Workspace, rows: list[dict] | None = None) -> None:
    """openai/MMMLU's KO_KR CSV in the hub layout: the English rows translated, same order and answers."""
    import pandas as pd

    korean = (
        rows
        if rows is not None
        else [
            {
                "Question": f"한국어 {row['subject']} 질문 {i}?",
                "Answer": "ABCD"[row["answer"]],
                "Subject": row["subject"],
                **{letter: f"선택지 {letter} {i}" for letter in "ABCD"},
            }
            for i, row in enumerate(mmlu_rows())
        ]
    )
    path = offline_copy(ws, "openai/MMMLU") / MMMLU_KO_FILE
    path.parent.mkdir(parents=True)
    pd.DataFrame(korean).to_csv(path, index=False)


def belebele_rows(language: str) -> list[dict]:
    text = "한국어 지문" if language == "ko" else "English passage"
    return [
        {
            "link": f"https://example.org/wiki/{passage}",
            "question_number": number,
            "dialect": "x",
            "flores_passage": f"{text} {passage}",
            "question": f"{text} question {passage}.{number}",
            **{f"mc_answer{n}": f"{text} answer {n}" for n in range(1, 5)},
            "correct_answer_num": str((passage + number) % 4 + 1),
        }
        for passage in range(3)
        for number in (1, 2)
    ]


def write_belebele_copy(ws: Workspace, english_order_seed: int = 0) -> None:
    """facebook/belebele's kor_Hang and eng_Latn JSON Lines in the hub layout (English rows shuffled)."""
    folder = offline_copy(ws, "facebook/belebele")
    (folder / "data").mkdir(parents=True)
    english = belebele_rows("en")
    random.Random(english_order_seed).shuffle(english)
    for language, rows in (("ko", belebele_rows("ko")), ("en", english)):
        lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        (folder / BELEBELE_FILES[language]).write_text(lines, encoding="utf-8")


def pair_prompts(ws: Workspace, korean: str, english: str) -> tuple[list[PromptItem], list[PromptItem]]:
    data = prepare_tasks(ws, [korean, english], None, 0)
    return load_prompts(korean, data), load_prompts(english, data)


def key(item: PromptItem) -> str:
    return item.item_id.split("/", 1)[1]


def test_mmmlu_ko_and_mmlu_en_load_from_offline_copies_matched_item_for_item(workspace: Workspace) -> None:
    write_mmlu_copy(workspace)
    write_mmmlu_copy(workspace)
    ko, en = pair_prompts(workspace, "mmmlu_ko", "mmlu_en")
    assert len(ko) == len(en) == len(SUBJECTS) * PER_SUBJECT
    assert [key(item) for item in ko] == [key(item) for item in en]
    assert [item.gold for item in ko] == [row["answer"] for row in mmlu_rows()] == [item.gold for item in en]
    assert ko[0].item_id == "mmmlu_ko/anatomy/0000" and en[-1].item_id == "mmlu_en/virology/0002"
    description = "The following are multiple choice questions (with answers) about anatomy"
    assert ko[0].prompt.startswith(f"{description} (Korean).\n\n한국어 anatomy 질문 0?\nA. 선택지 A 0\n")
    choices = "".join(f"{letter}. anatomy choice {c} 0\n" for letter, c in zip("ABCD", "wxyz", strict=True))
    assert en[0].prompt == f"{description}.\n\nEnglish anatomy question 0?\n{choices}Answer:"
    assert ko[0].continuations == (" A", " B", " C", " D")


def test_mmmlu_pair_is_refused_when_an_answer_or_a_count_does_not_match(workspace: Workspace) -> None:
    write_mmlu_copy(workspace)
    rows = [
        {
            "Question": f"질문 {i}",
            **{letter: "x" for letter in "ABCD"},
            "Answer": "ABCD"[row["answer"]],
            "Subject": row["subject"],
        }
        for i, row in enumerate(mmlu_rows())
    ]
    rows[4]["Answer"] = "ABCD"[(mmlu_rows()[4]["answer"] + 1) % 4]
    write_mmmlu_copy(workspace, rows)
    with pytest.raises(UserError, match=r"1 matched items differ in their answer \(first virology/0001\)"):
        prepare_tasks(workspace, ["mmmlu_ko"], None, 0)
    (offline_copy(workspace, "openai/MMMLU") / MMMLU_KO_FILE).unlink()
    (offline_copy(workspace, "openai/MMMLU") / "test").rmdir()
    write_mmmlu_copy(workspace, rows[:4] + rows[5:])
    with pytest.raises(UserError, match="virology has 2 Korean and 3 English items"):
        prepare_tasks(workspace, ["mmmlu_ko"], None, 0)


def test_belebele_pairs_by_link_and_question_number_whatever_the_file_order(workspace: Workspace) -> None:
    write_belebele_copy(workspace, english_order_seed=3)
    ko, en = pair_prompts(workspace, "belebele_ko", "belebele_en")
    assert len(ko) == len(en) == 6 and len({item.subject for item in ko}) == 3  # a passage is a subject
    english = {key(item): item for item in en}
    assert set(english) == {key(item) for item in ko}
    for korean in ko:
        assert korean.gold == english[key(korean)].gold
        assert english[key(korean)].subject == korean.subject
    first = belebele_rows("ko")[0]
    answers = "".join(f"{letter}: 한국어 지문 answer {n}\n" for n, letter in enumerate("ABCD", start=1))
    assert ko[0].prompt == f"P: {first['flores_passage']}\nQ: {first['question']}\n{answers}Answer:"
    assert ko[0].gold == int(first["correct_answer_num"]) - 1


def test_a_pair_gap_is_matched_and_names_its_pairing(workspace: Workspace) -> None:
    write_belebele_copy(workspace)
    ko, en = pair_prompts(workspace, "belebele_ko", "belebele_en")

    def scored(items: list[PromptItem], wrong: set[int]) -> list[ScoredItem]:
        return [
            ScoredItem(task=item.task, item_id=item.item_id, correct=i not in wrong, subject=item.subject)
            for i, item in enumerate(items)
        ]

    order = {key(item): i for i, item in enumerate(ko)}
    en_by_ko = sorted(en, key=lambda item: order[key(item)])
    base = {"belebele_ko": scored(ko, set()), "belebele_en": scored(en_by_ko, set())}
    cand = {"belebele_ko": scored(ko, {0, 1, 2}), "belebele_en": scored(en_by_ko, {0})}
    compared = stats.compare_tasks("bf16", "q", base, cand)
    matched = parallel.with_matched_gaps(compared, base, cand)["belebele_ko"]
    assert matched.ko_en_gap == pytest.approx(-2 / 6)
    assert matched.ko_en_gap_pairing == f"{parallel.MATCHED}: {BELEBELE_PAIRING}"


def test_a_dataset_not_copied_offline_is_one_line_saying_where_and_how(workspace: Workspace) -> None:
    for task, hub in (
        ("mmmlu_ko", "openai/MMMLU"),
        ("belebele_en", "facebook/belebele"),
        ("mmlu_en", "cais/mmlu"),
    ):
        with pytest.raises(UserError) as caught:
            TASK_SPECS[task].source(workspace, False)
        message = str(caught.value)
        assert "\n" not in message and f"{hub} is not available offline" in message
        assert str(offline_copy(workspace, hub)) in message and HUB_DATASETS[hub].revision in message


def test_online_a_missing_copy_is_the_hub_at_its_pinned_revision(workspace: Workspace) -> None:
    source = TASK_SPECS["belebele_ko"].source(workspace, True)
    assert source.hub == "facebook/belebele@d4c91dedc9de484dbea7b7d940f898f59fd135e9"
    assert source.where == "facebook/belebele@d4c91de"
    assert (
        TASK_SPECS["mmmlu_ko"].source(workspace, True).hub
        == f"openai/MMMLU@{HUB_DATASETS['openai/MMMLU'].revision}"
    )


@pytest.mark.parametrize("task", ["kmmlu_redux", "kmmlu_pro"])
@pytest.mark.parametrize("online", [False, True])
def test_an_unconfirmed_schema_is_refused_in_one_line(workspace: Workspace, task: str, online: bool) -> None:
    with pytest.raises(UserError) as caught:
        prepare_tasks(workspace, [task], None, 0, online=online)
    message = str(caught.value)
    assert "\n" not in message and "not loadable" in message and "unconfirmed" in message
    assert (
        HUB_DATASETS[f"LGAI-EXAONE/{'KMMLU-Redux' if task == 'kmmlu_redux' else 'KMMLU-Pro'}"].revision
        is None
    )


def test_every_entry_says_where_its_facts_come_from() -> None:
    for hub, entry in HUB_DATASETS.items():
        assert entry.hub == hub and entry.licence and entry.provenance
        assert entry.revision is None or len(entry.revision) == 40
        assert (entry.unconfirmed is None) or entry.revision is None  # never a guessed hash for a refusal
    assert lm_eval_availability("EunsuKim/CLIcK") == (
        "online: EunsuKim/CLIcK (lm-eval reads main; revision None: unconfirmed)"
    )


def test_kqe_tasks_lists_the_new_entries_with_source_licence_and_twin(workspace: Workspace) -> None:
    from evals.tasks.catalogue import listings

    write_belebele_copy(workspace)
    found = {listing.name: listing for listing in listings(workspace, None)}
    assert found["mmmlu_ko"].english == "mmlu_en" and found["mmmlu_ko"].pairing == MMMLU_PAIRING
    assert (
        found["mmmlu_ko"].licence == "MIT"
        and "openai/MMMLU is not available offline" in found["mmmlu_ko"].availability
    )
    assert found["belebele_ko"].availability == "offline" and found["belebele_ko"].licence == "CC-BY-SA-4.0"
    assert found["kmmlu_redux"].availability.startswith("not ready: LGAI-EXAONE/KMMLU-Redux: not loadable")
    assert found["lm-eval:kobest_copa"].licence == "CC-BY-SA-4.0"
    belebele = "online: facebook/belebele (lm-eval reads main; registry pins d4c91de)"
    assert found["lm-eval:belebele_kor_Hang"].availability == belebele  # lm-eval does not read the copy
    assert "revision None: unconfirmed" in found["lm-eval:haerae"].availability
