"""The ko_rag leaderboard cells per condition and context length, from the scored items
(`answer_score.py` scores each answer): F1 and EM over answerable questions, ΔF1 against the base with
a paired bootstrap CI clustered by gold passage, the closed-book scores and the open-book gain over
them (paired the same way), abstention, Hangul share, multiple-choice accuracy, retrieval recall."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from evals.statistics.stats import (
    BOOTSTRAP_RESAMPLES,
    SEED,
    cluster_sums,
    percentile_ci,
    small_sample_stretch,
)
from evals.tasks.ko_rag.abstention import abstains
from evals.tasks.ko_rag.context import ABSTAIN
from evals.tasks.ko_rag.sweep import (
    CLOSED_BOOK,
    LENGTHS,
    MC_TASK,
    RETRIEVED,
    TASK,
    coordinates,
    question_of,
)
from kqe.core.results import ItemResult


def _mean_replicates(
    differences: np.ndarray, index: np.ndarray, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Means of `differences` over clusters (`index`: each item's cluster) drawn with replacement,
    stretched for the number of clusters like `evals.statistics.stats`."""
    totals = np.column_stack([np.bincount(index, weights=differences), np.bincount(index)])
    sums = cluster_sums(totals, resamples, rng)
    mean = differences.mean()
    return mean + small_sample_stretch(len(totals)) * (sums[:, 0] / sums[:, 1] - mean)


def paired_mean_ci(
    differences: np.ndarray,
    clusters: Sequence[str],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """95% percentile bootstrap CI of the mean of paired differences, whole clusters resampled.

    Questions on one passage succeed or fail together (the passage is easy to read or not), so the
    clusters are the gold passages (an item's `subject`); as in `stats.bootstrap_accuracies`, the
    interval is never narrower than the one that resamples single items."""
    rng = np.random.default_rng([seed, len(differences)])
    index = np.unique(np.asarray(clusters), return_inverse=True)[1]
    clustered = _mean_replicates(differences, index, resamples, rng)
    items = _mean_replicates(differences, np.arange(len(differences)), resamples, rng)
    return percentile_ci(items if np.std(items) > np.std(clustered) else clustered)


Cells = dict[str, float | str | None]
Grouped = dict[tuple[str, str | None], dict[str, ItemResult]]
"""(condition label, length label or None) -> item id -> result."""


def column_prefix(label: str) -> str:
    """`ko_rag` for the retrieved condition (the columns it always had), `ko_rag_<label>` for the others."""
    return "ko_rag" if label == RETRIEVED else f"ko_rag_{label}"


def _grouped(items: Sequence[ItemResult]) -> Grouped:
    grouped: Grouped = defaultdict(dict)
    for item in items:
        grouped[coordinates(item.item_id)][item.item_id] = item
    return grouped


def _f1(item: ItemResult) -> float:
    return item.f1 or 0.0


def _paired(
    ours: dict[str, float], theirs: dict[str, float], clusters: dict[str, str]
) -> tuple[float, float, float] | None:
    """(mean of ours − theirs, its 95% CI clustered) over the same keys, None unless they match."""
    if not ours or set(ours) != set(theirs):
        return None
    keys = sorted(ours)
    differences = np.array([ours[k] - theirs[k] for k in keys])
    low, high = paired_mean_ci(differences, [clusters[k] for k in keys])
    return float(differences.mean()), low, high


def condition_cells(label: str, ours: Grouped, theirs: Grouped | None) -> Cells:
    """F1, EM and (against the base, on the same items) ΔF1 with its CI per length of one open-book
    condition, answerable questions only."""
    cells: Cells = {}
    prefix = column_prefix(label)
    for length in LENGTHS:
        scored = ours.get((label, length), {})
        f1 = {key: _f1(item) for key, item in scored.items()}
        cells[f"{prefix}_f1_{length}"] = float(np.mean(list(f1.values()))) if f1 else None
        cells[f"{prefix}_em_{length}"] = (
            float(np.mean([i.correct for i in scored.values()])) if scored else None
        )
        base = {key: _f1(item) for key, item in (theirs or {}).get((label, length), {}).items()}
        paired = _paired(f1, base, {key: item.subject for key, item in scored.items()})
        if theirs is not None and paired is not None:
            cells |= dict(zip((f"{prefix}_f1_delta_{length}", f"{prefix}_f1_ci_low_{length}",
                               f"{prefix}_f1_ci_high_{length}"), paired, strict=True))  # fmt: skip
    return cells


def _gains(grouped: Grouped, length: str) -> tuple[dict[str, float], dict[str, str]]:
    """Question -> retrieved F1 at `length` minus closed-book F1 (answerable questions scored in both),
    and each question's cluster."""
    closed = {question_of(key): _f1(item) for key, item in grouped.get((CLOSED_BOOK, None), {}).items()}
    gains, clusters = {}, {}
    for key, item in grouped.get((RETRIEVED, length), {}).items():
        question = question_of(key)
        if question in closed:
            gains[question], clusters[question] = _f1(item) - closed[question], item.subject
    return gains, clusters


def closed_book_cells(ours: Grouped, theirs: Grouped | None) -> Cells:
    """Closed-book F1 and EM (answerable questions), and per length the open-book gain (retrieved F1
    minus closed-book F1 on the same questions) with its CI, and its change against the base's."""
    closed = list(ours.get((CLOSED_BOOK, None), {}).values())
    cells: Cells = {
        "ko_rag_closed_book_f1": float(np.mean([_f1(i) for i in closed])) if closed else None,
        "ko_rag_closed_book_em": float(np.mean([i.correct for i in closed])) if closed else None,
    }
    for length in LENGTHS:
        gains, clusters = _gains(ours, length)
        within = _paired(gains, dict.fromkeys(gains, 0.0), clusters)
        if within is not None:
            cells |= dict(zip((f"ko_rag_gain_{length}", f"ko_rag_gain_ci_low_{length}",
                               f"ko_rag_gain_ci_high_{length}"), within, strict=True))  # fmt: skip
        across = _paired(gains, _gains(theirs, length)[0], clusters) if theirs is not None else None
        if across is not None:
            cells |= dict(zip((f"ko_rag_gain_delta_{length}", f"ko_rag_gain_delta_ci_low_{length}",
                               f"ko_rag_gain_delta_ci_high_{length}"), across, strict=True))  # fmt: skip
    return cells


def leaderboard_cells(
    items: Sequence[ItemResult],
    base_items: Sequence[ItemResult] | None,
    choice_items: Sequence[ItemResult],
    skipped: dict[str, str],
    recall: dict[str, float] | None = None,
) -> Cells:
    """The `ko_rag_*` leaderboard cells of one checkpoint: per open-book condition and length, F1, EM and
    (against the base, on the same items) ΔF1 with a paired bootstrap 95% CI clustered by gold passage,
    over answerable questions only; the closed-book scores and open-book gain; on the retrieved
    condition, Hangul share, abstention recall (on unanswerable questions) and precision, and
    multiple-choice accuracy over all scored lengths, and retrieval recall per length (`recall`); the
    lengths skipped and why."""
    answerable = [item for item in items if item.reference != ABSTAIN]
    ours = _grouped(answerable)
    theirs = None if base_items is None else _grouped([i for i in base_items if i.reference != ABSTAIN])
    cells: Cells = {}
    for label in sorted({label for label, _ in ours if label != CLOSED_BOOK} | {RETRIEVED}):
        cells |= condition_cells(label, ours, theirs)
    if (CLOSED_BOOK, None) in ours:
        cells |= closed_book_cells(ours, theirs)
    retrieved = [item for item in items if coordinates(item.item_id)[0] == RETRIEVED]
    shares = [item.hangul_share for item in retrieved if item.hangul_share is not None]
    cells["ko_rag_hangul"] = float(np.mean(shares)) if shares else None
    unanswerable = [item for item in retrieved if item.reference == ABSTAIN]  # `correct`: it abstained
    cells["ko_rag_abstain"] = float(np.mean([i.correct for i in unanswerable])) if unanswerable else None
    declined = [item.reference == ABSTAIN for item in retrieved if abstains(item.generated or "")]
    cells["ko_rag_abstain_precision"] = float(np.mean(declined)) if declined else None
    choices = [item for item in choice_items if coordinates(item.item_id)[0] == RETRIEVED]
    cells["ko_rag_mc_acc"] = float(np.mean([i.correct for i in choices])) if choices else None
    cells |= {f"ko_rag_recall_{length}": (recall or {}).get(length) for length in LENGTHS}
    cells["ko_rag_skipped"] = "; ".join(f"{label}: {why}" for label, why in skipped.items()) or None
    return cells


def checkpoint_cells(
    items: Mapping[str, Sequence[ItemResult]],
    base_items: Mapping[str, Sequence[ItemResult]] | None,
    skipped: dict[str, str],
    recall: dict[str, float] | None = None,
) -> Cells:
    """`leaderboard_cells` from a checkpoint's items by task (`base_items` None on the base row)."""
    base = None if base_items is None else base_items.get(TASK, [])
    return leaderboard_cells(items.get(TASK, []), base, items.get(MC_TASK, []), skipped, recall)


def closed_book_flags(results: Sequence[ItemResult]) -> list[ItemResult]:
    """`results` with each open-book item's `closed_book` set: whether the same checkpoint answered its
    question exactly without documents (left None where no closed-book item of it was scored)."""
    answered = {
        question_of(r.item_id): r.correct for r in results if coordinates(r.item_id)[0] == CLOSED_BOOK
    }
    flagged = []
    for result in results:
        question = question_of(result.item_id)
        if coordinates(result.item_id)[0] != CLOSED_BOOK and question in answered:
            result = result.model_copy(update={"closed_book": answered[question]})
        flagged.append(result)
    return flagged
