"""A candidate's generations against the base's: divergence, Korean fidelity and continuous metrics,
paired on item id; and the paired mean CI behind them, against t intervals and by coverage."""

from __future__ import annotations

import numpy as np
import pytest
from sacrebleu import sentence_chrf
from scipy import stats as scipy_stats

from evals.statistics import paired_means
from evals.statistics.generation_findings import (
    PairedEstimate,
    base_findings,
    continuous_verdict,
    first_difference,
    generation_findings,
    wilson_ci,
)
from kqe.core.errors import UserError
from kqe.core.results import ItemResult

TASK = "kormedmcqa_doctor"


def item(key: str, generated: str, subject: str = "s0", **fields: object) -> ItemResult:
    return ItemResult(
        task=TASK, subject=subject, item_id=key, gold=0, pred=-1, correct=False, choice_logprobs=[],
        prompt_sha="x", generated=generated, **fields,
    )  # fmt: skip


def test_divergence_pairs_on_shared_ids_and_measures_against_the_base_output() -> None:
    base = [
        item("a", "국민", generated_ids=[1, 2]),
        item("b", "국민입니다", generated_ids=[1, 2, 3, 4]),
        item("c", "헌법재판소", generated_ids=[5, 6, 7]),
        item("only-base", "x"),
    ]
    candidate = [
        item("a", "국민", generated_ids=[1, 2]),
        item("b", "국민", generated_ids=[1, 2]),  # a prefix of the base's ids: parts at 2
        item("c", "법원", generated_ids=[5, 9]),  # parts at 1
        item("only-candidate", "y"),
    ]
    found = generation_findings(base, candidate)
    assert found is not None and (found.task, found.n) == (TASK, 3)
    assert found.same_as_base.value == pytest.approx(1 / 3) and found.same_as_base.n == 3
    expected = [100.0, sentence_chrf("국민", ["국민입니다"]).score]
    expected.append(sentence_chrf("법원", ["헌법재판소"]).score)
    assert found.chrf_vs_base.value == pytest.approx(np.mean(expected))
    assert expected[1] != sentence_chrf("국민입니다", ["국민"]).score  # the base's output is the reference
    assert (found.first_diff_median, found.first_diff_n) == (1.5, 2)  # positions 2 and 1, differing only
    assert found.metrics == {} and found.hangul_share is None and found.code_switch is None


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2], [1, 2, 3]) == 2 == first_difference([1, 2, 3], [1, 2])
    assert first_difference([7], [8]) == 0 and first_difference([1, 2], [1, 2]) is None
    assert first_difference([], [3]) == 0


def test_no_ids_no_first_difference_and_identical_outputs_give_chrf_100() -> None:
    found = generation_findings([item("a", ""), item("b", "x")], [item("a", ""), item("b", "y")])
    assert found is not None and found.first_diff_median is None and found.first_diff_n == 0
    assert found.chrf_vs_base.value == pytest.approx(50.0)  # "" vs "": 100 (sacrebleu says 0); x vs y: 0


def test_fidelity_levels_and_deltas_over_items_both_sides_hold() -> None:
    base = [item(f"q{i}", "답", subject=f"s{i % 4}", hangul_share=1.0, code_switch=False) for i in range(8)]
    candidate = [
        item(f"q{i}", "answer", subject=f"s{i % 4}", hangul_share=0.5 if i < 4 else 1.0, code_switch=i < 2)
        for i in range(8)
    ]
    base[7] = base[7].model_copy(update={"hangul_share": None, "code_switch": None})  # no letters
    found = generation_findings(base, candidate)
    assert found is not None and found.hangul_share is not None and found.code_switch is not None
    hangul, switch = found.hangul_share, found.code_switch
    assert hangul.level.n == 7 and hangul.level.value == pytest.approx(5 / 7)  # (4·0.5 + 3·1) / 7
    assert hangul.delta is not None and hangul.delta.value == pytest.approx(5 / 7 - 1)
    assert hangul.delta.ci_low <= hangul.delta.value <= hangul.delta.ci_high < 0
    assert switch.level.value == pytest.approx(2 / 7) and switch.delta is not None
    assert switch.delta.value == pytest.approx(2 / 7) and 0 <= switch.level.ci_low < 2 / 7


def test_continuous_metrics_get_a_paired_delta_and_binary_ones_are_left_to_mcnemar() -> None:
    def scored(key: str, em: float, f1: float, cand: bool) -> ItemResult:
        metrics = {"exact_match,none": em, "f1,none": f1} | ({"bleu,none": 3.0} if cand else {})
        return item(key, "답", subject=key, metrics=metrics)

    base = [scored(f"q{i}", 1.0, 0.8, False) for i in range(6)]
    candidate = [scored(f"q{i}", float(i % 2), 0.8 - 0.1 * i, True) for i in range(6)]
    found = generation_findings(base, candidate)
    assert found is not None and set(found.metrics) == {"f1,none"}  # exact_match is binary; bleu one-sided
    f1 = found.metrics["f1,none"]
    assert (f1.base, f1.candidate) == (pytest.approx(0.8), pytest.approx(0.55))
    assert f1.delta.value == pytest.approx(-0.25) and f1.delta.n == 6
    assert f1.delta.ci_low < -0.25 < f1.delta.ci_high < 0
    assert f1.verdict == "significant loss"


def test_continuous_verdicts_take_a_margin_of_one_percent_of_the_metrics_scale() -> None:
    def pairs(key: str, base: float, shift: float, noise: float) -> tuple[list[ItemResult], list[ItemResult]]:
        def one(i: int, value: float) -> ItemResult:
            return item(f"q{i}", "답", subject=f"s{i % 8}", metrics={key: value})

        wobble = [noise * (1 if i % 2 else -1) for i in range(40)]
        return [one(i, base) for i in range(40)], [one(i, base + shift + wobble[i]) for i in range(40)]

    verdicts = {
        "chrF ±0.3 around 0 (0–100 scale)": (
            pairs("chrf,none", 40.0, 0.0, 0.3),
            "no loss detected within margin",
        ),
        "chrF −5": (pairs("chrf,none", 40.0, -5.0, 0.3), "significant loss"),
        "F1 ±0.003 around 0 ([0, 1])": (pairs("f1,none", 0.4, 0.0, 0.003), "no loss detected within margin"),
        "F1 ±0.3 around 0": (pairs("f1,none", 0.4, 0.0, 0.3), "inconclusive — n too small"),
    }
    for case, ((base, candidate), expected) in verdicts.items():
        found = generation_findings(base, candidate)
        assert found is not None
        assert next(iter(found.metrics.values())).verdict == expected, case
    assert continuous_verdict(PairedEstimate(-0.01, -0.05, 0.03, 3), 0.01) == "inconclusive — n too small"


def test_base_row_needs_no_ci_and_has_no_delta() -> None:
    base = [item(f"q{i}", "국민", subject=f"s{i}", hangul_share=1.0, code_switch=i == 0) for i in range(10)]
    found = base_findings(base)
    assert found is not None
    assert (found.same_as_base.value, found.same_as_base.ci_low, found.same_as_base.ci_high) == (1, 1, 1)
    assert found.chrf_vs_base.value == 100.0 and found.first_diff_median is None and found.metrics == {}
    assert found.code_switch is not None and found.code_switch.delta is None
    assert found.code_switch.level.value == pytest.approx(0.1)
    assert found.hangul_share is not None and found.hangul_share.delta is None


def test_nothing_shared_gives_none_and_a_repeated_id_is_refused() -> None:
    assert generation_findings([item("a", "x")], [item("b", "x")]) is None
    with pytest.raises(UserError, match="item a twice"):
        generation_findings([item("a", "x"), item("a", "y")], [item("a", "x")])


def test_a_share_of_one_keeps_wilsons_width() -> None:
    """Every output the same: the bootstrap has no spread, Wilson's interval still says how large an
    unseen difference rate could be (about 3.7/n at n = 100)."""
    same = [item(f"q{i}", "국민", subject=f"s{i % 10}") for i in range(100)]
    found = generation_findings(same, same)
    assert found is not None and found.same_as_base.ci_high == 1.0
    floor = wilson_ci(100, 100)[0]
    assert found.same_as_base.ci_low == pytest.approx(floor) and floor > 0.95


def test_ci_with_one_item_per_cluster_approaches_the_t_interval() -> None:
    differences = np.random.default_rng(7).normal(-0.05, 0.3, size=400)
    low, high = paired_means.paired_mean_ci(differences, [f"c{i}" for i in range(400)])
    reference = scipy_stats.ttest_1samp(differences, 0.0).confidence_interval(0.95)
    width = reference.high - reference.low
    assert abs(low - reference.low) < 0.05 * width and abs(high - reference.high) < 0.05 * width


def test_cluster_ci_approaches_the_t_interval_over_cluster_means() -> None:
    """Equal clusters sharing an effect: the CI is the t interval of the 30 cluster means (df 29), much
    wider than the one that takes the 150 items as independent."""
    rng = np.random.default_rng(11)
    effects = np.repeat(rng.normal(0, 0.4, size=30), 5)
    differences = effects + rng.normal(0, 0.1, size=150)
    clusters = [f"s{i // 5}" for i in range(150)]
    low, high = paired_means.paired_mean_ci(differences, clusters)
    reference = scipy_stats.ttest_1samp(differences.reshape(30, 5).mean(axis=1), 0.0).confidence_interval()
    width = reference.high - reference.low
    assert abs(low - reference.low) < 0.08 * width and abs(high - reference.high) < 0.08 * width
    naive = scipy_stats.ttest_1samp(differences, 0.0).confidence_interval()
    assert high - low > 1.5 * (naive.high - naive.low)


def test_coverage_of_the_paired_mean_ci() -> None:
    """200 simulated checkpoints pairs × 60 items in 12 subjects, a subject effect and a true mean
    difference of −0.1: the 95% CI holds the truth in 90–99% of them."""
    rng = np.random.default_rng(2026)
    clusters = [f"s{i // 5}" for i in range(60)]
    covered = 0
    for _ in range(200):
        differences = -0.1 + np.repeat(rng.normal(0, 0.2, size=12), 5) + rng.normal(0, 0.3, size=60)
        low, high = paired_means.paired_mean_ci(differences, clusters, resamples=2000)
        covered += low <= -0.1 <= high
    assert 0.90 <= covered / 200 <= 0.99
