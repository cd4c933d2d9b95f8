"""ko_rag's rows, the items both lm-eval and the suite score: one per question, open-book condition and
length, and one per question closed-book, each holding both prompts (generated answer, four choices)
and what went into its context (`sweep.py` names the conditions)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evals.tasks.ko_rag import retrieval as rag_retrieval
from evals.tasks.ko_rag.choices import mc_choices
from evals.tasks.ko_rag.context import (
    ABSTAIN,
    CLOSED_BOOK_INSTRUCTION,
    GEN_SUFFIX,
    INSTRUCTION,
    MAX_NEW_TOKENS,
    MC_SUFFIX,
    Budgeter,
    fit_context,
    render_context,
)
from evals.tasks.ko_rag.docs import Passage
from evals.tasks.ko_rag.questions import Question
from evals.tasks.ko_rag.source import RagSource, cluster_of, sample_questions
from evals.tasks.ko_rag.sweep import (
    CLOSED_BOOK,
    MC_TASK,
    ORACLE,
    RETRIEVED,
    TASK,
    item_id,
    open_book_labels,
)
from kqe.core.chat import Framing
from kqe.core.defaults import RAG_CONDITIONS, RAG_DEFAULT_CONDITIONS, RAG_LENGTHS
from kqe.core.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """What one question's contexts are built from."""

    question: Question
    retrieved: list[str]
    """BM25's top-k, best first."""
    hard_negatives: list[str]
    choices: tuple[list[str], int]
    """The four choices and the index of the right one."""

    def suffixes(self) -> tuple[str, str]:
        """The question after the context: for the generated answer, and with the four choices."""
        question = self.question.question
        return GEN_SUFFIX.format(question=question), MC_SUFFIX.format(*self.choices[0], question=question)


@dataclass(frozen=True)
class Pool:
    """The passages a context is cut from, their token sizes, and the tokenizer that counts them."""

    passages: dict[str, Passage]
    sizes: dict[str, int]
    budgeter: Budgeter


def _row(found: Found, label: str, length: str | None, context: str, frame: Framing) -> dict[str, Any]:
    """The fields every row has: ids, prompts, choices and answers."""
    question = found.question
    gen_suffix, mc_suffix = found.suffixes()
    return {
        "item_id": item_id(TASK, question.id, label, length),
        "mc_item_id": item_id(MC_TASK, question.id, label, length),
        "question_id": question.id,
        "type": question.type,
        "subject": cluster_of(question),
        "condition": label,
        "length": length,
        "prompt": frame.wrap(context + gen_suffix),
        "mc_prompt": frame.wrap(context + mc_suffix),
        "chat_template": frame != Framing(),
        "choices": found.choices[0],
        "mc_gold": found.choices[1],
        "answers": list(question.answers),
        "reference": question.answers[0] if question.answerable else ABSTAIN,
        "answerable": question.answerable,
        "gold_passages": list(question.gold_passages),
    }


def closed_book_row(found: Found, budgeter: Budgeter, room: int) -> dict[str, Any]:
    """The question without documents; it must fit `room` tokens (the shortest scored length)."""
    need, prompt_tokens = budgeter.need(CLOSED_BOOK_INSTRUCTION, *found.suffixes())
    if need > room:
        raise UserError(f"question {found.question.id} alone needs {need} tokens, more than {room}")
    return _row(found, CLOSED_BOOK, None, CLOSED_BOOK_INSTRUCTION, budgeter.frame) | {
        "block": [],
        "passage_ids": [],
        "depth": None,
        "gold_in_context": False,
        "prompt_tokens": prompt_tokens,
    }


def _plan(
    found: Found, label: str, depth: float | None, sizes: dict[str, int], budget: int, seed: str
) -> rag_retrieval.ContextPlan:
    """The context of one open-book condition: the retrieved block, or the gold one (oracle, depth
    grid) with the retrieved passages that are not gold first among the distractors."""
    if label == RETRIEVED:
        return rag_retrieval.plan_context(found.retrieved, sizes, budget, seed, found.hard_negatives)
    order, drawn = rag_retrieval.distractor_order(found.retrieved, sizes, seed, found.hard_negatives)
    gold = list(found.question.gold_passages)
    distractors = [pid for pid in [*found.retrieved, *order] if pid not in gold]
    return rag_retrieval.place_block(gold, distractors, sizes, budget, drawn if depth is None else depth)


def open_book_rows(
    found: Found, pool: Pool, lengths: dict[str, int], labels: dict[str, float | None], seed: int
) -> list[dict[str, Any]]:
    """One row per sweep length and open-book condition label (`sweep.open_book_labels`)."""
    question, suffixes = found.question, found.suffixes()
    fixed = pool.budgeter.need(INSTRUCTION, *suffixes)[0]
    rows = []
    for length_label, length in lengths.items():
        if fixed > length:
            raise UserError(
                f"question {question.id} alone needs {fixed} tokens, more than the {length_label} context"
            )
        for label, depth in labels.items():
            plan = _plan(found, label, depth, pool.sizes, length - fixed, f"{seed}/{question.id}")
            plan, prompt_tokens = fit_context(
                plan, pool.passages, pool.budgeter, suffixes, length, pool.sizes
            )
            context = render_context([pool.passages[pid] for pid in plan.passage_ids])
            rows.append(
                _row(found, label, length_label, context, pool.budgeter.frame)
                | {
                    "block": list(plan.block),
                    "passage_ids": list(plan.passage_ids),
                    "depth": round(plan.depth, 4),
                    "gold_in_context": all(pid in plan.passage_ids for pid in question.gold_passages),
                    "prompt_tokens": prompt_tokens,
                }
            )
    return rows


def fitting_lengths(
    max_model_len: int, lengths: dict[str, int] = RAG_LENGTHS
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
    conditions: tuple[str, ...] = RAG_DEFAULT_CONDITIONS,
    lengths: dict[str, int] = RAG_LENGTHS,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of every sampled question in every condition at each of `lengths` that fits (closed-book
    first, then length-major, condition by condition), and a manifest."""
    scored, skipped = fitting_lengths(max_model_len, lengths)
    if not scored:
        raise UserError(
            f"max-model-len {max_model_len} holds none of the ko_rag lengths {', '.join(lengths)}: "
            f"serve with a profile whose max_model_len is at least {min(lengths.values())}, "
            "or ask for a shorter length (--rag-lengths 1k)"
        )
    questions = sample_questions(source.questions, limit, seed)
    retriever = rag_retrieval.Retriever(source.passages)
    pool = Pool({p.id: p for p in source.passages}, budgeter.sizes(source.passages), budgeter)
    texts = {p.id: p.text for p in source.passages}
    labels = open_book_labels(conditions)
    rows: list[dict[str, Any]] = []
    recalls = []
    for done, question in enumerate(questions):
        retrieved = retriever.search(question.question)
        if question.answerable:
            recalls.append(rag_retrieval.recall_at_k(retrieved, question.gold_passages))
        choices = mc_choices(question, source.questions, texts, seed)
        found = Found(question, retrieved, retriever.hard_negatives(question.question), choices)
        if CLOSED_BOOK in conditions:
            rows.append(closed_book_row(found, budgeter, min(scored.values())))
        rows += open_book_rows(found, pool, scored, labels, seed)
        if progress:
            progress(done + 1, len(questions))
    rows.sort(key=lambda row: _place(row, list(scored), list(labels)))  # stable: question order kept
    manifest = {
        "label": source.label,
        "questions": len(questions),
        "types": dict(Counter(q.type for q in questions)),
        "conditions": [name for name in RAG_CONDITIONS if name in conditions],
        "chat_template": budgeter.frame != Framing(),
        "lengths": scored,
        "skipped": skipped,
        "max_model_len": max_model_len,
        "max_new_tokens": MAX_NEW_TOKENS,
        "top_k": rag_retrieval.TOP_K,
        "recall_at_k": round(sum(recalls) / len(recalls), 4) if recalls else None,
        "gold_in_context": gold_in_context(rows),
        "oracle_gold_in_context": gold_in_context(rows, ORACLE) if ORACLE in conditions else None,
    }
    for label, reason in skipped.items():
        log.warning("ko_rag: %s context skipped (%s)", label, reason)
    return rows, manifest


def _place(row: dict[str, Any], lengths: list[str], labels: list[str]) -> tuple[int, int]:
    """A row's rank in the file: closed-book rows first, then length-major, condition by condition."""
    if row["length"] is None:
        return -1, -1
    return lengths.index(row["length"]), labels.index(row["condition"])


def gold_in_context(rows: list[dict[str, Any]], condition: str = RETRIEVED) -> dict[str, float]:
    """Length -> share of the answerable rows of `condition` whose prompt holds every gold passage:
    for the retrieved condition, retrieval recall as far as the prompt, apart from reading; for the
    oracle, the share whose gold passages fit the length at all."""
    by_length: dict[str, list[bool]] = {}
    for row in rows:
        if row["answerable"] and row["condition"] == condition:
            by_length.setdefault(row["length"], []).append(row["gold_in_context"])
    return {label: round(sum(found) / len(found), 4) for label, found in by_length.items()}
