"""Where a ko_rag item sits in the grid it is scored on: its context length and its condition (what the
context holds around the question), both named in its item id.

Conditions (`--rag-conditions`, lm-eval metadata `ko_rag_conditions`):
- `retrieved`: BM25's top-k passages as one block at a depth drawn per question, distractors around
  it (retrieval.py): what a deployed RAG system reads;
- `oracle`: the gold passages forced in as the block, at the same drawn depth, with the retrieved
  passages that are not gold first among the distractors: reading apart from retrieval;
- `depth`: the oracle with its block at each depth of DEPTH_GRID (share of the distractor tokens
  before it: first, ¼, ½, ¾, last), at every length: five items per question and length;
- `closed_book`: no documents, one item per question (no length): what the checkpoint answers from
  memory, flagged on its open-book items.
"""

from __future__ import annotations

from kqe.core.defaults import RAG_CONDITIONS

TASK = "ko_rag"
MC_TASK = "ko_rag_mc"
RETRIEVED, ORACLE, DEPTH, CLOSED_BOOK = RAG_CONDITIONS
DEPTH_GRID = {"depth0": 0.0, "depth25": 0.25, "depth50": 0.5, "depth75": 0.75, "depth100": 1.0}
"""Label -> where the `depth` condition puts the gold block: share of the distractor tokens before it."""


def open_book_labels(conditions: tuple[str, ...]) -> dict[str, float | None]:
    """Item label -> the block's fixed depth (None: drawn per question) of each open-book condition."""
    labels: dict[str, float | None] = {name: None for name in (RETRIEVED, ORACLE) if name in conditions}
    return labels | (dict(DEPTH_GRID) if DEPTH in conditions else {})


def item_id(task: str, question_id: str, label: str, length: str | None) -> str:
    """`ko_rag/num-001/oracle/1k`; a closed-book item has no length: `ko_rag/num-001/closed_book`."""
    return f"{task}/{question_id}/{label}" + (f"/{length}" if length is not None else "")


def coordinates(item_id: str) -> tuple[str, str | None]:
    """(condition label, length label or None) of an item id made by `item_id`."""
    head, last = item_id.rsplit("/", 1)
    if last == CLOSED_BOOK:
        return CLOSED_BOOK, None
    return head.rsplit("/", 1)[-1], last


def question_of(item_id: str) -> str:
    """The question id inside an item id (question ids may hold slashes)."""
    label, length = coordinates(item_id)
    trailer = f"/{label}" + (f"/{length}" if length is not None else "")
    return item_id.split("/", 1)[1].removesuffix(trailer)
