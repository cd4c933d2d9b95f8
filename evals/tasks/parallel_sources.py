"""Two parallel Korean/English pairs from hub datasets (evals/tasks/hub_datasets.py), matched item by item.

- `mmmlu_ko` / `mmlu_en`: openai/MMMLU's KO_KR file is MMLU's test set translated by professional
  translators; an item is matched to cais/mmlu's test item of the same subject at the same position
  within the subject (`<subject>/<position>`). No source seen states this order outright, so it is
  checked on every load: both sides must hold the same subjects with the same counts and the same
  answer letter on every matched item, else the pair is refused with the first mismatch.
- `belebele_ko` / `belebele_en`: facebook/belebele's kor_Hang and eng_Latn files; its data/README says
  a passage is `link` (with `split`) and a question is passage plus `question_number`, the same in every
  language, so an item's key is those fields; both sides must hold the same keys and answers.

The matched key is each item id after its task name, which is what evals/statistics/parallel.py pairs on.
The Belebele subject (the bootstrap's cluster) is the passage: its one or two questions share it.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from evals.tasks.benchmark_data import (
    LETTERS,
    MMLU_HUB,
    Row,
    Source,
    SourceRows,
    files_sha,
    load_hub_files,
    mmlu_hub_row,
    offline_rows,
)
from evals.tasks.hub_datasets import locate
from kqe.core.errors import UserError
from kqe.core.io import sha256_of
from kqe.core.workspace import Workspace

MMMLU_HUB = "openai/MMMLU"
MMMLU_KO_FILE = "test/mmlu_KO-KR.csv"
MMLU_TEST_FILES = "all/test-*.parquet"
BELEBELE_HUB = "facebook/belebele"
BELEBELE_FILES = {"ko": "data/kor_Hang.jsonl", "en": "data/eng_Latn.jsonl"}
MMMLU_PAIRING = "subject + position (MMMLU KO_KR ↔ MMLU test, answers checked equal)"
BELEBELE_PAIRING = "link + question_number (Belebele kor_Hang ↔ eng_Latn, answers checked equal)"
_MMMLU_TEXT = ("Question", *LETTERS, "Answer", "Subject")
"""MMMLU CSV columns read as raw text (pandas would turn `12` into a number and `NA` into NaN)."""
_SUBJECT_MARKERS = ("_test.csv", "_test-")
"""Some MMMLU Subject cells embed a CSV file name; lm-eval 0.4.13 cuts them at these
(lm_eval/tasks/openai-mmmlu/default/utils.py, `_normalize_subject_name`)."""


def _positional(task: str, rows: list[Row]) -> list[Row]:
    """Rows with `item_id` = `task/subject/<position within subject>`, in file order."""
    seen: Counter[str] = Counter()
    out = []
    for row in rows:
        out.append({"item_id": f"{task}/{row['subject']}/{seen[row['subject']]:04d}", **row})
        seen[row["subject"]] += 1
    return out


def _mmmlu_subject(raw: str) -> str:
    for marker in _SUBJECT_MARKERS:
        raw = raw.split(marker)[0]
    return raw


def mmmlu_row(raw: Row) -> Row:
    """One MMMLU CSV row in the MMLU family's fields (`answer` 0-based)."""
    if raw["Answer"] not in LETTERS:
        raise UserError(
            f"MMMLU row {raw['Question'][:40]!r}: Answer {raw['Answer']!r} is not A-D: is this "
            f"{MMMLU_HUB} {MMMLU_KO_FILE}?"
        )
    return {
        "subject": _mmmlu_subject(raw["Subject"]),
        "question": raw["Question"],
        "choices": [raw[letter] for letter in LETTERS],
        "answer": LETTERS.index(raw["Answer"]),
    }


def belebele_row(raw: Row) -> Row:
    """One Belebele row: the passage as subject, the key fields kept for pairing."""
    answer = str(raw["correct_answer_num"])
    if answer not in ("1", "2", "3", "4"):
        raise UserError(f"Belebele row {raw['link']}: correct_answer_num {answer!r} is not 1-4")
    passage = sha256_of(f"{raw['link']}\n{raw.get('split', '')}".encode())[:10]
    return {
        "subject": f"passage_{passage}",
        "question_number": int(raw["question_number"]),
        "flores_passage": raw["flores_passage"],
        "question": raw["question"],
        "choices": [raw[f"mc_answer{n}"] for n in range(1, 5)],
        "answer": int(answer) - 1,
    }


def _belebele_ids(task: str, rows: list[Row]) -> list[Row]:
    return [{"item_id": f"{task}/{row['subject']}/q{row['question_number']}", **row} for row in rows]


def check_pairs(korean: list[Row], english: list[Row], what: str) -> None:
    """A UserError naming the first item where the two sides do not match key for key, answer for answer."""

    def answers(rows: list[Row]) -> dict[str, int]:
        keyed = {row["item_id"].split("/", 1)[1]: row["answer"] for row in rows}
        if len(keyed) != len(rows):
            raise UserError(f"{what}: {len(rows) - len(keyed)} items share a key: not a parallel pair")
        return keyed

    ko, en = answers(korean), answers(english)
    per_subject: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key in ko:
        per_subject[key.split("/")[0]][0] += 1
    for key in en:
        per_subject[key.split("/")[0]][1] += 1
    for subject, (n_ko, n_en) in sorted(per_subject.items()):
        if n_ko != n_en:
            raise UserError(
                f"{what}: {subject} has {n_ko} Korean and {n_en} English items: not matched item "
                "for item; check both files are the pinned revisions"
            )
    differing = sorted(key for key in ko if ko[key] != en[key])
    if differing:
        raise UserError(
            f"{what}: {len(differing)} matched items differ in their answer (first "
            f"{differing[0]}): the files are not aligned item for item"
        )


def _mmlu_rows(where: Path | str, task: str, cache: Path) -> list[Row]:
    test = load_hub_files(where, {"test": MMLU_TEST_FILES}, cache, {})["test"]
    return _positional(task, [mmlu_hub_row(raw) for raw in test])


def _mmmlu_ko_rows(where: Path | str, task: str, cache: Path) -> list[Row]:
    options = {"converters": dict.fromkeys(_MMMLU_TEXT, str), "keep_default_na": False}
    test = load_hub_files(where, {"test": MMMLU_KO_FILE}, cache, options)["test"]
    return _positional(task, [mmmlu_row(raw) for raw in test])


def _identity(where: Path | str, patterns: list[str]) -> str:
    if isinstance(where, Path):
        return files_sha([path for pattern in patterns for path in where.glob(pattern)])
    return where


def mmlu_en_source(ws: Workspace, online: bool) -> Source:
    """MMLU's test set with positional item ids: the English side of the MMMLU pair."""
    where = locate(ws, MMLU_HUB, [MMLU_TEST_FILES], online)
    load = functools.partial(_offline_of, _mmlu_rows, where, cache=ws.cache / "hf-datasets")
    hub = where if isinstance(where, str) else None
    return Source(
        "MMLU test (parallel to MMMLU KO_KR)",
        _where(where),
        _identity(where, [MMLU_TEST_FILES]),
        "same",
        True,
        None,
        hub,
        load,
    )


def mmmlu_ko_source(ws: Workspace, online: bool) -> Source:
    """MMMLU KO_KR, checked against MMLU's test set item for item on every load."""
    korean = locate(ws, MMMLU_HUB, [MMMLU_KO_FILE], online)
    english = locate(ws, MMLU_HUB, [MMLU_TEST_FILES], online)
    cache = ws.cache / "hf-datasets"

    def load(task: str) -> SourceRows:
        rows = _mmmlu_ko_rows(korean, task, cache)
        check_pairs(rows, _mmlu_rows(english, "mmlu_en", cache), "MMMLU KO_KR vs MMLU test")
        return offline_rows(rows)

    identity = f"{_identity(korean, [MMMLU_KO_FILE])}+{_identity(english, [MMLU_TEST_FILES])}"
    hub = korean if isinstance(korean, str) else None
    return Source(
        "MMMLU KO_KR test (parallel to MMLU)", _where(korean), identity, "same", True, None, hub, load
    )


def _belebele_rows(where: Path | str, language: str, task: str, cache: Path) -> list[Row]:
    test = load_hub_files(where, {"test": BELEBELE_FILES[language]}, cache, {})["test"]
    return _belebele_ids(task, [belebele_row(raw) for raw in test])


def belebele_source(language: str, ws: Workspace, online: bool) -> Source:
    """Belebele in `language` (`ko` or `en`); the Korean side is checked against the English on load."""
    files = list(BELEBELE_FILES.values()) if language == "ko" else [BELEBELE_FILES[language]]
    where = locate(ws, BELEBELE_HUB, files, online)
    cache = ws.cache / "hf-datasets"

    def load(task: str) -> SourceRows:
        rows = _belebele_rows(where, language, task, cache)
        if language == "ko":
            english = _belebele_rows(where, "en", "belebele_en", cache)
            check_pairs(rows, english, "Belebele kor_Hang vs eng_Latn")
        return offline_rows(rows)

    hub = where if isinstance(where, str) else None
    name = f"Belebele {BELEBELE_FILES[language].split('/')[1].split('.')[0]} (parallel)"
    return Source(name, _where(where), _identity(where, files), "same", True, None, hub, load)


def _offline_of(read: Any, where: Path | str, task: str, cache: Path) -> SourceRows:
    return offline_rows(read(where, task, cache))


def _where(where: Path | str) -> str:
    if isinstance(where, Path):
        return f"offline copy at {where}"
    hub, revision = where.split("@")
    return f"{hub}@{revision[:7]}"
