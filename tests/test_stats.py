"""Paired statistics checked against independent references (statsmodels, scipy, simulation) and
hand-computed cases (reading item files and `kqe compare`: tests/test_compare_files.py)."""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import binom, binomtest, bootstrap, norm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from evals.statistics.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    CLUSTER_BOOTSTRAP,
    ITEM_BOOTSTRAP,
    ITEM_FLOOR,
    SEED,
    bootstrap_accuracies,
    small_sample_stretch,
)
from evals.statistics.multiplicity import holm
from evals.statistics.pairing import PairedItems, read_items
from evals.statistics.stats import (
    NO_LOSS,
    SIGNIFICANT_LOSS,
    choice_agreement,
    compare,
    compare_tasks,
    mcnemar_p,
    mean_ci,
    minimum_detectable_effect,
)
from kqe.cli import main
from tests.helpers.paired_items import flips, make_items

# --- McNemar -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (5, 2), (12, 3), (40, 37), (0, 9), (300, 251)])
def test_mcnemar_matches_statsmodels(b: int, c: int) -> None:
    expected = mcnemar([[10, b], [c, 10]], exact=True).pvalue
    assert float(mcnemar_p(b, c)) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_vectorised_matches_scipy_binomtest_on_generated_counts() -> None:
    rng = np.random.default_rng(0)
    b, c = rng.integers(0, 60, 200), rng.integers(0, 60, 200)
    expected = [
        binomtest(int(x), int(x + y), 0.5).pvalue if x + y else 1.0 for x, y in zip(b, c, strict=True)
    ]
    np.testing.assert_allclose(mcnemar_p(b, c), expected, rtol=1e-10)


def test_mcnemar_and_mid_p_hand_computed() -> None:
    # 3 discordant pairs all one way: p = 2 * (1/2)^3 = 0.25; mid-p removes P(X=0) = 1/8
    assert float(mcnemar_p(3, 0)) == pytest.approx(0.25)
    assert float(mcnemar_p(3, 0, mid=True)) == pytest.approx(0.125)
    # 5 vs 0: exact 2/32, mid-p 1/32 — below 0.05 only with the mid-p
    assert float(mcnemar_p(0, 5)) == pytest.approx(0.0625)
    assert float(mcnemar_p(0, 5, mid=True)) == pytest.approx(0.03125)
    # 3 vs 1: exact 2 * 5/16, mid-p 10/16 - 4/16
    assert float(mcnemar_p(3, 1)) == pytest.approx(0.625)
    assert float(mcnemar_p(3, 1, mid=True)) == pytest.approx(0.375)
    # balanced splits: both are 1
    assert float(mcnemar_p(2, 2)) == float(mcnemar_p(2, 2, mid=True)) == pytest.approx(1.0)


@pytest.mark.parametrize(("b", "c"), [(7, 2), (1, 11), (30, 18)])
def test_mid_p_is_exact_p_less_the_observed_split(b: int, c: int) -> None:
    exact = binomtest(min(b, c), b + c, 0.5).pvalue
    assert float(mcnemar_p(b, c, mid=True)) == pytest.approx(exact - binom.pmf(min(b, c), b + c, 0.5))


# --- bootstrap -----------------------------------------------------------------------------------


def test_item_bootstrap_matches_scipy_percentile_ci() -> None:
    rng = np.random.default_rng(1)
    base = rng.random(3000) < 0.5
    cand = np.where(rng.random(3000) < 0.25, ~base, base)
    paired = PairedItems(base, cand, np.zeros(3000))
    star = bootstrap_accuracies(paired, 20_000, np.random.default_rng(3))
    assert (star.method, star.clusters) == (ITEM_BOOTSTRAP, 1)
    low, high = np.percentile(star.cand - star.base, [2.5, 97.5])
    diffs = cand.astype(float) - base
    ref = bootstrap((diffs,), np.mean, n_resamples=20_000, method="percentile", rng=np.random.default_rng(4))
    assert low == pytest.approx(ref.confidence_interval.low, abs=0.002)
    assert high == pytest.approx(ref.confidence_interval.high, abs=0.002)


def test_cluster_bootstrap_matches_scipy_over_subjects_with_the_small_sample_stretch() -> None:
    rng = np.random.default_rng(2)
    subjects = np.repeat(np.arange(20), rng.integers(5, 40, 20))
    level = rng.normal(0, 0.3, 20)[subjects]
    base = rng.random(len(subjects)) < 0.5
    cand = np.where(rng.random(len(subjects)) < 0.3 + level.clip(-0.3, 0.3), ~base, base)
    star = bootstrap_accuracies(PairedItems(base, cand, subjects), 20_000, rng)
    assert (star.method, star.clusters) == (CLUSTER_BOOTSTRAP, 20)
    low, high = np.percentile(star.cand - star.base, [2.5, 97.5])
    # reference: scipy resamples (difference sum, item count) per subject, statistic = ratio of sums
    sums = np.bincount(subjects, weights=cand.astype(float) - base)
    counts = np.bincount(subjects).astype(float)
    ref = bootstrap(
        (sums, counts),
        lambda s, n, axis=-1: s.sum(axis) / n.sum(axis),
        paired=True,
        n_resamples=20_000,
        method="percentile",
        rng=np.random.default_rng(5),
    ).confidence_interval
    delta, stretch = sums.sum() / counts.sum(), small_sample_stretch(20)
    assert low == pytest.approx(delta + stretch * (ref.low - delta), abs=0.004)
    assert high == pytest.approx(delta + stretch * (ref.high - delta), abs=0.004)


def test_stretch_is_the_small_sample_factor() -> None:
    assert small_sample_stretch(45) == pytest.approx(math.sqrt(45 / 44) * 2.015368 / 1.959964, rel=1e-5)
    assert small_sample_stretch(1_000_000) == pytest.approx(1.0, abs=1e-5)


def test_cluster_bootstrap_is_wider_when_subjects_differ() -> None:
    rng = np.random.default_rng(2)
    subjects = np.repeat(np.arange(20), 50)
    loss = rng.normal(0, 0.3, size=20).clip(-0.5, 0.5)[subjects]  # each subject its own loss level
    base = np.ones(1000, dtype=bool)
    cand = rng.random(1000) >= 0.3 + loss
    item_star = bootstrap_accuracies(PairedItems(base, cand, np.zeros(1000)), 5000, np.random.default_rng(0))
    clu_star = bootstrap_accuracies(PairedItems(base, cand, subjects), 5000, np.random.default_rng(0))
    assert np.std(clu_star.cand - clu_star.base) > 2 * np.std(item_star.cand - item_star.base)


def test_few_subjects_never_give_a_narrower_interval_than_the_items() -> None:
    """The issue's case: 1,200 items in 9 subjects, 4% flips each way, no effect by construction."""
    rng = np.random.default_rng(11)
    subjects = np.repeat(np.arange(9), 1200 // 9 + 1)[:1200]
    narrowed = 0
    for draw in range(40):
        base = rng.random(1200) < 0.5
        flip = rng.random(1200) < 0.08
        cand = np.where(flip, ~base, base)
        paired = PairedItems(base, cand, subjects)
        star = bootstrap_accuracies(paired, 4000, np.random.default_rng(draw))
        items = bootstrap_accuracies(PairedItems(base, cand, np.zeros(1200)), 4000, np.random.default_rng(99))
        item_low, item_high = np.percentile(items.cand - items.base, [2.5, 97.5])
        low, high = np.percentile(star.cand - star.base, [2.5, 97.5])
        assert high - low >= 0.95 * (item_high - item_low)  # the floor, up to resampling noise
        narrowed += star.method == ITEM_FLOOR
        assert star.clusters == 9 and star.method in (ITEM_FLOOR, CLUSTER_BOOTSTRAP)
    assert 5 <= narrowed <= 35  # without correlation the two spreads are alike: either can be narrower


def test_same_seed_same_numbers() -> None:
    base, cand = flips(400, 30, 20, 200)
    assert compare("a", "b", base, cand) == compare("a", "b", base, cand)


# --- the comparison record -----------------------------------------------------------------------


def test_compare_counts_delta_recovery_by_hand() -> None:
    base = make_items([True, True, False, False, True])
    cand = make_items([True, False, True, False, False])
    result = compare("bf16", "awq", base, cand, resamples=2000)
    assert (result.flips_c2w, result.flips_w2c) == (2, 1)
    assert (result.acc_base, result.acc_cand, result.delta) == pytest.approx((0.6, 0.4, -0.2))
    assert result.flip_rate == pytest.approx(0.6)
    assert result.recovery == pytest.approx(0.4 / 0.6)
    assert result.ci_low <= result.delta <= result.ci_high
    assert result.recovery_ci_low <= result.recovery <= result.recovery_ci_high  # type: ignore[operator]
    assert result.mcnemar_p == pytest.approx(1.0)
    assert result.mcnemar_midp == pytest.approx(2 * 4 / 8 - 3 / 8)  # 2·P(X≤1) − P(X=1), X ~ Bin(3, ½)
    assert result.p_holm == result.mcnemar_p


def test_identical_checkpoints_show_no_loss() -> None:
    base = make_items([True, False] * 150, subjects=[f"s{i % 30}" for i in range(300)])
    result = compare("bf16", "bf16", base, base)
    assert (result.delta, result.ci_low, result.ci_high) == pytest.approx((0.0, -1 / 600, 1 / 600))
    assert result.mean_kl == 0 and result.top_agreement == 1 and result.recovery == 1
    assert result.verdict == NO_LOSS


def test_kl_and_top_agreement_hand_values() -> None:
    lp = [[math.log(0.5), math.log(0.5), -50.0, -50.0], [math.log(0.7), math.log(0.3), -50.0, -50.0]]
    other = [[math.log(0.9), math.log(0.1), -50.0, -50.0], [math.log(0.2), math.log(0.8), -50.0, -50.0]]
    result = compare(
        "a", "b", make_items([True, True], logprobs=lp), make_items([True, False], logprobs=other)
    )
    kl_first = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    kl_second = 0.7 * math.log(0.7 / 0.2) + 0.3 * math.log(0.3 / 0.8)
    assert result.mean_kl == pytest.approx((kl_first + kl_second) / 2, rel=1e-6)
    assert result.top_agreement == pytest.approx(0.5)  # item 1: both say A (tie → first); item 2: A vs B


def test_kl_needs_log_probs_with_the_same_choices(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    rows = [{"task": "t", "item_id": "1", "correct": True, "choice_logprobs": [-1.0, -2.0]}]
    rows.append({"task": "t", "item_id": "2", "correct": False, "choice_logprobs": [-1.0, -2.0, -3.0]})
    path.write_text("\n".join(json.dumps(row) for row in rows))
    ragged = read_items(path)["t"]
    assert compare("a", "b", ragged, ragged).mean_kl == pytest.approx(0.0)  # padded, same widths
    bare = [item.model_copy(update={"choice_logprobs": None}) for item in ragged]
    assert compare("a", "b", ragged, bare).mean_kl is None


# --- MDE, verdicts, Holm -------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "discordance"), [(300, 0.1), (1000, 0.2), (35_000, 0.05)])
def test_mde_solves_connors_sample_size_formula(n: int, discordance: float) -> None:
    mde = minimum_detectable_effect(n, discordance)
    z_a, z_b = norm.ppf(0.975), norm.ppf(0.8)
    needed = (z_a * math.sqrt(discordance) + z_b * math.sqrt(discordance - mde**2)) ** 2 / mde**2
    assert needed == pytest.approx(n, rel=1e-9)


def test_mde_gives_80_percent_power_in_simulation() -> None:
    n, discordance = 1000, 0.2
    mde = minimum_detectable_effect(n, discordance)
    draws = np.random.default_rng(7).multinomial(n, [(0.2 + mde) / 2, (0.2 - mde) / 2, 0.8], size=40_000)
    b, c = draws[:, 0], draws[:, 1]
    z_test = np.mean((b - c) / np.sqrt(b + c) > norm.ppf(0.975))  # the test the formula is for
    exact = np.mean((mcnemar_p(b, c) < 0.05) & (b > c))
    assert z_test == pytest.approx(0.80, abs=0.015)
    assert 0.74 < exact <= z_test  # the exact test is a little conservative


def test_mde_without_flips_is_the_all_one_way_floor() -> None:
    n = 1000
    z_a, z_b = norm.ppf(0.975), norm.ppf(0.8)
    floor = ((z_a * math.sqrt(n) + z_b * math.sqrt(n + z_b**2 - z_a**2)) / (n + z_b**2)) ** 2
    assert minimum_detectable_effect(n, 0.0) == pytest.approx(floor)
    assert floor == pytest.approx((z_a + z_b) ** 2 / n, rel=0.01)
    assert minimum_detectable_effect(2, 0.5) == 1.0


def test_verdicts_on_clear_cases() -> None:
    loss = compare("a", "b", *flips(200, 30, 0, 100))
    assert loss.verdict == SIGNIFICANT_LOSS and loss.ci_high < 0 and loss.mcnemar_p < 1e-8
    fine = compare("a", "b", *flips(5000, 10, 10, 2500))
    assert fine.verdict == NO_LOSS and fine.ci_low > -0.01 and fine.noninf_p < 0.025
    small = compare("a", "b", *flips(50, 5, 4, 20))
    assert small.verdict == f"inconclusive — n too small (MDE {100 * small.mde:.1f} points)"
    assert small.mde > 0.1 and small.noninf_p > 0.025


def test_a_wider_margin_turns_inconclusive_into_no_loss() -> None:
    base, cand = flips(1000, 40, 35, 500)
    assert compare("a", "b", base, cand).verdict.startswith("inconclusive")
    assert compare("a", "b", base, cand, margin=0.05).verdict == NO_LOSS


def test_holm_matches_statsmodels() -> None:
    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 12):
        p = rng.random(size) ** 3
        p[::3] = p[0]  # ties
        np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1], rtol=1e-12)


def test_holm_across_tasks_can_withdraw_a_significant_loss() -> None:
    ko_base, ko_cand = flips(100, 10, 2, 50, task="kmmlu_hard")
    en_base, en_cand = flips(100, 10, 2, 50, task="mmlu")
    alone = compare("a", "b", ko_base, ko_cand)
    assert alone.verdict == SIGNIFICANT_LOSS and alone.mcnemar_p == pytest.approx(2 * 79 / 4096)
    both = compare_tasks(
        "a", "b", {"kmmlu_hard": ko_base, "mmlu": en_base}, {"kmmlu_hard": ko_cand, "mmlu": en_cand}
    )
    assert both["kmmlu_hard"].p_holm == pytest.approx(2 * alone.mcnemar_p)
    assert both["kmmlu_hard"].verdict != SIGNIFICANT_LOSS


# --- Korean-vs-English gap -----------------------------------------------------------------------


def test_ko_en_gap_matches_scipy_two_sample_bootstrap() -> None:
    rng = np.random.default_rng(4)

    def task(name: str, n: int, c2w: float, w2c: float) -> tuple[list, list, np.ndarray]:
        base = rng.random(n) < 0.5
        u = rng.random(n)
        cand = np.where(base, u >= c2w, u < w2c)
        return make_items(list(base), task=name), make_items(list(cand), task=name), cand.astype(float) - base

    ko_base, ko_cand, ko_diffs = task("kmmlu_hard", 3000, 0.12, 0.06)
    en_base, en_cand, en_diffs = task("mmlu", 2000, 0.08, 0.08)
    result = compare_tasks(
        "a", "b", {"kmmlu_hard": ko_base, "mmlu": en_base}, {"kmmlu_hard": ko_cand, "mmlu": en_cand}
    )
    ko, en = result["kmmlu_hard"], result["mmlu"]
    assert ko.english_task == "mmlu" and en.ko_en_gap is None
    assert ko.ko_en_gap == pytest.approx(ko.delta - en.delta)
    ref = bootstrap(
        (ko_diffs, en_diffs),
        lambda x, y, axis=-1: x.mean(axis) - y.mean(axis),
        n_resamples=20_000,
        method="percentile",
        rng=np.random.default_rng(5),
    ).confidence_interval
    assert ko.ko_en_gap_ci_low == pytest.approx(ref.low, abs=0.003)
    assert ko.ko_en_gap_ci_high == pytest.approx(ref.high, abs=0.003)


def test_the_delta_ci_is_the_estimate_plus_minus_z_replicate_sds_with_method_and_clusters(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(8)
    subjects = [f"s{i % 9}" for i in range(900)]
    base_ok = (rng.random(900) < 0.5).tolist()
    cand_ok = [ok if rng.random() > 0.1 + 0.1 * (i % 9 == 0) else not ok for i, ok in enumerate(base_ok)]
    base, cand = make_items(base_ok, subjects), make_items(cand_ok, subjects)
    result = compare("a", "b", base, cand)
    # direct: the same stream (seed, crc32 of the task), then estimate ± z·SD of the stretched replicates
    paired = PairedItems(np.array(base_ok), np.array(cand_ok), np.array(subjects))
    star = bootstrap_accuracies(paired, BOOTSTRAP_RESAMPLES, np.random.default_rng([SEED, zlib.crc32(b"t")]))
    half, step = norm.ppf(0.975) * np.std(star.cand - star.base), 0.5 / 900
    assert result.ci_low == pytest.approx(result.delta - half - step, abs=1e-9)
    assert result.ci_high == pytest.approx(result.delta + half + step, abs=1e-9)
    assert (result.ci_method, result.clusters) == (star.method, 9)
    for name, items in (("base", base), ("cand", cand)):
        lines = [item.model_dump_json() for item in items]
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    paths = [str(tmp_path / "base.jsonl"), str(tmp_path / "cand.jsonl")]
    shown = CliRunner().invoke(main, ["compare", *paths, "--json"])
    assert shown.exit_code == 0, shown.output
    recorded = json.loads(shown.stdout)["t"]
    assert (recorded["ci_method"], recorded["clusters"]) == (star.method, 9)


def test_kl_and_top_choice_cis_over_items_are_the_normal_interval_of_the_item_values() -> None:
    rng = np.random.default_rng(12)
    base_lp, cand_lp = rng.normal(-2, 1, (400, 4)), rng.normal(-2, 1, (400, 4))
    cand_lp[:200] = base_lp[:200]  # half the items unmoved: KL 0, same top choice
    correct = (rng.random(400) < 0.5).tolist()
    base, cand = (
        make_items(correct, logprobs=base_lp.tolist()),
        make_items(correct, logprobs=cand_lp.tolist()),
    )
    result = compare("a", "b", base, cand)
    kl, kept = choice_agreement(base_lp, cand_lp)
    intervals = {
        "kl": (result.kl_ci_low, result.kl_ci_high),
        "kept": (result.top_agreement_ci_low, result.top_agreement_ci_high),
    }
    for values, (low, high) in zip((kl, kept), intervals.values(), strict=True):
        half = norm.ppf(0.975) * np.std(values, ddof=1) / np.sqrt(400)
        assert (low, high) == pytest.approx((values.mean() - half, values.mean() + half), abs=1e-12)
    assert result.mean_kl == pytest.approx(kl.mean()) and 0.5 <= result.top_agreement < 1


def test_kl_ci_over_subjects_matches_scipy_with_the_stretch_and_is_never_narrower_than_items() -> None:
    rng = np.random.default_rng(13)
    subjects = np.repeat(np.arange(12), 40)
    spread = np.linspace(0.0, 2.0, 12)[subjects][:, None]  # each subject its own amount of movement
    base_lp = rng.normal(-2, 1, (480, 4))
    cand_lp = base_lp + spread * rng.normal(0, 1, (480, 4))
    base_ok = rng.random(480) < 0.5
    cand_ok = np.where(rng.random(480) < 0.1 + 0.3 * (subjects < 3), ~base_ok, base_ok)  # subjects differ
    paired = PairedItems(base_ok, cand_ok, subjects.astype(str), base_lp, cand_lp)
    replicates = bootstrap_accuracies(paired, BOOTSTRAP_RESAMPLES, np.random.default_rng(1))
    assert replicates.method == CLUSTER_BOOTSTRAP
    kl, _ = choice_agreement(base_lp, cand_lp)
    low, high = mean_ci(kl, paired, replicates, 20_000, np.random.default_rng(2))
    sums, counts = np.bincount(subjects, weights=kl), np.bincount(subjects).astype(float)
    ref = bootstrap(
        (sums, counts),
        lambda s, n, axis=-1: s.sum(axis) / n.sum(axis),
        paired=True,
        n_resamples=20_000,
        method="percentile",
        rng=np.random.default_rng(5),
    ).confidence_interval
    mean, stretch = kl.mean(), small_sample_stretch(12)
    assert low == pytest.approx(mean + stretch * (ref.low - mean), rel=0.03)
    assert high == pytest.approx(mean + stretch * (ref.high - mean), rel=0.03)
    half = norm.ppf(0.975) * np.std(kl, ddof=1) / np.sqrt(480)
    assert low <= mean - half and high >= mean + half
