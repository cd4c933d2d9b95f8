"""The ko_rag leaderboard columns, generated per condition and context length from the sweep
(`evals/tasks/ko_rag/sweep.py`) and filled from `evals/statistics/rag_findings.py`'s findings: the retrieved
condition keeps the plain `ko_rag_f1_<length>` names, the others are `ko_rag_<condition>_f1_<length>`.

Each column's group (`ColumnDoc.prefix`) decides when a CSV has it: `ko_rag` always (the columns the
board always had), a condition's group only when some row scored that condition."""

from __future__ import annotations

from evals.reporting.task_columns import ColumnDoc
from evals.tasks.ko_rag.sweep import DEPTH_GRID, RETRIEVED, open_book_labels
from kqe.core.defaults import RAG_CONDITIONS, RAG_LENGTHS

RAG = "ko_rag"
"""The group of the columns every board has."""
CLOSED_BOOK_GROUP = "ko_rag_closed_book"
_DEPTH_WORDS = {0.0: "first", 0.25: "after 1/4", 0.5: "after 1/2", 0.75: "after 3/4", 1.0: "last"}
CONDITION_TEXT = {
    RETRIEVED: "BM25's top passages in the prompt",
    "oracle": "the gold passages forced into the prompt",
} | {
    label: f"the gold passages forced in, {_DEPTH_WORDS[depth]} of the distractor tokens"
    for label, depth in DEPTH_GRID.items()
}
"""What the context holds in each open-book condition label, for the column docs."""


def column_prefix(label: str) -> str:
    """`ko_rag` for the retrieved condition (the columns it always had), `ko_rag_<label>` for the others."""
    return "ko_rag" if label == RETRIEVED else f"ko_rag_{label}"


def _ci_low(delta: str) -> str:
    return f"Lower end of the paired bootstrap 95% CI of {delta} (gold passages resampled)."


def _length_text(length: str) -> str:
    return f"{length} ({RAG_LENGTHS[length]:,} tokens in all)"


def _open_book(label: str) -> dict[str, ColumnDoc]:
    prefix, context = column_prefix(label), CONDITION_TEXT[label]
    group = RAG if label == RETRIEVED else prefix
    columns: dict[str, ColumnDoc] = {}
    for length in RAG_LENGTHS:
        delta = f"{prefix}_f1_delta_{length}"
        columns |= {
            f"{prefix}_f1_{length}": ColumnDoc(
                group,
                float,
                f"ko_rag number-exact answer F1 on answerable questions, fraction, at "
                f"{_length_text(length)}, {context}.",
            ),
            f"{prefix}_em_{length}": ColumnDoc(
                group,
                float,
                f"ko_rag exact-match share on answerable questions, fraction, at {length}, {context}.",
            ),
            delta: ColumnDoc(
                group,
                float,
                f"{prefix}_f1_{length} minus the base's on the same items, fraction; empty on the base row.",
            ),
            f"{prefix}_f1_ci_low_{length}": ColumnDoc(group, float, _ci_low(delta)),
            f"{prefix}_f1_ci_high_{length}": ColumnDoc(group, float, "Upper end of that CI."),
        }
        columns |= _contains(group, prefix, length, f"at {length}, {context}")
    return columns


def _contains(group: str, prefix: str, length: str, where: str) -> dict[str, ColumnDoc]:
    """`<prefix>_contains_<length>` and its Δ against the base with the CI, as F1 has them."""
    delta = f"{prefix}_contains_delta_{length}"
    return {
        f"{prefix}_contains_{length}": ColumnDoc(
            group,
            float,
            f"Share of answerable ko_rag questions whose answer contains an accepted answer and no "
            f"conflicting one (however long the answer), fraction, {where}; empty for items scored "
            "before contains existed.",
        ),
        delta: ColumnDoc(
            group,
            float,
            f"{prefix}_contains_{length} minus the base's on the same items, fraction; empty on the "
            "base row.",
        ),
        f"{prefix}_contains_ci_low_{length}": ColumnDoc(group, float, _ci_low(delta)),
        f"{prefix}_contains_ci_high_{length}": ColumnDoc(group, float, "Upper end of that CI."),
    }


READING = "ko_rag_reading"
"""Prefix of the headline columns: the retrieved condition over the questions the base did not
answer closed-book."""


def _reading() -> dict[str, ColumnDoc]:
    group = CLOSED_BOOK_GROUP
    subset = "answerable questions the base did not answer exactly closed-book (memory cannot answer them)"
    columns: dict[str, ColumnDoc] = {}
    for length in RAG_LENGTHS:
        where = f"at {length}, {CONDITION_TEXT[RETRIEVED]}, over the {subset}"
        delta = f"{READING}_f1_delta_{length}"
        columns |= {
            f"{READING}_n_{length}": ColumnDoc(
                group, int, f"How many items the {READING} columns at {length} cover."
            ),
            f"{READING}_f1_{length}": ColumnDoc(group, float, f"ko_rag answer F1, fraction, {where}."),
            f"{READING}_em_{length}": ColumnDoc(
                group, float, f"ko_rag exact-match share, fraction, {where}."
            ),
            delta: ColumnDoc(
                group,
                float,
                f"{READING}_f1_{length} minus the base's on the same items; empty on the base row.",
            ),
            f"{READING}_f1_ci_low_{length}": ColumnDoc(group, float, _ci_low(delta)),
            f"{READING}_f1_ci_high_{length}": ColumnDoc(group, float, "Upper end of that CI."),
        }
        columns |= _contains(group, READING, length, where)
    return columns


def _closed_book() -> dict[str, ColumnDoc]:
    group = CLOSED_BOOK_GROUP
    columns = {
        "ko_rag_closed_book_f1": ColumnDoc(
            group,
            float,
            "ko_rag answer F1 on answerable questions without documents (closed-book), fraction.",
        ),
        "ko_rag_closed_book_em": ColumnDoc(
            group,
            float,
            "Share of answerable ko_rag questions answered exactly closed-book (from memory: "
            "flagged `closed_book` on their open-book items), fraction.",
        ),
    }
    for length in RAG_LENGTHS:
        gain, delta = f"ko_rag_gain_{length}", f"ko_rag_gain_delta_{length}"
        columns |= {
            gain: ColumnDoc(
                group,
                float,
                f"Open-book gain at {length}: ko_rag F1 with the retrieved passages minus F1 "
                "closed-book, same answerable questions, fraction (what the documents add).",
            ),
            f"ko_rag_gain_ci_low_{length}": ColumnDoc(
                group, float, f"Lower end of the 95% CI of {gain} (gold passages resampled)."
            ),
            f"ko_rag_gain_ci_high_{length}": ColumnDoc(group, float, "Upper end of that CI."),
            delta: ColumnDoc(
                group,
                float,
                f"{gain} minus the base's on the same questions, fraction; empty on the base row.",
            ),
            f"ko_rag_gain_delta_ci_low_{length}": ColumnDoc(group, float, _ci_low(delta)),
            f"ko_rag_gain_delta_ci_high_{length}": ColumnDoc(group, float, "Upper end of that CI."),
        }
    return columns


_RETRIEVED_ONLY = (
    ("ko_rag_hangul", float, "ko_rag mean share of Hangul among the letters of the generated answers, "
     "retrieved condition, fraction (1.0 = Korean)."),
    ("ko_rag_abstain", float, "ko_rag share of unanswerable questions whose answer abstains (any common "
     "Korean phrasing), retrieved condition, fraction."),
    ("ko_rag_abstain_precision", float, "ko_rag share of the abstaining answers (any question) given on "
     "unanswerable questions, retrieved condition, fraction."),
    ("ko_rag_mc_acc", float, "ko_rag multiple-choice accuracy (log-probs of the letters) over every scored "
     "length, retrieved condition, fraction."),
    ("ko_rag_skipped", str, "ko_rag context lengths not scored and why (e.g. `16k: over max-model-len "
     "2048`); empty when none."),
)  # fmt: skip


def _columns() -> dict[str, ColumnDoc]:
    labels = list(open_book_labels(RAG_CONDITIONS))
    columns = _open_book(RETRIEVED)
    columns |= {name: ColumnDoc(RAG, kind, meaning) for name, kind, meaning in _RETRIEVED_ONLY}
    columns |= {
        f"ko_rag_recall_{length}": ColumnDoc(
            RAG,
            float,
            f"Share of the answerable ko_rag questions whose gold passages all reached the "
            f"{length} prompt in the retrieved condition (retrieval recall, the same for every checkpoint).",
        )
        for length in RAG_LENGTHS
    }
    for label in labels[1:]:
        columns |= _open_book(label)
    return columns | _closed_book() | _reading()


RAG_COLUMNS = _columns()
"""Every ko_rag column: name -> its group, type and docs, in CSV order."""
