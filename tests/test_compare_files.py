"""Reading per-item files, pairing two checkpoints' items, `kqe compare` on the command line, and the
leaderboard cells the comparison fills."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from evals.reporting.leaderboard import build_row, read_leaderboard, write_leaderboard
from evals.reporting.outcome import CheckpointOutcome, CheckpointResult, TaskFindings
from evals.serving.serve import load_profile
from evals.statistics.pairing import read_items
from evals.statistics.stats import compare, compare_files, compare_tasks
from kqe.cli import main
from kqe.core.errors import UserError
from kqe.core.records import Checkpoint
from tests.helpers.paired_items import flips, make_items


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_reader_takes_the_minimal_format_and_ignores_extra_fields(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "x.jsonl",
        [
            {"task": "mmlu", "item_id": "q1", "correct": True, "model": "x", "latency_ms": 3},
            {"task": "mmlu", "item_id": "q2", "correct": False, "subject": "law", "gold": 1, "pred": 2},
        ],
    )
    items = read_items(path)["mmlu"]
    assert [item.item_id for item in items] == ["q1", "q2"]
    assert items[0].subject is None and items[1].gold == 1


def test_reader_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "x.jsonl", [{"task": "t", "item_id": str(i), "correct": True} for i in range(3)]
    )
    path.write_text(path.read_text() + '{"task": "t", "item_id": "3", "corr')
    assert len(read_items(path)["t"]) == 3


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({"task": "t", "item_id": "1"}, "correct: Field required"),
        ({"task": "t", "item_id": "1", "correct": "yes"}, "correct: Input should be a valid boolean"),
        ({"item_id": "1", "correct": True}, "task: Field required"),
    ],
)
def test_reader_names_the_line_and_the_problem(tmp_path: Path, row: dict, needle: str) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"task": "t", "item_id": "0", "correct": True}, row])
    with pytest.raises(UserError, match=f"x.jsonl:2: not a per-item record \\({needle}"):
        read_items(path)


def test_pairing_errors_say_what_differs() -> None:
    base = make_items([True, False, True])
    with pytest.raises(UserError, match="1 only in base, 0 only in candidate"):
        compare("bf16", "awq", base, base[:2])
    with pytest.raises(UserError, match="share no items of task t"):
        compare("bf16", "awq", base, make_items([True], task="u"))
    with pytest.raises(UserError, match="appears twice in the candidate"):
        compare("bf16", "awq", base, [*base, base[0]])
    with pytest.raises(UserError, match="has gold 0 in base and 3 in candidate"):
        compare("bf16", "awq", base, [base[0].model_copy(update={"gold": 3}), *base[1:]])


@pytest.mark.parametrize("margin", [0.0, -0.01, 1.0, float("nan")])
def test_margin_must_be_a_positive_fraction_below_one(margin: float) -> None:
    with pytest.raises(UserError, match="accuracy points is not above 0 and below 100"):
        compare("a", "b", *flips(10, 1, 1, 5), margin=margin)


def test_compare_files_requires_the_same_tasks(tmp_path: Path) -> None:
    base = write_jsonl(tmp_path / "base.jsonl", [{"task": "mmlu", "item_id": "1", "correct": True}])
    cand = write_jsonl(tmp_path / "cand.jsonl", [{"task": "kmmlu_hard", "item_id": "1", "correct": True}])
    with pytest.raises(UserError, match=r"holds tasks \['mmlu'\] but .*cand.jsonl holds \['kmmlu_hard'\]"):
        compare_files(base, cand)


def test_kqe_compare_json_has_every_documented_key(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    rows: dict[str, list[dict]] = {"base": [], "cand": []}
    for task, n in (("kmmlu_hard", 225), ("mmlu", 300)):
        base_ok = rng.random(n) < 0.4
        cand_ok = np.where(rng.random(n) < 0.3, ~base_ok, base_ok)
        for i in range(n):
            for side, ok in (("base", base_ok), ("cand", cand_ok)):
                rows[side].append(
                    {"task": task, "item_id": f"{task}/{i}", "subject": f"s{i % 45}", "correct": bool(ok[i])}
                )
    base, cand = (
        write_jsonl(tmp_path / "b.jsonl", rows["base"]),
        write_jsonl(tmp_path / "c.jsonl", rows["cand"]),
    )
    result = CliRunner().invoke(main, ["compare", str(base), str(cand), "--margin", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    keys = {"n", "acc_base", "acc_cand", "delta", "ci_low", "ci_high", "mcnemar_p", "flips_c2w", "flips_w2c"}
    for task, n in (("kmmlu_hard", 225), ("mmlu", 300)):
        assert keys | {"recovery", "mde", "verdict", "p_holm"} <= report[task].keys()
        assert report[task]["n"] == n and report[task]["margin"] == pytest.approx(0.02)
        assert -1 <= report[task]["ci_low"] <= report[task]["delta"] <= report[task]["ci_high"] <= 1
    assert report["kmmlu_hard"]["ko_en_gap"] == pytest.approx(
        report["kmmlu_hard"]["delta"] - report["mmlu"]["delta"]
    )
    text = CliRunner().invoke(main, ["compare", str(base), str(cand)])
    assert text.exit_code == 0 and "kmmlu_hard - mmlu loss gap" in text.output
    assert report["mmlu"]["verdict"] in text.output


def test_kqe_compare_names_a_collapse_and_prints_the_debiased_delta(tmp_path: Path) -> None:
    """The candidate is the base with +3 nats on A: every answer A, the same beliefs otherwise."""
    rng = np.random.default_rng(7)
    rows: dict[str, list[dict]] = {"base": [], "cand": []}
    for i in range(200):
        gold, lp = i % 4, rng.normal(-40.0, 1.0, 4)  # log-probs: at most 0 after the +30 on A
        lp[gold] += 1.0
        for side, shift in (("base", 0.0), ("cand", 30.0)):
            logprobs = [float(lp[0] + shift), *map(float, lp[1:])]
            correct = int(np.argmax(logprobs)) == gold
            item = {"task": "t", "item_id": f"t/{i}", "subject": f"s{i % 20}", "correct": correct}
            rows[side].append(item | {"gold": gold, "choice_logprobs": logprobs})
    base, cand = (write_jsonl(tmp_path / f"{side}.jsonl", rows[side]) for side in ("base", "cand"))
    text = CliRunner().invoke(main, ["compare", str(base), str(cand)])
    assert text.exit_code == 0, text.output
    assert "=> collapsed: picks A on 100% of items" in text.output
    assert "t letter-debiased: acc" in text.output and "Δ +0.0 pts" in text.output


def test_leaderboard_carries_the_new_cells(tmp_path: Path) -> None:
    ko_base, ko_cand = flips(50, 5, 4, 20, task="kmmlu_hard")
    en_base, en_cand = flips(60, 3, 3, 30, task="mmlu")
    comparisons = compare_tasks(
        "bf16", "awq", {"kmmlu_hard": ko_base, "mmlu": en_base}, {"kmmlu_hard": ko_cand, "mmlu": en_cand}
    )
    checkpoint = Checkpoint(
        name="awq",
        scheme="awq-w4a16",
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
    outcome = CheckpointOutcome("tiny", "awq", "awq-w4a16", "ko70", "ok", checkpoint)
    tasks = TaskFindings(vs_base=comparisons)
    row = build_row(CheckpointResult(outcome, load_profile("cpu-ci"), "kqe eval", tasks=tasks))
    write_leaderboard(tmp_path / "board.csv", [row])
    [back] = read_leaderboard(tmp_path / "board.csv")
    ko = comparisons["kmmlu_hard"]
    assert back.kmmlu_verdict == ko.verdict and back.kmmlu_verdict.startswith("inconclusive — n too small")  # type: ignore[union-attr]
    assert back.kmmlu_p_holm == pytest.approx(ko.p_holm, rel=1e-5)
    assert back.mmlu_mde == pytest.approx(comparisons["mmlu"].mde, rel=1e-5)
    assert back.ko_en_gap == pytest.approx(ko.ko_en_gap, rel=1e-5)
    assert back.ko_en_gap_ci_low is not None and back.ko_en_gap_ci_high is not None
