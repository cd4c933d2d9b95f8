"""ko_faq, the task added through the registry alone: headings rebuilt from two wrappings, items built
from the fetched Debian FAQs, rendered by lm-eval, and columns that appear only where it was scored."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evals.reporting.leaderboard import read_leaderboard, write_leaderboard
from evals.reporting.leaderboard_row import LeaderboardRow, columns
from evals.tasks import debian_faq
from evals.tasks.prompts import load_prompts, prepare_tasks, source_label
from kqe.core.workspace import Workspace
from tests.helpers.benchmark_copies import link_faq_sources


@pytest.mark.parametrize(
    ("first", "second", "merged"),
    [
        ("어떻게 아나\n요?", "어떻게\n아나요?", "어떻게 아나요?"),  # Korean wraps inside words
        ("Debian GNU/\nLinux?", "Debian\nGNU/Linux?", "Debian GNU/Linux?"),
        ("a b\nc", "a\nb c", "a b c"),  # either copy's space counts
        ("x\ny", "x\ny", "x y"),  # both break at the same place: a space
    ],
)
def test_a_heading_is_rebuilt_from_two_wrappings(first: str, second: str, merged: str) -> None:
    assert debian_faq.merge_wrappings(first, second) == merged


def test_items_pair_each_korean_question_with_its_english_original(workspace: Workspace) -> None:
    link_faq_sources(workspace)
    ko, en = (workspace.sources() / debian_faq.FILES[lang] for lang in ("ko", "en"))
    korean, english = debian_faq.faq_questions(ko), debian_faq.faq_questions(en)
    rows = debian_faq.ko_faq_rows(ko, en)
    assert len(rows) >= 100 and len({row["item_id"] for row in rows}) == len(rows)
    assert min(Counter(row["subject"] for row in rows).values()) >= 2  # chapters are real clusters
    for row in rows:
        assert row["question"] == korean[row["section"]] and "\n" not in row["question"]
        assert len(set(row["choices"])) == 4 and row["choices"][row["answer"]] == english[row["section"]]
        chapter = row["section"].split(".")[0]
        same_chapter = {text for number, text in english.items() if number.split(".")[0] == chapter}
        assert set(row["choices"]) <= same_chapter
    assert Counter(row["answer"] for row in rows).most_common(1)[0][1] < 0.4 * len(rows)  # gold is shuffled
    assert rows == debian_faq.ko_faq_rows(ko, en)


def test_ko_faq_is_prepared_and_rendered_by_lm_eval(workspace: Workspace) -> None:
    link_faq_sources(workspace)
    folder = prepare_tasks(workspace, ["ko_faq"], None, seed=0)
    prompts = load_prompts("ko_faq", folder)
    assert source_label("ko_faq", folder).startswith(
        "Debian FAQ KO→EN questions (debian-faq-ko 11.1, offline"
    )
    rows = {
        row["item_id"]: row
        for row in debian_faq.ko_faq_rows(
            *(workspace.sources() / debian_faq.FILES[lang] for lang in ("ko", "en"))
        )
    }
    assert len(prompts) == len(rows)
    for item in prompts:
        row = rows[item.item_id]
        assert item.prompt.startswith(
            f"다음 데비안 FAQ 질문의 영어 원문을 고르세요.\n\n질문: {row['question']}\nA. "
        )
        assert item.prompt.endswith("정답：") and item.continuations == (" A", " B", " C", " D")
        assert item.gold == row["answer"] and item.subject == row["subject"]


def test_its_columns_appear_only_in_leaderboards_that_scored_it(tmp_path: Path) -> None:
    identity = {
        "model": "m",
        "scheme": "bf16",
        "calibration": "none",
        "status": "ok",
        "suite_version": "0",
        "date": "d",
        "serve_profile": "p",
        "checkpoint_key": "k",
        "versions": "",
        "command": "c",
    }
    empty = {
        name: None
        for name in LeaderboardRow.model_fields
        if name not in identity | {"tasks": 0, "schema_version": 0}
    }
    plain = LeaderboardRow(**identity | empty | {"checkpoint": "a", "kmmlu_acc": 0.3})
    with_faq = LeaderboardRow(**identity | empty | {"checkpoint": "b", "kmmlu_acc": 0.3, "ko_faq_acc": 0.5})
    assert "ko_faq_acc" not in columns([plain]) and "ko_faq_acc" in columns([plain, with_faq])
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [plain])  # a board written before ko_faq existed still reads
    assert read_leaderboard(path)[0].ko_faq_acc is None
    write_leaderboard(path, [plain, with_faq])
    assert [row.ko_faq_acc for row in read_leaderboard(path)] == [None, 0.5]
