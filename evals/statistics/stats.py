"""Paired statistics of a candidate checkpoint against its base on the same items.

Every checkpoint is scored on identical items, so the comparison is paired: the bootstrap resamples
items (or whole subjects, the clusters the items were drawn in) for both checkpoints at once, and the
test looks only at the items whose correctness differs (exact McNemar), which treats items as
independent; with subjects the cluster-level test (`evals.statistics.cluster_tests`) stands beside it
and the verdict follows the larger p of the two. The resampling is evals/statistics/bootstrap.py's.
Each task ends in a verdict:
the loss is real, or ruled out beyond a margin, or beyond what this many items can see (the MDE).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

from evals.statistics.bootstrap import (
    ALPHA,
    BOOTSTRAP_RESAMPLES,
    CLUSTER_BOOTSTRAP,
    ITEM_BOOTSTRAP,
    SEED,
    Z_CI,
    Replicates,
    bootstrap_accuracies,
    cluster_sums,
    delta_ci,
    percentile_ci,
    small_sample_stretch,
)
from evals.statistics.choice_bias import collapse, debiased_comparison
from evals.statistics.cluster_tests import ClusterTest, clustered_test
from evals.statistics.multiplicity import ADJUSTMENTS, holm
from evals.statistics.pairing import PairedItems, Scored, pair_items, read_items
from evals.tasks.registry import KOREAN_TO_ENGLISH
from kqe.core.errors import UserError
from kqe.core.results import Comparison

UNPAIRED = "unpaired (different items)"
"""`ko_en_gap_pairing` of two tasks on different items (evals/statistics/parallel.py: matched items)."""
POWER = 0.80
"""Power the minimum detectable effect is computed for."""
DEFAULT_MARGIN = 0.01
"""Non-inferiority margin as a fraction: a loss under one accuracy point is taken as acceptable."""
NO_LOSS = "no loss detected within margin"
SIGNIFICANT_LOSS = "significant loss"


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


def _cluster_level(paired: PairedItems, replicates: Replicates) -> ClusterTest | None:
    """The p of "no change" over the subjects the CI resampled; None without subjects."""
    if replicates.method == ITEM_BOOTSTRAP:
        return None
    return clustered_test(paired.cand_ok.astype(float) - paired.base_ok, paired.clusters)


def verdict(ci_low: float, ci_high: float, p: float, margin: float, mde: float) -> str:
    """A loss is significant when the (Holm-adjusted) exact test and the 95% CI both say so; else the
    CI's lower end above −margin rules out a loss as large as the margin; else n was too small."""
    if p < ALPHA and ci_high < 0:
        return SIGNIFICANT_LOSS
    if ci_low > -margin:
        return NO_LOSS
    return f"inconclusive — n too small (MDE {100 * mde:.1f} points)"


def _collapse(paired: PairedItems) -> str | None:
    """The candidate's answer collapse against the base; None without choice log-probs."""
    if paired.base_logprobs is None or paired.cand_logprobs is None:
        return None
    return collapse(paired.base_logprobs, paired.cand_logprobs)


def task_verdict(comparison: Comparison, p: float) -> str:
    """The verdict of a comparison at the (adjusted) tested p: its answer collapse where the candidate
    collapsed (its Δ is then letter preference), else `verdict`."""
    if comparison.collapse is not None:
        return comparison.collapse
    return verdict(comparison.ci_low, comparison.ci_high, p, comparison.margin, comparison.mde)


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
    ci_low, ci_high = delta_ci(replicates, acc_cand - acc_base, n)
    recovery, recovery_low, recovery_high = None, None, None
    if acc_base > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(base_star > 0, cand_star / base_star, np.nan)
        recovery, (recovery_low, recovery_high) = acc_cand / acc_base, percentile_ci(ratios, step / acc_base)
        recovery_low = max(recovery_low, 0.0)
    p, clustered = float(mcnemar_p(flips_c2w, flips_w2c)), _cluster_level(paired, replicates)
    tested = max(p, clustered.p if clustered else 0.0)
    mde = minimum_detectable_effect(n, (flips_c2w + flips_w2c) / n)
    collapsed = _collapse(paired)
    comparison = Comparison(
        task=task,
        base=names[0],
        candidate=names[1],
        n=n,
        acc_base=acc_base,
        acc_cand=acc_cand,
        delta=acc_cand - acc_base,
        ci_low=ci_low,
        ci_high=ci_high,
        mcnemar_p=p,
        mcnemar_midp=float(mcnemar_p(flips_c2w, flips_w2c, mid=True)),
        p_holm=tested,
        flips_c2w=flips_c2w,
        flips_w2c=flips_w2c,
        flip_rate=(flips_c2w + flips_w2c) / n,
        mean_kl=None,
        top_agreement=None,
        recovery=recovery,
        recovery_ci_low=recovery_low,
        recovery_ci_high=recovery_high,
        margin=margin,
        noninf_p=float((1 + np.sum(deltas - step <= -margin)) / (1 + resamples)),
        mde=mde,
        verdict=collapsed or verdict(ci_low, ci_high, tested, margin, mde),
        bootstrap_resamples=resamples,
        seed=seed,
        ci_method=replicates.method,
        clusters=replicates.clusters,
        cluster_p=clustered.p if clustered else None,
        cluster_p_method=clustered.method if clustered else None,
        collapse=collapsed,
    )
    found = _agreement(paired, replicates, resamples, rng) | debiased_comparison(paired, resamples, rng)
    comparison = comparison.model_copy(update=found)
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
        update["verdict"] = task_verdict(c, p)
        english = KOREAN_TO_ENGLISH.get(task, "")
        if english in results:
            en, en_deltas = results[english]
            gap_low, gap_high = percentile_ci(deltas - en_deltas)
            update |= {
                "english_task": english,
                "ko_en_gap": c.delta - en.delta,
                "ko_en_gap_ci_low": gap_low,
                "ko_en_gap_ci_high": gap_high,
                "ko_en_gap_pairing": UNPAIRED,
            }
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
        update = {"p_holm": float(p), "verdict": task_verdict(c, p)}
        found[name][task] = c.model_copy(update=update)
    return found
