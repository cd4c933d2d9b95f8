"""The ko_rag leaderboard cells per context length, from the scored items (`answer_score.py` scores
each answer): F1 and EM over answerable questions, ΔF1 against the base with a paired bootstrap CI
clustered by gold passage, abstention, Hangul share and multiple-choice accuracy."""

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
from evals.tasks.ko_rag.task import LENGTHS, MC_TASK, TASK
from kqe.core.results import ItemResult


def length_of(item_id: str) -> str:
    """The sweep label an item id ends with (`ko_rag/num-001/1k` -> `1k`)."""
    return item_id.rsplit("/", 1)[-1]


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


def _by_length(items: Sequence[ItemResult]) -> dict[str, dict[str, ItemResult]]:
    grouped: dict[str, dict[str, ItemResult]] = defaultdict(dict)
    for item in items:
        grouped[length_of(item.item_id)][item.item_id] = item
    return grouped


def leaderboard_cells(
    items: Sequence[ItemResult],
    base_items: Sequence[ItemResult] | None,
    choice_items: Sequence[ItemResult],
    skipped: dict[str, str],
) -> dict[str, float | str | None]:
    """The `ko_rag_*` leaderboard cells of one checkpoint: F1, EM and (against the base, on the same
    items) ΔF1 with a paired bootstrap 95% CI (clustered by gold passage) per length, over answerable
    questions only; Hangul share, abstention recall (on unanswerable questions) and precision, and
    multiple-choice accuracy over all scored lengths; the lengths skipped and why."""
    cells: dict[str, float | str | None] = {}
    ours = _by_length([item for item in items if item.reference != ABSTAIN])
    theirs = _by_length([item for item in base_items or [] if item.reference != ABSTAIN])
    for label in LENGTHS:
        scored = ours.get(label, {})
        f1 = np.array([item.f1 or 0.0 for item in scored.values()])
        cells[f"ko_rag_f1_{label}"] = float(f1.mean()) if len(f1) else None
        cells[f"ko_rag_em_{label}"] = float(np.mean([i.correct for i in scored.values()])) if scored else None
        base = theirs.get(label, {})
        if scored and base_items is not None and set(base) == set(scored):
            keys = sorted(scored)
            differences = np.array([(scored[k].f1 or 0.0) - (base[k].f1 or 0.0) for k in keys])
            low, high = paired_mean_ci(differences, [base[k].subject for k in keys])
            cells |= {f"ko_rag_f1_delta_{label}": float(differences.mean())}
            cells |= {f"ko_rag_f1_ci_low_{label}": low, f"ko_rag_f1_ci_high_{label}": high}
    shares = [item.hangul_share for item in items if item.hangul_share is not None]
    cells["ko_rag_hangul"] = float(np.mean(shares)) if shares else None
    unanswerable = [item for item in items if item.reference == ABSTAIN]  # `correct`: it abstained
    cells["ko_rag_abstain"] = float(np.mean([i.correct for i in unanswerable])) if unanswerable else None
    declined = [item.reference == ABSTAIN for item in items if abstains(item.generated or "")]
    cells["ko_rag_abstain_precision"] = float(np.mean(declined)) if declined else None
    cells["ko_rag_mc_acc"] = float(np.mean([i.correct for i in choice_items])) if choice_items else None
    cells["ko_rag_skipped"] = "; ".join(f"{label}: {why}" for label, why in skipped.items()) or None
    return cells


def checkpoint_cells(
    items: Mapping[str, Sequence[ItemResult]],
    base_items: Mapping[str, Sequence[ItemResult]] | None,
    skipped: dict[str, str],
) -> dict[str, float | str | None]:
    """`leaderboard_cells` from a checkpoint's items by task (`base_items` None on the base row)."""
    base = None if base_items is None else base_items.get(TASK, [])
    return leaderboard_cells(items.get(TASK, []), base, items.get(MC_TASK, []), skipped)
