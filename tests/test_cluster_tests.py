"""The cluster-level p-values against their references: an exact enumeration written out loop by loop
and scipy's sign-flip permutation test for K ≤ 12, scipy's one-sample t test and statsmodels'
cluster-robust t for more; the floor 2^(1−K); the accuracy verdict following the larger of McNemar's
and the clusters' p; the p formatter; every committed run.json still read."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm
from scipy.stats import permutation_test, ttest_1samp

from evals.reporting.p_values import format_p
from evals.statistics.cluster_tests import (
    ONE_CLUSTER,
    SIGN_FLIP_MAX_CLUSTERS,
    cluster_test,
    clustered_test,
    ratio_t_p,
    sign_flip_floor,
    sign_flip_p,
)
from evals.statistics.paired_means import paired_mean
from evals.statistics.pairing import PairedItems
from evals.statistics.stats import SIGNIFICANT_LOSS, compare_paired, verdict_p
from kqe.core.results import RunSummary

RESULTS = Path(__file__).resolve().parents[1] / "results"


def enumerated_p(totals: list[float]) -> float:
    """Every sign pattern written out: the share whose |Σ| reaches the observed |Σ|."""
    observed = abs(sum(totals))
    patterns = list(itertools.product((1, -1), repeat=len(totals)))
    reach = sum(
        abs(sum(s * x for s, x in zip(signs, totals, strict=True))) >= observed - 1e-12 for signs in patterns
    )
    return reach / len(patterns)


@pytest.mark.parametrize("k", range(1, SIGN_FLIP_MAX_CLUSTERS + 1))
def test_sign_flip_p_equals_the_exact_enumeration_and_scipys_permutation_test(k: int) -> None:
    rng = np.random.default_rng(k)
    for shift in (0.0, 0.5, 1.5):
        totals = rng.normal(shift, 1.0, k)
        p = sign_flip_p(totals)
        assert p == pytest.approx(enumerated_p(totals.tolist()), abs=1e-12)
        if k > 1:
            reference = permutation_test(
                (totals,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
            )
            assert p == pytest.approx(reference.pvalue, rel=1e-12)
        assert p >= sign_flip_floor(k)


@pytest.mark.parametrize("k", range(1, SIGN_FLIP_MAX_CLUSTERS + 1))
def test_the_smallest_sign_flip_p_is_two_to_the_one_minus_k_reached_when_every_cluster_moves_one_way(
    k: int,
) -> None:
    # the observed pattern and its negation always reach |Σ|; only they do when every total is positive
    # and the smallest exceeds nothing that could cancel it: distinct powers of two
    totals = 2.0 ** np.arange(k)
    assert sign_flip_p(totals) == sign_flip_floor(k) == 2.0 ** (1 - k)
    assert sign_flip_p(-totals) == sign_flip_floor(k)
    assert sign_flip_p(np.zeros(k)) == 1.0, "no change at all: every pattern reaches it"


def test_sign_flip_refuses_more_clusters_than_it_enumerates() -> None:
    with pytest.raises(ValueError, match="at most 12"):
        sign_flip_p(np.ones(SIGN_FLIP_MAX_CLUSTERS + 1))


def test_t_p_equals_scipys_one_sample_t_test_on_equal_clusters() -> None:
    rng = np.random.default_rng(3)
    for k in (13, 20, 45):
        means = rng.normal(0.2, 1.0, k)
        assert ratio_t_p(means * 7, np.full(k, 7.0)) == pytest.approx(
            ttest_1samp(means, 0.0).pvalue, rel=1e-9
        )


def test_t_p_equals_statsmodels_cluster_robust_t_on_unequal_clusters() -> None:
    rng = np.random.default_rng(4)
    for k in (13, 30):
        groups = np.repeat(np.arange(k), rng.integers(1, 12, k))
        values = rng.normal(0.3, 1.0, len(groups)) + rng.normal(0, 0.5, k)[groups]
        fit = sm.OLS(values, np.ones(len(values))).fit(
            cov_type="cluster", cov_kwds={"groups": groups}, use_t=True
        )
        assert clustered_test(values, groups).p == pytest.approx(fit.pvalues[0], rel=1e-9)


def test_cluster_test_picks_the_method_by_the_number_of_clusters() -> None:
    assert cluster_test([3.0], [1.0]).method == ONE_CLUSTER and cluster_test([3.0], [1.0]).p == 1.0
    assert cluster_test(np.arange(1.0, 13.0), np.ones(12)).method == "exact sign-flip over 12 clusters"
    assert cluster_test(np.arange(1.0, 14.0), np.ones(13), "documents").method == "t(K−1) over 13 documents"


def _few_subjects_losing_many_items() -> PairedItems:
    """4 subjects of 50 items; the candidate loses 10 items in each: McNemar (200 independent items,
    40 flips one way) finds p ~ 1e-12, the 4 subjects cannot say more than p = 0.125."""
    base_ok = np.ones(200, dtype=bool)
    cand_ok = base_ok.copy()
    for subject in range(4):
        cand_ok[subject * 50 : subject * 50 + 10] = False
    return PairedItems(base_ok=base_ok, cand_ok=cand_ok, clusters=np.repeat(np.arange(4), 50))


def test_the_accuracy_verdict_follows_the_larger_of_mcnemars_and_the_subjects_p() -> None:
    c = compare_paired("kmmlu", "base", "cand", _few_subjects_losing_many_items(), resamples=2000)
    assert c.mcnemar_p < 1e-10 and c.cluster_p == sign_flip_floor(4) == 0.125
    assert c.cluster_p_method == "exact sign-flip over 4 clusters"
    assert c.p_holm == verdict_p(c) == 0.125 and c.verdict != SIGNIFICANT_LOSS
    items = _few_subjects_losing_many_items()
    alone = PairedItems(base_ok=items.base_ok, cand_ok=items.cand_ok, clusters=np.arange(200))
    c = compare_paired("kmmlu", "base", "cand", alone, resamples=2000)
    assert c.cluster_p is None and c.p_holm == c.mcnemar_p and c.verdict == SIGNIFICANT_LOSS


def test_the_bootstrap_p_never_goes_below_one_over_resamples_plus_one() -> None:
    c = compare_paired("kmmlu", "base", "cand", _few_subjects_losing_many_items(), resamples=999)
    assert c.noninf_p >= 1 / 1000


def test_a_paired_mean_carries_its_clusters_p() -> None:
    differences = np.repeat([0.2, 0.1, 0.3, 0.25, 0.15], 6)  # 5 passages of 6 questions, all gained
    found = paired_mean(differences, [f"p{i // 6}" for i in range(30)], resamples=2000)
    assert found.value == pytest.approx(0.2) and found.ci_low > 0
    assert found.p == sign_flip_floor(5) and found.p_method == "exact sign-flip over 5 clusters"


@pytest.mark.parametrize(
    ("p", "plain", "labelled"),
    [
        (None, "—", "p —"),
        (1e-47, "< 0.001", "p < 0.001"),
        (0.000999, "< 0.001", "p < 0.001"),
        (0.001, "0.001", "p = 0.001"),
        (0.0312, "0.0312", "p = 0.0312"),
        (0.125, "0.125", "p = 0.125"),
        (1.0, "1", "p = 1"),
    ],
)
def test_a_p_prints_down_to_the_display_floor_and_as_below_it_under(
    p: float | None, plain: str, labelled: str
) -> None:
    assert format_p(p) == plain and format_p(p, "p") == labelled


def _floor_of(method: str | None) -> float:
    """The least p the method a record names can give: 2^(1−K) for an exact sign-flip over K, else 0."""
    found = re.fullmatch(r"exact sign-flip over (\d+) \w+", method or "")
    return sign_flip_floor(int(found[1])) if found else 0.0


def test_every_committed_run_summary_reads_and_no_p_is_below_its_clusters_reach() -> None:
    found = sorted(RESULTS.rglob("run.json"))
    assert found, "results/ holds committed runs"
    rerun = 0
    for path in found:
        run = RunSummary.model_validate_json(path.read_text(encoding="utf-8"))
        methods = {c.p_method is None for c in run.perplexity_comparisons}
        assert len(methods) <= 1, path  # a run's p-values come from one version of the method
        if methods == {False}:  # made after the fix: every p within what its units resolve
            rerun += 1
            for c in run.perplexity_comparisons:
                assert c.p is None or c.p >= _floor_of(c.p_method), (path, c.text_set, c.p_method)
            for comparison in run.comparisons:
                assert comparison.cluster_p_method is not None, (path, comparison.task)
                assert comparison.cluster_p is None or comparison.cluster_p >= _floor_of(
                    comparison.cluster_p_method
                )
        else:
            assert all(c.cluster_p is None and c.cluster_p_method is None for c in run.comparisons), path
    assert rerun >= 1, "the committed default run was made with cluster-level p"


def test_the_calibration_simulation_counts_null_rejections_per_method() -> None:
    from bench.pvalue_bench import accuracy_null, null_rejection, perplexity_null, run_pvalue_calibration

    few = null_rejection(perplexity_null(3), 400, np.random.default_rng(1))
    assert few["suite"] == few["sign_flip"] == 0.0, "3 clusters: no p below 0.25"
    assert 0.01 <= few["t"] <= 0.11, few  # 5% ± 3 standard errors of 400 draws
    many = null_rejection(accuracy_null(20), 400, np.random.default_rng(2))
    assert many["suite"] == many["t"] and np.isnan(many["sign_flip"]) and 0.01 <= many["t"] <= 0.11
    lines: list[str] = []
    row = run_pvalue_calibration(20, (3, 13), lines.append)
    assert set(row) >= {"accuracy_k3_suite", "perplexity_k13_t", "pvalue_suite_max_null_share"}
    assert len(lines) == 2 + 4 + 1, "a title, a header, one line per population and K, the summary"
