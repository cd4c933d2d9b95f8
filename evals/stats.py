"""Paired statistics of a candidate checkpoint against its base on the same items.

Every checkpoint is scored on identical items, so the comparison is paired: the bootstrap resamples
items (or whole subjects, which are the clusters the items were drawn in) and the test looks only at
the items whose correctness differs (exact McNemar).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.special import logsumexp
from scipy.stats import binomtest

from kqe.errors import UserError
from kqe.io import read_jsonl
from kqe.records import Comparison, ItemResult

BOOTSTRAP_RESAMPLES = 10_000
SEED = 20261129


def read_items(path: Path) -> dict[str, list[ItemResult]]:
    """Read a per-item file (JSON Lines of ItemResult) grouped by task; a wrong file is a one-line error."""
    if not path.is_file():
        raise UserError(f"per-item file {path} not found: pass a file written under results/<model>/items/")
    try:
        items = read_jsonl(path, ItemResult)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{exc}: expected one JSON object per line (task, item_id, correct, ...)") from None
    if not items:
        raise UserError(f"per-item file {path} holds no items: score a checkpoint first")
    grouped: dict[str, list[ItemResult]] = {}
    for item in items:
        grouped.setdefault(item.task, []).append(item)
    return grouped


def join_items(
    base: Sequence[ItemResult], cand: Sequence[ItemResult]
) -> tuple[list[ItemResult], list[ItemResult]]:
    """Pair items by item_id; two sets that are not the same items are an error that counts the gap."""
    by_id = {item.item_id: item for item in cand}
    base_ids = {item.item_id for item in base}
    if base_ids != set(by_id):
        only_base = len(base_ids - set(by_id))
        only_cand = len(set(by_id) - base_ids)
        raise UserError(
            f"base and candidate were scored on different items ({only_base} only in base, "
            f"{only_cand} only in candidate): re-run scoring so both cover the same items"
        )
    paired = sorted(base, key=lambda item: item.item_id)
    return paired, [by_id[item.item_id] for item in paired]


def mcnemar_exact(flips_c2w: int, flips_w2c: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against 1/2."""
    discordant = flips_c2w + flips_w2c
    if discordant == 0:
        return 1.0
    return float(binomtest(flips_c2w, discordant, 0.5).pvalue)


def bootstrap_delta_ci(
    diffs: np.ndarray, clusters: np.ndarray, resamples: int, seed: int
) -> tuple[float, float]:
    """Percentile 95% CI of the mean paired difference, resampling clusters when there are several.

    With one cluster the items are resampled; since a difference is -1, 0 or +1, a resample is fully
    described by multinomial counts of those three values, which keeps 35k-item bootstraps cheap.
    """
    rng = np.random.default_rng(seed)
    labels, cluster_index = np.unique(clusters, return_inverse=True)
    n = len(diffs)
    if len(labels) > 1:
        sums = np.bincount(cluster_index, weights=diffs)
        counts = np.bincount(cluster_index).astype(float)
        picks = rng.integers(0, len(labels), size=(resamples, len(labels)))
        deltas = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    else:
        shares = [np.mean(diffs == 1), np.mean(diffs == -1), np.mean(diffs == 0)]
        draws = rng.multinomial(n, shares, size=resamples)
        deltas = (draws[:, 0] - draws[:, 1]) / n
    low, high = np.percentile(deltas, [2.5, 97.5])
    return float(low), float(high)


def mean_choice_kl(base: Sequence[ItemResult], cand: Sequence[ItemResult]) -> float | None:
    """Mean KL(base ‖ candidate) of the distributions over choices, in nats."""
    pairs = zip(base, cand, strict=True)
    if not base or any(len(b.choice_logprobs) != len(c.choice_logprobs) for b, c in pairs):
        return None
    p = np.array([b.choice_logprobs for b in base])
    q = np.array([c.choice_logprobs for c in cand])
    p = p - logsumexp(p, axis=1, keepdims=True)
    q = q - logsumexp(q, axis=1, keepdims=True)
    return float(np.mean(np.sum(np.exp(p) * (p - q), axis=1)))


def compare(
    base_name: str,
    cand_name: str,
    base: Sequence[ItemResult],
    cand: Sequence[ItemResult],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> Comparison:
    """Paired comparison of one task: Δ accuracy, its bootstrap CI, exact McNemar, flips, choice KL."""
    base_items, cand_items = join_items(base, cand)
    if not base_items:
        raise UserError(f"no items to compare for {cand_name} vs {base_name}: score some items first")
    base_ok = np.array([item.correct for item in base_items])
    cand_ok = np.array([item.correct for item in cand_items])
    diffs = cand_ok.astype(float) - base_ok.astype(float)
    flips_c2w = int(np.sum(base_ok & ~cand_ok))
    flips_w2c = int(np.sum(~base_ok & cand_ok))
    ci_low, ci_high = bootstrap_delta_ci(
        diffs, np.array([item.subject for item in base_items]), resamples, seed
    )
    return Comparison(
        task=base_items[0].task,
        base=base_name,
        candidate=cand_name,
        n=len(base_items),
        acc_base=float(base_ok.mean()),
        acc_cand=float(cand_ok.mean()),
        delta=float(diffs.mean()),
        ci_low=ci_low,
        ci_high=ci_high,
        mcnemar_p=mcnemar_exact(flips_c2w, flips_w2c),
        flips_c2w=flips_c2w,
        flips_w2c=flips_w2c,
        mean_kl=mean_choice_kl(base_items, cand_items),
        bootstrap_resamples=resamples,
        seed=seed,
    )
