"""Paired statistics checked against independent references and hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import bootstrap
from statsmodels.stats.contingency_tables import mcnemar

from evals.stats import bootstrap_delta_ci, compare, mcnemar_exact, mean_choice_kl
from kqe.errors import UserError
from kqe.records import ItemResult


def make_items(correct: list[bool], subjects: list[str] | None = None, logprobs=None) -> list[ItemResult]:
    items = []
    for i, ok in enumerate(correct):
        lp = logprobs[i] if logprobs is not None else [-1.0, -2.0, -3.0, -4.0]
        items.append(
            ItemResult(
                task="t",
                subject=subjects[i] if subjects else "s",
                item_id=f"t/{i}",
                gold=0,
                pred=0 if ok else 1,
                correct=ok,
                choice_logprobs=lp,
                prompt_sha="x",
            )
        )
    return items


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (5, 2), (12, 3), (40, 37), (0, 9)])
def test_mcnemar_matches_statsmodels(b: int, c: int) -> None:
    table = [[10, b], [c, 10]]
    expected = 1.0 if b + c == 0 else mcnemar(table, exact=True).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_hand_computed() -> None:
    # 3 discordant pairs all one way: p = 2 * (1/2)^3 = 0.25
    assert mcnemar_exact(3, 0) == pytest.approx(0.25)
    # 1 vs 1: the most balanced split gives p = 1
    assert mcnemar_exact(1, 1) == pytest.approx(1.0)


def test_compare_counts_and_delta_by_hand() -> None:
    base = make_items([True, True, False, False, True])
    cand = make_items([True, False, True, False, False])
    result = compare("bf16", "awq", base, cand, resamples=2000)
    assert (result.flips_c2w, result.flips_w2c) == (2, 1)
    assert result.acc_base == pytest.approx(0.6)
    assert result.acc_cand == pytest.approx(0.4)
    assert result.delta == pytest.approx(-0.2)
    assert result.ci_low <= result.delta <= result.ci_high
    assert result.mcnemar_p == pytest.approx(1.0)


def test_item_bootstrap_matches_scipy_percentile_ci() -> None:
    rng = np.random.default_rng(1)
    diffs = rng.choice([-1.0, 0.0, 1.0], p=[0.15, 0.75, 0.10], size=3000)
    low, high = bootstrap_delta_ci(diffs, np.zeros(3000), resamples=20_000, seed=3)
    ref = bootstrap((diffs,), np.mean, n_resamples=20_000, method="percentile", random_state=4)
    assert low == pytest.approx(ref.confidence_interval.low, abs=0.002)
    assert high == pytest.approx(ref.confidence_interval.high, abs=0.002)


def test_cluster_bootstrap_is_wider_when_subjects_differ() -> None:
    rng = np.random.default_rng(2)
    subjects = np.repeat(np.arange(20), 50)
    # each subject has its own loss level: clustering must widen the interval
    per_subject = rng.normal(0, 0.3, size=20)
    diffs = np.clip(np.round(per_subject[subjects] + rng.normal(0, 0.5, size=1000)), -1, 1)
    item_low, item_high = bootstrap_delta_ci(diffs, np.zeros(1000), 5000, 0)
    clu_low, clu_high = bootstrap_delta_ci(diffs, subjects, 5000, 0)
    assert (clu_high - clu_low) > (item_high - item_low)


def test_bootstrap_is_reproducible_under_seed() -> None:
    diffs = np.array([1.0, 0.0, -1.0, 0.0, 0.0, 1.0, -1.0, -1.0])
    assert bootstrap_delta_ci(diffs, np.zeros(8), 1000, 7) == bootstrap_delta_ci(diffs, np.zeros(8), 1000, 7)


def test_kl_is_zero_for_identical_and_matches_hand_value() -> None:
    lp = [[math.log(0.5), math.log(0.5), -50.0, -50.0]]
    same = make_items([True], logprobs=lp)
    assert mean_choice_kl(same, same) == pytest.approx(0.0, abs=1e-12)
    other = make_items([True], logprobs=[[math.log(0.9), math.log(0.1), -50.0, -50.0]])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert mean_choice_kl(same, other) == pytest.approx(expected, rel=1e-6)


def test_mismatched_items_are_an_error_naming_the_gap() -> None:
    base = make_items([True, False, True])
    cand = make_items([True, False])
    with pytest.raises(UserError, match="1 only in base, 0 only in candidate"):
        compare("bf16", "awq", base, cand)
