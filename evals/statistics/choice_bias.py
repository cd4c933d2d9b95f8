"""Letter preference in multiple-choice answers: answer collapse, and accuracy with the letter prior
taken out.

- Answer collapse: a checkpoint that puts its highest log-prob on one choice on ≥ 90% of a task's items
  has stopped telling the options apart; its accuracy is then that letter's share of the gold answers,
  and its Δ against a base that does not collapse measures letter preference, not knowledge. The
  comparison's verdict names it instead of judging Δ.
- Debiased accuracy (Zheng et al., ICLR 2024: selection bias, PriDe): a model's log-prob of option i
  mixes a prior for position i with its belief in the option's content. The prior is estimated as the
  checkpoint's mean log-prob per position over the task (each item's log-probs renormalised over its
  choices first) and subtracted before the argmax. It is cross-fitted: subjects (else items) fall in K
  folds, and an item is corrected with the prior of the other folds, so its own log-probs never correct
  it. Label-free: with the gold answers spread evenly over the positions, the content part of the mean
  is the same at every position and cancels in the argmax; where the gold answers lean to one
  position, part of that lean is taken out with the prior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from string import ascii_uppercase

import numpy as np

from evals.statistics.bootstrap import bootstrap_accuracies, delta_ci
from evals.statistics.pairing import PairedItems, Scored, item_columns
from kqe.core.results import ChoiceProfile

COLLAPSE_SHARE = 0.90
"""Share of the items on one choice from which a checkpoint's answers count as collapsed."""
COLLAPSED = "collapsed: "
"""How a collapsed task's verdict begins (`collapsed: picks A on 100% of items`)."""
DEBIAS_FOLDS = 5
"""Folds the letter prior is cross-fitted over (fewer when the task has fewer subjects or items)."""
DEBIASED_FIELDS = (
    "acc_debiased_base",
    "acc_debiased_cand",
    "delta_debiased",
    "delta_debiased_ci_low",
    "delta_debiased_ci_high",
)
"""`Comparison`'s debiased-accuracy fields."""


def letter(index: int) -> str:
    """The letter of choice `index` (0 → A); past Z, its 1-based number."""
    return ascii_uppercase[index] if index < len(ascii_uppercase) else str(index + 1)


def choice_counts(logprobs: np.ndarray) -> np.ndarray:
    """Items whose highest log-prob is on each choice, in choice order."""
    return np.bincount(np.argmax(logprobs, axis=1), minlength=logprobs.shape[1])


def _top(counts: np.ndarray) -> tuple[int, float]:
    """The most frequent choice and its share of the items."""
    top = int(np.argmax(counts))
    return top, float(counts[top] / counts.sum())


def _percent(share: float) -> str:
    """A share as whole percent, rounded down: 99.6% of the items is not 'all of them'."""
    return f"{math.floor(100 * share + 1e-9)}%"


def collapse(base_logprobs: np.ndarray, cand_logprobs: np.ndarray) -> str | None:
    """`collapsed: picks <letter> on N% of items` when the candidate's top choice is one choice on at
    least COLLAPSE_SHARE of the items and the base's is not; None otherwise."""
    cand_top, cand_share = _top(choice_counts(cand_logprobs))
    _, base_share = _top(choice_counts(base_logprobs))
    if cand_share >= COLLAPSE_SHARE > base_share:
        return f"{COLLAPSED}picks {letter(cand_top)} on {_percent(cand_share)} of items"
    return None


def folds(clusters: np.ndarray, count: int = DEBIAS_FOLDS) -> np.ndarray:
    """Fold of each item: whole subjects dealt round-robin in name order, or items one by one when
    they fall in a single subject; at most `count` folds, fewer with fewer subjects (items)."""
    labels, index = np.unique(clusters, return_inverse=True)
    if len(labels) > 1:
        return index % min(count, len(labels))
    return np.arange(len(clusters)) % max(min(count, len(clusters)), 1)


def _renormalised(logprobs: np.ndarray) -> np.ndarray:
    """Each item's log-probs as log-probabilities over its choices."""
    from scipy.special import logsumexp

    return logprobs - logsumexp(logprobs, axis=1, keepdims=True)


def letter_prior(logprobs: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """(n, choices): the prior each item is corrected with, the mean renormalised log-prob per position
    over the items of the other folds."""
    normed = _renormalised(logprobs)
    prior = np.empty_like(normed)
    for held in np.unique(fold):
        inside = fold == held
        prior[inside] = normed[~inside].mean(axis=0)
    return prior


def debiased_predictions(logprobs: np.ndarray, clusters: np.ndarray) -> np.ndarray | None:
    """Per item, the choice of highest log-prob after the cross-fitted letter prior is subtracted; None
    with fewer than two folds or choices that are not all finite (items with fewer choices)."""
    fold = folds(clusters)
    if len(np.unique(fold)) < 2 or not np.all(np.isfinite(logprobs)):
        return None
    return np.argmax(_renormalised(logprobs) - letter_prior(logprobs, fold), axis=1)


def debiased_correct(
    logprobs: np.ndarray, gold: np.ndarray | None, clusters: np.ndarray
) -> np.ndarray | None:
    """Per item, whether the debiased choice is the gold one; None without gold for every item."""
    if gold is None or np.any(gold < 0):
        return None
    predictions = debiased_predictions(logprobs, clusters)
    return None if predictions is None else predictions == gold


def debiased_comparison(
    paired: PairedItems, resamples: int, rng: np.random.Generator
) -> dict[str, float | None]:
    """`Comparison`'s debiased fields: each checkpoint debiased with its own prior, their paired Δ and
    its 95% CI from the same paired bootstrap as Δ; None each without log-probs or gold."""
    if paired.base_logprobs is None or paired.cand_logprobs is None:
        return dict.fromkeys(DEBIASED_FIELDS)
    base_ok = debiased_correct(paired.base_logprobs, paired.gold, paired.clusters)
    cand_ok = debiased_correct(paired.cand_logprobs, paired.gold, paired.clusters)
    if base_ok is None or cand_ok is None:
        return dict.fromkeys(DEBIASED_FIELDS)
    debiased = PairedItems(base_ok=base_ok, cand_ok=cand_ok, clusters=paired.clusters)
    acc_base, acc_cand = float(base_ok.mean()), float(cand_ok.mean())
    low, high = delta_ci(bootstrap_accuracies(debiased, resamples, rng), acc_cand - acc_base, len(base_ok))
    values = (acc_base, acc_cand, acc_cand - acc_base, low, high)
    return dict(zip(DEBIASED_FIELDS, values, strict=True))


def choice_profile(checkpoint: str, task: str, items: Sequence[Scored]) -> ChoiceProfile | None:
    """One checkpoint's choice distribution and debiased accuracy on one task; None for a task whose
    items carry no choice log-probs (generative ones)."""
    columns = item_columns(items, checkpoint)
    if columns.logprobs is None:
        return None
    counts = choice_counts(columns.logprobs)
    top, share = _top(counts)
    correct = debiased_correct(columns.logprobs, columns.gold, columns.subjects)
    return ChoiceProfile(
        checkpoint=checkpoint,
        task=task,
        counts=[int(count) for count in counts],
        top_choice=letter(top),
        top_share=share,
        acc_debiased=None if correct is None else float(correct.mean()),
        debias_folds=None if correct is None else len(np.unique(folds(columns.subjects))),
    )


def checkpoint_choices(checkpoint: str, items: Mapping[str, Sequence[Scored]]) -> dict[str, ChoiceProfile]:
    """Task → choice profile, for every multiple-choice task of a checkpoint."""
    found = {task: choice_profile(checkpoint, task, task_items) for task, task_items in items.items()}
    return {task: profile for task, profile in found.items() if profile is not None}
