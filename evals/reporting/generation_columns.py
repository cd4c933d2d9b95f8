"""The generation columns: divergence from the base and Korean fidelity of every generative task's
outputs (`lmeval_*` for an lm-eval generation task, `ko_rag_*` for ko_rag's answers), and an lm-eval
task's continuous metric, filled from `evals/statistics/generation_findings.py`.

Each prefix's columns are one group (`ColumnDoc.prefix`): a CSV has them only when some row scored a
generative task of that prefix, so runs without generation keep the leaderboards they had."""

from __future__ import annotations

from evals.reporting.task_columns import ColumnDoc
from evals.statistics.generation_findings import Fidelity, GenerationFindings, PairedEstimate
from evals.tasks.ko_rag.sweep import TASK as RAG_TASK
from evals.tasks.registry import LM_EVAL_COLUMNS, is_lm_eval_task

GENERATIVE_PREFIXES = {LM_EVAL_COLUMNS: "the lm-eval generation task", "ko_rag": "ko_rag (every condition)"}
"""Column prefix of a generative task → what the column docs call its outputs' task."""
CI = "95% CI (subjects resampled; ko_rag: gold passages)"

Cells = dict[str, object]


def generation_prefix(task: str) -> str | None:
    """The column prefix of a generative task's columns; None for a task that does not generate."""
    if task == RAG_TASK:
        return "ko_rag"
    return LM_EVAL_COLUMNS if is_lm_eval_task(task) else None


def _with_ci(group: str, column: str, kind: type, meaning: str) -> dict[str, ColumnDoc]:
    return {
        column: ColumnDoc(group, kind, meaning),
        f"{column}_ci_low": ColumnDoc(group, float, f"Lower end of the {CI} of {column}."),
        f"{column}_ci_high": ColumnDoc(group, float, "Upper end of that CI."),
    }


def _group(prefix: str, task: str) -> dict[str, ColumnDoc]:
    group = f"{prefix}_generation"
    columns = {
        f"{prefix}_gen_items": ColumnDoc(group, int, f"Items of {task} both it and the base generated for.")
    }
    columns |= _with_ci(
        group,
        f"{prefix}_same_as_base",
        float,
        f"Share of {task}'s greedy outputs identical to the base's on the same prompt, fraction.",
    )
    columns |= _with_ci(
        group,
        f"{prefix}_chrf_vs_base",
        float,
        f"Mean sentence chrF (0–100) of {task}'s outputs with the base's output as the reference.",
    )
    columns[f"{prefix}_first_diff_tokens"] = ColumnDoc(
        group,
        float,
        f"Median token position where {task}'s output first differs from the base's (differing items).",
    )
    columns |= _with_ci(
        group, f"{prefix}_hangul_share", float, f"Mean Hangul share of the letters of {task}'s outputs."
    )
    columns |= _with_ci(
        group,
        f"{prefix}_hangul_share_delta",
        float,
        f"{prefix}_hangul_share minus the base's on the same items; empty on the base row.",
    )
    columns |= _with_ci(
        group,
        f"{prefix}_code_switch_rate",
        float,
        f"Share of {task}'s outputs with Latin, Han or Kana runs their prompt does not hold, fraction.",
    )
    columns |= _with_ci(
        group,
        f"{prefix}_code_switch_delta",
        float,
        f"{prefix}_code_switch_rate minus the base's on the same items; empty on the base row.",
    )
    return columns


def _continuous(prefix: str) -> dict[str, ColumnDoc]:
    group = f"{prefix}_generation"
    return {
        f"{prefix}_score_metric": ColumnDoc(
            group, str, "The lm-eval task's first continuous metric (`metric,filter`: chrf, bleu, f1…)."
        ),
        f"{prefix}_score": ColumnDoc(
            group, float, f"Mean per-item {prefix}_score_metric of this checkpoint."
        ),
        **_with_ci(
            group,
            f"{prefix}_score_delta",
            float,
            f"{prefix}_score minus the base's on the same items (paired); empty on the base row.",
        ),
        f"{prefix}_score_verdict": ColumnDoc(
            group,
            str,
            f"Verdict on {prefix}_score_delta: significant loss, no loss within margin, or inconclusive.",
        ),
    }


GENERATION_COLUMNS = {
    name: doc
    for prefix, task in GENERATIVE_PREFIXES.items()
    for name, doc in (
        _group(prefix, task) | (_continuous(prefix) if prefix == LM_EVAL_COLUMNS else {})
    ).items()
}
"""Every generation column: name → its group, type and docs."""


def _estimate(column: str, estimate: PairedEstimate | None) -> Cells:
    if estimate is None:
        return {}
    return {
        column: estimate.value,
        f"{column}_ci_low": estimate.ci_low,
        f"{column}_ci_high": estimate.ci_high,
    }


def _fidelity(column: str, found: Fidelity | None, delta: str) -> Cells:
    if found is None:
        return {}
    return _estimate(column, found.level) | _estimate(delta, found.delta)


def generation_cells(findings: dict[str, GenerationFindings]) -> Cells:
    """The generation columns of one checkpoint, from its findings per generative task."""
    cells: Cells = {}
    for task, found in findings.items():
        prefix = generation_prefix(task)
        if prefix is None:
            continue
        cells[f"{prefix}_gen_items"] = found.n
        cells |= _estimate(f"{prefix}_same_as_base", found.same_as_base)
        cells |= _estimate(f"{prefix}_chrf_vs_base", found.chrf_vs_base)
        cells[f"{prefix}_first_diff_tokens"] = found.first_diff_median
        cells |= _fidelity(f"{prefix}_hangul_share", found.hangul_share, f"{prefix}_hangul_share_delta")
        cells |= _fidelity(f"{prefix}_code_switch_rate", found.code_switch, f"{prefix}_code_switch_delta")
        if prefix == LM_EVAL_COLUMNS and found.metrics:
            metric, delta = next(iter(found.metrics.items()))
            cells |= {f"{prefix}_score_metric": metric, f"{prefix}_score": delta.candidate}
            cells[f"{prefix}_score_verdict"] = delta.verdict
            cells |= _estimate(f"{prefix}_score_delta", delta.delta)
    return cells
