"""Letter preference: answer collapse named in the verdict, and the cross-fitted letter-prior
debiasing checked on synthetic log-probs whose letter prior is known."""

from __future__ import annotations

import numpy as np
import pytest

from evals.statistics import choice_bias
from evals.statistics.pairing import PairedItems
from evals.statistics.stats import SIGNIFICANT_LOSS, adjust_run, compare_paired, compare_tasks
from kqe.core.results import ItemResult

CHOICES = 4


def synthetic(
    n: int, subjects: int, signal: float, prior: list[float], seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gold spread evenly over the positions; content log-probs = noise + `signal` on the gold choice;
    observed = content + the letter `prior` + a per-item offset (a full-vocabulary log-likelihood is
    not normalised over the choices). Returns observed, content, gold, subject of each item."""
    rng = np.random.default_rng(seed)
    gold = np.arange(n) % CHOICES
    rng.shuffle(gold)
    content = rng.normal(0.0, 1.0, (n, CHOICES))
    content[np.arange(n), gold] += signal
    observed = content + np.asarray(prior) + rng.normal(-6.0, 1.0, (n, 1))
    clusters = np.array([f"s{i % subjects:02d}" for i in range(n)])
    return observed, content, gold, clusters


def items(logprobs: np.ndarray, gold: np.ndarray, clusters: np.ndarray, task: str = "t") -> list[ItemResult]:
    return [
        ItemResult(
            task=task,
            subject=str(clusters[i]),
            item_id=f"{task}/{i}",
            gold=int(gold[i]),
            pred=int(np.argmax(logprobs[i])),
            correct=bool(np.argmax(logprobs[i]) == gold[i]),
            choice_logprobs=[float(v) for v in logprobs[i]],
            prompt_sha="x",
        )
        for i in range(len(gold))
    ]


def test_debiased_accuracy_recovers_the_unbiased_one_under_a_known_letter_prior() -> None:
    observed, content, gold, clusters = synthetic(4000, 40, 1.2, [1.6, 0.0, -0.3, 0.2], seed=7)
    unbiased = float(np.mean(np.argmax(content, axis=1) == gold))
    biased = float(np.mean(np.argmax(observed, axis=1) == gold))
    correct = choice_bias.debiased_correct(observed, gold, clusters)
    assert correct is not None
    assert biased < unbiased - 0.08  # the prior costs accuracy: a test that the correction must undo
    assert float(correct.mean()) == pytest.approx(unbiased, abs=0.015)


def test_without_a_letter_prior_debiasing_changes_almost_nothing() -> None:
    observed, content, gold, clusters = synthetic(4000, 40, 1.2, [0.0] * CHOICES, seed=8)
    correct = choice_bias.debiased_correct(observed, gold, clusters)
    assert correct is not None
    assert float(correct.mean()) == pytest.approx(
        float(np.mean(np.argmax(content, axis=1) == gold)), abs=0.01
    )


def test_an_items_own_log_probs_never_correct_it() -> None:
    observed, _, _, clusters = synthetic(400, 10, 1.0, [1.0, 0.0, 0.0, 0.0], seed=9)
    fold = choice_bias.folds(clusters)
    assert len(np.unique(fold)) == choice_bias.DEBIAS_FOLDS
    assert all(len(set(clusters[fold == f]) & set(clusters[fold != f])) == 0 for f in np.unique(fold))
    moved = observed.copy()
    moved[0] += [0.0, 40.0, 0.0, 0.0]  # item 0 now screams B
    before, after = choice_bias.letter_prior(observed, fold), choice_bias.letter_prior(moved, fold)
    same_fold = fold == fold[0]
    np.testing.assert_array_equal(before[same_fold], after[same_fold])  # its own fold's prior: untouched
    assert np.all(after[~same_fold, 1] > before[~same_fold, 1])  # the other folds' priors see it


def test_items_of_one_subject_are_folded_one_by_one() -> None:
    assert list(choice_bias.folds(np.array(["s"] * 7))) == [0, 1, 2, 3, 4, 0, 1]
    assert list(choice_bias.folds(np.array(["b", "a", "b", "c"]))) == [1, 0, 1, 2]
    lone = np.zeros((1, CHOICES))
    assert choice_bias.debiased_predictions(lone, np.array(["s"])) is None  # no other fold to learn from


def test_a_collapsed_candidate_is_named_in_place_of_its_delta_verdict() -> None:
    observed, _, gold, clusters = synthetic(400, 20, 1.0, [0.0] * CHOICES, seed=10)
    collapsed = observed.copy()
    collapsed[:, 0] += 30.0  # every answer A
    base, cand = items(observed, gold, clusters, "kmmlu"), items(collapsed, gold, clusters, "kmmlu")
    compared = compare_tasks("bf16", "awq", {"kmmlu": base}, {"kmmlu": cand})["kmmlu"]
    assert compared.collapse == compared.verdict == "collapsed: picks A on 100% of items"
    for method in ("holm", "bh"):  # re-adjusting the run keeps the collapse
        assert adjust_run({"awq": {"kmmlu": compared}}, method)["awq"]["kmmlu"].verdict == compared.verdict
    # the debiased accuracy takes the prior out: the collapse's own Δ is not what it reports
    assert compared.acc_debiased_cand is not None and compared.acc_debiased_base is not None
    assert compared.acc_debiased_cand == pytest.approx(compared.acc_debiased_base, abs=0.02)


def test_collapse_needs_ninety_percent_on_one_choice_and_a_base_that_does_not() -> None:
    spread = np.tile(np.eye(CHOICES), (25, 1))  # 100 items, each choice on 25

    def leaning(share: int) -> np.ndarray:
        """100 items: `share` of them on A, the rest on B, C and D in turn."""
        others = np.eye(CHOICES)[1 + np.arange(100 - share) % (CHOICES - 1)]
        return np.vstack([np.tile(np.eye(CHOICES)[0], (share, 1)), others])

    assert choice_bias.collapse(spread, leaning(90)) == "collapsed: picks A on 90% of items"
    assert choice_bias.collapse(spread, leaning(89)) is None
    assert choice_bias.collapse(leaning(95), leaning(100)) is None  # the base collapsed too: Δ as usual
    many = np.tile(np.eye(CHOICES), (50, 1))
    many[1:] = [0.0, 0.0, 1.0, 0.0]  # 199 of 200 on C: 99.5%, not yet all of them
    assert (
        choice_bias.collapse(np.tile(np.eye(CHOICES), (50, 1)), many) == "collapsed: picks C on 99% of items"
    )


def test_a_letter_prior_alone_loses_accuracy_but_no_debiased_accuracy() -> None:
    observed, _, gold, clusters = synthetic(2000, 40, 1.2, [0.0] * CHOICES, seed=11)
    shifted = observed + np.array([1.5, 0.0, 0.0, 0.0])  # the same beliefs, a new preference for A
    base_ok, cand_ok = np.argmax(observed, 1) == gold, np.argmax(shifted, 1) == gold
    paired = PairedItems(base_ok, cand_ok, clusters, observed, shifted, gold)
    c = compare_paired("t", "bf16", "q", paired, resamples=2000)
    assert c.ci_high < 0 and c.verdict == SIGNIFICANT_LOSS  # raw accuracy: a loss
    assert c.delta_debiased is not None and c.delta_debiased_ci_low is not None
    assert c.delta_debiased_ci_high is not None
    assert c.delta_debiased_ci_low < 0 < c.delta_debiased_ci_high  # debiased: no change seen
    assert abs(c.delta_debiased) < abs(c.delta) / 4
    assert c.delta_debiased_ci_high - c.delta_debiased_ci_low > 0


def test_choice_profile_counts_each_choice_and_skips_generative_items() -> None:
    observed, _, gold, clusters = synthetic(200, 10, 1.0, [0.0] * CHOICES, seed=12)
    observed[:, 3] += 20.0
    profile = choice_bias.choice_profile("q", "t", items(observed, gold, clusters))
    assert profile is not None
    assert profile.counts == [0, 0, 0, 200] and profile.top_choice == "D" and profile.top_share == 1.0
    assert profile.acc_debiased is not None and profile.debias_folds == 5
    generated = [i.model_copy(update={"choice_logprobs": []}) for i in items(observed, gold, clusters)]
    assert choice_bias.checkpoint_choices(
        "q", {"g": generated, "t": items(observed, gold, clusters)}
    ).keys() == {"t"}


def test_without_log_probs_or_gold_the_debiased_fields_stay_empty() -> None:
    paired = PairedItems(np.ones(10, bool), np.zeros(10, bool), np.array(["s"] * 10))
    rng = np.random.default_rng(0)
    assert set(choice_bias.debiased_comparison(paired, 100, rng).values()) == {None}
    lp = np.zeros((10, CHOICES))
    no_gold = PairedItems(paired.base_ok, paired.cand_ok, paired.clusters, lp, lp, np.full(10, -1))
    assert set(choice_bias.debiased_comparison(no_gold, 100, rng).values()) == {None}
