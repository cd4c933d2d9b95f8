"""A leaderboard row's cells from the typed parts of a `CheckpointResult` that their stages found:
averages, choices, CircularEval, perplexity, ko_rag and placement (`leaderboard.build_row` adds the
rest). The column names live here and in `leaderboard_row.py`, nowhere else."""

from __future__ import annotations

from evals.planning.placement import Placement
from evals.reporting.rag_columns import READING
from evals.reporting.rag_columns import column_prefix as rag_prefix
from evals.statistics.averages import Estimate, TaskSummary
from evals.statistics.circular import CircularScores
from evals.statistics.perplexity_stats import PerplexityFindings
from evals.statistics.rag_findings import ClosedBookScores, OpenBookScores, RagFindings
from evals.tasks.registry import column_prefix
from kqe.core.defaults import PARALLEL_TEXT_SETS, RAG_LENGTHS
from kqe.core.results import ChoiceProfile, Comparison

Cells = dict[str, object]


def _estimate(column: str, estimate: Estimate, low: str = "_ci_low", high: str = "_ci_high") -> Cells:
    return {column: estimate.value, f"{column}{low}": estimate.ci_low, f"{column}{high}": estimate.ci_high}


def averages_cells(averages: dict[str, TaskSummary]) -> Cells:
    """Per task: its source label, micro and macro CIs, supercategories and macro Δ (`kmmlu_macro…`)."""
    cells: Cells = {}
    for task, summary in averages.items():
        prefix = column_prefix(task)
        cells[f"{prefix}_source"] = summary.source
        found = summary.averages
        if found is None:
            continue
        micro = _estimate(f"{prefix}_acc", found.micro)
        cells |= {column: value for column, value in micro.items() if column != f"{prefix}_acc"}
        cells |= _estimate(f"{prefix}_macro", found.macro)
        for category, estimate in found.categories.items():
            cells |= _estimate(f"{prefix}_{category}", estimate)
        if summary.macro_delta is not None:
            cells |= _estimate(f"{prefix}_macro_delta", summary.macro_delta)
    return cells


def choice_cells(prefix: str, profile: ChoiceProfile | None, comparison: Comparison | None) -> dict:
    """The task's top choice and its share, and the letter-debiased accuracy with its Δ and CI."""
    cells: dict = {}
    if profile is not None:
        cells |= {
            f"{prefix}_top_choice": profile.top_choice,
            f"{prefix}_top_choice_share": profile.top_share,
            f"{prefix}_acc_debiased": profile.acc_debiased,
        }
    if comparison is not None:
        cells |= {
            f"{prefix}_acc_debiased_delta": comparison.delta_debiased,
            f"{prefix}_acc_debiased_ci_low": comparison.delta_debiased_ci_low,
            f"{prefix}_acc_debiased_ci_high": comparison.delta_debiased_ci_high,
        }
    return cells


def circular_cells(prefix: str, scores: CircularScores | None) -> Cells:
    """The task's CircularEval columns (`--circular`); none without it, so they stay out of the CSV."""
    if scores is None:
        return {}
    return {
        f"{prefix}_circular_items": scores.items,
        f"{prefix}_acc_circular": scores.acc,
        f"{prefix}_acc_circular_plain": scores.acc_plain,
        f"{prefix}_acc_circular_delta": scores.delta,
        f"{prefix}_acc_circular_ci_low": scores.ci_low,
        f"{prefix}_acc_circular_ci_high": scores.ci_high,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


PPL_TEXT_SETS = ("ko", "en", "lo_ko", "lo_en")
"""Held-out text sets with perplexity columns of their own (`ppl_<set>`, its Δ, CI and verdict)."""


def perplexity_cells(found: PerplexityFindings) -> Cells:
    """The `# perplexity columns`: per text set the perplexity and its Δ% against the base with CI and
    verdict, the Korean calibration effect and each parallel pair's KO−EN gap."""
    cells: Cells = {}
    for text_set in PPL_TEXT_SETS:
        c = found.vs_base.get(text_set)
        measured = found.measured.perplexity.get(text_set) if found.measured is not None else None
        cells |= {
            f"ppl_{text_set}": measured,
            f"ppl_{text_set}_delta_pct": found.delta_pct.get(text_set),
            f"ppl_{text_set}_delta_pct_ci_low": None if c is None else round(c.ci_low_pct, 3),
            f"ppl_{text_set}_delta_pct_ci_high": None if c is None else round(c.ci_high_pct, 3),
            f"ppl_{text_set}_verdict": None if c is None else c.verdict,
        }
    effect = found.vs_control.get("ko")
    cells |= {
        "ppl_ko_calib_effect_pct": _rounded(effect.delta_pct if effect else None),
        "ppl_ko_calib_effect_ci_low": _rounded(effect.ci_low_pct if effect else None),
        "ppl_ko_calib_effect_ci_high": _rounded(effect.ci_high_pct if effect else None),
    }
    for name in PARALLEL_TEXT_SETS:
        gap = found.gaps.get(name)
        cells |= {
            f"ppl_{name}_gap_pct": _rounded(gap.gap_pct if gap else None),
            f"ppl_{name}_gap_ci_low": _rounded(gap.ci_low if gap else None),
            f"ppl_{name}_gap_ci_high": _rounded(gap.ci_high if gap else None),
        }
    return cells


def rag_cells(found: RagFindings) -> Cells:
    """The `ko_rag_*` columns (`rag_columns.py` documents each)."""
    cells: Cells = {}
    for (label, length), scores in found.open_book.items():
        cells |= _open_book_cells(rag_prefix(label), length, scores)
    if found.closed_book is not None:
        cells |= _closed_book_cells(found.closed_book)
    for length, scores in found.reading.items():
        cells |= _open_book_cells(READING, length, scores) | {f"{READING}_n_{length}": scores.n}
    cells |= {
        "ko_rag_hangul": found.hangul,
        "ko_rag_abstain": found.abstain,
        "ko_rag_abstain_precision": found.abstain_precision,
        "ko_rag_mc_acc": found.mc_acc,
    }
    cells |= {f"ko_rag_recall_{length}": found.recall.get(length) for length in RAG_LENGTHS}
    cells["ko_rag_skipped"] = "; ".join(f"{label}: {why}" for label, why in found.skipped.items()) or None
    return cells


def _open_book_cells(prefix: str, length: str, scores: OpenBookScores) -> Cells:
    """F1, EM and contains at one length, with their Δ and CI where the row has them."""
    cells: Cells = {
        f"{prefix}_f1_{length}": scores.f1,
        f"{prefix}_em_{length}": scores.em,
        f"{prefix}_contains_{length}": scores.contains,
    }
    if scores.f1_delta is not None:
        cells |= _length_estimate(f"{prefix}_f1", "_delta", length, scores.f1_delta)
    if scores.contains_delta is not None:
        cells |= _length_estimate(f"{prefix}_contains", "_delta", length, scores.contains_delta)
    return cells


def _length_estimate(stem: str, value: str, length: str, estimate: Estimate) -> Cells:
    """`<stem><value>_<length>` and its CI as `<stem>_ci_low_<length>`, `<stem>_ci_high_<length>`."""
    return {
        f"{stem}{value}_{length}": estimate.value,
        f"{stem}_ci_low_{length}": estimate.ci_low,
        f"{stem}_ci_high_{length}": estimate.ci_high,
    }


def _closed_book_cells(closed: ClosedBookScores) -> Cells:
    cells: Cells = {"ko_rag_closed_book_f1": closed.f1, "ko_rag_closed_book_em": closed.em}
    for length, gain in closed.gains.items():
        if gain.gain is not None:
            cells |= _length_estimate("ko_rag_gain", "", length, gain.gain)
        if gain.gain_delta is not None:
            cells |= _length_estimate("ko_rag_gain_delta", "", length, gain.gain_delta)
    return cells


def placement_cells(placement: Placement) -> Cells:
    """The target and scoring-placement columns of a checkpoint (`evals/planning/placement.py`)."""
    plan, score, target = placement.target_plan, placement.score, None
    cells: Cells = {"memory_source": placement.memory_source}
    if plan is not None:
        target = f"{plan.gpu or f'{plan.gpu_gib:g} GiB GPU'} ×{plan.tensor_parallel_size}"
        cells |= {
            "fits_target": plan.fits,
            "target_pattern": plan.pattern,
            "target_shortfall_gib": placement.shortfall_gib,
        }
    if score is not None:
        profile = score.profile
        cells |= {
            "score_device": score.device,
            "score_tensor_parallel_size": profile.tensor_parallel_size,
            "score_cpu_offload_gib": profile.cpu_offload_gib,
            "score_placement": score.why,
        }
    return cells | {"target": target}
