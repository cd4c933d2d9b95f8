"""`kqe compare`: paired statistics of two per-item files."""

from __future__ import annotations

from pathlib import Path

import click

from evals.reporting.p_values import format_p
from kqe.commands.console import Number, echo, run_guarded
from kqe.core.results import Comparison
from kqe.core.text import json_text


def _over_subjects(r: Comparison) -> str:
    """The cluster-level p beside McNemar's (which treats items as independent); empty without subjects."""
    if r.cluster_p is None:
        return ""
    return f", {format_p(r.cluster_p, 'p')} over subjects ({r.cluster_p_method})"


def _debiased(r: Comparison) -> str | None:
    """The letter-debiased accuracies and their Δ with its CI; None without choice log-probs and gold."""
    base, cand, delta = r.acc_debiased_base, r.acc_debiased_cand, r.delta_debiased
    low, high = r.delta_debiased_ci_low, r.delta_debiased_ci_high
    if base is None or cand is None or delta is None or low is None or high is None:
        return None
    return (
        f"letter-debiased: acc {base:.3f} -> {cand:.3f}  Δ {100 * delta:+.1f} pts "
        f"[{100 * low:+.1f}, {100 * high:+.1f}]"
    )


@click.command("compare")
@click.argument("base_items", type=click.Path(path_type=Path))
@click.argument("cand_items", type=click.Path(path_type=Path))
@click.option(
    "--margin",
    type=Number(),  # finite; its range is checked with the statistics (stats.check_margin)
    default=1.0,
    show_default=True,
    help="Non-inferiority margin in accuracy points (1.0 = a loss of 0.01 is acceptable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object keyed by task (fractions).")
def compare_command(base_items: Path, cand_items: Path, margin: float, as_json: bool) -> None:
    """Paired comparison of two per-item files (JSON Lines with task, item_id, correct, optionally
    subject, gold, choice_logprobs) task by task. Two candidate files give the calibration effect."""
    from evals.statistics.stats import compare_files

    def action() -> None:
        results = compare_files(base_items, cand_items, margin)
        if as_json:
            report = {task: r.model_dump(mode="json") for task, r in results.items()}
            echo(json_text(report))
            return
        for task, r in results.items():
            kl = ""
            if r.mean_kl is not None:
                kl = (
                    f"  KL {r.mean_kl:.4f} [{r.kl_ci_low:.4f}, {r.kl_ci_high:.4f}]  top choice kept "
                    f"{r.top_agreement:.3f} [{r.top_agreement_ci_low:.3f}, {r.top_agreement_ci_high:.3f}]"
                )
            echo(
                f"{task}: n={r.n}  acc {r.acc_base:.3f} -> {r.acc_cand:.3f}  Δ {100 * r.delta:+.1f} pts "
                f"[{100 * r.ci_low:+.1f}, {100 * r.ci_high:+.1f}] ({r.ci_method}, {r.clusters} subjects)  "
                f"McNemar {format_p(r.mcnemar_p, 'p')}{_over_subjects(r)} "
                f"(Holm {format_p(r.p_holm)})  flips c→w {r.flips_c2w} w→c {r.flips_w2c}{kl}  "
                f"MDE {100 * r.mde:.1f} pts  => {r.verdict}"
            )
            if (debiased := _debiased(r)) is not None:
                echo(f"{task} {debiased}")
            if r.ko_en_gap is not None and r.ko_en_gap_ci_low is not None and r.ko_en_gap_ci_high is not None:
                echo(
                    f"{task} - {r.english_task} loss gap: {100 * r.ko_en_gap:+.1f} pts "
                    f"[{100 * r.ko_en_gap_ci_low:+.1f}, {100 * r.ko_en_gap_ci_high:+.1f}]"
                )

    run_guarded(action)
