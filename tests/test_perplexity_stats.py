"""Paired perplexity statistics against direct implementations on hand data, scipy's t-test and
sign-flip permutation test and a coverage simulation; the run-wide multiplicity adjustments against
statsmodels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import permutation_test, ttest_1samp
from statsmodels.stats.multitest import multipletests

from evals.reporting.perplexity_report import perplexity_section
from evals.reporting.row_cells import perplexity_cells
from evals.statistics.bootstrap import small_sample_stretch
from evals.statistics.cluster_tests import sign_flip_floor
from evals.statistics.multiplicity import benjamini_hochberg
from evals.statistics.perplexity_stats import (
    DOCUMENTS,
    FEW_DOCUMENTS,
    compare_perplexity,
    pair_windows,
    parallel_gap,
    perplexity_findings,
)
from evals.statistics.stats import NO_LOSS, SIGNIFICANT_LOSS, adjust_run, compare_tasks
from kqe.core.results import ItemResult, Perplexity, RunSummary, WindowNll
from tests.helpers.cli import assert_one_line_error


def record(
    name: str, windows: dict[str, list[tuple[str, int, float]]], window_tokens: int = 512
) -> Perplexity:
    found = {s: [WindowNll(document=d, tokens=t, nll=n) for d, t, n in ws] for s, ws in windows.items()}
    tokens = {s: sum(w.tokens for w in ws) for s, ws in found.items()}
    nll = {s: sum(w.nll for w in ws) for s, ws in found.items()}
    return Perplexity(
        checkpoint=name,
        window_tokens=window_tokens,
        tokens=tokens,
        nll=nll,
        perplexity={s: math.exp(nll[s] / tokens[s]) for s in found},
        text_sha256=dict.fromkeys(found, "t"),
        windows=found,
        wall_s=1.0,
    )


def direct_bootstrap(
    diff: list[float], tokens: list[float], resamples: int, seed: int
) -> tuple[float, float, float]:
    """Textbook paired cluster bootstrap, loop by loop: units drawn with replacement, each replicate's
    Σdiff/Σtokens, deviations stretched by √(K/(K−1))·t/z, a symmetric 95% interval on the log scale,
    then exp: (Δ%, low %, high %)."""
    rng = np.random.default_rng(seed)
    k = len(diff)
    estimate = sum(diff) / sum(tokens)
    replicates = []
    for _ in range(resamples):
        picks = [int(rng.integers(k)) for _ in range(k)]
        replicates.append(sum(diff[i] for i in picks) / sum(tokens[i] for i in picks))
    sd = small_sample_stretch(k) * float(np.std(replicates))
    half = 1.959963984540054 * sd
    delta, low, high = (100 * math.expm1(x) for x in (estimate, estimate - half, estimate + half))
    return delta, low, high


def test_delta_and_its_ci_match_a_direct_document_bootstrap_on_hand_data() -> None:
    # four documents of two windows: the candidate adds 0.02–0.06 nats per token, unevenly
    docs = {"a": (0.02, 0.03), "b": (0.05, 0.04), "c": (0.06, 0.05), "d": (0.01, 0.03)}
    base_w, cand_w = [], []
    for doc, adds in docs.items():
        for add, tokens in zip(adds, (100, 60), strict=True):
            base_w.append((doc, tokens, 3.0 * tokens))
            cand_w.append((doc, tokens, (3.0 + add) * tokens))
    base, cand = record("bf16", {"ko": base_w}), record("fp8", {"ko": cand_w})
    c = compare_perplexity(base, cand, "ko", resamples=20_000)
    assert c is not None and c.ci_method == DOCUMENTS and c.clusters == 4 and c.windows == 8
    diff = [sum(a * t for a, t in zip(adds, (100, 60), strict=True)) for adds in docs.values()]
    delta, low, high = direct_bootstrap(diff, [160.0] * 4, 20_000, seed=7)
    assert c.delta_pct == pytest.approx(delta, rel=1e-12)
    assert c.delta_pct == pytest.approx(100 * (c.ppl_cand / c.ppl_base - 1), rel=1e-9)
    width = high - low
    assert c.ci_low_pct == pytest.approx(low, abs=0.03 * width)  # two Monte Carlo runs of 20k
    assert c.ci_high_pct == pytest.approx(high, abs=0.03 * width)
    # every document rose, and that is all 4 documents can say: the exact test's floor, 2^(1−4)
    assert c.p == sign_flip_floor(4) == 0.125 and c.p_method == "exact sign-flip over 4 documents"
    assert c.ci_low_pct > 0 and c.verdict.startswith("inconclusive"), "p 0.125 is no significant loss"


def _documents(rng: np.random.Generator, count: int, shift: float, tokens: int | None) -> tuple[list, list]:
    base_w, cand_w = [], []
    for d in range(count):
        change = shift + rng.normal(0, 0.01)
        size = tokens or int(rng.integers(50, 500))
        base_w.append((f"s{d}", size, 300.0))
        cand_w.append((f"s{d}", size, 300.0 + change * size))
    return base_w, cand_w


def test_p_over_few_documents_is_scipys_exact_sign_flip_test_of_their_nll_changes() -> None:
    rng = np.random.default_rng(5)
    for shift in (0.0, 0.004, 0.01, 0.02):
        base_w, cand_w = _documents(rng, 8, shift, None)
        c = compare_perplexity(record("b", {"faq_en": base_w}), record("c", {"faq_en": cand_w}), "faq_en")
        assert c is not None and c.p_method == "exact sign-flip over 8 documents"
        totals = np.array([cand[2] - base[2] for base, cand in zip(base_w, cand_w, strict=True)])
        reference = permutation_test(
            (totals,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
        )
        assert c.p == pytest.approx(reference.pvalue, rel=1e-12) and c.p >= sign_flip_floor(8)


def test_p_over_many_documents_is_scipys_one_sample_t_test_of_the_document_changes() -> None:
    rng = np.random.default_rng(6)
    for shift in (0.0, 0.003, 0.01):
        base_w, cand_w = _documents(rng, 20, shift, 200)
        c = compare_perplexity(record("b", {"ko": base_w}), record("c", {"ko": cand_w}), "ko")
        assert c is not None and c.p_method == "t(K−1) over 20 documents"
        per_token = [(cand[2] - base[2]) / 200 for base, cand in zip(base_w, cand_w, strict=True)]
        assert c.p == pytest.approx(ttest_1samp(per_token, 0.0).pvalue, rel=1e-9)


def test_few_documents_resample_windows_and_unpairable_records_give_none() -> None:
    base = record("bf16", {"en": [("X", 100, 300.0), ("X", 100, 310.0), ("XI", 100, 290.0)]})
    same = record("awq", {"en": [("X", 100, 300.2), ("X", 100, 309.9), ("XI", 100, 290.1)]})
    c = compare_perplexity(base, same, "en")
    assert c is not None and c.ci_method == FEW_DOCUMENTS and c.clusters == 2
    assert c.ci_low_pct < 0 < c.ci_high_pct < 1.0 and c.verdict == NO_LOSS
    other = record("awq", {"en": [("X", 100, 300.0), ("X", 90, 300.0), ("XI", 100, 290.0)]})
    assert pair_windows(base, other, "en") is None, "different windows are not paired"
    assert (
        compare_perplexity(
            base,
            record("awq", {"en": [(w.document, w.tokens, w.nll) for w in same.windows["en"]]}, 256),
            "en",
        )
        is None
    )
    assert compare_perplexity(base, same, "ko") is None


def test_the_document_ci_covers_the_truth_in_simulation() -> None:
    """Documents with their own effect (between-document spread) around a true log-ratio: the 95% CI
    must cover it about 95% of the time, with 4 and with 12 documents."""
    rng = np.random.default_rng(11)
    truth = 0.03
    for documents in (4, 12):
        covered, runs = 0, 300
        for _ in range(runs):
            effects = truth + rng.normal(0, 0.02, documents)
            base_w, cand_w = [], []
            for d, effect in enumerate(effects):
                for _ in range(3):
                    noise = rng.normal(0, 0.01)
                    base_w.append((f"d{d}", 200, 3.0 * 200))
                    cand_w.append((f"d{d}", 200, (3.0 + effect + noise) * 200))
            c = compare_perplexity(
                record("b", {"ko": base_w}), record("c", {"ko": cand_w}), "ko", resamples=2000
            )
            assert c is not None
            covered += c.ci_low_pct <= 100 * math.expm1(truth) <= c.ci_high_pct
        assert covered / runs >= 0.92, (documents, covered / runs)


def test_the_parallel_gap_pairs_sections_across_languages() -> None:
    sections = ["preamble", "13.1", "13.2", "14.1", "14.2"]
    ko_add = [0.10, 0.12, 0.08, 0.11, 0.09]  # Korean loses ~10% nats, English ~2%
    en_add = [0.02, 0.03, 0.01, 0.02, 0.02]
    windows_b = {
        "faq_ko": [(s, 100, 400.0) for s in sections],
        "faq_en": [(s, 80, 240.0) for s in sections],
    }
    windows_c = {
        "faq_ko": [(s, 100, 400.0 + 100 * a) for s, a in zip(sections, ko_add, strict=True)],
        "faq_en": [(s, 80, 240.0 + 80 * a) for s, a in zip(sections, en_add, strict=True)],
    }
    gap = parallel_gap(record("bf16", windows_b), record("awq", windows_c), "faq_ko", "faq_en")
    assert gap is not None and gap.documents == sorted(sections)
    assert gap.delta_ko_pct == pytest.approx(100 * math.expm1(np.mean(ko_add)), rel=1e-9)
    assert gap.delta_en_pct == pytest.approx(100 * math.expm1(np.mean(en_add)), rel=1e-9)
    assert gap.gap_pct == pytest.approx(gap.delta_ko_pct - gap.delta_en_pct)
    assert 0 < gap.ci_low < gap.gap_pct < gap.ci_high
    shuffled = {**windows_c, "faq_en": [("other", 80, 240.0)] * 5}
    assert parallel_gap(record("bf16", windows_b), record("awq", shuffled), "faq_ko", "faq_en") is None


def test_findings_fill_the_leaderboard_cells_and_leave_the_base_row_empty() -> None:
    docs = [(f"b{i}", 100, 300.0) for i in range(16)]  # more than 12: the t(15) test can go below 0.05
    base = record("bf16", {"ko": docs, "en": docs})
    cand = record("awq", {"ko": [(d, t, n + 20 + i % 3) for i, (d, t, n) in enumerate(docs)], "en": docs})
    control = record("awq-en", {"ko": [(d, t, n + 25 + i) for i, (d, t, n) in enumerate(docs)], "en": docs})
    cells = perplexity_cells(found := perplexity_findings(cand, base, control))
    assert cells["ppl_ko_verdict"] == SIGNIFICANT_LOSS and cells["ppl_en_verdict"] == NO_LOSS
    assert cells["ppl_ko_calib_effect_pct"] < 0 < cells["ppl_ko_delta_pct_ci_low"]
    assert cells["ppl_faq_gap_pct"] is None and cells["ppl_lo_gap_pct"] is None and found.gaps == {}
    assert [(c.base, c.text_set) for c in found.comparisons] == [
        ("bf16", "ko"),
        ("bf16", "en"),
        ("awq-en", "ko"),
        ("awq-en", "en"),
    ]
    on_base = perplexity_findings(base, base, None)
    empty = {
        name: value for name, value in perplexity_cells(on_base).items() if name not in ("ppl_ko", "ppl_en")
    }
    assert on_base.comparisons == [] and set(empty.values()) == {None}


def test_each_parallel_pair_has_its_own_gap_and_columns() -> None:
    pages = [f"shared.p{i}" for i in range(40)]
    sections = ["13.1", "13.2", "14.1"]
    base = record(
        "bf16",
        {
            "lo_ko": [(p, 200, 600.0) for p in pages],
            "lo_en": [(p, 160, 400.0) for p in pages],
            "faq_ko": [(s, 100, 300.0) for s in sections],
            "faq_en": [(s, 80, 200.0) for s in sections],
        },
    )
    cand = record(
        "awq",
        {
            "lo_ko": [(p, 200, 600.0 + 30 + i % 5) for i, p in enumerate(pages)],  # Korean loses ~0.16 nats
            "lo_en": [(p, 160, 400.0 + 8 + i % 3) for i, p in enumerate(pages)],
            "faq_ko": [(s, 100, 300.0 + 5) for s in sections],
            "faq_en": [(s, 80, 200.0 + 5) for s in sections],
        },
    )
    found = perplexity_findings(cand, base, None)
    assert sorted(found.gaps) == ["faq", "lo"]
    lo = found.gaps["lo"]
    assert (lo.korean, lo.english, len(lo.documents)) == ("lo_ko", "lo_en", 40)
    assert 0 < lo.ci_low < lo.gap_pct < lo.ci_high and lo.gap_pct > found.gaps["faq"].gap_pct
    cells = perplexity_cells(found)
    assert cells["ppl_lo_gap_pct"] == round(lo.gap_pct, 3)
    assert cells["ppl_lo_ko_verdict"] == SIGNIFICANT_LOSS and cells["ppl_lo_ko_delta_pct"] > 0
    assert cells["ppl_lo_en_delta_pct_ci_low"] is not None and cells["ppl_ko"] is None
    run = RunSummary.model_construct(
        perplexity_comparisons=found.comparisons, perplexity_gaps=[*found.gaps.values()]
    )
    text = "\n".join(perplexity_section(run, "bf16"))
    assert "- awq: Korean perplexity on the help pages +" in text and "LibreOffice help pages, Korean" in text
    assert f"| awq | LibreOffice help, by page | {lo.delta_ko_pct:+.1f}% |" in text and "| 40 |" in text
    assert "| awq | Debian FAQ ch. 13–14, by section |" in text


def test_benjamini_hochberg_matches_statsmodels() -> None:
    rng = np.random.default_rng(2)
    for size in (1, 2, 7, 24):
        p = rng.random(size) ** 3
        p[::4] = p[0]  # ties
        np.testing.assert_allclose(benjamini_hochberg(p), multipletests(p, method="fdr_bh")[1], rtol=1e-12)


def _items(task: str, n: int, wrong: set[int]) -> list[ItemResult]:
    return [
        ItemResult(
            task=task,
            subject="s",
            item_id=f"{task}-{i}",
            gold=0,
            pred=int(i in wrong),
            correct=i not in wrong,
            choice_logprobs=[],
            prompt_sha="x",
        )
        for i in range(n)
    ]


def test_run_wide_holm_and_bh_adjust_across_checkpoints_and_tasks() -> None:
    base = {t: _items(t, 200, set(range(100, 140))) for t in ("kmmlu", "mmlu")}
    cands = {
        "awq": {
            "kmmlu": _items("kmmlu", 200, set(range(0, 14)) | set(range(100, 140))),
            "mmlu": _items("mmlu", 200, set(range(100, 140))),
        },
        "rtn": {
            "kmmlu": _items("kmmlu", 200, set(range(0, 9)) | set(range(101, 140))),
            "mmlu": _items("mmlu", 200, set(range(0, 2)) | set(range(100, 140))),
        },
    }
    per = {name: compare_tasks("bf16", name, base, items) for name, items in cands.items()}
    raw = [per[n][t].mcnemar_p for n in per for t in per[n]]
    for method, reference in (("holm", "holm"), ("bh", "fdr_bh")):
        adjusted = adjust_run(per, method)
        got = [adjusted[n][t].p_holm for n in per for t in per[n]]
        np.testing.assert_allclose(got, multipletests(raw, method=reference)[1], rtol=1e-12)
    assert adjust_run(per, "holm-per-checkpoint") == per
    # rtn's 9 c→w / 1 w→c (p 0.021): significant within its own two tasks, not across the run's four
    assert per["rtn"]["kmmlu"].verdict == SIGNIFICANT_LOSS
    assert adjust_run(per, "holm")["rtn"]["kmmlu"].verdict != SIGNIFICANT_LOSS


def test_the_report_says_in_words_whether_each_change_is_told_from_zero() -> None:
    docs = [(f"b{i}", 100, 300.0) for i in range(4)]
    base = record("bf16", {"ko": docs})
    fp8 = record("fp8", {"ko": [(d, t, n + 10 + i) for i, (d, t, n) in enumerate(docs)]})
    ko70 = record("awq-ko70", {"ko": [(d, t, n + 40 + (-1) ** i) for i, (d, t, n) in enumerate(docs)]})
    en100 = record("awq-en100", {"ko": [(d, t, n + 40) for d, t, n in docs]})
    found = [perplexity_findings(fp8, base, None), perplexity_findings(ko70, base, en100)]
    run = RunSummary.model_construct(
        perplexity_comparisons=[c for f in found for c in f.comparisons], perplexity_gaps=[]
    )
    text = "\n".join(perplexity_section(run, "bf16"))
    assert "- fp8: Korean perplexity +" in text and "against bf16, a real change: the CI excludes 0" in text
    assert "- awq-ko70: Korean calibration moved Korean perplexity by +0.0% [" in text
    assert "against awq-en100, not distinguishable from 0: the CI holds it" in text
    assert "No paired perplexity" in perplexity_section(None, "bf16")[0]


def test_multiplicity_and_the_perplexity_margin_are_options_the_reproduce_command_keeps() -> None:
    from click.testing import CliRunner

    from kqe.cli import main
    from kqe.core.eval_config import EvalConfig

    command = EvalConfig(multiplicity="bh", ppl_margin_pct=2.0).command()
    assert "--multiplicity bh --ppl-margin 2" in command
    assert "--multiplicity" not in EvalConfig().command(), "defaults keep the command as it was"
    wrong = CliRunner().invoke(main, ["eval", "--multiplicity", "bonferroni", "--dry-run"])
    assert_one_line_error(wrong, "holm-per-checkpoint")
    negative = CliRunner().invoke(main, ["eval", "--ppl-margin", "-1", "--dry-run"])
    assert_one_line_error(negative, "--ppl-margin")
