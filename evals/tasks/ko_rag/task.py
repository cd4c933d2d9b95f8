"""ko_rag: Korean retrieval-augmented QA over real documents, with a context-length sweep.

For each question: BM25 (evals/tasks/ko_rag/retrieval.py) retrieves the top-k passages of the whole pool;
for each sweep length the context is a block of passages plus distractors up to the token budget,
counted with the target model's tokenizer (BOS included, like lm-eval's hf model). A length is the
whole request, prompt plus answer room: `1k` = 1,024 tokens holds a prompt of at most 1,024 −
MAX_NEW_TOKENS. Lengths above the served max-model-len are skipped and recorded as skipped. The block
is what the condition says (`sweep.py`): the retrieved passages, the gold ones (oracle, depth grid),
or no documents at all (closed-book).

Each row (question, condition, length: `rows.py`) becomes two scored items that share their context
(so the server's prefix cache reads it once):
- `ko_rag/<question>/<condition>/<length>`: a generated short answer (greedy, ≤ MAX_NEW_TOKENS, stops
  at a newline), scored by exact match / morpheme F1 / Hangul share (evals/scoring/generate.py); an
  unanswerable question is right when the answer abstains (abstention.py);
- `ko_rag_mc/<question>/<condition>/<length>`: four choices (the gold answer, distractors of its kind
  that are not also right, see choices.py, and ABSTAIN) scored by the log-probability of the letters.

`prepare_ko_rag` writes the rows (`ko_rag.jsonl`) the lm-eval tasks in evals/tasks/ko_rag/ read and a
manifest (`ko_rag.source.json`) into a cache folder keyed by every input, like `prompts.prepare_tasks`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.tasks.ko_rag.context import LETTERS, hf_budgeter
from evals.tasks.ko_rag.rows import build_rows
from evals.tasks.ko_rag.source import load_source
from evals.tasks.ko_rag.sweep import MC_TASK, TASK
from evals.tasks.prompt_tokens import prompt_sha
from evals.tasks.prompts import PromptItem
from kqe.core.defaults import RAG_DEFAULT_CONDITIONS, RAG_LENGTHS
from kqe.core.errors import UserError
from kqe.core.io import loads_json, sha256_file, write_atomic
from kqe.core.records import content_hash
from kqe.core.workspace import Workspace

log = logging.getLogger(__name__)

DATA_FORMAT = 3
"""Bump when the rows, the prompt templates or the context rules (`context.py`, `rows.py`) change:
part of the cache key."""
ROWS_FILE = "ko_rag.jsonl"
MANIFEST_FILE = "ko_rag.source.json"


@dataclass(frozen=True)
class RagOptions:
    """How a run asks for ko_rag: which conditions at which lengths, and whether prompts are chat turns."""

    conditions: tuple[str, ...] = RAG_DEFAULT_CONDITIONS
    """Conditions scored (`kqe.core.defaults.RAG_CONDITIONS`)."""
    lengths: tuple[str, ...] = tuple(RAG_LENGTHS)
    """Context lengths scored (`kqe.core.defaults.RAG_LENGTHS` labels); those over max-model-len skipped."""
    chat_template: bool = False
    """Each prompt wrapped as the user turn of the model's chat template (instruct checkpoints)."""


def _tokenizer_identity(tokenizer_dir: Path) -> str:
    files = sorted(tokenizer_dir.glob("tokenizer*.json")) + sorted(tokenizer_dir.glob("*.model"))
    if not files:
        raise UserError(f"{tokenizer_dir} has no tokenizer files: pass a model directory")
    return content_hash({f.name: sha256_file(f) for f in files})


def prepare_ko_rag(
    ws: Workspace,
    tokenizer_dir: Path,
    max_model_len: int,
    limit: int | None,
    seed: int,
    data_dir: Path | None = None,
    options: RagOptions | None = None,
) -> Path:
    """Write `ko_rag.jsonl` and its manifest into `ws.cache/tasks/<key>/`; return that folder.

    The key hashes the documents, questions, tokenizer, max-model-len, limit, seed, options and
    DATA_FORMAT, so a re-run reuses the folder and any change gets a new one.
    """
    options = options or RagOptions()
    source = load_source(ws, data_dir)
    key = content_hash(
        {
            "task": TASK,
            "format": DATA_FORMAT,
            "source": source.identity,
            "limit": limit,
            "seed": seed,
            "tokenizer": _tokenizer_identity(tokenizer_dir),
            "max_model_len": max_model_len,
            "conditions": list(options.conditions),
            "lengths": list(options.lengths),
            "chat_template": options.chat_template,
        }
    )
    out = ws.cache / "tasks" / key
    rows_path, manifest_path = out / ROWS_FILE, out / MANIFEST_FILE
    if rows_path.is_file() and manifest_path.is_file():
        return out
    budgeter = hf_budgeter(tokenizer_dir, options.chat_template)
    lengths = {label: RAG_LENGTHS[label] for label in options.lengths}
    rows, manifest = build_rows(source, budgeter, max_model_len, limit, seed, options.conditions, lengths)
    write_atomic(manifest_path, json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    write_atomic(rows_path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    log.info("ko_rag: %d items (%s) -> %s", len(rows), ", ".join(manifest["lengths"]), rows_path)
    return out


def read_rows(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / ROWS_FILE
    if not path.is_file():
        raise UserError(f"{path} is missing: run prepare_ko_rag first")
    lines = path.read_text(encoding="utf-8").split("\n")
    return [loads_json(line) for line in lines if line.strip()]


def read_manifest(data_dir: Path) -> dict[str, Any]:
    path = data_dir / MANIFEST_FILE
    if not path.is_file():
        raise UserError(f"{path} is missing: run prepare_ko_rag first")
    manifest: dict[str, Any] = loads_json(path.read_text(encoding="utf-8"))
    return manifest


@dataclass(frozen=True)
class RagItem:
    """One generative ko_rag item: a prompt and what a right answer looks like."""

    item_id: str
    subject: str
    prompt: str
    answers: tuple[str, ...]
    """Accepted answers (empty when unanswerable)."""
    answerable: bool
    prompt_tokens: int
    """The prompt's length in the served model's tokens (what scoring it costs grows with)."""


def generation_items(rows: list[dict[str, Any]]) -> list[RagItem]:
    return [
        RagItem(
            row["item_id"],
            row["subject"],
            row["prompt"],
            tuple(row["answers"]),
            row["answerable"],
            row["prompt_tokens"],
        )
        for row in rows
    ]


def choice_items(rows: list[dict[str, Any]]) -> list[PromptItem]:
    """The multiple-choice items, as the letter-choice scorer of evals/scoring/score.py takes them."""
    return [
        PromptItem(
            task=MC_TASK,
            subject=row["subject"],
            item_id=row["mc_item_id"],
            prompt=row["mc_prompt"],
            continuations=tuple(f" {letter}" for letter in LETTERS),
            gold=row["mc_gold"],
        )
        for row in rows
    ]


@dataclass(frozen=True)
class PreparedRag:
    """ko_rag ready to score: both item kinds, the lengths left out and the retrieval recall."""

    folder: Path
    generation: list[RagItem]
    choices: list[PromptItem]
    skipped: dict[str, str]
    """Length label -> why it is not scored."""
    gold_in_context: dict[str, float]
    """Length label -> share of the retrieved condition's answerable rows with every gold passage
    in the prompt (`rows.gold_in_context`)."""

    def stage_items(self) -> dict[str, list[str]]:
        """Task -> `item_id:prompt sha` of each item: what a finished scoring stage is keyed by (the
        contexts depend on the tokenizer, max-model-len and templates, not on the ids alone)."""
        return {
            TASK: [f"{item.item_id}:{prompt_sha(item.prompt)}" for item in self.generation],
            MC_TASK: [f"{item.item_id}:{prompt_sha(item.prompt)}" for item in self.choices],
        }


def prepared(
    ws: Workspace,
    tokenizer_dir: Path,
    max_model_len: int,
    limit: int | None,
    seed: int,
    data_dir: Path | None = None,
    options: RagOptions | None = None,
) -> PreparedRag:
    """`prepare_ko_rag`, then its items read back."""
    folder = prepare_ko_rag(ws, tokenizer_dir, max_model_len, limit, seed, data_dir, options)
    rows, manifest = read_rows(folder), read_manifest(folder)
    return PreparedRag(
        folder, generation_items(rows), choice_items(rows), manifest["skipped"], manifest["gold_in_context"]
    )
