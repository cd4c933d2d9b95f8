"""Paired perplexity statistics: a checkpoint against another on the same windows of held-out text.

Both checkpoints scored the same token windows, so the comparison is paired: the change in mean NLL
per token is Σ(NLL_cand − NLL_base) / Σ tokens over the windows, and the perplexity ratio is its exp.
The bootstrap resamples whole documents (a bill, a chapter, a FAQ section), as accuracy resamples
subjects, never narrower than resampling windows, and stretched for the few units it has
(`bootstrap.small_sample_stretch`); with fewer than 3 documents it resamples windows. The p-value
takes the CI's units as its units (`evals.statistics.cluster_tests`: exact sign flips over up to 12 of
them, else t(K−1)), so it never claims more than those few documents can show: 4 documents, p ≥ 0.125.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from evals.statistics.bootstrap import ALPHA, BOOTSTRAP_RESAMPLES, SEED, cluster_sums, small_sample_stretch
from evals.statistics.cluster_tests import ClusterTest, cluster_test
from evals.statistics.stats import NO_LOSS, SIGNIFICANT_LOSS
from kqe.core.defaults import PARALLEL_TEXT_SETS, PPL_MARGIN_PCT
from kqe.core.results import Perplexity, PerplexityComparison, PerplexityGap

MIN_DOCUMENTS = 3
"""Fewer documents than this are too few to resample: the windows are resampled instead."""
DOCUMENTS = "document bootstrap"
WINDOW_FLOOR = "window bootstrap (documents spread narrower)"
FEW_DOCUMENTS = f"window bootstrap (fewer than {MIN_DOCUMENTS} documents)"


@dataclass(frozen=True)
class PairedWindows:
    """Two checkpoints' NLLs on the same windows of one text set, aligned."""

    base_nll: np.ndarray
    cand_nll: np.ndarray
    tokens: np.ndarray
    documents: np.ndarray
    """Document of each window: the cluster label."""


def pair_windows(base: Perplexity, cand: Perplexity, text_set: str) -> PairedWindows | None:
    """The windows both scored on `text_set`; None when either lacks them or they scored other text
    or other windows (then there is nothing to pair)."""
    b, c = base.windows.get(text_set), cand.windows.get(text_set)
    if not b or not c or base.window_tokens != cand.window_tokens:
        return None
    same_text = base.text_sha256.get(text_set) == cand.text_sha256.get(text_set)
    if not same_text or [(w.document, w.tokens) for w in b] != [(w.document, w.tokens) for w in c]:
        return None
    return PairedWindows(
        base_nll=np.array([w.nll for w in b]),
        cand_nll=np.array([w.nll for w in c]),
        tokens=np.array([w.tokens for w in b], dtype=float),
        documents=np.array([w.document for w in b]),
    )


@dataclass(frozen=True)
class LogRatio:
    """Bootstrap replicates of the change in mean NLL per token (the log of the perplexity ratio)."""

    estimate: float
    replicates: np.ndarray
    """Stretched replicates, (resamples,)."""
    method: str
    clusters: int


def log_ratio_replicates(paired: PairedWindows, resamples: int, rng: np.random.Generator) -> LogRatio:
    """Replicates of the wider of the document and the window bootstrap (documents when ≥ 3)."""
    diff = paired.cand_nll - paired.base_nll
    estimate = float(diff.sum() / paired.tokens.sum())
    labels, index = np.unique(paired.documents, return_inverse=True)
    windows = _replicates(diff, paired.tokens, estimate, resamples, rng)
    if len(labels) < MIN_DOCUMENTS or len(labels) == len(diff):
        method = DOCUMENTS if len(labels) == len(diff) >= MIN_DOCUMENTS else FEW_DOCUMENTS
        return LogRatio(estimate, windows, method, len(labels))
    doc_diff, doc_tokens = np.bincount(index, weights=diff), np.bincount(index, weights=paired.tokens)
    documents = _replicates(doc_diff, doc_tokens, estimate, resamples, rng)
    if np.std(windows) > np.std(documents):
        return LogRatio(estimate, windows, WINDOW_FLOOR, len(labels))
    return LogRatio(estimate, documents, DOCUMENTS, len(labels))


def _replicates(
    diff: np.ndarray, tokens: np.ndarray, estimate: float, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Units resampled with replacement; each replicate's Σdiff / Σtokens, stretched around `estimate`."""
    sums = cluster_sums(np.column_stack([diff, tokens]), resamples, rng)
    return estimate + small_sample_stretch(len(diff)) * (sums[:, 0] / sums[:, 1] - estimate)


def ratio_test(paired: PairedWindows, method: str) -> ClusterTest:
    """The p of "no change" over the units the CI resampled (`method`): documents, or windows where the
    CI resampled windows; where the windows were the floor, the larger p of the two."""
    diff = paired.cand_nll - paired.base_nll
    windows = cluster_test(diff, paired.tokens, "windows")
    if method == FEW_DOCUMENTS:
        return windows
    index = np.unique(paired.documents, return_inverse=True)[1]
    doc_diff, doc_tokens = np.bincount(index, weights=diff), np.bincount(index, weights=paired.tokens)
    documents = cluster_test(doc_diff, doc_tokens, "documents")
    return windows if method == WINDOW_FLOOR and windows.p > documents.p else documents


def percent(log_ratio: float | np.ndarray) -> float | np.ndarray:
    """A change in mean NLL per token as a perplexity change, percent."""
    return 100 * np.expm1(log_ratio)


def ppl_verdict(low_pct: float, high_pct: float, p: float, margin_pct: float) -> str:
    """`significant loss` when the p-value and the CI both say perplexity rose; `no loss detected
    within margin` when the CI stays below +margin; else inconclusive, with the CI."""
    if p < ALPHA and low_pct > 0:
        return SIGNIFICANT_LOSS
    if high_pct < margin_pct:
        return NO_LOSS
    return f"inconclusive — CI {low_pct:+.1f}% to {high_pct:+.1f}%"


def _rng(seed: int, *names: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(name.encode()) for name in names)])


def compare_perplexity(
    base: Perplexity,
    cand: Perplexity,
    text_set: str,
    margin_pct: float = PPL_MARGIN_PCT,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> PerplexityComparison | None:
    """`cand` against `base` on the windows of `text_set`; None when they cannot be paired."""
    paired = pair_windows(base, cand, text_set)
    if paired is None:
        return None
    ratio = log_ratio_replicates(paired, resamples, _rng(seed, "ppl", text_set))
    spread = float(np.std(ratio.replicates))
    half = norm.ppf(1 - ALPHA / 2) * spread  # symmetric on the log scale
    low, high = float(percent(ratio.estimate - half)), float(percent(ratio.estimate + half))
    test = ratio_test(paired, ratio.method)
    p = test.p
    tokens = float(paired.tokens.sum())
    return PerplexityComparison(
        text_set=text_set,
        base=base.checkpoint,
        candidate=cand.checkpoint,
        windows=len(paired.tokens),
        tokens=int(tokens),
        ppl_base=float(np.exp(paired.base_nll.sum() / tokens)),
        ppl_cand=float(np.exp(paired.cand_nll.sum() / tokens)),
        delta_pct=float(percent(ratio.estimate)),
        ci_low_pct=low,
        ci_high_pct=high,
        p=p,
        margin_pct=margin_pct,
        verdict=ppl_verdict(low, high, p, margin_pct),
        ci_method=ratio.method,
        clusters=ratio.clusters,
        bootstrap_resamples=resamples,
        seed=seed,
        p_method=test.method,
    )


def parallel_gap(
    base: Perplexity,
    cand: Perplexity,
    korean: str,
    english: str,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = SEED,
) -> PerplexityGap | None:
    """Korean minus English perplexity change on the same documents, documents resampled in both
    languages at once; None when the sets cannot be paired or hold different documents."""
    ko, en = pair_windows(base, cand, korean), pair_windows(base, cand, english)
    if ko is None or en is None:
        return None
    names = sorted(set(ko.documents))
    if names != sorted(set(en.documents)):
        return None
    columns = []
    for paired in (ko, en):  # per document: Σdiff, Σtokens, in `names` order
        index = np.searchsorted(names, paired.documents)
        diff = paired.cand_nll - paired.base_nll
        columns += [np.bincount(index, weights=diff), np.bincount(index, weights=paired.tokens)]
    totals = np.column_stack(columns)
    sums = cluster_sums(totals, resamples, _rng(seed, "gap", korean, english))
    ko_est, en_est = totals[:, 0].sum() / totals[:, 1].sum(), totals[:, 2].sum() / totals[:, 3].sum()
    gap = float(percent(ko_est) - percent(en_est))
    star = percent(sums[:, 0] / sums[:, 1]) - percent(sums[:, 2] / sums[:, 3])
    half = norm.ppf(1 - ALPHA / 2) * small_sample_stretch(len(names)) * float(np.std(star))
    return PerplexityGap(
        base=base.checkpoint,
        candidate=cand.checkpoint,
        korean=korean,
        english=english,
        documents=names,
        delta_ko_pct=float(percent(ko_est)),
        delta_en_pct=float(percent(en_est)),
        gap_pct=gap,
        ci_low=gap - half,
        ci_high=gap + half,
        bootstrap_resamples=resamples,
        seed=seed,
    )


@dataclass(frozen=True)
class PerplexityFindings:
    """What a run found about one checkpoint's perplexity, for its leaderboard row and run.json."""

    measured: Perplexity | None
    """The checkpoint's own perplexity record, where it was scored."""
    delta_pct: dict[str, float]
    """Text set → perplexity change against the base in percent, where both scored the same text with
    the same window (never on the base row)."""
    vs_base: dict[str, PerplexityComparison]
    """Text set → paired comparison with the base (empty on the base row)."""
    vs_control: dict[str, PerplexityComparison]
    """Text set → paired comparison with the calibration control: the calibration effect."""
    gaps: dict[str, PerplexityGap]
    """Parallel pair name (`faq`, `lo`: `PARALLEL_TEXT_SETS`) → the Korean − English change against
    the base on its documents, where both languages were paired (empty on the base row)."""

    @property
    def comparisons(self) -> list[PerplexityComparison]:
        """Against the base, then against the calibration control, per text set."""
        return [*self.vs_base.values(), *self.vs_control.values()]


def relative_change(result: Perplexity | None, base: Perplexity | None) -> dict[str, float]:
    """Text set → Δ% of `result`'s perplexity against `base`'s, only against another checkpoint (the
    base) scored on the same text with the same window."""
    if result is None or base is None or base.checkpoint == result.checkpoint:
        return {}
    if base.window_tokens != result.window_tokens:
        return {}
    return {
        text_set: round(100 * (value / base.perplexity[text_set] - 1), 3)
        for text_set, value in result.perplexity.items()
        if text_set in base.perplexity and base.text_sha256.get(text_set) == result.text_sha256.get(text_set)
    }


def perplexity_findings(
    ckpt: Perplexity | None,
    base: Perplexity | None,
    control: Perplexity | None,
    margin_pct: float = PPL_MARGIN_PCT,
) -> PerplexityFindings:
    """A checkpoint's perplexity, its change against the base and the calibration control with CIs and
    verdicts, and the KO−EN gap of each parallel pair (empty on the base row or without paired windows)."""
    vs_base: dict[str, PerplexityComparison] = {}
    vs_control: dict[str, PerplexityComparison] = {}
    gaps: dict[str, PerplexityGap] = {}
    if ckpt is not None and base is not None and base.checkpoint != ckpt.checkpoint:
        found = {s: compare_perplexity(base, ckpt, s, margin_pct) for s in ckpt.windows}
        vs_base = {s: c for s, c in found.items() if c is not None}
        found_gaps = {name: parallel_gap(base, ckpt, *pair) for name, pair in PARALLEL_TEXT_SETS.items()}
        gaps = {name: gap for name, gap in found_gaps.items() if gap is not None}
    if ckpt is not None and control is not None:
        found = {s: compare_perplexity(control, ckpt, s, margin_pct) for s in ckpt.windows}
        vs_control = {s: c for s, c in found.items() if c is not None}
    return PerplexityFindings(ckpt, relative_change(ckpt, base), vs_base, vs_control, gaps)
