"""BM25 over Korean morphemes, and contexts that fill a token budget with retrieved passages and distractors.

Retrieval is Okapi BM25 (k1 = 1.5, b = 0.75, idf = ln(1 + (N − df + ½) / (df + ½))) over Kiwi content
morphemes of each passage's title and text, so particles and endings do not split a word's matches.

A context for one question and one budget: a block (the top-k retrieved passages in rank order, each
one that fits; the oracle's gold passages) then distractors while they fit: hard negatives first (the
passages BM25 ranks next, HARD_NEGATIVES of them, from the same source as the best one), then the
other passages in an order drawn once per question. The block sits at a depth drawn once per
question (the same relative place at every budget) or at a fixed one (the depth grid), recorded in
the plan as the share of distractor tokens before it, so a longer context holds the shorter one's
passages plus more and the only thing that grows is the reading the model must do around the evidence.
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
    block: tuple[str, ...]
    """The block among them: the retrieved passages in rank order, or the gold ones (oracle, depth grid)."""
    depth: float
    """Where the block starts: the share of the distractor tokens placed before it (0 = first, 1 = last)."""


def _planned(ids: Sequence[str], block: Sequence[str], sizes: dict[str, int]) -> ContextPlan:
    kept = tuple(pid for pid in block if pid in ids)
    start = next((index for index, pid in enumerate(ids) if pid in kept), len(ids))
    before = sum(sizes[pid] for pid in ids[:start] if pid not in kept)
    others = sum(sizes[pid] for pid in ids if pid not in kept)
    return ContextPlan(tuple(ids), kept, before / others if others else 0.0)


def distractor_order(
    retrieved: Sequence[str], sizes: dict[str, int], seed: str, hard_negatives: Sequence[str] = ()
) -> tuple[list[str], float]:
    """(distractors in the order they are offered, the block's drawn depth) for one question: the
    `hard_negatives` (passages ranked just below the retrieved ones, from the same source: they look
    relevant and are not), then the other passages in an order drawn from `seed` (e.g. the question
    id), which also draws the depth, identically for every budget."""
    rng = random.Random(seed)
    rest = [pid for pid in sorted(sizes) if pid not in retrieved and pid not in hard_negatives]
    rng.shuffle(rest)
    return [pid for pid in hard_negatives if pid not in retrieved] + rest, rng.random()


def _fill(
    block: Sequence[str], distractors: Sequence[str], sizes: dict[str, int], budget: int
) -> tuple[list[str], list[str]]:
    """The block's passages that fit `budget` (tokens), then the distractors that fit after them."""
    used = 0
    kept: tuple[list[str], list[str]] = ([], [])
    for part, pids in zip(kept, (block, distractors), strict=True):
        for pid in pids:
            if used + sizes[pid] <= budget:
                part.append(pid)
                used += sizes[pid]
    return kept


def plan_context(
    retrieved: Sequence[str],
    sizes: dict[str, int],
    budget: int,
    seed: str,
    hard_negatives: Sequence[str] = (),
) -> ContextPlan:
    """Retrieved passages and distractors (`distractor_order`) whose token `sizes` sum to at most
    `budget`, the block after the drawn share of the distractors."""
    distractors, depth = distractor_order(retrieved, sizes, seed, hard_negatives)
    block, filler = _fill(retrieved, distractors, sizes, budget)
    at = round(depth * len(filler))
    return _planned(filler[:at] + block + filler[at:], block, sizes)


def place_block(
    block: Sequence[str], distractors: Sequence[str], sizes: dict[str, int], budget: int, depth: float
) -> ContextPlan:
    """`block` and `distractors` within `budget`, the block at the passage boundary whose share of
    the distractor tokens before it is nearest `depth` (0 and 1 exactly: first and last)."""
    kept, filler = _fill(block, distractors, sizes, budget)
    total = sum(sizes[pid] for pid in filler)
    before = [sum(sizes[pid] for pid in filler[:k]) for k in range(len(filler) + 1)]
    at = min(range(len(filler) + 1), key=lambda k: (abs(before[k] - depth * total), k))
    return _planned(filler[:at] + kept + filler[at:], kept, sizes)


def fit_plan(
    plan: ContextPlan, render: Callable[[Sequence[str]], int], limit: int, sizes: dict[str, int]
) -> ContextPlan:
    """Drop distractors from the end until `render(ids)` (the prompt's exact token count) ≤ `limit`;
    per-passage sizes are summed beforehand, so this only corrects tokens merged across joins."""
    ids = list(plan.passage_ids)
    while render(ids) > limit:
        droppable = [index for index, pid in enumerate(ids) if pid not in plan.block]
        if not droppable:
            ids.pop()  # only the block is left: drop its lowest-ranked passage at the end
        else:
            ids.pop(droppable[-1])
    return _planned(ids, plan.block, sizes)
