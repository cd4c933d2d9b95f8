"""Adjusting p-values for many tests: Holm's step-down (any false finding) and Benjamini–Hochberg
(the expected share of false findings), within one checkpoint's tasks or across a whole run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjustment: controls the chance of any false finding across the tests."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    steps = (len(p) - np.arange(len(p))) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(steps), 1.0)
    return adjusted


def benjamini_hochberg(pvalues: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg's step-up adjustment: controls the expected share of false findings."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")[::-1]  # largest first: the running minimum steps down
    steps = p[order] * m / np.arange(m, 0, -1)
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.minimum.accumulate(steps), 1.0)
    return adjusted


ADJUSTMENTS = {"holm": holm, "bh": benjamini_hochberg}
"""Run-wide adjustments by `--multiplicity` name (`holm-per-checkpoint` is stats.compare_tasks')."""
