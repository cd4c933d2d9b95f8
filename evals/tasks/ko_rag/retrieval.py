"""BM25 over Korean morphemes, and contexts that fill a token budget with retrieved passages and distractors.

Retrieval is Okapi BM25 (k1 = 1.5, b = 0.75, idf = ln(1 + (N − df + ½) / (df + ½))) over Kiwi content
morphemes of each passage's title and text, so particles and endings do not split a word's matches.

A context for one question and one budget: the top-k retrieved passages (in rank order, each one that
fits) as one block, then distractors while they fit: hard negatives first (the passages BM25 ranks
next, HARD_NEGATIVES of them, from the same source as the best one), then the other passages in an
order drawn once per question. The block sits at a depth drawn once per question (the same relative
place at every budget, recorded in the plan), so a longer context holds the shorter one's passages
plus more and the only thing that grows is the reading the model must do around the evidence.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evals.tasks.ko_rag.docs import Passage
from evals.tasks.ko_rag.korean import content_morphemes

K1 = 1.5
B = 0.75
TOP_K = 4
"""Retrieved passages put into every context (as many as fit the budget)."""
HARD_NEGATIVES = 16
"""Passages ranked after the top k (ranks 5-20) offered first as distractors, when from the same source."""


class Bm25:
    """An Okapi BM25 index over pre-tokenized documents."""

    def __init__(self, documents: Sequence[Sequence[str]]) -> None:
        self._counts = [Counter(terms) for terms in documents]
        self._lengths = [len(terms) for terms in documents]
        self._average = sum(self._lengths) / max(1, len(documents))
        frequency: Counter[str] = Counter()
        for counts in self._counts:
            frequency.update(counts.keys())
        n = len(documents)
        self._idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}

    def scores(self, query: Sequence[str]) -> list[float]:
        """BM25 score of every document for the query terms (repeated query terms count once)."""
        terms = [term for term in dict.fromkeys(query) if term in self._idf]
        scores = []
        for counts, length in zip(self._counts, self._lengths, strict=True):
            norm = K1 * (1 - B + B * length / self._average)
            scores.append(
                sum(self._idf[t] * counts[t] * (K1 + 1) / (counts[t] + norm) for t in terms if t in counts)
            )
        return scores

    def top(self, query: Sequence[str], k: int) -> list[int]:
        """Indices of the k best documents, best first; ties go to the earlier document."""
        scores = self.scores(query)
        return sorted(range(len(scores)), key=lambda index: (-scores[index], index))[:k]


class Retriever:
    """BM25 over a passage pool, keyed by passage id."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.passages = list(passages)
        self._index = Bm25([content_morphemes(f"{p.title}\n{p.text}") for p in self.passages])

    def search(self, query: str, k: int = TOP_K) -> list[str]:
        """Ids of the k passages that best match `query`, best first."""
        return [self.passages[index].id for index in self._index.top(content_morphemes(query), k)]

    def hard_negatives(self, query: str, k: int = TOP_K, n: int = HARD_NEGATIVES) -> list[str]:
        """The passages ranked k+1 .. k+n for `query` that come from the best passage's source."""
        ranked = self.search(query, k + n)
        source = ranked[0].split("/")[0] if ranked else ""
        return [pid for pid in ranked[k:] if pid.split("/")[0] == source]


def recall_at_k(retrieved: Sequence[str], gold: Sequence[str]) -> float:
    """Share of the gold passages among the retrieved ones (1.0 = all found)."""
    return sum(pid in retrieved for pid in gold) / len(gold) if gold else 1.0


@dataclass(frozen=True)
class ContextPlan:
    """Passages of one question's context at one budget, in prompt order."""

    passage_ids: tuple[str, ...]
    """Every passage in the prompt, in order."""
    retrieved: tuple[str, ...]
    """The retrieved passages among them, in rank order."""
    depth: float
    """Where the retrieved block starts, as a share of the distractors placed before it (0 = first)."""


def plan_context(
    retrieved: Sequence[str],
    sizes: dict[str, int],
    budget: int,
    seed: str,
    hard_negatives: Sequence[str] = (),
) -> ContextPlan:
    """Retrieved passages and distractors whose token `sizes` sum to at most `budget`.

    Distractors are the `hard_negatives` first (passages ranked just below the retrieved ones, from
    the same source: they look relevant and are not), then the other passages in an order drawn from
    `seed` (e.g. the question id), which also fixes the block's depth, identically for every budget.
    """
    rng = random.Random(seed)
    rest = [pid for pid in sorted(sizes) if pid not in retrieved and pid not in hard_negatives]
    rng.shuffle(rest)
    distractors = [pid for pid in hard_negatives if pid not in retrieved] + rest
    depth = rng.random()
    used = 0
    block: list[str] = []
    for pid in retrieved:
        if used + sizes[pid] <= budget:
            block.append(pid)
            used += sizes[pid]
    filler: list[str] = []
    for pid in distractors:
        if used + sizes[pid] <= budget:
            filler.append(pid)
            used += sizes[pid]
    at = round(depth * len(filler))
    return ContextPlan(
        tuple(filler[:at] + block + filler[at:]), tuple(block), at / len(filler) if filler else 0.0
    )


def fit_plan(plan: ContextPlan, render: Callable[[Sequence[str]], int], limit: int) -> ContextPlan:
    """Drop distractors from the end until `render(ids)` (the prompt's exact token count) ≤ `limit`;
    per-passage sizes are summed beforehand, so this only corrects tokens merged across joins."""
    ids = list(plan.passage_ids)
    while render(ids) > limit:
        droppable = [index for index, pid in enumerate(ids) if pid not in plan.retrieved]
        if not droppable:
            ids.pop()  # only retrieved passages left: drop the lowest-ranked one at the end
        else:
            ids.pop(droppable[-1])
    retrieved = tuple(pid for pid in plan.retrieved if pid in ids)
    before = next((index for index, pid in enumerate(ids) if pid in retrieved), 0)
    others = len(ids) - len(retrieved)
    return ContextPlan(tuple(ids), retrieved, before / others if others else 0.0)
