"""Micro vs macro averages, supercategories and their CIs: hand-computed values and coverage in simulation."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from evals.reporting.leaderboard_row import COLUMNS
from evals.reporting.row_cells import averages_cells
from evals.statistics.averages import checkpoint_averages, macro_delta, task_averages
from evals.tasks.benchmark_data import kmmlu_categories, kmmlu_hard_dir, kmmlu_hard_rows, kmmlu_subjects


@dataclass(frozen=True)
class Item:
    """What the averages read from a scored item (a stand-in for ItemResult)."""

    task: str
    item_id: str
    subject: str | None
    correct: bool
    gold: int | None = None
    choice_logprobs: list[float] | None = None


def items(task: str, by_subject: dict[str, list[int]]) -> list[Item]:
    return [
        Item(task, f"{subject}/{index}", subject, bool(ok))
        for subject, marks in by_subject.items()
        for index, ok in enumerate(marks)
    ]


def test_micro_and_macro_differ_on_unbalanced_subjects_by_hand() -> None:
    # law: 6 of 8 right (0.75); math: 0 of 2 right. micro = 6/10, macro = (0.75 + 0) / 2
    scored = items("kmmlu", {"law": [1, 1, 1, 1, 1, 1, 0, 0], "math": [0, 0]})
    averages = task_averages(scored, {"law": "humss", "math": "stem"}, resamples=2000)
    assert (averages.n, averages.subjects) == (10, 2)
    assert averages.micro.value == pytest.approx(0.6)
    assert averages.macro.value == pytest.approx(0.375)
    assert averages.categories["humss"].value == pytest.approx(0.75)
    assert averages.categories["stem"].value == pytest.approx(0.0)
    assert list(averages.categories) == ["stem", "humss"]  # fixed order, absent categories left out
    # math's items are all wrong: its resamples cannot move, so its category's CI is the point
    assert (averages.categories["stem"].ci_low, averages.categories["stem"].ci_high) == (0.0, 0.0)
    for estimate in (averages.micro, averages.macro, averages.categories["humss"]):
        assert 0.0 <= estimate.ci_low < estimate.value < estimate.ci_high <= 1.0


def test_macro_delta_is_paired_and_hand_computed() -> None:
    # law: base right on 2 of 4, candidate on 1 (Δ −0.25); math: base 0 of 2, candidate 1 (Δ +0.5).
    # micro Δ = (2 − 2) / 6 = 0, macro Δ = (−0.25 + 0.5) / 2 = 0.125
    base = items("kmmlu", {"law": [1, 1, 0, 0], "math": [0, 0]})
    cand = items("kmmlu", {"law": [1, 0, 0, 0], "math": [1, 0]})
    delta = macro_delta(base, cand, resamples=2000)
    assert delta.value == pytest.approx(0.125)
    assert delta.ci_low < 0.125 < delta.ci_high
    same = macro_delta(base, base, resamples=500)
    assert (same.value, same.ci_low, same.ci_high) == (0.0, 0.0, 0.0)  # paired: no flips, no spread


def test_same_seed_same_intervals_and_base_rows_leave_delta_empty() -> None:
    scored = items("mmlu", {"anatomy": [1, 0, 1, 0, 1], "virology": [0, 0, 1]})
    first = averages_cells(
        checkpoint_averages({"mmlu": scored}, None, {"mmlu": "MMLU test (offline)"}, resamples=500)
    )
    again = averages_cells(
        checkpoint_averages({"mmlu": scored}, None, {"mmlu": "MMLU test (offline)"}, resamples=500)
    )
    assert first == again
    assert first["mmlu_source"] == "MMLU test (offline)" and "mmlu_macro_delta" not in first
    assert first["mmlu_macro"] == pytest.approx((3 / 5 + 1 / 3) / 2)
    assert "mmlu_stem" not in first and "mmlu_acc" not in first  # micro acc itself comes from the ScoreRun
    row_fields = set(COLUMNS)
    assert set(first) <= row_fields


def test_kmmlu_cells_carry_every_supercategory_and_fit_the_row() -> None:
    rows = kmmlu_hard_rows(kmmlu_hard_dir(), task="kmmlu")
    rng = np.random.default_rng(0)
    scored = [Item("kmmlu", row["item_id"], row["subject"], bool(rng.random() < 0.3)) for row in rows]
    cand = [
        Item(i.task, i.item_id, i.subject, i.correct if rng.random() < 0.8 else not i.correct) for i in scored
    ]
    label = "KMMLU-HARD dev (offline, 225 items), 0-shot"
    cells = averages_cells(
        checkpoint_averages({"kmmlu": cand}, {"kmmlu": scored}, {"kmmlu": label}, resamples=500)
    )
    for category in ("stem", "applied", "humss", "other"):
        assert (
            cells[f"kmmlu_{category}_ci_low"]
            <= cells[f"kmmlu_{category}"]
            <= cells[f"kmmlu_{category}_ci_high"]
        )
    assert (
        cells["kmmlu_macro_delta_ci_low"] <= cells["kmmlu_macro_delta"] <= cells["kmmlu_macro_delta_ci_high"]
    )
    assert cells["kmmlu_source"] == label
    assert set(cells) <= set(COLUMNS)
    assert all(isinstance(value, float) for column, value in cells.items() if column != "kmmlu_source")


def test_supercategory_map_covers_all_45_subjects_and_the_offline_items() -> None:
    categories = kmmlu_categories()
    assert len(categories) == 45
    assert Counter(categories.values()) == {"stem": 11, "applied": 12, "humss": 11, "other": 11}
    assert categories["korean_history"] == "humss" and categories["math"] == "stem"
    assert kmmlu_subjects()["korean_history"].config == "Korean-History"
    offline_subjects = {row["subject"] for row in kmmlu_hard_rows(kmmlu_hard_dir())}
    assert offline_subjects == set(categories)


def _simulate(rng: np.random.Generator, sizes: np.ndarray, p: np.ndarray, q: np.ndarray) -> tuple[list, list]:
    """One benchmark: base right with p per subject; the candidate keeps the base's answer 80% of the
    time, else is right with q (true per-subject Δ = 0.2 (q − p))."""
    base, cand = [], []
    for subject, (n, p_s, q_s) in enumerate(zip(sizes, p, q, strict=True)):
        b = rng.random(n) < p_s
        c = np.where(rng.random(n) < 0.8, b, rng.random(n) < q_s)
        base += [Item("t", f"{subject}/{i}", str(subject), bool(ok)) for i, ok in enumerate(b)]
        cand += [Item("t", f"{subject}/{i}", str(subject), bool(ok)) for i, ok in enumerate(c)]
    return base, cand


@pytest.mark.parametrize("shape", ["unbalanced", "five_per_subject"])
def test_intervals_cover_the_truth_about_95_percent(shape: str) -> None:
    """Stratified bootstrap with the small-sample stretch: 95% CIs cover the true micro, macro and
    macro Δ in 91-99% of 300 simulated benchmarks (45 subjects, fixed; items redrawn)."""
    rng = np.random.default_rng(11)
    sizes = rng.choice([5, 10, 20, 60], size=45) if shape == "unbalanced" else np.full(45, 5)
    p = rng.uniform(0.15, 0.7, size=45)
    q = rng.uniform(0.1, 0.8, size=45)
    truth = {
        "micro": float(sizes @ p / sizes.sum()),
        "macro": float(p.mean()),
        "delta": float((0.2 * (q - p)).mean()),
    }
    covered: Counter[str] = Counter()
    runs = 300
    for run in range(runs):
        base, cand = _simulate(rng, sizes, p, q)
        averages = task_averages(base, resamples=1000, seed=run)
        delta = macro_delta(base, cand, resamples=1000, seed=run)
        for name, estimate in (("micro", averages.micro), ("macro", averages.macro), ("delta", delta)):
            covered[name] += estimate.ci_low <= truth[name] <= estimate.ci_high
    for name in truth:
        assert 0.91 <= covered[name] / runs <= 0.99, (name, covered[name] / runs)


def test_report_section_names_the_items_and_shows_micro_and_macro() -> None:
    from evals.reporting.averages_report import markdown_section
    from evals.reporting.leaderboard import build_row
    from evals.reporting.outcome import CheckpointOutcome, CheckpointResult, TaskFindings
    from evals.serving.serve import load_profile
    from kqe.core.records import Checkpoint
    from kqe.core.results import ScoreRun

    base = items("kmmlu", {"law": [1, 1, 1, 1, 1, 1, 0, 0], "math": [0, 0]})
    cand = items("kmmlu", {"law": [1, 1, 1, 1, 1, 0, 0, 0], "math": [1, 0]})
    label = "KMMLU-HARD dev (offline, 225 items), 0-shot"
    rows = []
    for name, scored, reference in (("bf16", base, None), ("awq", cand, {"kmmlu": base})):
        found = checkpoint_averages({"kmmlu": scored}, reference, {"kmmlu": label}, resamples=500)
        checkpoint = Checkpoint(
            name=name,
            scheme=name,
            model="tiny",
            path="/x",
            recipe={},
            calibration_hash=None,
            package_versions={},
            wall_s=1.0,
            peak_rss_bytes=1,
            disk_bytes=1,
            key="k",
        )
        accuracy = sum(item.correct for item in scored) / len(scored)
        run = ScoreRun(
            checkpoint=name,
            task="kmmlu",
            n_items=10,
            accuracy=accuracy,
            items_per_s=None,
            items_path="/x",
            profile_key="p",
        )
        outcome = CheckpointOutcome("tiny", name, name, "none", "ok", checkpoint, runs={"kmmlu": run})
        result = CheckpointResult(outcome, load_profile("cpu-ci"), "kqe", tasks=TaskFindings(averages=found))
        rows.append(build_row(result))
    assert rows[1].kmmlu_acc == pytest.approx(0.6) and rows[1].kmmlu_macro == pytest.approx(
        (5 / 8 + 1 / 2) / 2
    )
    text = "\n".join(markdown_section(rows))
    assert f"Items: KMMLU: {label}." in text
    assert "| bf16 | 60.0 [" in text and "| 37.5 [" in text  # micro 60%, macro 37.5%
    assert "| awq | 60.0 [" in text and "| +18.8 [" in text  # macro Δ = (−12.5 + 50) / 2 points
