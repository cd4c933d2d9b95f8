"""What ko_rag found about a checkpoint per condition and context length, from its scored items
(`evals/tasks/ko_rag/metrics.py` groups them): F1 and EM over answerable questions, ΔF1 against the base
with a paired bootstrap CI clustered by gold passage and its p over the passages, the closed-book scores
and the open-book gain over them (paired the same way), abstention, Hangul share, multiple-choice
accuracy, retrieval recall; and the reading headline: the retrieved condition over the questions the
base did not answer closed-book (what memory cannot answer), beside the all-items figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evals.statistics.paired_means import PairedEstimate, paired_mean
from evals.tasks.ko_rag.abstention import abstains
from evals.tasks.ko_rag.context import ABSTAIN
from evals.tasks.ko_rag.metrics import Grouped, answer_f1, by_coordinates, open_book_gains
from evals.tasks.ko_rag.sweep import CLOSED_BOOK, MC_TASK, RETRIEVED, TASK, coordinates, question_of
from kqe.core.defaults import RAG_LENGTHS
from kqe.core.results import ItemResult


@dataclass(frozen=True)
class OpenBookScores:
    """One open-book condition at one context length, answerable questions only."""

    f1: float | None
    """Mean number-exact answer F1; None when nothing was scored."""
    em: float | None
    """Exact-match share."""
    f1_delta: PairedEstimate | None
    """F1 minus the base's on the same items, with its CI clustered by gold passage and its p over the
    passages; None on the base row or when the items differ."""
    contains: float | None = None
    """Share of answers that contain an accepted answer (`ItemResult.contains`); None when nothing was
    scored or an item was scored before `contains` existed."""
    contains_delta: PairedEstimate | None = None
    """`contains` minus the base's on the same items, paired like `f1_delta`."""
    n: int = 0
    """Items scored."""


@dataclass(frozen=True)
class OpenBookGain:
    """What the retrieved passages add over closed-book at one length, on the same questions."""

    gain: PairedEstimate | None
    """Retrieved F1 minus closed-book F1, with its CI and p."""
    gain_delta: PairedEstimate | None
    """`gain` minus the base's on the same questions; None on the base row."""


@dataclass(frozen=True)
class ClosedBookScores:
    """The closed-book condition: answers from memory, and the open-book gain over them."""

    f1: float | None
    """Mean answer F1 on answerable questions without documents."""
    em: float | None
    """Share answered exactly without documents."""
    gains: dict[str, OpenBookGain]
    """Length label → the retrieved condition's gain over closed-book."""


@dataclass(frozen=True)
class RagFindings:
    """What ko_rag found about one checkpoint (`rag_findings` says how each part is computed)."""

    open_book: dict[tuple[str, str], OpenBookScores]
    """(open-book condition label, length label) → its scores; the retrieved condition always."""
    closed_book: ClosedBookScores | None
    """None when the closed-book condition was not scored."""
    hangul: float | None
    """Mean Hangul share of the generated answers, retrieved condition."""
    abstain: float | None
    """Share of unanswerable questions whose answer abstains, retrieved condition."""
    abstain_precision: float | None
    """Share of the abstaining answers given on unanswerable questions, retrieved condition."""
    mc_acc: float | None
    """Multiple-choice accuracy over every scored length, retrieved condition."""
    recall: dict[str, float]
    """Length label → retrieval recall (the same for every checkpoint), where measured."""
    reading: dict[str, OpenBookScores]
    """Length label → the retrieved condition over the answerable questions the base did not answer
    exactly closed-book; empty when closed-book was not scored."""
    skipped: dict[str, str]
    """Length label → why it was not scored."""


def _paired(
    ours: dict[str, float], theirs: dict[str, float], clusters: dict[str, str]
) -> PairedEstimate | None:
    """The mean of ours − theirs with its 95% CI and p clustered, over the same keys; None unless they
    match."""
    if not ours or set(ours) != set(theirs):
        return None
    keys = sorted(ours)
    differences = np.array([ours[k] - theirs[k] for k in keys])
    return paired_mean(differences, [clusters[k] for k in keys])


def _contains(items: dict[str, ItemResult]) -> dict[str, float] | None:
    """Item key → contains as 0/1; None when some item has no `contains` (scored before it existed)."""
    if any(item.contains is None for item in items.values()):
        return None
    return {key: float(bool(item.contains)) for key, item in items.items()}


def _scores(scored: dict[str, ItemResult], base: dict[str, ItemResult] | None) -> OpenBookScores:
    """F1, EM, contains and (against the base's items, on the same keys) ΔF1 and Δcontains with CIs."""
    f1 = {key: answer_f1(item) for key, item in scored.items()}
    contains = _contains(scored)
    clusters = {key: item.subject for key, item in scored.items()}
    f1_delta = contains_delta = None
    if base is not None:
        f1_delta = _paired(f1, {key: answer_f1(item) for key, item in base.items()}, clusters)
        base_contains = _contains(base)
        if contains is not None and base_contains is not None:
            contains_delta = _paired(contains, base_contains, clusters)
    return OpenBookScores(
        f1=float(np.mean(list(f1.values()))) if f1 else None,
        em=float(np.mean([i.correct for i in scored.values()])) if scored else None,
        f1_delta=f1_delta,
        contains=float(np.mean(list(contains.values()))) if contains else None,
        contains_delta=contains_delta,
        n=len(scored),
    )


def _open_book(label: str, length: str, ours: Grouped, theirs: Grouped | None) -> OpenBookScores:
    """F1, EM, contains and (against the base, on the same items) their Δ with CIs of one open-book
    condition at one length, answerable questions only."""
    base = None if theirs is None else theirs.get((label, length), {})
    return _scores(ours.get((label, length), {}), base)


def memorised(grouped: Grouped) -> set[str] | None:
    """Questions answered exactly closed-book in `grouped` (None when closed-book was not scored)."""
    closed = grouped.get((CLOSED_BOOK, None))
    if not closed:
        return None
    return {question_of(key) for key, item in closed.items() if item.correct}


def _reading(ours: Grouped, theirs: Grouped | None) -> dict[str, OpenBookScores]:
    """Per length, the retrieved condition over the questions the base (this checkpoint on the base
    row) did not answer closed-book."""
    known = memorised(theirs if theirs is not None else ours)
    if known is None:
        return {}
    reading = {}
    for length in RAG_LENGTHS:
        scored = ours.get((RETRIEVED, length), {})
        if not scored:
            continue
        keep = {key: item for key, item in scored.items() if question_of(key) not in known}
        base = None if theirs is None else theirs.get((RETRIEVED, length), {})
        base_kept = None if base is None else {key: base[key] for key in keep if key in base}
        reading[length] = _scores(keep, base_kept)
    return reading


def _closed_book(ours: Grouped, theirs: Grouped | None) -> ClosedBookScores:
    """Closed-book F1 and EM (answerable questions), and per length the open-book gain (retrieved F1
    minus closed-book F1 on the same questions) with its CI, and its change against the base's."""
    closed = list(ours.get((CLOSED_BOOK, None), {}).values())
    gains: dict[str, OpenBookGain] = {}
    for length in RAG_LENGTHS:
        gain, clusters = open_book_gains(ours, length)
        within = _paired(gain, dict.fromkeys(gain, 0.0), clusters)
        across = _paired(gain, open_book_gains(theirs, length)[0], clusters) if theirs is not None else None
        gains[length] = OpenBookGain(within, across)
    return ClosedBookScores(
        f1=float(np.mean([answer_f1(i) for i in closed])) if closed else None,
        em=float(np.mean([i.correct for i in closed])) if closed else None,
        gains=gains,
    )


def _mean(values: Sequence[float | bool]) -> float | None:
    return float(np.mean(values)) if values else None


def rag_findings(
    items: Sequence[ItemResult],
    base_items: Sequence[ItemResult] | None,
    choice_items: Sequence[ItemResult],
    skipped: dict[str, str],
    recall: dict[str, float] | None = None,
) -> RagFindings:
    """ko_rag's findings about one checkpoint: per open-book condition and length, F1, EM and (against
    the base, on the same items) ΔF1 with a paired bootstrap 95% CI clustered by gold passage, over
    answerable questions only; the closed-book scores and open-book gain; on the retrieved condition,
    Hangul share, abstention recall (on unanswerable questions) and precision, and multiple-choice
    accuracy over all scored lengths, and retrieval recall per length (`recall`); the lengths skipped
    and why."""
    answerable = [item for item in items if item.reference != ABSTAIN]
    ours = by_coordinates(answerable)
    theirs = None if base_items is None else by_coordinates([i for i in base_items if i.reference != ABSTAIN])
    labels = sorted({label for label, _ in ours if label != CLOSED_BOOK} | {RETRIEVED})
    retrieved = [item for item in items if coordinates(item.item_id)[0] == RETRIEVED]
    unanswerable = [item for item in retrieved if item.reference == ABSTAIN]  # `correct`: it abstained
    choices = [item for item in choice_items if coordinates(item.item_id)[0] == RETRIEVED]
    return RagFindings(
        open_book={
            (label, length): _open_book(label, length, ours, theirs)
            for label in labels
            for length in RAG_LENGTHS
        },
        closed_book=_closed_book(ours, theirs) if (CLOSED_BOOK, None) in ours else None,
        hangul=_mean([item.hangul_share for item in retrieved if item.hangul_share is not None]),
        abstain=_mean([i.correct for i in unanswerable]),
        abstain_precision=_mean(
            [item.reference == ABSTAIN for item in retrieved if abstains(item.generated or "")]
        ),
        mc_acc=_mean([i.correct for i in choices]),
        recall=dict(recall or {}),
        reading=_reading(ours, theirs),
        skipped=skipped,
    )


def checkpoint_findings(
    items: Mapping[str, Sequence[ItemResult]],
    base_items: Mapping[str, Sequence[ItemResult]] | None,
    skipped: dict[str, str],
    recall: dict[str, float] | None = None,
) -> RagFindings:
    """`rag_findings` from a checkpoint's items by task (`base_items` None on the base row)."""
    base = None if base_items is None else base_items.get(TASK, [])
    return rag_findings(items.get(TASK, []), base, items.get(MC_TASK, []), skipped, recall)
