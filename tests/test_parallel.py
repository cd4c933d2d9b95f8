"""The Korean-vs-English gap on matched items of a parallel pair, and the offline FAQ pair itself."""

from __future__ import annotations

import re

import pytest

from evals.statistics import parallel, stats
from evals.statistics.pairing import ScoredItem
from evals.tasks.prompts import load_prompts, prepare_tasks
from kqe.core.workspace import Workspace
from tests.helpers.benchmark_copies import link_faq_sources


def _items(task: str, correct: list[bool]) -> list[ScoredItem]:
    return [
        ScoredItem(task=task, item_id=f"{task}/s{i % 6}/{i}", correct=ok, subject=f"s{i % 6}")
        for i, ok in enumerate(correct)
    ]


def test_matched_gap_cancels_what_both_languages_lose_on_the_same_items() -> None:
    n = 120
    base = [i % 3 != 0 for i in range(n)]
    cand = [ok and i % 5 != 0 for i, ok in enumerate(base)]  # the same items flip in both languages
    ko_en = {"faq_chapter_ko": base, "faq_chapter_en": base}
    base_items = {task: _items(task, ok) for task, ok in ko_en.items()}
    cand_items = {task: _items(task, cand) for task in ko_en}
    unpaired = stats.compare_tasks("bf16", "q", base_items, cand_items)["faq_chapter_ko"]
    assert unpaired.ko_en_gap_pairing == stats.UNPAIRED and unpaired.ko_en_gap == pytest.approx(0.0)
    assert unpaired.ko_en_gap_ci_high - unpaired.ko_en_gap_ci_low > 0.05  # two draws' noise adds up
    matched = parallel.with_matched_gaps({"faq_chapter_ko": unpaired}, base_items, cand_items)[
        "faq_chapter_ko"
    ]
    assert matched.ko_en_gap_pairing == f"{parallel.MATCHED}: section number (Debian FAQ ko ↔ en)"
    assert (matched.ko_en_gap, matched.ko_en_gap_ci_low, matched.ko_en_gap_ci_high) == (0.0, 0.0, 0.0)


def test_matched_gap_is_the_mean_per_item_difference_with_a_ci_around_it() -> None:
    n = 120
    base = [True] * n
    cand_ko = [i % 4 != 0 for i in range(n)]  # Korean loses a quarter of the items
    cand_en = [i % 8 != 0 for i in range(n)]  # English an eighth, half of them the same items
    gap = parallel.matched_gap(
        _items("ko", base), _items("ko", cand_ko), _items("en", base), _items("en", cand_en), 1000, 0
    )
    assert gap.items == n and gap.gap == pytest.approx(-(n // 4 - n // 8) / n)
    assert gap.ci_low < gap.gap < gap.ci_high < 0


def test_faq_chapter_pair_holds_the_same_questions_in_both_languages(workspace: Workspace) -> None:
    link_faq_sources(workspace)
    data = prepare_tasks(workspace, ["faq_chapter_ko", "faq_chapter_en"], None, 0)
    ko, en = load_prompts("faq_chapter_ko", data), load_prompts("faq_chapter_en", data)
    assert len(ko) == len(en) >= 100 and len({item.subject for item in ko}) >= 10
    hangul = re.compile(r"[\uac00-\ud7a3]")
    for korean, english in zip(ko, en, strict=True):
        assert korean.item_id.split("/", 1)[1] == english.item_id.split("/", 1)[1]
        assert (korean.gold, korean.subject) == (english.gold, english.subject)
        assert hangul.search(korean.prompt.split("질문: ")[1]) and not hangul.search(english.prompt)
