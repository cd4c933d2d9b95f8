"""The 95% CI of a mean of per-item paired differences (or of per-item values), whole clusters
resampled: what ko_rag's ΔF1 and the generation signals (`evals.statistics.generation_findings`) use."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evals.statistics.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    SEED,
    cluster_sums,
    percentile_ci,
    small_sample_stretch,
)


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

    Items of one cluster succeed or fail together (questions on one passage: the passage is easy to
    read or not; items of one subject), so whole clusters are drawn (an item's `subject`: ko_rag's gold
    passage, a task's subject); as in `bootstrap.bootstrap_accuracies`, the interval is never narrower than
    the one that resamples single items."""
    rng = np.random.default_rng([seed, len(differences)])
    index = np.unique(np.asarray(clusters), return_inverse=True)[1]
    clustered = _mean_replicates(differences, index, resamples, rng)
    items = _mean_replicates(differences, np.arange(len(differences)), resamples, rng)
    return percentile_ci(items if np.std(items) > np.std(clustered) else clustered)
