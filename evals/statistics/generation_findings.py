"""What a candidate's generations show against the base's on one generative task, paired item by item.

- Divergence: the share of items whose output is the base's exactly (`same_as_base`), the mean sentence
  chrF of the candidate's output with the base's as reference (`chrf_vs_base`, 0–100), and the median
  token position where the two outputs part (`first_diff_median`, differing items only).
- Korean fidelity: the mean Hangul share of the candidate's outputs and the share that code-switch
  (the items' `hangul_share` and `code_switch`, which the scorer sets from
  `evals.tasks.ko_rag.korean.hangul_share` and `evals.tasks.language_fidelity.code_switches`), each with
  its paired Δ against the base.
- Continuous metrics (F1, chrF, BLEU…, any key of `metrics` whose values are not all 0 or 1): the paired
  Δ of means. Binary ones (exact_match) go through `evals.statistics.stats` (McNemar on `correct`).

Items pair on `item_id` (only those both sides hold); every CI is `paired_mean_ci`'s 95% bootstrap
over whole subjects, never narrower than the item bootstrap. A share (same_as_base, code-switch rate)
also never gets a narrower interval than Wilson's on its items, so a share of 0 or 1 still has a
width; a Δ whose differences are all zero has the CI [0, 0]. The base's own row (`base_findings`)
needs no CI for divergence: it is the reference (same_as_base 1, chrF 100 by definition).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from evals.statistics.bootstrap import Z_CI
from evals.statistics.paired_means import paired_mean_ci
from evals.statistics.stats import DEFAULT_MARGIN, NO_LOSS, SIGNIFICANT_LOSS
from kqe.core.errors import UserError
from kqe.core.results import ItemResult

CHRF_IDENTICAL = 100.0
"""chrF of an output against itself (sacrebleu gives 0 when both are empty; identical is identical)."""


@dataclass(frozen=True)
class PairedEstimate:
    """A mean over paired items with its 95% CI."""

    value: float
    """The mean (a share in [0, 1], chrF in [0, 100], or a Δ: candidate − base)."""
    ci_low: float
    """Lower end of the 95% CI."""
    ci_high: float
    """Upper end of the 95% CI."""
    n: int
    """Items the mean is over."""


@dataclass(frozen=True)
class MetricDelta:
    """One continuous lm-eval metric (`metric,filter`) on the items both sides scored it on."""

    base: float
    """The base's mean."""
    candidate: float
    """The candidate's mean."""
    delta: PairedEstimate
    """candidate − base, paired, with its CI."""
    verdict: str
    """As for accuracy (`evals.statistics.stats`), with the CI as the test: `significant loss` when the CI
    lies below 0, `no loss detected within margin` when its lower end is above −margin (1% of the
    metric's scale: 0.01 for a metric in [0, 1], 1 point for one on 0–100 such as chrF), else
    `inconclusive`."""


@dataclass(frozen=True)
class Fidelity:
    """A Korean-fidelity level of one checkpoint and its Δ against the base on the same items."""

    level: PairedEstimate
    """The checkpoint's mean (Hangul share, or the share of outputs that code-switch), with its CI."""
    delta: PairedEstimate | None
    """level − the base's on the same items, with its CI; None on the base's own row."""


@dataclass(frozen=True)
class GenerationFindings:
    """One checkpoint's generations on one task against the base's (`generation_findings`)."""

    task: str
    """The task."""
    n: int
    """Items both checkpoints generated for."""
    same_as_base: PairedEstimate
    """Share whose generated text equals the base's exactly; 1 on the base's row (no CI needed)."""
    chrf_vs_base: PairedEstimate
    """Mean sentence chrF (sacrebleu, 0–100) of the output with the base's output as the reference
    (not the task's reference answer); 100 on the base's row."""
    first_diff_median: float | None
    """Median token position of the first difference between the two outputs' `generated_ids`, over
    the items whose ids differ (one a prefix of the other: the shorter's length); None without ids or
    without differing items, and on the base's row."""
    first_diff_n: int
    """Items behind `first_diff_median`."""
    hangul_share: Fidelity | None
    """Mean Hangul share of the outputs, over items where both outputs have letters; None without any."""
    code_switch: Fidelity | None
    """Share of outputs that code-switch, over items where both have `code_switch`; None without any."""
    metrics: dict[str, MetricDelta]
    """`metric,filter` → its paired Δ, for every continuous metric both scored; empty on the base's row."""


def _by_id(items: Sequence[ItemResult], side: str) -> dict[str, ItemResult]:
    """Generated items by id (items without text left out); a UserError on a repeated id."""
    found: dict[str, ItemResult] = {}
    for item in items:
        if item.item_id in found:
            raise UserError(f"{side}'s per-item results hold {item.task} item {item.item_id} twice: re-score")
        if item.generated is not None:
            found[item.item_id] = item
    return found


def paired_generations(
    base: Sequence[ItemResult], candidate: Sequence[ItemResult]
) -> list[tuple[ItemResult, ItemResult]]:
    """(base item, candidate item) for every id both generated for, in id order."""
    ours, theirs = _by_id(base, "the base"), _by_id(candidate, "the candidate")
    return [(ours[key], theirs[key]) for key in sorted(ours.keys() & theirs.keys())]


def _estimate(values: np.ndarray, clusters: Sequence[str], bounds: tuple[float, float]) -> PairedEstimate:
    """The mean of `values` with `paired_mean_ci`'s CI, kept within `bounds`."""
    low, high = paired_mean_ci(values, clusters)
    return PairedEstimate(float(values.mean()), max(low, bounds[0]), min(high, bounds[1]), len(values))


def wilson_ci(successes: float, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a share: never of width 0, even at 0 or n successes."""
    share, z2 = successes / n, Z_CI**2
    centre = (share + z2 / (2 * n)) / (1 + z2 / n)
    half = Z_CI * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _share(flags: np.ndarray, clusters: Sequence[str]) -> PairedEstimate:
    """A share with the bootstrap CI, widened to Wilson's where that is wider."""
    boot = _estimate(flags, clusters, (0.0, 1.0))
    low, high = wilson_ci(float(flags.sum()), len(flags))
    return PairedEstimate(boot.value, min(boot.ci_low, low), max(boot.ci_high, high), boot.n)


def first_difference(left: Sequence[int], right: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (one a prefix of the other: the shorter's
    length); None when they are equal."""
    if list(left) == list(right):
        return None
    for position, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return position
    return min(len(left), len(right))


def _first_diff(pairs: list[tuple[ItemResult, ItemResult]]) -> tuple[float | None, int]:
    positions = [
        first_difference(base.generated_ids, cand.generated_ids)
        for base, cand in pairs
        if base.generated_ids is not None and cand.generated_ids is not None
    ]
    differing = [position for position in positions if position is not None]
    return (float(np.median(differing)) if differing else None), len(differing)


def sentence_chrf(output: str, reference: str) -> float:
    """sacrebleu's sentence chrF (0–100) of `output` against `reference`; CHRF_IDENTICAL when equal."""
    from sacrebleu import sentence_chrf as chrf

    return CHRF_IDENTICAL if output == reference else float(chrf(output, [reference]).score)


def _fidelity(
    pairs: list[tuple[ItemResult, ItemResult]],
    value: Callable[[ItemResult], float | bool | None],
    share: bool,
    paired: bool,
) -> Fidelity | None:
    """The level of `value` on the candidate side (the base's own when not `paired`) and its Δ, over
    items where both sides have it."""
    held = [(value(base), value(cand), cand.subject) for base, cand in pairs]
    held = [(b, c, subject) for b, c, subject in held if b is not None and c is not None]
    if not held:
        return None
    theirs, ours = (np.array([row[i] for row in held], dtype=float) for i in (0, 1))
    clusters = [row[2] for row in held]
    level = _share(ours, clusters) if share else _estimate(ours, clusters, (0.0, 1.0))
    return Fidelity(level, _estimate(ours - theirs, clusters, (-1.0, 1.0)) if paired else None)


def _is_binary(values: np.ndarray) -> bool:
    return bool(np.isin(values, (0.0, 1.0)).all())


def metric_deltas(pairs: list[tuple[ItemResult, ItemResult]]) -> dict[str, MetricDelta]:
    """`metric,filter` → the paired Δ of a continuous metric, over the items both scored it on."""
    # in the task's own order (its first filter's metrics first): the leaderboard reports the first
    keys = list(dict.fromkeys(key for base, cand in pairs for key in base.metrics if key in cand.metrics))
    found = {}
    for key in keys:
        both = [(base, cand) for base, cand in pairs if key in base.metrics and key in cand.metrics]
        theirs = np.array([base.metrics[key] for base, _ in both])
        ours = np.array([cand.metrics[key] for _, cand in both])
        if _is_binary(np.concatenate([theirs, ours])):
            continue
        delta = _estimate(ours - theirs, [cand.subject for _, cand in both], (-math.inf, math.inf))
        margin = DEFAULT_MARGIN * _scale(np.concatenate([theirs, ours]))
        found[key] = MetricDelta(
            float(theirs.mean()), float(ours.mean()), delta, continuous_verdict(delta, margin)
        )
    return found


def _scale(values: np.ndarray) -> float:
    """1 for a metric whose values lie in [0, 1], else 100 (chrF, BLEU and the like are on 0–100)."""
    return 1.0 if ((values >= 0) & (values <= 1)).all() else 100.0


def continuous_verdict(delta: PairedEstimate, margin: float) -> str:
    """The accuracy verdict's words for a continuous metric's paired Δ, its CI standing in for the test."""
    if delta.ci_high < 0:
        return SIGNIFICANT_LOSS
    if delta.ci_low > -margin:
        return NO_LOSS
    return "inconclusive — n too small"


def generation_findings(
    base: Sequence[ItemResult], candidate: Sequence[ItemResult]
) -> GenerationFindings | None:
    """The candidate's divergence from the base, its Korean fidelity and its continuous metrics'
    Δ on one task, over the items both generated for; None when they share none."""
    pairs = paired_generations(base, candidate)
    if not pairs:
        return None
    clusters = [cand.subject for _, cand in pairs]
    same = np.array([cand.generated == theirs.generated for theirs, cand in pairs], dtype=float)
    chrf = np.array([sentence_chrf(cand.generated or "", theirs.generated or "") for theirs, cand in pairs])
    median, differing = _first_diff(pairs)
    return GenerationFindings(
        task=pairs[0][1].task,
        n=len(pairs),
        same_as_base=_share(same, clusters),
        chrf_vs_base=_estimate(chrf, clusters, (0.0, CHRF_IDENTICAL)),
        first_diff_median=median,
        first_diff_n=differing,
        hangul_share=_fidelity(pairs, lambda item: item.hangul_share, share=False, paired=True),
        code_switch=_fidelity(pairs, lambda item: item.code_switch, share=True, paired=True),
        metrics=metric_deltas(pairs),
    )


def base_findings(base: Sequence[ItemResult]) -> GenerationFindings | None:
    """The base's own row: divergence at its definition (same_as_base 1, chrF 100, no CI: the base is
    the reference), its Hangul share and code-switch rate with their CIs and no Δ; None without
    generations."""
    pairs = paired_generations(base, base)
    if not pairs:
        return None
    n = len(pairs)
    return GenerationFindings(
        task=pairs[0][0].task,
        n=n,
        same_as_base=PairedEstimate(1.0, 1.0, 1.0, n),
        chrf_vs_base=PairedEstimate(CHRF_IDENTICAL, CHRF_IDENTICAL, CHRF_IDENTICAL, n),
        first_diff_median=None,
        first_diff_n=0,
        hangul_share=_fidelity(pairs, lambda item: item.hangul_share, share=False, paired=False),
        code_switch=_fidelity(pairs, lambda item: item.code_switch, share=True, paired=False),
        metrics={},
    )
