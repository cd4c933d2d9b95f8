"""Paired bootstrap replicates and the intervals read from them.

Every interval of the suite comes from here: items or whole subjects (the clusters items were drawn in)
resampled for both checkpoints at once, the replicates stretched for the few units they come from, and a
percentile or symmetric 95% interval read off them.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from evals.statistics.pairing import PairedItems

BOOTSTRAP_RESAMPLES = 10_000
SEED = 20261129
ALPHA = 0.05
"""Two-sided level of the McNemar test and of the 95% CIs."""
Z_CI = NormalDist().inv_cdf(1 - ALPHA / 2)
"""1.96; scipy.stats is imported only where needed, not by every `kqe` command (0.6 s of each start)."""
_PICK_CELLS = 4_000_000  # bounds each block of the resamples × clusters draws (32 MB)


def cluster_sums(totals: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, columns): column sums of `totals` rows over clusters drawn with replacement."""
    clusters = len(totals)
    block = max(1, _PICK_CELLS // clusters)
    sums = []
    for start in range(0, resamples, block):
        picks = rng.integers(0, clusters, size=(min(block, resamples - start), clusters))
        sums.append(np.stack([column[picks].sum(axis=1) for column in totals.T], axis=1))
    return np.vstack(sums)


def small_sample_stretch(units: int) -> float:
    """Small-sample factor for a bootstrap over `units` resampled units: √(K/(K−1)) · t(K−1) / z."""
    from scipy.stats import t

    if units < 2:
        return 1.0
    return float(np.sqrt(units / (units - 1)) * t.ppf(1 - ALPHA / 2, units - 1) / Z_CI)


CLUSTER_BOOTSTRAP = "cluster bootstrap"
"""Whole subjects resampled: their spread was at least the items' (the usual case)."""
ITEM_FLOOR = "item bootstrap (cluster spread came out narrower)"
"""Items resampled despite subjects: a few subjects' spread can be too narrow by chance; the CI never is."""
ITEM_BOOTSTRAP = "item bootstrap"
"""Items resampled: no subjects (or one item per subject)."""


@dataclass(frozen=True)
class Replicates:
    """Bootstrap replicates of (base accuracy, candidate accuracy), both from the same resamples."""

    base: np.ndarray
    cand: np.ndarray
    method: str
    """CLUSTER_BOOTSTRAP, ITEM_FLOOR or ITEM_BOOTSTRAP."""
    clusters: int
    """Subjects the items fall in (1 without subjects)."""


def bootstrap_accuracies(paired: PairedItems, resamples: int, rng: np.random.Generator) -> Replicates:
    """Replicates of the wider of two paired bootstraps: whole subjects and single items.

    Whole subjects carry the correlation of items within a subject, which only widens the interval in
    expectation; with few subjects their spread is itself a noisy estimate and can come out narrower
    than the items' (9 subjects, no effect: a CI half as wide, excluding 0 while McNemar p = 0.06), so
    the item interval is a floor. Resampling K units understates the spread by √((K−1)/K), and a
    percentile interval ignores that the spread is estimated from K units, so deviations from the
    estimate are stretched by √(K/(K−1)) · t(K−1)/z (bench/stats_bench.py checks coverage).
    """
    n = len(paired.base_ok)
    labels, index = np.unique(paired.clusters, return_inverse=True)
    if not 1 < len(labels) < n:
        return Replicates(*_item_replicates(paired, resamples, rng), ITEM_BOOTSTRAP, 1)
    clustered = _cluster_replicates(paired, index, resamples, rng)
    items = _item_replicates(paired, resamples, rng)
    if _width(items) > _width(clustered):
        return Replicates(*items, ITEM_FLOOR, len(labels))
    return Replicates(*clustered, CLUSTER_BOOTSTRAP, len(labels))


def _cluster_replicates(
    paired: PairedItems, index: np.ndarray, resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Whole subjects resampled; a replicate's accuracy is its items' share correct."""
    columns = [np.bincount(index, weights=ok) for ok in (paired.base_ok, paired.cand_ok)]
    sums = cluster_sums(np.column_stack([*columns, np.bincount(index)]), resamples, rng)
    return _stretched(paired, sums[:, 0] / sums[:, 2], sums[:, 1] / sums[:, 2], int(index.max()) + 1)


def _item_replicates(
    paired: PairedItems, resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Items resampled: an item is one of four cells (both right, only base, only candidate, neither),
    so a resample is fully described by multinomial counts of the cells."""
    n = len(paired.base_ok)
    # cells: 0 neither right, 1 only the candidate, 2 only the base, 3 both
    cells = 2 * paired.base_ok.astype(int) + paired.cand_ok.astype(int)
    draws = rng.multinomial(n, np.bincount(cells, minlength=4) / n, size=resamples)
    return _stretched(paired, (draws[:, 2] + draws[:, 3]) / n, (draws[:, 1] + draws[:, 3]) / n, n)


def _stretched(
    paired: PairedItems, base_star: np.ndarray, cand_star: np.ndarray, units: int
) -> tuple[np.ndarray, np.ndarray]:
    stretch = small_sample_stretch(units)
    base_acc, cand_acc = paired.base_ok.mean(), paired.cand_ok.mean()
    return base_acc + stretch * (base_star - base_acc), cand_acc + stretch * (cand_star - cand_acc)


def _width(replicates: tuple[np.ndarray, np.ndarray]) -> float:
    return float(np.std(replicates[1] - replicates[0]))


def percentile_ci(replicates: np.ndarray, widen: float = 0.0) -> tuple[float, float]:
    """95% percentile interval of bootstrap replicates (NaN replicates left out), `widen` added on
    each side: half a step of a discrete statistic's lattice, a continuity correction."""
    low, high = np.nanpercentile(replicates, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return float(low - widen), float(high + widen)


def symmetric_ci(replicates: np.ndarray, estimate: float, widen: float = 0.0) -> tuple[float, float]:
    """95% interval estimate ± z · SD of the (stretched) replicates, `widen` added on each side.

    Symmetric on purpose: per-subject losses are skewed (a few subjects lose much), and a percentile
    interval then leans the way the sample leans, the wrong way; with few subjects that cost up to
    3 points of coverage in bench/stats_bench.py's grid, the symmetric one kept it."""
    half = Z_CI * float(np.std(replicates))
    return estimate - half - widen, estimate + half + widen


def delta_ci(replicates: Replicates, estimate: float, n: int) -> tuple[float, float]:
    """The paired Δ's 95% CI from its replicates: symmetric around `estimate`, half a step of Δ's
    lattice (0.5/n: Δ moves in steps of 1/n) added each side as a continuity correction, in [−1, 1]."""
    low, high = symmetric_ci(replicates.cand - replicates.base, estimate, 0.5 / n)
    return max(low, -1.0), min(high, 1.0)
