"""The per-task leaderboard columns (`kmmlu_acc`, `mmlu_verdict`, `kmmlu_stem`, …), generated from the
task registry (`evals.tasks.registry.COLUMN_SPECS`) by the templates below, so a task with a new column
prefix gets its columns, their docs and their place in the CSV from its entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import TypeAdapter

from evals.tasks.registry import CATEGORY_LABELS, COLUMN_SPECS, LM_EVAL_COLUMNS, ColumnSpec

Cell = float | int | str | None


@dataclass(frozen=True)
class TaskColumn:
    """One column every task of a column prefix has: `<prefix>_<suffix>`."""

    suffix: str
    kind: type
    meaning: str
    """Its docs, with `{label}` for the task's label."""


COMPARISON = (
    TaskColumn("acc", float, "{label} accuracy (micro average)."),
    TaskColumn("delta", float, "{label} Δ accuracy vs the base."),
    TaskColumn("ci_low", float, "Lower end of the {label} Δ 95% CI."),
    TaskColumn("ci_high", float, "Upper end of the {label} Δ 95% CI."),
    TaskColumn("p", float, "{label} exact McNemar p."),
    TaskColumn(
        "p_holm",
        float,
        "{label} tested p (the larger of McNemar's and the subjects') after Holm's correction.",
    ),
    TaskColumn("flips_c2w", int, "{label} items flipped correct→wrong."),
    TaskColumn("flips_w2c", int, "{label} items flipped wrong→correct."),
    TaskColumn("kl", float, "{label} mean KL(base ‖ checkpoint) of the choice distributions, nats."),
    TaskColumn("recovery", float, "{label} accuracy as a share of the base's (acc / base acc)."),
    TaskColumn("mde", float, "{label} smallest loss this many items detect with 80% power (fraction)."),
    TaskColumn(
        "verdict",
        str,
        "{label} verdict: no loss detected within margin, significant loss, or inconclusive (MDE); "
        "`collapsed: picks <letter> on N% of items` where the checkpoint's answers collapsed onto one "
        "choice and the base's did not (its Δ is then letter preference).",
    ),
    TaskColumn(
        "top_choice", str, "{label} most frequent choice: the letter with the highest log-prob on most items."
    ),
    TaskColumn(
        "top_choice_share",
        float,
        "{label} share of the items on that choice (fraction); from 0.9, where the base's is below, the "
        "answers collapsed (run.json `choices` holds every choice's count).",
    ),
    TaskColumn(
        "acc_debiased",
        float,
        "{label} accuracy with this checkpoint's letter prior (its mean log-prob per choice position, "
        "cross-fitted over subject folds) subtracted before the argmax (fraction).",
    ),
    TaskColumn(
        "acc_debiased_delta",
        float,
        "{label} debiased accuracy minus the base's on the same items (fraction).",
    ),
    TaskColumn(
        "acc_debiased_ci_low", float, "Lower end of the 95% CI of {prefix}_acc_debiased_delta (as Δ's)."
    ),
    TaskColumn("acc_debiased_ci_high", float, "Upper end of the 95% CI of {prefix}_acc_debiased_delta."),
)
"""Accuracy, the paired comparison with the base, and the answers' letter preference."""
CIRCULAR = (
    TaskColumn(
        "circular_items", int, "{label} items asked in every cyclic rotation of their options (--circular)."
    ),
    TaskColumn(
        "acc_circular",
        float,
        "{label} CircularEval accuracy: share of those items right in every rotation, the gold answer "
        "moving with its option (fraction); no letter preference can score here.",
    ),
    TaskColumn(
        "acc_circular_plain", float, "{label} accuracy as scored (rotation 0) on those same items (fraction)."
    ),
    TaskColumn(
        "acc_circular_delta",
        float,
        "{label} circular accuracy minus the base's on the same items (fraction); empty on the base row.",
    ),
    TaskColumn(
        "acc_circular_ci_low", float, "Lower end of the paired 95% CI of {prefix}_acc_circular_delta."
    ),
    TaskColumn("acc_circular_ci_high", float, "Upper end of the 95% CI of {prefix}_acc_circular_delta."),
)
"""CircularEval on `--circular` items: present only in runs that ask for it (a group of its own)."""
CIRCULAR_GROUP = "_circular"
"""What a task prefix's circular columns are grouped under (`kmmlu_circular`): a CSV has them only when
some row has one, so runs without `--circular` keep the leaderboards they had."""
CALIBRATION_EFFECT = (
    TaskColumn(
        "calib_effect",
        float,
        "{label} accuracy of this checkpoint minus that of `calib_effect_vs`, same items (fraction).",
    ),
    TaskColumn("calib_effect_ci_low", float, "Lower end of the 95% CI of {prefix}_calib_effect."),
    TaskColumn("calib_effect_ci_high", float, "Upper end of the 95% CI of {prefix}_calib_effect."),
    TaskColumn("calib_effect_p", float, "Exact McNemar p of {prefix}_calib_effect."),
    TaskColumn(
        "calib_effect_mde",
        float,
        "Smallest {label} calibration effect these items detect with 80% power (fraction).",
    ),
)
"""The same scheme calibrated on another mix, paired on the same items."""
KV_EFFECT = (
    TaskColumn(
        "kv_effect",
        float,
        "{label} accuracy of this row minus that of `kv_effect_vs` (the same weights with the KV cache at "
        "auto), same items (fraction): the KV cache's cost alone.",
    ),
    TaskColumn("kv_effect_ci_low", float, "Lower end of the 95% CI of {prefix}_kv_effect."),
    TaskColumn("kv_effect_ci_high", float, "Upper end of the 95% CI of {prefix}_kv_effect."),
    TaskColumn("kv_effect_p", float, "Exact McNemar p of {prefix}_kv_effect."),
)
"""The same weights served with the KV cache at auto (`--kv-cache-dtypes`), paired on the same items."""
KV_EFFECT_GROUP = "_kv"
"""What a task prefix's KV-effect columns are grouped under (`kmmlu_kv`): a CSV has them only when some
row was served with a non-auto KV dtype, so runs without `--kv-cache-dtypes` keep their leaderboards."""


def _estimate(
    suffix: str, meaning: str, how: str = "items resampled within subjects"
) -> tuple[TaskColumn, ...]:
    """A fraction and its 95% CI."""
    return (
        TaskColumn(suffix, float, meaning),
        TaskColumn(
            f"{suffix}_ci_low", float, f"Lower end of the 95% CI of {{prefix}}_{suffix} ({how}), fraction."
        ),
        TaskColumn(f"{suffix}_ci_high", float, "Upper end of that CI, fraction."),
    )


def _averages(spec: ColumnSpec) -> tuple[TaskColumn, ...]:
    """Which items, the micro CI, macro average and its Δ, then one estimate per supercategory."""
    acc_ci = _estimate("acc", "")[1:]  # the micro average itself is a comparison column
    categories = (
        _estimate(
            key, f"{{label}} {CATEGORY_LABELS[key]} supercategory: mean accuracy of its subjects, fraction."
        )
        for key in spec.categories
    )
    return (
        TaskColumn(
            "source",
            str,
            "Which {label} items were scored: the set and its revision, item count, shots, sample.",
        ),
        *acc_ci,
        *_estimate("macro", "{label} macro average: mean of the subjects' accuracies, fraction."),
        *_estimate(
            "macro_delta",
            "{label} macro average minus the base's on the same items, fraction; empty on the base row.",
            "paired bootstrap",
        ),
        *(column for estimate in categories for column in estimate),
    )


class ColumnDoc(NamedTuple):
    """What a generated column is."""

    prefix: str
    kind: type
    meaning: str


def _columns(groups: dict[str, tuple[TaskColumn, ...]]) -> dict[str, ColumnDoc]:
    return {
        f"{prefix}_{column.suffix}": ColumnDoc(
            prefix, column.kind, column.meaning.format(label=COLUMN_SPECS[prefix].label, prefix=prefix)
        )
        for prefix, group in groups.items()
        for column in group
    }


COMPARISON_COLUMNS = _columns({prefix: COMPARISON for prefix in COLUMN_SPECS})
CALIBRATION_EFFECT_COLUMNS = _columns({prefix: CALIBRATION_EFFECT for prefix in COLUMN_SPECS})
AVERAGES_COLUMNS = _columns({prefix: _averages(spec) for prefix, spec in COLUMN_SPECS.items()})
CIRCULAR_COLUMNS = {
    name: doc._replace(prefix=doc.prefix + CIRCULAR_GROUP)
    for name, doc in _columns(
        {prefix: CIRCULAR for prefix in COLUMN_SPECS if prefix != LM_EVAL_COLUMNS}
    ).items()
}
"""Every registry task prefix's circular columns, each prefix's in its own group (lm-eval tasks, whose
rows lm-eval's own YAML renders, are not rotated)."""
KV_EFFECT_COLUMNS = {
    name: doc._replace(prefix=doc.prefix + KV_EFFECT_GROUP)
    for name, doc in _columns({prefix: KV_EFFECT for prefix in COLUMN_SPECS}).items()
}
"""Every registry task prefix's KV-effect columns, each prefix's in its own group."""
TASK_COLUMNS = COMPARISON_COLUMNS | CALIBRATION_EFFECT_COLUMNS | AVERAGES_COLUMNS
"""Every per-task column of every registered column prefix: name -> what it is."""
_CELL_KINDS: dict[type, TypeAdapter[Any]] = {kind: TypeAdapter(kind) for kind in (float, int, str)}


def cell(kind: type, value: object) -> Cell:
    """`value` as a generated column of type `kind` (CSV text included)."""
    return None if value is None else _CELL_KINDS[kind].validate_python(value)
