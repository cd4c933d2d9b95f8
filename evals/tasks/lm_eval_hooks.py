"""Dataset loaders for the kqe task YAMLs: they read the items `evals.tasks.prompts.prepare_tasks` wrote.

The data folder is not known when the YAMLs are written, so it comes at run time from lm-eval's task
metadata key `kqe_task_data` (`--metadata '{"kqe_task_data": DIR}'`, or `TaskManager(metadata=...)`)
or, failing that, from the environment variable `KQE_TASK_DATA`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import datasets

DATA_ENV = "KQE_TASK_DATA"
METADATA_KEY = "kqe_task_data"


def task_data_file(task: str, options: dict[str, Any]) -> Path:
    """The prepared JSON Lines file of `task` named by lm-eval metadata or the environment."""
    where = options.get(METADATA_KEY) or os.environ.get(DATA_ENV)
    if not where:
        raise ValueError(
            f"no task data for {task}: set {DATA_ENV} (or metadata {METADATA_KEY}) to a folder "
            "written by evals.tasks.prompts.prepare_tasks"
        )
    path = Path(where) / f"{task}.jsonl"
    if not path.is_file():
        raise ValueError(f"{path} is missing: prepare the task data with evals.tasks.prompts.prepare_tasks")
    return path


def _load(task: str, options: dict[str, Any]) -> datasets.DatasetDict:
    # split on "\n" only: str.splitlines() also breaks at U+2028, U+0085, … that MMLU text contains
    lines = task_data_file(task, options).read_text(encoding="utf-8").split("\n")
    rows = [json.loads(line) for line in lines if line.strip()]
    # from_list keeps everything in memory: no writes to the datasets cache for a few thousand rows.
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def load_prepared(task: str, **options: Any) -> datasets.DatasetDict:
    """`custom_dataset` of every kqe task YAML: its `dataset_kwargs: {task: <our task name>}` says which
    prepared file to read (lm-eval passes task metadata and dataset_kwargs as keywords)."""
    return _load(task, options)
