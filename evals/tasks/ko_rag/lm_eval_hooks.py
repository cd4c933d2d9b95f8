"""Dataset and metrics for the ko_rag lm-eval tasks: the rows `evals.tasks.ko_rag.task.prepare_ko_rag` writes.

Where the rows come from, first match wins:
- lm-eval metadata `kqe_task_data` or the environment variable `KQE_TASK_DATA`: a folder holding
  `ko_rag.jsonl` (what `kqe eval` prepared; its manifest says for which tokenizer and max-model-len);
- otherwise they are prepared here (and cached under `KQE_HOME`) for the model being evaluated:
  lm-eval passes the model arguments as metadata, so `pretrained` (or `tokenizer`) names the tokenizer
  that counts the context budget, and `max_length`, else the model config's context size, decides which
  lengths fit. Metadata `ko_rag_max_length` caps it, `ko_rag_data` points at a folder with your own
  docs.jsonl + questions.jsonl, `ko_rag_limit` samples questions, `ko_rag_seed` seeds it (default 1234),
  `ko_rag_conditions` names the conditions (`retrieved,oracle,depth,closed_book`; default
  `retrieved,closed_book`), `ko_rag_chat_template: true` wraps each prompt in the model's chat
  template (instruct checkpoints).
  The built-in documents need the offline sources: run `make setup` first.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import datasets

DATA_ENV = "KQE_TASK_DATA"
METADATA_KEY = "kqe_task_data"
DEFAULT_MAX_LENGTH = 2048
"""lm-eval's hf model falls back to this when neither its arguments nor the config give a length."""


def _model_max_length(pretrained: str, options: dict[str, Any]) -> int:
    if options.get("max_length"):
        return int(options["max_length"])
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(pretrained).get_text_config()
    for attribute in ("n_positions", "max_position_embeddings", "n_ctx"):
        if getattr(config, attribute, None):
            return int(getattr(config, attribute))
    return DEFAULT_MAX_LENGTH


@functools.cache
def _prepared(
    tokenizer: str, max_length: int, data: str | None, limit: int | None, seed: int, options: Any
) -> str:
    from evals.tasks.ko_rag.task import prepare_ko_rag
    from kqe.core.workspace import Workspace

    where = Path(data) if data else None
    return str(prepare_ko_rag(Workspace.from_env(), Path(tokenizer), max_length, limit, seed, where, options))


def _rag_options(options: dict[str, Any]) -> Any:
    """The metadata's `ko_rag_conditions` and `ko_rag_chat_template` as task options."""
    from evals.tasks.ko_rag.task import RagOptions
    from kqe.core.defaults import RAG_DEFAULT_CONDITIONS
    from kqe.core.eval_config import parse_conditions

    named = options.get("ko_rag_conditions")
    conditions = parse_conditions(str(named), "ko_rag_conditions") if named else RAG_DEFAULT_CONDITIONS
    chat = str(options.get("ko_rag_chat_template", "")).lower() in ("1", "true", "yes")
    return RagOptions(conditions, chat_template=chat)


def data_folder(options: dict[str, Any]) -> Path:
    """The folder holding ko_rag.jsonl for this run (see the module docstring)."""
    where = options.get(METADATA_KEY) or os.environ.get(DATA_ENV)
    if where and (Path(where) / "ko_rag.jsonl").is_file():
        return Path(where)
    tokenizer = options.get("tokenizer") or options.get("pretrained")
    if not tokenizer:
        raise ValueError(
            f"ko_rag has no data: set {DATA_ENV} to a folder prepared by kqe, or evaluate a model "
            "given as `pretrained=<dir>` so the contexts can be cut with its tokenizer"
        )
    max_length = _model_max_length(str(tokenizer), options)
    if options.get("ko_rag_max_length"):
        max_length = min(max_length, int(options["ko_rag_max_length"]))
    limit = int(options["ko_rag_limit"]) if options.get("ko_rag_limit") else None
    seed = int(options.get("ko_rag_seed", 1234))
    rag = _rag_options(options)
    return Path(_prepared(str(tokenizer), max_length, options.get("ko_rag_data"), limit, seed, rag))


def load_ko_rag(**options: Any) -> datasets.DatasetDict:
    """`custom_dataset` of ko_rag_gen and ko_rag_mc (lm-eval passes metadata as keywords)."""
    lines = (data_folder(options) / "ko_rag.jsonl").read_text(encoding="utf-8").split("\n")
    rows = [json.loads(line) for line in lines if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def process_generation(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """Per-item em, f1 and contains of a generated answer, by the scorer the suite uses (metrics.py)."""
    from evals.tasks.ko_rag.answer_score import score_answer

    score = score_answer(results[0], doc["answers"], doc["answerable"])
    return {"em": float(score.exact), "f1": score.f1, "contains": float(score.contains)}
