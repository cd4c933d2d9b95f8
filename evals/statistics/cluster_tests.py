"""p-values whose reference is the one the CIs use: the clusters (subjects, documents, gold passages),
not the items, are the units, so a p never claims more than K clusters can show.

A statistic that is a ratio Σ totals / Σ sizes over K clusters (a change in accuracy, in mean NLL per
token, in mean F1) is tested against 0 in one of two ways:

- K ≤ SIGN_FLIP_MAX_CLUSTERS: the exact sign-flip randomization test. Under "no change" each cluster's
  total is as likely to be +x as −x, so every one of the 2^K sign patterns of the totals is as likely
  as the observed one; p is the share of patterns whose |Σ| reaches the observed |Σ| (the observed
  pattern included). The observed pattern and its negation always count, so p ≥ 2 / 2^K = 2^(1−K):
  with 4 clusters no p is below 0.125, with 5 none reaches 0.05.
- more clusters: t with K−1 degrees of freedom on the ratio over its cluster-robust standard error
  (CR1: the residuals totals − estimate · sizes, scaled by K/(K−1); Cameron & Miller 2015), the
  reference the CIs' t(K−1) stretch uses. With equal sizes it is the one-sample t test of the cluster
  means.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

SIGN_FLIP_MAX_CLUSTERS = 12
"""Up to this many clusters the 2^K sign patterns (4,096) are enumerated: the exact test."""
SIGN_FLIP = "exact sign-flip"
T_TEST = "t(K−1)"
ONE_CLUSTER = "no test (one cluster)"


@dataclass(frozen=True)
class ClusterTest:
    """A two-sided p of "no change" over K clusters, and how it was found."""

    p: float
    method: str
    """SIGN_FLIP, T_TEST or ONE_CLUSTER, with the clusters: `exact sign-flip over 4 clusters`."""
    clusters: int


def sign_flip_floor(clusters: int) -> float:
    """The smallest two-sided p the exact sign-flip test over `clusters` totals can give: 2^(1−K)."""
    return 2.0 ** (1 - clusters)


def sign_flip_p(totals: ArrayLike) -> float:
    """Two-sided exact p of Σ totals = 0 over every sign pattern of the totals (observed included)."""
    values = np.asarray(totals, dtype=float)
    k = len(values)
    if k > SIGN_FLIP_MAX_CLUSTERS:
        raise ValueError(f"{k} clusters: the exact test enumerates at most {SIGN_FLIP_MAX_CLUSTERS}")
    signs = 1 - 2 * ((np.arange(2**k)[:, None] >> np.arange(k)) & 1)
    flipped = np.abs(signs @ values)
    # sums equal to the observed one in exact arithmetic differ by rounding: count them as reaching it
    tolerance = 1e-9 * float(np.abs(values).sum())
    return float(np.mean(flipped >= abs(values.sum()) - tolerance))


def ratio_t_p(totals: ArrayLike, sizes: ArrayLike) -> float:
    """Two-sided p of Σ totals / Σ sizes = 0 against t(K−1), with the CR1 cluster-robust SE."""
    from scipy.stats import t

    values, weights = np.asarray(totals, dtype=float), np.asarray(sizes, dtype=float)
    k = len(values)
    estimate = values.sum() / weights.sum()
    residuals = values - estimate * weights
    se = float(np.sqrt(k / (k - 1) * np.sum(residuals**2)) / weights.sum())
    if se == 0:  # every cluster moved alike: no spread to judge by
        return float(estimate == 0)
    return float(2 * t.sf(abs(estimate) / se, k - 1))


def cluster_test(totals: ArrayLike, sizes: ArrayLike, unit: str = "clusters") -> ClusterTest:
    """The p of Σ totals / Σ sizes = 0: exact sign flips up to SIGN_FLIP_MAX_CLUSTERS clusters, else
    t(K−1); p = 1 with one cluster (nothing to compare it with). `unit` names the clusters in the
    method (`documents`, `windows`)."""
    values = np.asarray(totals, dtype=float)
    k = len(values)
    if k < 2:
        return ClusterTest(1.0, ONE_CLUSTER, k)
    if k <= SIGN_FLIP_MAX_CLUSTERS:
        return ClusterTest(sign_flip_p(values), f"{SIGN_FLIP} over {k} {unit}", k)
    return ClusterTest(ratio_t_p(values, sizes), f"{T_TEST} over {k} {unit}", k)


def clustered_test(values: ArrayLike, clusters: ArrayLike) -> ClusterTest:
    """`cluster_test` of the mean of per-item `values` (paired differences), items grouped by cluster."""
    index = np.unique(np.asarray(clusters), return_inverse=True)[1]
    return cluster_test(np.bincount(index, weights=np.asarray(values, dtype=float)), np.bincount(index))
