"""Calibration of the cluster-level p-values (`evals/statistics/cluster_tests.py`), the `pvalues` part of
bench/stats_bench.py: under "no change", how often is p < 0.05, per number of clusters K?

Two null populations per K (K = 3, 5, 9, 20, 45):
- accuracy: stats_bench's few-subjects grid with no effect (900 items in K subjects, correlation 0.05,
  4% of items flipped each way), the p the suite records (`cluster_p`);
- perplexity: K documents of 1–6 windows of 100–500 tokens, each document with its own change in NLL
  per token around 0 (between-document spread 0.01) plus window noise: the p compare_perplexity uses.
For each it reports the suite's p (exact sign flips up to 12 clusters, else t(K−1)) and both references
alone. An exact sign-flip test cannot give p below 2^(1−K): at K = 3 (0.25) and K = 5 (0.0625) it never
rejects at 0.05, a size of 0 by construction; t(K−1) is the reference that can, and its share is the one
to hold to 4–6% there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from evals.statistics.cluster_tests import SIGN_FLIP_MAX_CLUSTERS, cluster_test, ratio_t_p, sign_flip_p

ALPHA = 0.05
PVALUE_ICC = 0.05
"""Within-subject correlation of the accuracy null (stats_bench's grid at 0.05)."""
TARGET = (0.04, 0.06)
"""Share of p < 0.05 under the null a calibrated test keeps to, where it can reach 0.05."""

Draw = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]
"""One null replicate: per-cluster totals and sizes."""


def accuracy_null(subjects: int) -> Draw:
    """Per-subject sums of candidate − base correctness under stats_bench's grid null, and item counts."""
    from bench.stats_bench import grid_scenario  # stats_bench imports this module in its main

    scenario = grid_scenario(subjects, PVALUE_ICC).null()

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        paired = scenario.draw(rng)
        index = np.unique(paired.clusters, return_inverse=True)[1]
        differences = paired.cand_ok.astype(float) - paired.base_ok
        return np.bincount(index, weights=differences), np.bincount(index).astype(float)

    return draw


def perplexity_null(documents: int) -> Draw:
    """Per-document Σ NLL change and Σ tokens: a change per token of N(0, 0.01) per document plus
    N(0, 0.02) per window, 1–6 windows of 100–500 tokens."""

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        windows = rng.integers(1, 7, documents)
        tokens = rng.integers(100, 501, windows.sum()).astype(float)
        document = np.repeat(np.arange(documents), windows)
        per_token = rng.normal(0, 0.01, documents)[document] + rng.normal(0, 0.02, len(tokens))
        return np.bincount(document, weights=per_token * tokens), np.bincount(document, weights=tokens)

    return draw


def null_rejection(draw: Draw, replicates: int, rng: np.random.Generator) -> dict[str, float]:
    """Shares of null replicates with p < ALPHA: the suite's p (`suite`), t(K−1) alone (`t`) and, up to
    SIGN_FLIP_MAX_CLUSTERS clusters, the exact sign-flip test alone (`sign_flip`, else NaN)."""
    counts = {"suite": 0, "t": 0, "sign_flip": 0}
    clusters = 0
    for _ in range(replicates):
        totals, sizes = draw(rng)
        clusters = len(totals)
        counts["suite"] += cluster_test(totals, sizes).p < ALPHA
        counts["t"] += ratio_t_p(totals, sizes) < ALPHA
        if clusters <= SIGN_FLIP_MAX_CLUSTERS:
            counts["sign_flip"] += sign_flip_p(totals) < ALPHA
    shares = {key: count / replicates for key, count in counts.items()}
    return shares | ({} if clusters <= SIGN_FLIP_MAX_CLUSTERS else {"sign_flip": float("nan")})


def run_pvalue_calibration(
    replicates: int, counts: tuple[int, ...], say: Callable[[str], None]
) -> dict[str, float]:
    """The table of null rejection shares per population and K, and their row for results/bench."""
    say(f"\n## p-value calibration: share of p < {ALPHA} under no change ({replicates} replicates per cell)")
    say(f"{'population':11} {'K':>3} {'floor 2^(1-K)':>13} {'suite':>7} {'t(K-1)':>7} {'sign-flip':>9}")
    row: dict[str, float] = {}
    for name, population in (("accuracy", accuracy_null), ("perplexity", perplexity_null)):
        for k in counts:
            rng = np.random.default_rng([k, len(name)])
            shares = null_rejection(population(k), replicates, rng)
            flip = "—" if np.isnan(shares["sign_flip"]) else f"{shares['sign_flip']:.3f}"
            say(
                f"{name:11} {k:3d} {2.0 ** (1 - k):13.3g} {shares['suite']:7.3f} {shares['t']:7.3f} {flip:>9}"
            )
            row |= {f"{name}_k{k}_{key}": value for key, value in shares.items()}
    t_shares = [value for key, value in row.items() if key.endswith("_t")]
    suite = max(value for key, value in row.items() if key.endswith("_suite"))
    say(
        f"t(K-1): null p < {ALPHA} in {min(t_shares):.3f}–{max(t_shares):.3f} of runs over every K "
        f"(target {TARGET[0]:.2f}–{TARGET[1]:.2f}); the suite's p at most {suite:.3f} (target <= "
        f"{TARGET[1]:.2f}; its sign flips never reject where 2^(1-K) > {ALPHA})"
    )
    summary = {"pvalue_suite_max_null_share": suite, "pvalue_t_min_null_share": min(t_shares)}
    return row | summary | {"pvalue_t_max_null_share": max(t_shares)}
