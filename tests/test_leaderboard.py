"""Leaderboard CSV: round trip, formula neutralisation, schema-version and column errors."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from evals.planning.placement import Placement
from evals.planning.planner import Plan
from evals.reporting.generation_columns import GENERATION_COLUMNS
from evals.reporting.leaderboard import (
    COLUMNS,
    build_row,
    read_leaderboard,
    write_aggregate,
    write_leaderboard,
)
from evals.reporting.leaderboard_row import (
    LEADERBOARD_SCHEMA_VERSION,
    READABLE_SCHEMA_VERSIONS,
    LeaderboardRow,
)
from evals.reporting.outcome import CheckpointOutcome, CheckpointResult, TaskFindings
from evals.reporting.rag_columns import RAG_COLUMNS
from evals.reporting.task_columns import CIRCULAR_COLUMNS, KV_EFFECT_COLUMNS
from evals.serving.serve import load_profile
from evals.tasks.registry import COLUMN_SPECS
from kqe.core.errors import UserError
from kqe.core.records import Checkpoint, MemoryReport
from kqe.core.results import ChoiceProfile, Comparison, ScoreRun


def checkpoint(name: str = "awq-w4a16") -> Checkpoint:
    return Checkpoint(
        name=name,
        scheme=name,
        model="tiny",
        path="/x",
        recipe={},
        calibration_hash=None,
        package_versions={"llmcompressor": "0.14.0.1"},
        wall_s=1.0,
        peak_rss_bytes=1,
        disk_bytes=2**30,
        key="abc",
    )


_SAMPLE_RUN = ScoreRun(
    checkpoint="awq-w4a16",
    task="mmlu",
    n_items=10,
    accuracy=0.4,
    items_per_s=12.5,
    items_path="/x.jsonl",
    profile_key="p",
)
_SAMPLE_COMPARISON = Comparison(
    task="mmlu",
    base="bf16",
    candidate="awq-w4a16",
    n=10,
    acc_base=0.5,
    acc_cand=0.4,
    delta=-0.1,
    ci_low=-0.3,
    ci_high=0.1,
    mcnemar_p=0.62,
    mcnemar_midp=0.5,
    p_holm=0.62,
    flips_c2w=2,
    flips_w2c=1,
    flip_rate=0.3,
    mean_kl=0.01,
    top_agreement=0.9,
    recovery=0.8,
    recovery_ci_low=0.5,
    recovery_ci_high=1.2,
    margin=0.01,
    noninf_p=0.7,
    mde=0.2,
    verdict="inconclusive — n too small (MDE 20.0 points)",
    bootstrap_resamples=100,
    seed=1,
)


def sample_row(command: str = "kqe eval --model tiny") -> LeaderboardRow:
    run, comparison = _SAMPLE_RUN, _SAMPLE_COMPARISON
    memory = MemoryReport(
        source="vllm-log",
        device="cpu",
        weights_gib=0.1,
        kv_cache_gib=1.0,
        kv_cache_tokens=5000,
        max_concurrency=2.4,
        max_model_len=2048,
    )
    runs, comparisons = {"mmlu": run}, {"mmlu": comparison}
    outcome = CheckpointOutcome("tiny", "awq-w4a16", "awq-w4a16", "ko70", "ok", checkpoint(), runs=runs)
    tasks = TaskFindings(vs_base=comparisons)
    return build_row(CheckpointResult(outcome, load_profile("cpu-ci"), command, memory=memory, tasks=tasks))


def test_a_quantized_row_scoring_ko_rag_builds_with_the_other_tasks_cells() -> None:
    """ko_rag and ko_rag_mc are compared with the base like every task (run.json keeps those), but
    their leaderboard cells come from the ko_rag module, not the shared `<prefix>_*` columns."""
    plain = sample_row()
    row = build_row(_rag_result(plain))
    assert row.mmlu_delta == plain.mmlu_delta == pytest.approx(-0.1)
    assert row.mmlu_acc == plain.mmlu_acc and row.kmmlu_acc is None


def _rag_result(plain: LeaderboardRow) -> CheckpointResult:
    """sample_row's checkpoint with ko_rag and ko_rag_mc scored and compared beside mmlu."""
    runs = {task: _SAMPLE_RUN.model_copy(update={"task": task}) for task in ("mmlu", "ko_rag", "ko_rag_mc")}
    vs_base = {task: _SAMPLE_COMPARISON.model_copy(update={"task": task}) for task in runs}
    outcome = CheckpointOutcome("tiny", "awq-w4a16", "awq-w4a16", "ko70", "ok", checkpoint(), runs=runs)
    return CheckpointResult(
        outcome, load_profile("cpu-ci"), plain.command, tasks=TaskFindings(vs_base=vs_base)
    )


def test_round_trip_keeps_values(tmp_path: Path) -> None:
    row = sample_row()
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [row])
    [back] = read_leaderboard(path)
    assert back.mmlu_delta == pytest.approx(-0.1)
    assert back.mmlu_flips_c2w == 2
    assert back.kv_cache_tokens == 5000
    assert back.kmmlu_acc is None
    assert back.disk_gib == pytest.approx(1.0)
    header = path.read_text().splitlines()[0].split(",")
    unscored = tuple(f"{prefix}_" for prefix in COLUMN_SPECS if prefix != "mmlu")
    conditions = {name for name, doc in RAG_COLUMNS.items() if doc.prefix != "ko_rag"}  # none scored
    conditions |= set(GENERATION_COLUMNS)  # no generative task scored
    conditions |= set(CIRCULAR_COLUMNS)  # no --circular
    conditions |= set(KV_EFFECT_COLUMNS)  # no --kv-cache-dtypes
    assert header == [c for c in COLUMNS if not c.startswith(unscored) and c not in conditions]
    assert "ko_rag_f1_1k" in header and "ko_rag_recall_1k" in header  # ko_rag's own columns, always


def test_a_checkpoint_never_built_keeps_its_status_profile_and_planned_memory() -> None:
    profile = load_profile("rtx4090-16k")
    planned = MemoryReport(
        source="planner",
        device="gpu",
        weights_gib=27.5,
        kv_cache_gib=0.0,
        kv_cache_tokens=0,
        max_concurrency=0.0,
        max_model_len=16384,
    )
    outcome = CheckpointOutcome("tiny", "bf16", "bf16", "none", "not scored: fits nowhere here")
    plan = Plan.model_construct(
        gpu="RTX 4090", gpu_gib=24.0, tensor_parallel_size=1, fits=False, pattern=None
    )
    placement = Placement.model_construct(
        target_plan=plan, memory_source="planner", shortfall_gib=3.5, score=None
    )  # a target it does not fit, and nowhere to score here
    row = build_row(CheckpointResult(outcome, profile, "kqe eval", memory=planned, placement=placement))
    assert (row.status, row.serve_profile) == ("not scored: fits nowhere here", f"rtx4090-16k:{profile.key}")
    assert row.weights_gib == 27.5 and row.fits_target is False
    assert row.checkpoint_key == "" and row.disk_gib is None and row.mmlu_acc is None


def test_formula_like_cell_is_neutralised(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [sample_row(command='=HYPERLINK("http://x","y")')])
    text = path.read_text()
    assert "'=HYPERLINK" in text
    assert ",=HYPERLINK" not in text and ',"=HYPERLINK' not in text
    assert read_leaderboard(path)[0].command.startswith("=HYPERLINK")


READABLE = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))


def test_other_schema_version_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [sample_row()])
    lines = path.read_text().splitlines()
    lines[1] = "0" + lines[1][1:]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=f"schema version 0, this suite reads versions {READABLE}"):
        read_leaderboard(path)


def test_leaderboard_of_the_previous_schema_is_a_clear_error() -> None:
    """The committed gemma3-270m leaderboard as session 1's suite (schema 2) wrote it."""
    path = Path(__file__).parent / "data" / "leaderboards" / "gemma3-270m-schema2.csv"
    message = f"has schema version 2, this suite reads versions {READABLE}: re-run `make eval`"
    with pytest.raises(UserError, match=message):
        read_leaderboard(path)


def test_a_schema_3_board_reads_with_the_placement_columns_empty() -> None:
    """The gemma3-270m leaderboard committed before the target columns existed."""
    rows = read_leaderboard(Path(__file__).parent / "data" / "leaderboards" / "gemma3-270m-schema3.csv")
    assert {row.schema_version for row in rows} == {LEADERBOARD_SCHEMA_VERSION} and len(rows) == 5  # upgraded
    assert all(row.ppl_ko_verdict is None for row in rows)
    assert all(row.memory_source is None and row.target is None for row in rows)
    assert rows[0].kmmlu_acc is not None


def test_a_schema_5_board_with_the_former_load_columns_reads_with_one_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Schema 5's load_* came from kqe's own load generator: its p95 TTFT is dropped with a note."""
    with (Path(__file__).parent / "data" / "leaderboards" / "gemma3-270m-schema3.csv").open(
        newline=""
    ) as src:
        records = list(csv.DictReader(src))
    for record in records:
        record |= {"schema_version": "5", "load_concurrency": "8", "load_output_tokens_per_s": "41.5"}
        record |= {"load_ttft_p95_s": "1.25", "load_preemptions": "0"}
    path = tmp_path / "leaderboard.csv"
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    with caplog.at_level("WARNING"):
        rows = read_leaderboard(path)
    notes = [r.getMessage() for r in caplog.records if "former load generator" in r.getMessage()]
    assert len(notes) == 1 and "load_ttft_p95_s is not read" in notes[0]
    assert rows[0].load_output_tokens_per_s == 41.5 and rows[0].load_ttft_p99_ms is None
    assert {row.schema_version for row in rows} == {LEADERBOARD_SCHEMA_VERSION}


def test_missing_columns_are_named(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    path.write_text("model,checkpoint\ntiny,bf16\n")
    with pytest.raises(UserError, match="lacks columns schema_version, scheme"):
        read_leaderboard(path)


def test_empty_leaderboard_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    with pytest.raises(UserError, match="has no rows"):
        read_leaderboard(path)


def test_aggregate_holds_every_model_of_this_schema(tmp_path: Path) -> None:
    def row(model: str, checkpoint: str = "awq-w4a16"):
        return sample_row().model_copy(update={"model": model, "checkpoint": checkpoint})

    write_leaderboard(tmp_path / "model-a" / "leaderboard.csv", [row("model-a")])
    write_leaderboard(tmp_path / "model-b" / "leaderboard.csv", [row("model-b"), row("model-b", "fp8")])
    stale = tmp_path / "model-c" / "leaderboard.csv"
    write_leaderboard(stale, [sample_row()])
    lines = stale.read_text().splitlines()
    stale.write_text("\n".join([lines[0], "1" + lines[1][1:]]) + "\n")

    aggregate = write_aggregate(tmp_path)

    assert aggregate == tmp_path / "leaderboard.csv"
    assert len(read_leaderboard(aggregate)) == 3


def test_a_collapsed_task_carries_its_choice_columns_debiased_delta_and_verdict(tmp_path: Path) -> None:
    collapsed = "collapsed: picks A on 100% of items"
    comparison = _SAMPLE_COMPARISON.model_copy(
        update={
            "verdict": collapsed,
            "collapse": collapsed,
            "delta_debiased": -0.01,
            "delta_debiased_ci_low": -0.05,
            "delta_debiased_ci_high": 0.03,
        }
    )
    profile = ChoiceProfile(
        checkpoint="awq-w4a16", task="mmlu", counts=[10, 0, 0, 0], top_choice="A", top_share=1.0,
        acc_debiased=0.3, debias_folds=5,
    )  # fmt: skip
    outcome = CheckpointOutcome(
        "tiny", "awq-w4a16", "awq-w4a16", "ko70", "ok", checkpoint(), runs={"mmlu": _SAMPLE_RUN}
    )
    tasks = TaskFindings(vs_base={"mmlu": comparison}, choices={"mmlu": profile})
    built = build_row(CheckpointResult(outcome, load_profile("cpu-ci"), "kqe eval", tasks=tasks))
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [built])
    [row] = read_leaderboard(path)
    assert (row.mmlu_verdict, row.mmlu_top_choice, row.mmlu_top_choice_share) == (collapsed, "A", 1.0)
    assert (row.mmlu_acc_debiased, row.mmlu_acc_debiased_delta) == (0.3, -0.01)
    assert (row.mmlu_acc_debiased_ci_low, row.mmlu_acc_debiased_ci_high) == (-0.05, 0.03)
    assert sample_row().mmlu_top_choice is None and sample_row().mmlu_acc_debiased is None  # none found


def test_a_kv_variant_row_says_its_kv_dtype_and_its_pairing_with_the_same_weights_at_auto(
    tmp_path: Path,
) -> None:
    name = "bf16+kv-fp8"
    vs_auto = _SAMPLE_COMPARISON.model_copy(update={"candidate": name, "delta": -0.2, "ci_low": -0.4})
    outcome = CheckpointOutcome(
        "tiny", name, "bf16", "none", "ok", checkpoint(name), runs={"mmlu": _SAMPLE_RUN}
    )
    tasks = TaskFindings(vs_base={"mmlu": vs_auto}, kv_control="bf16", vs_kv_control={"mmlu": vs_auto})
    profile = load_profile("cpu-ci").model_copy(update={"kv_cache_dtype": "fp8"})
    row = build_row(CheckpointResult(outcome, profile, "kqe eval", tasks=tasks))
    assert (row.kv_cache_dtype, row.kv_effect_vs) == ("fp8", "bf16")
    assert row.mmlu_kv_effect == pytest.approx(-0.2) and row.mmlu_kv_effect_ci_low == pytest.approx(-0.4)
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [sample_row(), row])
    plain, back = read_leaderboard(path)
    assert plain.kv_cache_dtype == "auto" and plain.kv_effect_vs is None and plain.mmlu_kv_effect is None
    assert back.kv_cache_dtype == "fp8" and back.mmlu_kv_effect_p == pytest.approx(vs_auto.mcnemar_p)
