"""Micro and macro accuracy, per-supercategory scores and the macro Δ against the base, with 95% CIs.

- micro: the share of all items answered right (lm-eval's KMMLU and MMLU group score);
- macro: the mean of the subjects' accuracies (what the KMMLU paper reports);
- supercategory (KMMLU's STEM, Applied Science, HUMSS, Other): the macro over its subjects.
With a subject-stratified `--limit` the two averages differ only by the rounding of each subject's
share; on the full sets they differ by the subject sizes (KMMLU's test subjects hold 100 to 2,000+).

The CIs come from a stratified bootstrap: items are resampled within each subject and the subjects are
kept, because the benchmark's subjects are fixed, not a sample (the paired micro Δ CI of
`evals.statistics.stats` resamples whole subjects instead, and so answers "on subjects like these"). A binary
item's resampled subject count is binomial(n_s, p̂_s), so replicates are drawn per subject directly.
The within-subject bootstrap variance is the plug-in p̂(1−p̂)/n_s, low by (n_s−1)/n_s (20% with five
items a subject), so each subject's deviations are stretched by √(n_s/(n_s−1)). The macro Δ is paired:
a subject's four cells (neither right, only the candidate, only the base, both) are drawn as one
multinomial, so both checkpoints answer the same resampled items.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evals.statistics.bootstrap import BOOTSTRAP_RESAMPLES, SEED, percentile_ci
from evals.statistics.pairing import Scored, pair_items
from evals.tasks import benchmark_data
from evals.tasks.registry import CATEGORY_LABELS, TASK_SPECS


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% CI (fractions)."""

    value: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class TaskAverages:
    """One checkpoint's averages on one task."""

    n: int
    """Items scored."""
    subjects: int
    """Subjects among them."""
    micro: Estimate
    """Share of all items right."""
    macro: Estimate
    """Mean of the subjects' accuracies."""
    categories: dict[str, Estimate]
    """Supercategory → macro over its subjects (empty without a category map)."""


def _subject_table(subjects: np.ndarray, *columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """Subject labels, items per subject, and per-subject sums of each boolean column."""
    labels, index = np.unique(subjects, return_inverse=True)
    sums = [np.bincount(index, weights=column, minlength=len(labels)) for column in columns]
    return (labels, np.bincount(index, minlength=len(labels)), *sums)


def _stretch(sizes: np.ndarray) -> np.ndarray:
    """√(n/(n−1)) per subject (1 for a one-item subject, whose spread cannot be estimated)."""
    return np.sqrt(np.where(sizes > 1, sizes / np.maximum(sizes - 1, 1), 1.0))


def _estimate(point: float, replicates: np.ndarray, low: float, high: float) -> Estimate:
    ci_low, ci_high = percentile_ci(replicates)
    # + 0.0 turns a -0.0 (a Δ of zero) into 0.0, which the CSV writes as "0", not "-0"
    return Estimate(point + 0.0, max(ci_low, low) + 0.0, min(ci_high, high) + 0.0)


def task_averages(
    items: Sequence[Scored],
    categories: Mapping[str, str] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> TaskAverages:
    """Micro, macro and (with `categories`, subject → supercategory) per-supercategory accuracy."""
    if not items:
        raise ValueError("no items to average")
    subjects = np.array([item.subject or "" for item in items])
    correct = np.array([item.correct for item in items], dtype=float)
    labels, sizes, right = _subject_table(subjects, correct)
    accuracy = right / sizes
    rng = np.random.default_rng([seed, zlib.crc32(items[0].task.encode())])
    draws = rng.binomial(sizes, accuracy, size=(resamples, len(labels))) / sizes
    replicates = accuracy + _stretch(sizes) * (draws - accuracy)
    weights = sizes / sizes.sum()
    micro = _estimate(float(weights @ accuracy), replicates @ weights, 0.0, 1.0)
    macro = _estimate(float(accuracy.mean()), replicates.mean(axis=1), 0.0, 1.0)
    by_category: dict[str, Estimate] = {}
    if categories is not None:
        unknown = [str(label) for label in labels if label not in categories]
        if unknown:
            raise ValueError(f"subjects without a supercategory: {', '.join(unknown)}")
        of = np.array([categories[label] for label in labels])
        for category in CATEGORY_LABELS:
            mask = of == category
            if mask.any():
                by_category[category] = _estimate(
                    float(accuracy[mask].mean()), replicates[:, mask].mean(axis=1), 0.0, 1.0
                )
    return TaskAverages(len(items), len(labels), micro, macro, by_category)


def macro_delta(
    base: Sequence[Scored], cand: Sequence[Scored], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = SEED
) -> Estimate:
    """Candidate macro − base macro on the same items, with a paired stratified-bootstrap 95% CI."""
    paired = pair_items(base, cand)
    only_cand = paired.cand_ok & ~paired.base_ok
    only_base = paired.base_ok & ~paired.cand_ok
    both = paired.base_ok & paired.cand_ok
    _, sizes, n_cand, n_base, n_both = _subject_table(paired.clusters, only_cand, only_base, both)
    cells = np.stack([sizes - n_cand - n_base - n_both, n_cand, n_base, n_both], axis=1) / sizes[:, None]
    delta = (n_cand - n_base) / sizes
    rng = np.random.default_rng([seed, zlib.crc32(f"{base[0].task}/macro-delta".encode())])
    draws = rng.multinomial(sizes, cells, size=(resamples, len(sizes)))
    drawn = (draws[..., 1] - draws[..., 2]) / sizes
    replicates = (delta + _stretch(sizes) * (drawn - delta)).mean(axis=1)
    return _estimate(float(delta.mean()), replicates, -1.0, 1.0)


@dataclass(frozen=True)
class TaskSummary:
    """What the averages say about one task of a checkpoint."""

    source: str
    """What the task's items are (`KMMLU-HARD dev (offline, 225 items), 0-shot`)."""
    averages: TaskAverages | None
    """Micro, macro and supercategories; None when this checkpoint has no items of the task."""
    macro_delta: Estimate | None
    """Macro against the base on the same items; None on the base row or without the base's items."""


def checkpoint_averages(
    items: Mapping[str, Sequence[Scored]],
    base_items: Mapping[str, Sequence[Scored]] | None,
    labels: Mapping[str, str],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> dict[str, TaskSummary]:
    """Task → a checkpoint's averages on it, for every task of the run (`labels`: task → what its items
    are); `base_items` None (the base itself) leaves the macro Δ out."""
    found: dict[str, TaskSummary] = {}
    for task, label in labels.items():
        scored = items.get(task)
        if not scored:
            found[task] = TaskSummary(label, None, None)
            continue
        registered = TASK_SPECS.get(task)
        categories = benchmark_data.kmmlu_categories() if registered and registered.categories else None
        delta = None
        if base_items and base_items.get(task):
            delta = macro_delta(base_items[task], scored, resamples, seed)
        found[task] = TaskSummary(label, task_averages(scored, categories, resamples, seed), delta)
    return found
