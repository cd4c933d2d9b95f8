"""What a number of paired items can resolve, said before a run: the losses McNemar's test would miss."""

from __future__ import annotations

FLIP_SHARES = (0.05, 0.35)
"""Shares of answers a checkpoint flips against its base, low and high, for the resolution said before
a run: FP8 flipped 6% and 4-bit schemes 37% of gemma3-270m's KMMLU-HARD answers (results/gemma3-270m)."""


def unresolved(items: int) -> str:
    """The losses `items` paired items cannot tell from noise (McNemar MDE over FLIP_SHARES)."""
    from evals.statistics.stats import minimum_detectable_effect  # scipy: not on every CLI start

    low, high = (100 * minimum_detectable_effect(items, share) for share in FLIP_SHARES)
    return f"differences under ~{_points(low)}–{_points(high)} points cannot be resolved"


def _points(value: float) -> str:
    return f"{value:.0f}" if value >= 2 else f"{value:.1f}"
