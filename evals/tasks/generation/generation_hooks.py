"""Data and filter of the offline generation task `kqe_kmmlu_hard_gen` (its YAML names these).

The answer filter is lm-eval's own KorMedMCQA cascade (`lm_eval/tasks/kormedmcqa/utils.py`), limited to
the four letters KMMLU has.
"""

from __future__ import annotations

from typing import Any

import datasets
from lm_eval.api.filter import Filter

from evals.tasks.benchmark_data import kmmlu_hard_dir, kmmlu_hard_rows

LETTERS = "ABCD"


def kmmlu_hard_dev(**options: Any) -> datasets.DatasetDict:
    """The 225 KMMLU-HARD dev items (question, A–D, answer 1–4, subject) as the `test` split."""
    rows = kmmlu_hard_rows(kmmlu_hard_dir(), "kqe_kmmlu_hard_gen")
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


class ExtractLetterFilter(Filter):
    """The letter an answer chooses, by KorMedMCQA's cascade over A–D; empty when none is found."""

    def apply(self, resps: Any, docs: Any) -> Any:
        from lm_eval.tasks.kormedmcqa.utils import extract_choice

        return [[_letter(extract_choice(resp)) for resp in responses] for responses in resps]


def _letter(choice: str) -> str:
    return choice if choice in LETTERS else ""
