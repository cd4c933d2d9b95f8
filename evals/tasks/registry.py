"""The task registry: every task the suite scores, once. The leaderboard's column prefixes, the plots'
labels, `kqe choose --task`, the Korean-vs-English pairing and the lm-eval task names all derive
from `TASK_SPECS`; adding a letter-choice task is one entry here, its data loader and its YAML
(`ko_faq` was added so: this entry, evals/tasks/debian_faq.py, evals/tasks/kqe_ko_faq.yaml).
Any lm-eval multiple-choice task is a task too, named `lm-eval:<name>` (evals/tasks/lm_eval_bridge.py):
its items come from lm-eval's own YAML, and it fills the `lmeval_*` columns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from evals.tasks.benchmark_data import Source, kmmlu_hard_source, kmmlu_source, mmlu_source
from evals.tasks.debian_faq import ko_faq_source
from evals.tasks.faq_chapters import faq_chapter_source
from evals.tasks.hub_datasets import HUB_DATASETS, unloadable_source
from evals.tasks.parallel_sources import (
    BELEBELE_HUB,
    BELEBELE_PAIRING,
    MMMLU_HUB,
    MMMLU_PAIRING,
    belebele_source,
    mmlu_en_source,
    mmmlu_ko_source,
)
from kqe.core.workspace import Workspace


@dataclass(frozen=True)
class TaskSpec:
    """One letter-choice task we score: which items, how many shots, which lm-eval task renders it."""

    source: Callable[[Workspace, bool], Source]
    """Where its items come from, given whether the run is online (hub, local copy or offline)."""
    shots: int
    """Shots asked for; offline KMMLU has at most 4 per item."""
    lm_eval_task: str
    """Name of its lm-eval task in evals/tasks/."""
    columns: str
    """Prefix of the leaderboard columns it fills (`kmmlu`, `mmlu`): one task per prefix per run."""
    label: str
    """What reports and plots call the columns it fills."""
    licence: str
    """Licence of its items (`kqe tasks` shows it)."""
    english: str | None = None
    """The English task its loss is contrasted with (the Korean-vs-English gap); None for English tasks."""
    categories: tuple[str, ...] = ()
    """Supercategories its subjects fall in (keys of CATEGORY_LABELS), each a column of its own."""
    pairing: str | None = None
    """How its items match its English twin's, translated item for item (same item id after the task
    name), so the Korean-vs-English gap is taken on matched items (`evals/statistics/parallel.py`);
    None when the two hold different items. The leaderboard's `ko_en_gap_pairing` names it."""


@dataclass(frozen=True)
class ColumnSpec:
    """What a leaderboard column prefix is called and which supercategory columns it has."""

    label: str
    """What reports and plots call its columns."""
    categories: tuple[str, ...] = ()
    """Supercategories (keys of CATEGORY_LABELS), each a column of its own."""


CATEGORY_LABELS = {
    "stem": "STEM",
    "applied": "Applied Science",
    "humss": "HUMSS (humanities and social sciences)",
    "other": "Other",
}
"""Supercategory key -> what the column docs call it (KMMLU's four, lm-eval's group tags)."""
KMMLU_CATEGORIES = tuple(CATEGORY_LABELS)


KMMLU_LICENCE = "CC-BY-ND-4.0"
MMLU_LICENCE = "MIT"
DEBIAN_FAQ_LICENCE = "verbatim-copying permission of the Debian FAQ"
TASK_SPECS = {
    "kmmlu": TaskSpec(
        kmmlu_source, 0, "kqe_kmmlu", "kmmlu", "KMMLU", KMMLU_LICENCE, "mmlu", KMMLU_CATEGORIES
    ),
    "kmmlu_5shot": TaskSpec(
        kmmlu_source, 5, "kqe_kmmlu_5shot", "kmmlu", "KMMLU", KMMLU_LICENCE, "mmlu_5shot", KMMLU_CATEGORIES
    ),
    "kmmlu_hard": TaskSpec(
        kmmlu_hard_source, 0, "kqe_kmmlu_hard", "kmmlu", "KMMLU", KMMLU_LICENCE, "mmlu", KMMLU_CATEGORIES
    ),
    "mmlu": TaskSpec(mmlu_source, 0, "kqe_mmlu", "mmlu", "MMLU", MMLU_LICENCE),
    "mmlu_5shot": TaskSpec(mmlu_source, 5, "kqe_mmlu_5shot", "mmlu", "MMLU", MMLU_LICENCE),
    "ko_faq": TaskSpec(ko_faq_source, 0, "kqe_ko_faq", "ko_faq", "KO-FAQ", DEBIAN_FAQ_LICENCE),
    "faq_chapter_ko": TaskSpec(
        partial(faq_chapter_source, "ko"),
        0,
        "kqe_faq_chapter_ko",
        "faq_ko",
        "FAQ-CHAPTER-KO",
        DEBIAN_FAQ_LICENCE,
        "faq_chapter_en",
        pairing="section number (Debian FAQ ko ↔ en)",
    ),
    "faq_chapter_en": TaskSpec(
        partial(faq_chapter_source, "en"),
        0,
        "kqe_faq_chapter_en",
        "faq_en",
        "FAQ-CHAPTER-EN",
        DEBIAN_FAQ_LICENCE,
    ),
    "mmmlu_ko": TaskSpec(
        mmmlu_ko_source, 0, "kqe_mmmlu_ko", "mmmlu", "MMMLU-KO", HUB_DATASETS[MMMLU_HUB].licence, "mmlu_en",
        pairing=MMMLU_PAIRING,
    ),
    "mmlu_en": TaskSpec(mmlu_en_source, 0, "kqe_mmlu_en", "mmlu", "MMLU", MMLU_LICENCE),
    "belebele_ko": TaskSpec(
        partial(belebele_source, "ko"), 0, "kqe_belebele_ko", "belebele_ko", "BELEBELE-KO",
        HUB_DATASETS[BELEBELE_HUB].licence, "belebele_en", pairing=BELEBELE_PAIRING,
    ),
    "belebele_en": TaskSpec(
        partial(belebele_source, "en"), 0, "kqe_belebele_en", "belebele_en", "BELEBELE-EN",
        HUB_DATASETS[BELEBELE_HUB].licence,
    ),
    "kmmlu_redux": TaskSpec(
        partial(unloadable_source, "LGAI-EXAONE/KMMLU-Redux"), 0, "kqe_kmmlu", "kmmlu", "KMMLU",
        HUB_DATASETS["LGAI-EXAONE/KMMLU-Redux"].licence, "mmlu", KMMLU_CATEGORIES,
    ),
    "kmmlu_pro": TaskSpec(
        partial(unloadable_source, "LGAI-EXAONE/KMMLU-Pro"), 0, "kqe_kmmlu", "kmmlu", "KMMLU",
        HUB_DATASETS["LGAI-EXAONE/KMMLU-Pro"].licence, "mmlu", KMMLU_CATEGORIES,
    ),
}  # fmt: skip
OTHER_TASKS = ("ko_rag",)
"""Tasks scored by their own modules (ko_rag: evals/tasks/ko_rag/task.py): known names, not prepared here."""
TASKS = (*TASK_SPECS, *OTHER_TASKS)
LM_EVAL_PREFIX = "lm-eval:"
"""What names an lm-eval multiple-choice task in `--tasks`: `lm-eval:kobest_copa`, `lm-eval:haerae`."""
LM_EVAL_COLUMNS = "lmeval"
"""Column prefix an lm-eval task fills (its `lmeval_source` says which task): one such task per run."""
LM_EVAL_TASKS = {task: spec.lm_eval_task for task, spec in TASK_SPECS.items()}
"""Our task name -> name of its lm-eval task in evals/tasks/."""
COLUMN_PREFIXES = {task: spec.columns for task, spec in TASK_SPECS.items()}
"""Registry task -> its leaderboard column prefix; a run scores at most one task per prefix."""


def is_lm_eval_task(task: str) -> bool:
    """Whether `task` names an lm-eval task (`lm-eval:<name>`) rather than a registry task."""
    return task.startswith(LM_EVAL_PREFIX)


def fills_task_columns(task: str) -> bool:
    """Whether `task` fills the shared `<prefix>_*` accuracy columns (ko_rag's tasks write their own)."""
    return task in TASK_SPECS or is_lm_eval_task(task)


def column_prefix(task: str) -> str:
    """The leaderboard column prefix `task` fills (registry tasks: their entry; lm-eval tasks: `lmeval`)."""
    return LM_EVAL_COLUMNS if is_lm_eval_task(task) else TASK_SPECS[task].columns


def _first_per_prefix() -> dict[str, ColumnSpec]:
    found: dict[str, ColumnSpec] = {}
    for spec in TASK_SPECS.values():
        found.setdefault(spec.columns, ColumnSpec(spec.label, spec.categories))
    found[LM_EVAL_COLUMNS] = ColumnSpec("lm-eval task")
    return found


COLUMN_SPECS = _first_per_prefix()
"""Leaderboard column prefix -> label and supercategories (of the first task registered with it)."""
COLUMN_LABELS = {prefix: spec.label for prefix, spec in COLUMN_SPECS.items()}
"""Leaderboard column prefix -> label, in column order (Korean first)."""
KOREAN_TO_ENGLISH = {task: spec.english for task, spec in TASK_SPECS.items() if spec.english}
"""Korean task -> the English task its loss is contrasted with."""
PARALLEL_TASKS = {task: spec.pairing for task, spec in TASK_SPECS.items() if spec.pairing and spec.english}
"""Korean task -> how its items match its English twin's (its gap to English is taken on matched items)."""
