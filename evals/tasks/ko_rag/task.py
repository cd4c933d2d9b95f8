"""ko_rag: Korean retrieval-augmented QA over real documents, with a context-length sweep.

For each question: BM25 (evals/tasks/ko_rag/retrieval.py) retrieves the top-k passages of the whole pool;
for each sweep length the context is those passages plus distractors up to the token budget, counted
with the target model's tokenizer (BOS included, like lm-eval's hf model). A length is the whole
request, prompt plus answer room: `1k` = 1,024 tokens holds a prompt of at most 1,024 − MAX_NEW_TOKENS.
Lengths above the served max-model-len are skipped and recorded as skipped.

Each (question, length) becomes two scored items that share their context (so the server's prefix
cache reads it once):
- `ko_rag/<question>/<length>`: a generated short answer (greedy, ≤ MAX_NEW_TOKENS, stops at a newline),
  scored by exact match / morpheme F1 / Hangul share (evals/scoring/generate.py); an unanswerable question
  is right when the answer abstains with ABSTAIN, the string the instruction asks for;
- `ko_rag_mc/<question>/<length>`: four choices (the gold answer, distractors of its kind that are
  not also right, see choices.py, and ABSTAIN) scored by the log-probability of the letters, like KMMLU.

`prepare_ko_rag` writes the rows (`ko_rag.jsonl`) the lm-eval tasks in evals/tasks/ko_rag/ read and a
manifest (`ko_rag.source.json`) into a cache folder keyed by every input, like `prompts.prepare_tasks`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.tasks.ko_rag import docs as rag_docs
from evals.tasks.ko_rag import questions as rag_questions
from evals.tasks.ko_rag import retrieval as rag_retrieval
from evals.tasks.ko_rag.choices import mc_choices
from evals.tasks.ko_rag.context import (
    ABSTAIN,
    GEN_SUFFIX,
    INSTRUCTION,
    LETTERS,
    MAX_NEW_TOKENS,
    MC_SUFFIX,
    Budgeter,
    fit_context,
    hf_budgeter,
    render_context,
)
from evals.tasks.ko_rag.docs import Passage
from evals.tasks.ko_rag.questions import Question
from evals.tasks.prompts import PromptItem, stratified_sample
from kqe.core.errors import UserError
from kqe.core.io import sha256_file, sha256_of, write_atomic
from kqe.core.records import content_hash
from kqe.core.workspace import Workspace

log = logging.getLogger(__name__)

TASK = "ko_rag"
MC_TASK = "ko_rag_mc"
LENGTHS = {"1k": 1024, "2k": 2048, "4k": 4096, "16k": 16384}
"""The sweep: label -> tokens of the whole request. Fixed, because the leaderboard has a column per label."""
DATA_FORMAT = 2
"""Bump when the rows, the prompt templates or the context rules (`context.py`) change: part
of the cache key."""
ROWS_FILE = "ko_rag.jsonl"
MANIFEST_FILE = "ko_rag.source.json"


@dataclass(frozen=True)
class RagSource:
    """The passages and questions ko_rag is built from, and what identifies them."""

    passages: list[Passage]
    questions: list[Question]
    label: str
    """What they are, e.g. `built-in: constitution, 10 bills, Debian FAQ (203 questions)`."""
    identity: str
    """Hash of the documents and questions (part of the cache key)."""


def load_source(ws: Workspace, data_dir: Path | None = None) -> RagSource:
    """The built-in documents and question set, or a user folder with docs.jsonl + questions.jsonl."""
    if data_dir is None:
        passages = rag_docs.builtin_passages(ws.sources())
        questions_path = rag_questions.QUESTIONS_PATH
        label = "built-in: constitution, 10 bills, Debian FAQ"
    else:
        passages = rag_docs.read_docs_jsonl(data_dir / "docs.jsonl")
        questions_path = data_dir / "questions.jsonl"
        label = f"user data {data_dir}"
    questions = rag_questions.read_questions(questions_path, {p.id: p.text for p in passages})
    documents = sha256_of(json.dumps([(p.id, p.title, p.text) for p in passages], ensure_ascii=False))
    identity = content_hash({"documents": documents, "questions": sha256_file(questions_path)})
    return RagSource(passages, questions, f"{label} ({len(questions)} questions)", identity)


def sample_questions(questions: list[Question], limit: int | None, seed: int) -> list[Question]:
    """`limit` questions spread over the types in proportion (all when limit is None or larger)."""
    rows = [{"subject": q.type, "index": i} for i, q in enumerate(questions)]
    return [questions[row["index"]] for row in stratified_sample(rows, limit, seed)]


def cluster_of(question: Question) -> str:
    """The item's subject, the cluster the paired bootstrap resamples: its first gold passage (questions
    on one passage succeed or fail together), or `unanswerable/<id>` for a question without one."""
    return question.gold_passages[0] if question.gold_passages else f"{question.type}/{question.id}"


def question_rows(
    question: Question,
    retrieved: tuple[list[str], list[str]],
    choices: tuple[list[str], int],
    passages: dict[str, Passage],
    sizes: dict[str, int],
    budgeter: Budgeter,
    lengths: dict[str, int],
    seed: int,
) -> list[dict[str, Any]]:
    """One row per sweep length: the prompts, choices and the passages that went in (`retrieved`: the
    top-k passages and the hard negatives)."""
    gen_suffix = GEN_SUFFIX.format(question=question.question)
    mc_suffix = MC_SUFFIX.format(*choices[0], question=question.question)
    fixed = budgeter.need(INSTRUCTION, gen_suffix, mc_suffix)[0]
    rows = []
    for label, length in lengths.items():
        if fixed > length:
            raise UserError(
                f"question {question.id} alone needs {fixed} tokens, more than the {label} context"
            )
        plan = rag_retrieval.plan_context(
            retrieved[0], sizes, length - fixed, f"{seed}/{question.id}", retrieved[1]
        )
        plan, prompt_tokens = fit_context(plan, passages, budgeter, (gen_suffix, mc_suffix), length)
        context = render_context([passages[pid] for pid in plan.passage_ids])
        rows.append(
            {
                "item_id": f"{TASK}/{question.id}/{label}",
                "mc_item_id": f"{MC_TASK}/{question.id}/{label}",
                "question_id": question.id,
                "type": question.type,
                "subject": cluster_of(question),
                "length": label,
                "prompt": context + gen_suffix,
                "mc_prompt": context + mc_suffix,
                "choices": choices[0],
                "mc_gold": choices[1],
                "answers": list(question.answers),
                "reference": question.answers[0] if question.answerable else ABSTAIN,
                "answerable": question.answerable,
                "gold_passages": list(question.gold_passages),
                "retrieved": list(plan.retrieved),
                "passage_ids": list(plan.passage_ids),
                "depth": round(plan.depth, 4),
                "gold_in_context": all(pid in plan.passage_ids for pid in question.gold_passages),
                "prompt_tokens": prompt_tokens,
            }
        )
    return rows


def fitting_lengths(
    max_model_len: int, lengths: dict[str, int] = LENGTHS
) -> tuple[dict[str, int], dict[str, str]]:
    """(scored, skipped): the lengths whose whole request fits max-model-len, and why the others do not."""
    scored = {label: n for label, n in lengths.items() if n <= max_model_len}
    skipped = {
        label: f"over max-model-len {max_model_len}" for label, n in lengths.items() if n > max_model_len
    }
    return scored, skipped


def build_rows(
    source: RagSource,
    budgeter: Budgeter,
    max_model_len: int,
    limit: int | None,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of every sampled question at every fitting length (length-major order), and a manifest."""
    scored, skipped = fitting_lengths(max_model_len)
    if not scored:
        raise UserError(
            f"max-model-len {max_model_len} holds none of the ko_rag lengths {', '.join(LENGTHS)}: "
            "serve with a profile whose max_model_len is at least 1024"
        )
    questions = sample_questions(source.questions, limit, seed)
    retriever = rag_retrieval.Retriever(source.passages)
    by_id = {p.id: p for p in source.passages}
    texts = {p.id: p.text for p in source.passages}
    sizes = budgeter.sizes(source.passages)
    per_question: list[list[dict[str, Any]]] = []
    recalls = []
    for done, question in enumerate(questions):
        retrieved = retriever.search(question.question)
        if question.answerable:
            recalls.append(rag_retrieval.recall_at_k(retrieved, question.gold_passages))
        choices = mc_choices(question, source.questions, texts, seed)
        found = (retrieved, retriever.hard_negatives(question.question))
        per_question.append(question_rows(question, found, choices, by_id, sizes, budgeter, scored, seed))
        if progress:
            progress(done + 1, len(questions))
    rows = [row for label in scored for rows in per_question for row in rows if row["length"] == label]
    manifest = {
        "label": source.label,
        "questions": len(questions),
        "types": dict(Counter(q.type for q in questions)),
        "lengths": scored,
        "skipped": skipped,
        "max_model_len": max_model_len,
        "max_new_tokens": MAX_NEW_TOKENS,
        "top_k": rag_retrieval.TOP_K,
        "recall_at_k": round(sum(recalls) / len(recalls), 4) if recalls else None,
        "gold_in_context": _gold_in_context(rows),
    }
    for label, reason in skipped.items():
        log.warning("ko_rag: %s context skipped (%s)", label, reason)
    return rows, manifest


def _gold_in_context(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Length -> share of answerable rows whose prompt holds every gold passage (retrieval failure
    apart from reading failure)."""
    by_length: dict[str, list[bool]] = {}
    for row in rows:
        if row["answerable"]:
            by_length.setdefault(row["length"], []).append(row["gold_in_context"])
    return {label: round(sum(found) / len(found), 4) for label, found in by_length.items()}


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
) -> Path:
    """Write `ko_rag.jsonl` and its manifest into `ws.cache/tasks/<key>/`; return that folder.

    The key hashes the documents, questions, tokenizer, max-model-len, limit, seed and DATA_FORMAT, so
    a re-run reuses the folder and any change gets a new one.
    """
    source = load_source(ws, data_dir)
    key = content_hash(
        {
            "task": TASK, "format": DATA_FORMAT, "source": source.identity, "limit": limit, "seed": seed,
            "tokenizer": _tokenizer_identity(tokenizer_dir), "max_model_len": max_model_len,
        }
    )  # fmt: skip
    out = ws.cache / "tasks" / key
    rows_path, manifest_path = out / ROWS_FILE, out / MANIFEST_FILE
    if rows_path.is_file() and manifest_path.is_file():
        return out
    rows, manifest = build_rows(source, hf_budgeter(tokenizer_dir), max_model_len, limit, seed)
    write_atomic(manifest_path, json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    write_atomic(rows_path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    log.info("ko_rag: %d items (%s) -> %s", len(rows), ", ".join(manifest["lengths"]), rows_path)
    return out


def read_rows(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / ROWS_FILE
    if not path.is_file():
        raise UserError(f"{path} is missing: run prepare_ko_rag first")
    lines = path.read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines if line.strip()]


def read_manifest(data_dir: Path) -> dict[str, Any]:
    path = data_dir / MANIFEST_FILE
    if not path.is_file():
        raise UserError(f"{path} is missing: run prepare_ko_rag first")
    manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
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


def generation_items(rows: list[dict[str, Any]]) -> list[RagItem]:
    return [
        RagItem(row["item_id"], row["subject"], row["prompt"], tuple(row["answers"]), row["answerable"])
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
    """ko_rag ready to score: both item kinds, and the lengths left out."""

    folder: Path
    generation: list[RagItem]
    choices: list[PromptItem]
    skipped: dict[str, str]
    """Length label -> why it is not scored."""

    def stage_items(self) -> dict[str, list[str]]:
        """Task -> `item_id:prompt sha` of each item: what a finished scoring stage is keyed by (the
        contexts depend on the tokenizer, max-model-len and templates, not on the ids alone)."""
        from evals.scoring.score import prompt_sha

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
) -> PreparedRag:
    """`prepare_ko_rag`, then its items read back."""
    folder = prepare_ko_rag(ws, tokenizer_dir, max_model_len, limit, seed, data_dir)
    rows = read_rows(folder)
    skipped: dict[str, str] = read_manifest(folder)["skipped"]
    return PreparedRag(folder, generation_items(rows), choice_items(rows), skipped)
