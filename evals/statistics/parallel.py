"""The Korean-vs-English loss gap on the same questions: a parallel pair's matched items.

A parallel pair (a registry task whose `parallel` entry says its items are its English twin's,
translated item for item) matches item i of the Korean task with item i of the English one by their
item key: the item id without its leading task name. The gap is the mean over matched items of
(Δ on item i in Korean) − (Δ on item i in English), each Δ being candidate minus base correctness,
so the two languages' noise on the same question cancels instead of adding. Its 95% CI resamples
whole subjects (the Korean item's subject), stretched for few subjects as the other CIs are, never
narrower than resampling single items (`evals.statistics.bootstrap.bootstrap_accuracies` says why).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evals.statistics.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    SEED,
    cluster_sums,
    percentile_ci,
    small_sample_stretch,
)
from evals.statistics.pairing import Scored
from evals.tasks.registry import PARALLEL_TASKS
from kqe.core.errors import UserError
from kqe.core.results import Comparison

MATCHED = "matched items"
"""Start of a parallel pair's `ko_en_gap_pairing` (Δ per item, Korean minus English, on the same
questions), followed by the pair's pairing from the registry."""


@dataclass(frozen=True)
class MatchedGap:
    """The gap on matched items and its 95% CI."""

    gap: float
    ci_low: float
    ci_high: float
    items: int
    """Matched items behind it."""


def with_matched_gaps(
    comparisons: Mapping[str, Comparison],
    base: Mapping[str, Sequence[Scored]],
    cand: Mapping[str, Sequence[Scored]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> dict[str, Comparison]:
    """`stats.compare_tasks`' comparisons, a parallel pair's unpaired gap replaced by the matched one."""
    found = dict(comparisons)
    for task, comparison in comparisons.items():
        english = comparison.english_task
        if task not in PARALLEL_TASKS or english is None or comparison.ko_en_gap is None:
            continue
        matched = matched_gap(base[task], cand[task], base[english], cand[english], resamples, seed)
        pairing = f"{MATCHED}: {PARALLEL_TASKS[task]}"
        found[task] = comparison.model_copy(
            update={
                "ko_en_gap": matched.gap,
                "ko_en_gap_ci_low": matched.ci_low,
                "ko_en_gap_ci_high": matched.ci_high,
                "ko_en_gap_pairing": pairing,
            }
        )
    return found


def item_key(item: Scored) -> str:
    """What pairs an item with its translation: the item id without its leading task name."""
    return item.item_id.split("/", 1)[-1]


def _correct(items: Sequence[Scored]) -> dict[str, tuple[bool, str]]:
    return {item_key(item): (bool(item.correct), item.subject or "") for item in items}


def matched_gap(
    base_ko: Sequence[Scored],
    cand_ko: Sequence[Scored],
    base_en: Sequence[Scored],
    cand_en: Sequence[Scored],
    resamples: int,
    seed: int,
) -> MatchedGap:
    """Gap and CI over the items all four result sets share; a UserError when they share none."""
    sets = [_correct(items) for items in (base_ko, cand_ko, base_en, cand_en)]
    keys = sorted(set.intersection(*(set(found) for found in sets)))
    if not keys:
        raise UserError("the Korean and English tasks of a parallel pair share no item keys: score both")
    ok = np.array([[found[key][0] for found in sets] for key in keys], dtype=float)
    per_item = (ok[:, 1] - ok[:, 0]) - (ok[:, 3] - ok[:, 2])
    gap = float(per_item.mean())
    rng = np.random.default_rng([seed, zlib.crc32(b"ko_en_gap")])
    labels, index = np.unique([sets[0][key][1] for key in keys], return_inverse=True)
    replicates = _items(per_item, resamples, rng)
    if 1 < len(labels) < len(keys):
        totals = np.column_stack([np.bincount(index, weights=per_item), np.bincount(index)])
        sums = cluster_sums(totals, resamples, rng)
        clustered = gap + small_sample_stretch(len(labels)) * (sums[:, 0] / sums[:, 1] - gap)
        replicates = clustered if np.std(clustered) >= np.std(replicates) else replicates
    low, high = percentile_ci(replicates)
    return MatchedGap(gap, max(low, -2.0), min(high, 2.0), len(keys))


def _items(per_item: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    n = len(per_item)
    picks = rng.integers(0, n, size=(resamples, n))
    gap = per_item.mean()
    return np.asarray(gap + small_sample_stretch(n) * (per_item[picks].mean(axis=1) - gap))
