"""`make eval` end to end on the tiny model: real llmcompressor, real `vllm serve`, real statistics."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evals.capacity import session
from evals.planning.placement import PlacementPlan
from evals.reporting.leaderboard import read_leaderboard
from evals.serving.serve import load_profile
from evals.statistics.stats import compare
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.io import read_jsonl, read_record
from kqe.core.results import ItemResult, RunSummary
from kqe.core.workspace import Workspace
from kqe.pipeline import config
from kqe.pipeline.run import run_eval
from tests.helpers.ko_rag_data import DOCS, QUESTIONS, write_jsonl
from tests.helpers.matrix_run import MatrixRun
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.sources import write_sources


def without_dates(csv_text: str) -> str:
    """The leaderboard text with the `date` column (the run's own date) blanked."""
    rows = list(csv.reader(io.StringIO(csv_text)))
    column = rows[0].index("date")
    return repr([cells[:column] + cells[column + 1 :] for cells in rows])


@pytest.mark.slow
@needs_serve_env
def test_eval_builds_serves_scores_ranks_and_resumes(
    matrix_run: MatrixRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, cfg, board, stages = matrix_run.ws, matrix_run.cfg, matrix_run.board, list(matrix_run.stages)
    rows = read_leaderboard(board)
    assert [row.checkpoint for row in rows] == ["bf16", "awq-w4a16-ko70", "awq-w4a16-en100", "w4a16-rtn"]
    assert [row.status for row in rows] == ["ok", "ok", "ok", "ok"]
    assert [row.calibration for row in rows] == ["none", "ko70", "en100", "none"]
    assert len({row.serve_profile for row in rows}) == 1
    for row in rows:
        assert row.kv_cache_tokens and row.kv_cache_tokens > 0
        assert row.max_concurrency and row.max_concurrency > 0
        assert row.kmmlu_acc is not None and row.mmlu_acc is not None
        assert row.command.startswith("kqe eval --model")
    assert rows[0].kmmlu_delta is None and rows[0].kmmlu_verdict is None  # the base is not compared
    assert rows[1].kmmlu_verdict is not None and rows[3].mmlu_p_holm is not None

    # every leaderboard number traces back to per-item files listed in run.json
    summary = read_record(board.parent / "run.json", RunSummary)
    items = {
        (run.checkpoint, run.task): read_jsonl(Path(run.items_path), ItemResult) for run in summary.score_runs
    }
    assert len(items[("bf16", "kmmlu")]) == 30 and len(items[("bf16", "mmlu")]) == 24
    awq, awq_en = rows[1], rows[2]
    recount = compare("bf16", "awq-w4a16-ko70", items[("bf16", "mmlu")], items[("awq-w4a16-ko70", "mmlu")])
    assert (awq.mmlu_flips_c2w, awq.mmlu_flips_w2c) == (recount.flips_c2w, recount.flips_w2c)
    assert awq.mmlu_delta == pytest.approx(recount.delta, abs=1e-6)
    # the calibration effect: Korean-calibrated AWQ against English-calibrated AWQ on the same items
    assert awq.calib_effect_vs == "awq-w4a16-en100" and awq_en.calib_effect_vs is None
    effect = compare(
        "awq-w4a16-en100",
        "awq-w4a16-ko70",
        items[("awq-w4a16-en100", "kmmlu")],
        items[("awq-w4a16-ko70", "kmmlu")],
    )
    assert awq.kmmlu_calib_effect == pytest.approx(effect.delta, abs=1e-6)
    assert awq.kmmlu_calib_effect_mde == pytest.approx(effect.mde, abs=1e-6)
    assert awq.mmlu_calib_effect is not None and awq_en.mmlu_calib_effect is None
    assert len(summary.calibrations) == 2
    # perplexity: paired CIs and verdicts against the base, the calibration effect, the parallel gap
    assert rows[0].ppl_ko_verdict is None and all(row.ppl_ko_verdict for row in rows[1:])
    assert all(row.ppl_faq_gap_ci_low is not None for row in rows[1:]) and rows[0].ppl_faq_gap_pct is None
    assert all(row.ppl_lo_gap_ci_low is not None and row.ppl_lo_ko_verdict for row in rows[1:])
    assert awq.ppl_ko_calib_effect_pct is not None and awq_en.ppl_ko_calib_effect_pct is None
    ppl = {(c.base, c.candidate, c.text_set): c for c in summary.perplexity_comparisons}
    assert len(ppl) == 3 * 6 + 6  # three candidates × six text sets, and ko70 against en100
    assert ppl[("bf16", "w4a16-rtn", "ko")].delta_pct == pytest.approx(rows[3].ppl_ko_delta_pct, abs=1e-3)
    effect_ppl = ppl[("awq-w4a16-en100", "awq-w4a16-ko70", "ko")]
    assert effect_ppl.delta_pct == pytest.approx(awq.ppl_ko_calib_effect_pct, abs=1e-3)
    gaps = [(g.candidate, g.korean) for g in summary.perplexity_gaps]  # one per parallel pair
    assert gaps == [(row.checkpoint, ko) for row in rows[1:] for ko in ("faq_ko", "lo_ko")]
    assert summary.multiplicity == "holm-per-checkpoint"
    bf16_ids = {item.item_id for item in items[("bf16", "kmmlu")]}
    assert bf16_ids == {item.item_id for item in items[("w4a16-rtn", "kmmlu")]}
    assert any(stage.startswith("serve ") for stage in stages)

    # a second run reuses every stage: no build, no server, the same leaderboard
    stages.clear()
    first = board.read_text()
    again = run_eval(cfg, workspace, lambda what, done, total: stages.append(what))
    assert not any(stage.startswith("serve ") for stage in stages)
    assert without_dates(again.read_text()) == without_dates(first)

    # a named run of part of the matrix gets its own leaderboard from the shared stages, no server
    rtn_only = cfg.model_copy(update={"schemes": ("bf16", "w4a16-rtn"), "run": "rtn-only"})
    named = run_eval(rtn_only, workspace, lambda what, done, total: stages.append(what))
    assert named == board.parent / "runs" / "rtn-only" / "leaderboard.csv"
    assert [row.checkpoint for row in read_leaderboard(named)] == ["bf16", "w4a16-rtn"]
    assert read_leaderboard(named)[1].kmmlu_delta == rows[3].kmmlu_delta
    assert "--run rtn-only" in read_leaderboard(named)[0].command
    assert not any(stage.startswith("serve ") for stage in stages)
    assert without_dates(board.read_text()) == without_dates(first)

    # a target the base does not fit (0.2 GiB, below the planner's 0.26 GiB overhead for this eager
    # profile): memory planned for it, items scored through the fallback (this CPU under cpu-ci, the very
    # stages above: no server), and every comparison kept
    targeted = rtn_only.model_copy(update={"run": "target", "gpu_gib": 0.2, "score_profile": "cpu-ci"})
    base_t, rtn_t = read_leaderboard(
        run_eval(targeted, workspace, lambda what, done, total: stages.append(what))
    )
    assert base_t.fits_target is False and base_t.target_pattern and (base_t.target_shortfall_gib or 0) > 0
    assert base_t.memory_source == rtn_t.memory_source == "planner" and base_t.kv_cache_tokens == 0
    assert base_t.score_device == "cpu" and base_t.score_placement == "no GPU on this machine"
    assert base_t.target == "0.2 GiB GPU ×1" and "--gpu-gib 0.2 --score-profile cpu-ci" in base_t.command
    assert (rtn_t.kmmlu_delta, rtn_t.kmmlu_ci_low, rtn_t.kmmlu_verdict) == (
        rows[3].kmmlu_delta,
        rows[3].kmmlu_ci_low,
        rows[3].kmmlu_verdict,
    )
    target_dir = board.parent / "runs" / "target"
    assert "planned for the target (0.2 GiB GPU ×1)" in (target_dir / "report.md").read_text()
    assert (target_dir / "placement.json").is_file()
    assert not any(stage.startswith("serve ") for stage in stages)

    # a checkpoint that fits nowhere: its row says why, with the target's planned memory; the run goes on
    real_place = config.place

    def rtn_fits_nowhere(*args: Any) -> PlacementPlan:
        planned = real_place(*args)
        why = "not scored: does not fit this machine's GPUs"
        moved = [
            p.model_copy(update={"score": None, "reason": why}) if p.checkpoint == "w4a16-rtn" else p
            for p in planned.checkpoints
        ]
        return planned.model_copy(update={"checkpoints": moved})

    monkeypatch.setattr(config, "place", rtn_fits_nowhere)
    nowhere = targeted.model_copy(update={"run": "nowhere"})
    base_n, rtn_n = read_leaderboard(run_eval(nowhere, workspace, lambda what, done, total: None))
    assert base_n.status == "ok" and base_n.kmmlu_acc == rows[0].kmmlu_acc
    assert rtn_n.status == "not scored: does not fit this machine's GPUs" and rtn_n.kmmlu_acc is None
    assert rtn_n.memory_source == "planner" and rtn_n.weights_gib is not None


@pytest.mark.slow
@needs_serve_env
def test_ko_rag_beside_a_quantized_checkpoint_gets_paired_deltas_in_its_row(
    matrix_run: MatrixRun, tmp_path: Path
) -> None:
    """ko_rag (generation and its multiple-choice twin) scored on the matrix's base and RTN checkpoints:
    the RTN row carries ΔF1 with its passage-clustered CI per length, run.json every comparison."""

    write_jsonl(tmp_path / "rag" / "docs.jsonl", DOCS)
    write_jsonl(tmp_path / "rag" / "questions.jsonl", QUESTIONS)
    cfg = matrix_run.cfg.model_copy(
        update={
            "schemes": ("bf16", "w4a16-rtn"),
            "tasks": ("kmmlu", "ko_rag"),
            "run": "rag",
            "rag_data": str(tmp_path / "rag"),
            "rag_conditions": ("retrieved", "closed_book"),
            "rag_lengths": ("1k", "2k"),
        }
    )
    board = run_eval(cfg, matrix_run.ws, lambda what, done, total: None)
    base, rtn = read_leaderboard(board)
    assert base.ko_rag_f1_1k is not None and base.ko_rag_f1_delta_1k is None  # the base is not compared
    for length in ("1k", "2k"):  # the tiny model's 2,048 positions hold these two
        delta, low, high = (
            getattr(rtn, f"ko_rag_f1_{part}{length}") for part in ("delta_", "ci_low_", "ci_high_")
        )
        assert low is not None and high is not None and low <= delta <= high, length
    assert rtn.ko_rag_closed_book_f1 is not None and rtn.ko_rag_gain_delta_1k is not None
    assert (
        rtn.kmmlu_delta is not None and rtn.kmmlu_delta == read_leaderboard(matrix_run.board)[3].kmmlu_delta
    )
    compared = {(c.candidate, c.task) for c in read_record(board.parent / "run.json", RunSummary).comparisons}
    assert {("w4a16-rtn", "ko_rag"), ("w4a16-rtn", "ko_rag_mc"), ("w4a16-rtn", "kmmlu")} <= compared


@pytest.mark.slow
@needs_serve_env
def test_a_checkpoint_the_engine_cannot_load_gets_a_failed_row(
    tiny_model_dir: Path, workspace: Workspace, tmp_path: Path
) -> None:
    write_sources(workspace)
    broken = tmp_path / "broken-llama"
    shutil.copytree(tiny_model_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(config | {"architectures": ["NotARealModelForCausalLM"]}))
    cfg = EvalConfig(model=str(broken), schemes=("bf16",), tasks=("kmmlu", "mmlu"), limit=8, profile="cpu-ci")

    board = run_eval(cfg, workspace, lambda what, done, total: None)

    [row] = read_leaderboard(board)
    assert row.status.startswith("failed: ")
    assert "NotARealModelForCausalLM" in row.status and "doctor: not an OOM" in row.status
    assert "\n" not in row.status and row.kmmlu_acc is None
    assert "bf16" in read_record(board.parent / "run.json", RunSummary).failures


@pytest.mark.slow
@needs_serve_env
def test_load_stage_puts_capacity_in_the_row(
    tiny_model_dir: Path, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_sources(workspace)
    cfg = EvalConfig(
        model=str(tiny_model_dir),
        schemes=("bf16",),
        tasks=("kmmlu", "mmlu"),
        limit=8,
        profile="cpu-ci",
        load=True,
        load_duration_s=3,
    )
    stages: list[str] = []
    board = run_eval(cfg, workspace, lambda what, done, total: stages.append(what))
    [row] = read_leaderboard(board)
    assert row.status == "ok" and row.load_concurrency == load_profile("cpu-ci").max_num_seqs
    assert row.load_output_tokens_per_s and row.load_output_tokens_per_s > 0
    assert row.load_ttft_p99_ms and row.load_ttft_p99_ms > 0 and row.load_preemptions is not None
    assert row.load_goodput_req_per_s is not None
    levels = read_record(board.parent / "run.json", RunSummary).capacity["bf16"].levels
    assert [level.concurrency for level in levels] == [1, 2, 4]  # 1, a step, max-num-seqs
    assert "--load" in row.command and "load bf16" in stages

    stages.clear()
    run_eval(cfg, workspace, lambda what, done, total: stages.append(what))
    assert not any(stage.startswith(("serve ", "load ")) for stage in stages)
    assert "| bf16 | 1 |" in (board.parent / "report.md").read_text(encoding="utf-8")

    # a benchmark that fails (fp8-dynamic on a CPU ran past its limit) leaves the scores standing and
    # says why; the next run measures it again
    (stale,) = board.parent.glob("stages/bf16.*.capacity.json")
    stale.unlink()
    why = "vllm bench serve at concurrency 1 ran past 200 s: lower the time per level"

    def bench_fails(*args: Any, **kwargs: Any) -> None:
        raise UserError(why)

    monkeypatch.setattr(session, "measure_server", bench_fails)
    [failed] = read_leaderboard(run_eval(cfg, workspace, lambda what, done, total: None))
    assert failed.status == "ok" and failed.kmmlu_acc == row.kmmlu_acc
    assert failed.load_output_tokens_per_s is None and failed.load_concurrency is None
    summary = read_record(board.parent / "run.json", RunSummary)
    assert summary.load_failures == {"bf16": why} and not summary.capacity and not summary.failures
    assert f"bf16: not measured: {why}" in (board.parent / "report.md").read_text(encoding="utf-8")
    assert not list(board.parent.glob("stages/bf16.*.capacity.json"))
