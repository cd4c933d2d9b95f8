"""CircularEval accuracy (Liu et al. 2023, MMBench): an item counts right only if the checkpoint picks
its gold option in every cyclic rotation of the options (`evals/tasks/circular.py` builds them).

A model that prefers a letter regardless of content gets a rotated item right in at most one rotation
(the one putting the gold answer at its letter), so it scores 0 however the gold letters fall: the
letter prior is removed by construction, at the price of k − 1 more requests per item. Rotation 0 is the
item as the run scored it (its per-item file); rotations 1..k−1 are in the task's circular file.

The paired Δ against the base and its 95% CI come from the same paired bootstrap and Δ interval as
accuracy (`bootstrap.bootstrap_accuracies`, `bootstrap.delta_ci`), over the drawn items.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evals.statistics.bootstrap import BOOTSTRAP_RESAMPLES, SEED, bootstrap_accuracies, delta_ci
from evals.statistics.pairing import Scored, ScoredItem, pair_items
from evals.tasks.circular import base_id


@dataclass(frozen=True)
class CircularScores:
    """One checkpoint's CircularEval on one task, and its paired Δ against the base (fractions)."""

    items: int
    """Items asked in every rotation (`--circular N`)."""
    acc: float
    """Share of them right in every rotation."""
    acc_plain: float
    """Share of them right as scored (rotation 0): the accuracy the circular one is to be read against."""
    delta: float | None = None
    """acc minus the base's on the same items; None on the base."""
    ci_low: float | None = None
    """Lower end of the 95% CI of delta (paired bootstrap over the items, subjects as clusters)."""
    ci_high: float | None = None
    """Upper end of that CI."""


def circular_items(plain: Sequence[Scored], rotated: Sequence[Scored]) -> list[ScoredItem]:
    """One result per rotated item, in the order of `plain`: correct when right as scored and in every
    rotation. Every rotated item must have its plain result and all k − 1 rotations (k its choices)."""
    rotations: dict[str, list[Scored]] = defaultdict(list)
    for result in rotated:
        rotations[base_id(result.item_id)[0]].append(result)
    as_scored = {result.item_id: result for result in plain}
    missing = sorted(set(rotations) - set(as_scored))
    if missing:
        raise ValueError(f"rotated items without their scored item: {missing[:3]}")
    out = []
    for result in plain:
        found = rotations.get(result.item_id)
        if found is None:
            continue
        choices = len(result.choice_logprobs or ())
        if choices and len(found) != choices - 1:
            raise ValueError(f"{result.item_id}: {len(found)} rotations, expected {choices - 1}")
        right = result.correct and all(other.correct for other in found)
        out.append(
            ScoredItem(
                task=result.task,
                item_id=result.item_id,
                correct=right,
                subject=result.subject,
                gold=result.gold,
            )
        )
    return out


def circular_delta(
    base: Sequence[ScoredItem], cand: Sequence[ScoredItem], resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float, float]:
    """The candidate's circular accuracy minus the base's on the same items, and its 95% CI."""
    paired = pair_items(base, cand)
    rng = np.random.default_rng([SEED, zlib.crc32(f"{base[0].task}/circular".encode())])
    delta = float(paired.cand_ok.mean() - paired.base_ok.mean())
    low, high = delta_ci(bootstrap_accuracies(paired, resamples, rng), delta, len(paired.base_ok))
    return delta, low, high


def circular_scores(
    plain: Sequence[Scored], rotated: Sequence[Scored], base: Sequence[ScoredItem] | None = None
) -> CircularScores:
    """A checkpoint's circular scores on one task, with the Δ against `base`'s circular items when given."""
    items = circular_items(plain, rotated)
    as_scored = {result.item_id: result.correct for result in plain}
    acc = float(np.mean([item.correct for item in items]))
    acc_plain = float(np.mean([as_scored[item.item_id] for item in items]))
    if base is None:
        return CircularScores(len(items), acc, acc_plain)
    return CircularScores(len(items), acc, acc_plain, *circular_delta(base, items))


def checkpoint_circular(
    items: Mapping[str, Sequence[Scored]],
    circular: Mapping[str, Sequence[Scored]],
    base_items: Mapping[str, Sequence[Scored]] | None,
    base_circular: Mapping[str, Sequence[Scored]] | None,
) -> dict[str, CircularScores]:
    """Task → circular scores of a checkpoint, for every task it has rotations of; the Δ against the
    base where the base has them too (`base_*` None: this is the base)."""
    found = {}
    for task, rotated in circular.items():
        if not rotated or task not in items:
            continue
        base = None
        if base_items is not None and base_circular is not None and base_circular.get(task):
            base = circular_items(base_items[task], base_circular[task])
        found[task] = circular_scores(items[task], rotated, base)
    return found
