"""The exact McNemar test of paired binary outcomes and the loss it can detect (its MDE)."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

ALPHA = 0.05
"""Two-sided level of the McNemar test and of the 95% CIs."""
POWER = 0.80
"""Power the minimum detectable effect is computed for."""


def mcnemar_p(flips_c2w: ArrayLike, flips_w2c: ArrayLike, mid: bool = False) -> np.ndarray:
    """Two-sided exact McNemar p (binomial test of the discordant pairs against 1/2), vectorised.

    The mid-p variant subtracts the probability of the observed split itself, which brings the test's
    size close to nominal instead of below it (Fagerland, Lydersen & Laake 2013)."""
    from scipy.stats import binom

    b, c = np.asarray(flips_c2w), np.asarray(flips_w2c)
    discordant, smaller = b + c, np.minimum(b, c)
    p = 2 * binom.cdf(smaller, discordant, 0.5)
    if mid:
        p = p - binom.pmf(smaller, discordant, 0.5)
    return np.minimum(p, 1.0)


def minimum_detectable_effect(
    n: int, discordance: float, alpha: float = ALPHA, power: float = POWER
) -> float:
    """Smallest |Δ| the two-sided McNemar test at `alpha` finds with `power`, for n paired items of
    which a share `discordance` (ψ) flipped.

    Connor's (1987) sample size n = (z_a √ψ + z_b √(ψ − Δ²))² / Δ² solved for Δ gives
    Δ = (z_a √(ψ n) + z_b √(ψ (n + z_b² − z_a²))) / (n + z_b²). A loss Δ flips at least Δ·n items,
    so ψ is raised to Δ when fewer flips were seen: then Δ = ((z_a √n + z_b √(n + z_b² − z_a²)) /
    (n + z_b²))², about 7.8 / n, the loss that all-one-way flips must reach to be detected.
    """
    if n <= 0:
        return 1.0
    z_a, z_b = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    spread = max(n + z_b**2 - z_a**2, 0.0)
    observed = (z_a * np.sqrt(discordance * n) + z_b * np.sqrt(discordance * spread)) / (n + z_b**2)
    all_flips = ((z_a * np.sqrt(n) + z_b * np.sqrt(spread)) / (n + z_b**2)) ** 2
    return float(min(max(observed, all_flips), 1.0))
