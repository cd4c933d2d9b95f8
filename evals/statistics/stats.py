"""Paired statistics of a candidate checkpoint against its base on the same items.

Every checkpoint is scored on identical items, so the comparison is paired: the bootstrap resamples
items (or whole subjects, the clusters the items were drawn in) for both checkpoints at once, and the
test looks only at the items whose correctness differs (exact McNemar), which treats items as
independent; with subjects the cluster-level test (`evals.statistics.cluster_tests`) stands beside it
and the verdict follows the larger p of the two. Each task ends in a verdict:
the loss is real, or ruled out beyond a margin, or beyond what this many items can see (the MDE).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from evals.statistics.cluster_tests import clustered_test
from evals.statistics.mcnemar import ALPHA, mcnemar_p, minimum_detectable_effect
from evals.statistics.multiplicity import ADJUSTMENTS, holm
from evals.statistics.pairing import PairedItems, Scored, pair_items, read_items
from evals.tasks.registry import KOREAN_TO_ENGLISH
from kqe.core.errors import UserError
from kqe.core.results import Comparison

BOOTSTRAP_RESAMPLES = 10_000
SEED = 20261129
Z_CI = NormalDist().inv_cdf(1 - ALPHA / 2)
"""1.96; scipy.stats is imported only where needed, not by every `kqe` command (0.6 s of each start)."""
UNPAIRED = "unpaired (different items)"
"""`ko_en_gap_pairing` of two tasks on different items (evals/statistics/parallel.py: matched items)."""
DEFAULT_MARGIN = 0.01
"""Non-inferiority margin as a fraction: a loss under one accuracy point is taken as acceptable."""
NO_LOSS = "no loss detected within margin"
SIGNIFICANT_LOSS = "significant loss"
_PICK_CELLS = 4_000_000  # bounds each block of the resamples × clusters draws (32 MB)


def cluster_sums(totals: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, columns): column sums of `totals` rows over clusters drawn with replacement."""
    clusters = len(totals)
    block = max(1, _PICK_CELLS // clusters)
    sums = []
    for start in range(0, resamples, block):
        picks = rng.integers(0, clusters, size=(min(block, resamples - start), clusters))
        sums.append(np.stack([column[picks].sum(axis=1) for column in totals.T], axis=1))
    return np.vstack(sums)


def small_sample_stretch(units: int) -> float:
    """Small-sample factor for a bootstrap over `units` resampled units: √(K/(K−1)) · t(K−1) / z."""
    from scipy.stats import t

    if units < 2:
        return 1.0
    return float(np.sqrt(units / (units - 1)) * t.ppf(1 - ALPHA / 2, units - 1) / Z_CI)


CLUSTER_BOOTSTRAP = "cluster bootstrap"
"""Whole subjects resampled: their spread was at least the items' (the usual case)."""
ITEM_FLOOR = "item bootstrap (cluster spread came out narrower)"
"""Items resampled despite subjects: a few subjects' spread can be too narrow by chance; the CI never is."""
ITEM_BOOTSTRAP = "item bootstrap"
"""Items resampled: no subjects (or one item per subject)."""


@dataclass(frozen=True)
class Replicates:
    """Bootstrap replicates of (base accuracy, candidate accuracy), both from the same resamples."""

    base: np.ndarray
    cand: np.ndarray
    method: str
    """CLUSTER_BOOTSTRAP, ITEM_FLOOR or ITEM_BOOTSTRAP."""
    clusters: int
    """Subjects the items fall in (1 without subjects)."""


def bootstrap_accuracies(paired: PairedItems, resamples: int, rng: np.random.Generator) -> Replicates:
    """Replicates of the wider of two paired bootstraps: whole subjects and single items.

    Whole subjects carry the correlation of items within a subject, which only widens the interval in
    expectation; with few subjects their spread is itself a noisy estimate and can come out narrower
    than the items' (9 subjects, no effect: a CI half as wide, excluding 0 while McNemar p = 0.06), so
    the item interval is a floor. Resampling K units understates the spread by √((K−1)/K), and a
    percentile interval ignores that the spread is estimated from K units, so deviations from the
    estimate are stretched by √(K/(K−1)) · t(K−1)/z (bench/stats_bench.py checks coverage).
    """
    n = len(paired.base_ok)
    labels, index = np.unique(paired.clusters, return_inverse=True)
    if not 1 < len(labels) < n:
        return Replicates(*_item_replicates(paired, resamples, rng), ITEM_BOOTSTRAP, 1)
    clustered = _cluster_replicates(paired, index, resamples, rng)
    items = _item_replicates(paired, resamples, rng)
    if _width(items) > _width(clustered):
        return Replicates(*items, ITEM_FLOOR, len(labels))
    return Replicates(*clustered, CLUSTER_BOOTSTRAP, len(labels))


def _cluster_replicates(
    paired: PairedItems, index: np.ndarray, resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Whole subjects resampled; a replicate's accuracy is its items' share correct."""
    columns = [np.bincount(index, weights=ok) for ok in (paired.base_ok, paired.cand_ok)]
    sums = cluster_sums(np.column_stack([*columns, np.bincount(index)]), resamples, rng)
    return _stretched(paired, sums[:, 0] / sums[:, 2], sums[:, 1] / sums[:, 2], int(index.max()) + 1)


def _item_replicates(
    paired: PairedItems, resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Items resampled: an item is one of four cells (both right, only base, only candidate, neither),
    so a resample is fully described by multinomial counts of the cells."""
    n = len(paired.base_ok)
    # cells: 0 neither right, 1 only the candidate, 2 only the base, 3 both
    cells = 2 * paired.base_ok.astype(int) + paired.cand_ok.astype(int)
    draws = rng.multinomial(n, np.bincount(cells, minlength=4) / n, size=resamples)
    return _stretched(paired, (draws[:, 2] + draws[:, 3]) / n, (draws[:, 1] + draws[:, 3]) / n, n)


def _stretched(
    paired: PairedItems, base_star: np.ndarray, cand_star: np.ndarray, units: int
) -> tuple[np.ndarray, np.ndarray]:
    stretch = small_sample_stretch(units)
    base_acc, cand_acc = paired.base_ok.mean(), paired.cand_ok.mean()
    return base_acc + stretch * (base_star - base_acc), cand_acc + stretch * (cand_star - cand_acc)


def _width(replicates: tuple[np.ndarray, np.ndarray]) -> float:
    return float(np.std(replicates[1] - replicates[0]))


def percentile_ci(replicates: np.ndarray, widen: float = 0.0) -> tuple[float, float]:
    """95% percentile interval of bootstrap replicates (NaN replicates left out), `widen` added on
    each side: half a step of a discrete statistic's lattice, a continuity correction."""
    low, high = np.nanpercentile(replicates, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return float(low - widen), float(high + widen)


def symmetric_ci(replicates: np.ndarray, estimate: float, widen: float = 0.0) -> tuple[float, float]:
    """95% interval estimate ± z · SD of the (stretched) replicates, `widen` added on each side.

    Symmetric on purpose: per-subject losses are skewed (a few subjects lose much), and a percentile
    interval then leans the way the sample leans, the wrong way; with few subjects that cost up to
    3 points of coverage in bench/stats_bench.py's grid, the symmetric one kept it."""
    half = Z_CI * float(np.std(replicates))
    return estimate - half - widen, estimate + half + widen


def choice_agreement(base_lp: np.ndarray, cand_lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item: KL(base ‖ candidate) of the choice distributions (nats), and 1.0 where both put their
    highest log-prob on the same choice; log-probs are renormalised over the choices first."""
    from scipy.special import logsumexp

    base_norm = base_lp - logsumexp(base_lp, axis=1, keepdims=True)
    cand_norm = cand_lp - logsumexp(cand_lp, axis=1, keepdims=True)
    p = np.exp(base_norm)
    with np.errstate(invalid="ignore"):  # -inf − -inf on padded or impossible choices, where p = 0
        terms = np.where(p > 0, p * (base_norm - cand_norm), 0.0)
    same_top = np.argmax(base_lp, axis=1) == np.argmax(cand_lp, axis=1)
    return terms.sum(axis=1), same_top.astype(float)


def mean_ci(
    values: np.ndarray, paired: PairedItems, replicates: Replicates, resamples: int, rng: np.random.Generator
) -> tuple[float, float]:
    """95% CI of the mean of per-item `values` (KL, top choice kept), resampled as the accuracies were.

    Over items: mean ± z·SE (a mean of n items is close to normal). Over whole subjects: the stretched
    percentile interval of subject-resampled means (KL is skewed: a few items move far), never
    narrower than the item interval, as for Δ.
    """
    n = len(values)
    with np.errstate(over="ignore", invalid="ignore"):  # a KL near inf (a choice ruled out) stays so
        mean = float(np.mean(values))
        half = Z_CI * float(np.std(values, ddof=1)) / np.sqrt(n) if n > 1 else 0.0
        low, high = mean - half, mean + half
    if replicates.method != CLUSTER_BOOTSTRAP:
        return low, high
    _, index = np.unique(paired.clusters, return_inverse=True)
    sums = cluster_sums(
        np.column_stack([np.bincount(index, weights=values), np.bincount(index)]), resamples, rng
    )
    star = mean + small_sample_stretch(replicates.clusters) * (sums[:, 0] / sums[:, 1] - mean)
    cluster_low, cluster_high = percentile_ci(star)
    return min(low, cluster_low), max(high, cluster_high)


def _agreement(
    paired: PairedItems, replicates: Replicates, resamples: int, rng: np.random.Generator
) -> dict[str, float | None]:
    """`Comparison`'s KL and top-choice fields with their CIs; None without log-probs."""
    names = ("mean_kl", "kl_ci_low", "kl_ci_high", "top_agreement", "top_agreement_ci_low")
    if paired.base_logprobs is None or paired.cand_logprobs is None:
        return dict.fromkeys((*names, "top_agreement_ci_high"), None)
    kl, kept = choice_agreement(paired.base_logprobs, paired.cand_logprobs)
    kl_low, kl_high = mean_ci(kl, paired, replicates, resamples, rng)
    kept_low, kept_high = mean_ci(kept, paired, replicates, resamples, rng)
    with np.errstate(over="ignore"):
        values = (float(np.mean(kl)), max(kl_low, 0.0), kl_high, float(np.mean(kept)), max(kept_low, 0.0))
    found: dict[str, float | None] = dict(zip(names, values, strict=True))
    return found | {"top_agreement_ci_high": min(kept_high, 1.0)}


def verdict_p(comparison: Comparison) -> float:
    """The p a verdict judges by (before the multiplicity correction): the larger of McNemar's, which
    treats items as independent, and the cluster-level one where the items fall in subjects."""
    return max(comparison.mcnemar_p, comparison.cluster_p if comparison.cluster_p is not None else 0.0)


def verdict(ci_low: float, ci_high: float, p: float, margin: float, mde: float) -> str:
    """A loss is significant when the (Holm-adjusted) exact test and the 95% CI both say so; else the
    CI's lower end above −margin rules out a loss as large as the margin; else n was too small."""
    if p < ALPHA and ci_high < 0:
        return SIGNIFICANT_LOSS
    if ci_low > -margin:
        return NO_LOSS
    return f"inconclusive — n too small (MDE {100 * mde:.1f} points)"


def check_margin(margin: float) -> float:
    """The margin as a fraction in (0, 1), or a one-line error."""
    if not 0 < margin < 1:
        raise UserError(
            f"margin {100 * margin:g} accuracy points is not above 0 and below 100: "
            "pass a positive loss budget, e.g. --margin 1.0"
        )
    return margin


def _compare_with_replicates(
    task: str, names: tuple[str, str], paired: PairedItems, margin: float, resamples: int, seed: int
) -> tuple[Comparison, np.ndarray]:
    n = len(paired.base_ok)
    flips_c2w = int(np.sum(paired.base_ok & ~paired.cand_ok))
    flips_w2c = int(np.sum(~paired.base_ok & paired.cand_ok))
    acc_base, acc_cand = float(paired.base_ok.mean()), float(paired.cand_ok.mean())
    # one stream per task: reproducible per task, independent across tasks (the gap needs that)
    rng = np.random.default_rng([seed, zlib.crc32(task.encode())])
    replicates = bootstrap_accuracies(paired, resamples, rng)
    base_star, cand_star = replicates.base, replicates.cand
    deltas = cand_star - base_star
    step = 0.5 / n  # delta moves in steps of 1/n: half a step each side, a continuity correction
    ci_low, ci_high = symmetric_ci(deltas, acc_cand - acc_base, step)
    ci_low, ci_high = max(ci_low, -1.0), min(ci_high, 1.0)
    recovery, recovery_low, recovery_high = None, None, None
    if acc_base > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(base_star > 0, cand_star / base_star, np.nan)
        recovery, (recovery_low, recovery_high) = acc_cand / acc_base, percentile_ci(ratios, step / acc_base)
        recovery_low = max(recovery_low, 0.0)
    p = float(mcnemar_p(flips_c2w, flips_w2c))
    clustered = None
    if replicates.method != ITEM_BOOTSTRAP:
        clustered = clustered_test(paired.cand_ok.astype(float) - paired.base_ok, paired.clusters)
    tested = max(p, clustered.p if clustered else 0.0)
    mde = minimum_detectable_effect(n, (flips_c2w + flips_w2c) / n)
    comparison = Comparison(
        task=task, base=names[0], candidate=names[1], n=n, acc_base=acc_base, acc_cand=acc_cand,
        delta=acc_cand - acc_base, ci_low=ci_low, ci_high=ci_high, mcnemar_p=p,
        mcnemar_midp=float(mcnemar_p(flips_c2w, flips_w2c, mid=True)), p_holm=tested,
        flips_c2w=flips_c2w, flips_w2c=flips_w2c, flip_rate=(flips_c2w + flips_w2c) / n,
        mean_kl=None, top_agreement=None, recovery=recovery, recovery_ci_low=recovery_low,
        recovery_ci_high=recovery_high, margin=margin,
        noninf_p=float((1 + np.sum(deltas - step <= -margin)) / (1 + resamples)), mde=mde,
        verdict=verdict(ci_low, ci_high, tested, margin, mde), bootstrap_resamples=resamples, seed=seed,
        ci_method=replicates.method, clusters=replicates.clusters,
        cluster_p=clustered.p if clustered else None,
        cluster_p_method=clustered.method if clustered else None,
    )  # fmt: skip
    comparison = comparison.model_copy(update=_agreement(paired, replicates, resamples, rng))
    return comparison, deltas


def compare_paired(
    task: str,
    base_name: str,
    cand_name: str,
    paired: PairedItems,
    margin: float = DEFAULT_MARGIN,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> Comparison:
    """Every paired statistic of one task from aligned arrays (what `compare` does after joining)."""
    names, margin = (base_name, cand_name), check_margin(margin)
    return _compare_with_replicates(task, names, paired, margin, resamples, seed)[0]


def compare(
    base_name: str,
    cand_name: str,
    base: Sequence[Scored],
    cand: Sequence[Scored],
    margin: float = DEFAULT_MARGIN,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> Comparison:
    """Paired comparison of one task. Two candidates (e.g. Korean- vs English-calibrated AWQ) passed
    as base and candidate give the calibration effect."""
    paired = pair_items(base, cand)
    return compare_paired(base[0].task, base_name, cand_name, paired, margin, resamples, seed)


def compare_tasks(
    base_name: str,
    cand_name: str,
    base: Mapping[str, Sequence[Scored]],
    cand: Mapping[str, Sequence[Scored]],
    margin: float = DEFAULT_MARGIN,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> dict[str, Comparison]:
    """Compare every task both hold; the tested p (`verdict_p`) is Holm-adjusted across them and verdicts
    use the adjusted p.

    A Korean task whose English twin was compared too also gets the loss gap Δ(Korean) − Δ(English)
    with a 95% CI; the two tasks hold different items, so each is resampled on its own.
    """
    check_margin(margin)
    results: dict[str, tuple[Comparison, np.ndarray]] = {}
    for task, cand_items in cand.items():
        if task in base:
            paired = pair_items(base[task], cand_items)
            names = (base_name, cand_name)
            results[task] = _compare_with_replicates(task, names, paired, margin, resamples, seed)
    adjusted = holm([verdict_p(comparison) for comparison, _ in results.values()])
    final: dict[str, Comparison] = {}
    for (task, (c, deltas)), p in zip(results.items(), adjusted, strict=True):
        update: dict[str, object] = {"p_holm": float(p)}
        update["verdict"] = verdict(c.ci_low, c.ci_high, p, margin, c.mde)
        english = KOREAN_TO_ENGLISH.get(task, "")
        if english in results:
            en, en_deltas = results[english]
            gap_low, gap_high = percentile_ci(deltas - en_deltas)
            update |= {
                "english_task": english, "ko_en_gap": c.delta - en.delta, "ko_en_gap_ci_low": gap_low,
                "ko_en_gap_ci_high": gap_high, "ko_en_gap_pairing": UNPAIRED,
            }  # fmt: skip
        final[task] = c.model_copy(update=update)
    return final


def compare_files(
    base_path: Path, cand_path: Path, margin_points: float = 100 * DEFAULT_MARGIN
) -> dict[str, Comparison]:
    """`kqe compare`: two per-item files, task by task, margin given in accuracy points."""
    margin = check_margin(margin_points / 100)
    base, cand = read_items(base_path), read_items(cand_path)
    if base.keys() != cand.keys():
        raise UserError(
            f"{base_path} holds tasks {sorted(base)} but {cand_path} holds {sorted(cand)}: "
            "pass two files scored on the same tasks"
        )
    try:
        return compare_tasks(str(base_path), str(cand_path), base, cand, margin)
    except UserError as exc:
        raise UserError(f"{base_path} vs {cand_path}: {exc}") from None


def adjust_run(
    vs_base: Mapping[str, Mapping[str, Comparison]], method: str
) -> dict[str, dict[str, Comparison]]:
    """Every checkpoint × task comparison of a run, p_holm and verdict re-adjusted across all of them
    by `method` (`holm`, `bh`); `holm-per-checkpoint` keeps compare_tasks' per-checkpoint Holm."""
    if method not in ADJUSTMENTS:
        return {name: dict(tasks) for name, tasks in vs_base.items()}
    keys = [(name, task) for name, tasks in vs_base.items() for task in tasks]
    adjusted = ADJUSTMENTS[method]([verdict_p(vs_base[name][task]) for name, task in keys])
    found: dict[str, dict[str, Comparison]] = {name: {} for name in vs_base}
    for (name, task), p in zip(keys, adjusted, strict=True):
        c = vs_base[name][task]
        update = {"p_holm": float(p), "verdict": verdict(c.ci_low, c.ci_high, p, c.margin, c.mde)}
        found[name][task] = c.model_copy(update=update)
    return found
