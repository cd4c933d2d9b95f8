"""`kqe eval --kv-cache-dtypes` (fast): the KV rows of the matrix, their profiles and plans, and the
one-line errors before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.planning.placement import place, target_from
from evals.planning.vllm_memory import gpu_named
from evals.reporting.kv_report import TITLE as KV_TITLE
from evals.reporting.kv_report import kv_section
from evals.reporting.leaderboard import read_leaderboard
from evals.reporting.report import report_markdown
from evals.serving.cpu import CpuKernels
from evals.serving.hardware import Device, for_device
from evals.serving.serve import load_profile
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.io import read_record
from kqe.core.kv_cache import AUTO
from kqe.core.registry import load_registry
from kqe.core.results import RunSummary
from kqe.core.schemes import scheme_info
from kqe.core.workspace import Workspace
from kqe.pipeline.matrix import (
    MatrixEntry,
    calibration_references,
    default_kv_checkpoints,
    kv_references,
    kv_variants,
    plan_matrix,
)
from kqe.pipeline.run import run_eval
from tests.helpers.cli import invoke_kqe
from tests.helpers.leaderboard_rows import row as board_row
from tests.helpers.leaderboard_rows import with_cells
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.sources import write_sources

GEMMA = load_registry()["gemma3-270m"]
AMX = Device("cpu", cpu_kernels=CpuKernels("_C", w4a16=True))
NEEDS_CALIBRATION = {"awq-w4a16": True, "w4a16-rtn": False, "fp8-dynamic": False}


def matrix() -> list[MatrixEntry]:
    schemes = ("bf16", "fp8-dynamic", "awq-w4a16", "w4a16-rtn")
    return plan_matrix(schemes, ("ko70", "en100"), NEEDS_CALIBRATION.__getitem__)


def bits(scheme: str) -> int:
    return scheme_info(scheme).bits


def test_by_default_the_base_and_the_first_4bit_checkpoint_get_kv_rows() -> None:
    entries = matrix()
    assert default_kv_checkpoints(entries, bits) == ["bf16", "awq-w4a16-ko70"]
    only_8bit = plan_matrix(("bf16", "fp8-dynamic"), ("ko70",), NEEDS_CALIBRATION.__getitem__)
    assert default_kv_checkpoints(only_8bit, bits) == ["bf16"]


def test_kv_rows_serve_the_weights_they_name_each_with_its_dtype() -> None:
    entries = matrix()
    rows = kv_variants(entries, (AUTO, "fp8", "fp8_e5m2"), ["bf16", "w4a16-rtn"])
    assert [row.name for row in rows] == [
        "bf16+kv-fp8", "bf16+kv-fp8_e5m2", "w4a16-rtn+kv-fp8", "w4a16-rtn+kv-fp8_e5m2",
    ]  # fmt: skip
    rtn = next(entry for entry in entries if entry.name == "w4a16-rtn")
    for row in rows:
        source = next(entry for entry in entries if entry.name == row.weights)
        assert (row.scheme, row.mix, row.built_as) == (source.scheme, source.mix, source.name)
        assert row.kv_cache_dtype != AUTO
    assert kv_references([*entries, *rows]) == {row.name: row.weights for row in rows}
    assert rtn.built_as == "w4a16-rtn" and rtn.kv_cache_dtype == AUTO


def test_a_kv_checkpoint_the_run_does_not_build_is_one_line_naming_the_ones_it_does() -> None:
    with pytest.raises(UserError) as err:
        kv_variants(matrix(), (AUTO, "fp8"), ["bf16", "awq-w4a16"])
    message = str(err.value)
    assert "\n" not in message and "--kv-checkpoints" in message and "awq-w4a16-ko70" in message


def test_a_kv_row_is_scored_and_planned_with_its_dtype_and_nothing_else_changed() -> None:
    profile = for_device(load_profile("cpu-small"), AMX)
    formats = {"bf16": "bf16", "bf16+kv-fp8": "bf16"}
    kv = {"bf16": AUTO, "bf16+kv-fp8": "fp8"}
    here = place(GEMMA, formats, None, AMX, profile, None, kv)
    auto, fp8 = (here.of(name).score for name in formats)
    assert auto is not None and fp8 is not None
    assert (auto.profile.kv_cache_dtype, fp8.profile.kv_cache_dtype) == (AUTO, "fp8")
    assert auto.profile.model_copy(update={"kv_cache_dtype": "fp8"}) == fp8.profile
    assert auto.profile.key != fp8.profile.key  # its stage files are its own
    target = target_from(gpu_named("rtx4090"), None, load_profile("rtx4090-16k"))
    planned = place(GEMMA, formats, target, AMX, target.profile, profile, kv)
    plans = [planned.of(name).target_plan for name in formats]
    assert plans[0] is not None and plans[1] is not None
    assert plans[1].kv_bytes_per_token * 2 == plans[0].kv_bytes_per_token
    assert plans[1].max_concurrency > 1.9 * plans[0].max_concurrency


def test_the_dry_run_lists_each_kv_row_with_the_kv_dtype_it_is_served_with(
    monkeypatch: pytest.MonkeyPatch, home_with_sources: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    asked = ["eval", "--model", str(tiny_model_dir), "--schemes", "bf16,w4a16-rtn", "--tasks", "mmlu"]
    asked += ["--limit", "8", "--kv-cache-dtypes", "auto,fp8", "--dry-run", "--json"]
    plan = json.loads(invoke_kqe(monkeypatch, home_with_sources, tmp_path, asked).stdout)
    served = {c["name"]: (c["scheme"], c["score_placement"]["kv_cache_dtype"]) for c in plan["checkpoints"]}
    assert served == {
        "bf16": ("bf16", AUTO),
        "w4a16-rtn": ("w4a16-rtn", AUTO),
        "bf16+kv-fp8": ("bf16", "fp8"),
        "w4a16-rtn+kv-fp8": ("w4a16-rtn", "fp8"),
    }


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--kv-cache-dtypes", "auto,fp4"], ("--kv-cache-dtypes", "'fp4'", "fp8_e4m3")),
        (["--kv-cache-dtypes", "auto,fp8", "--kv-checkpoints", "awq"], ("--kv-checkpoints", "'awq'", "bf16")),
        (["--kv-checkpoints", "bf16"], ("--kv-checkpoints", "--kv-cache-dtypes")),
    ],
)
def test_bad_kv_input_is_one_line_before_anything_is_built(
    monkeypatch: pytest.MonkeyPatch,
    home_with_sources: Path,
    tiny_model_dir: Path,
    tmp_path: Path,
    extra: list[str],
    needles: tuple[str, ...],
) -> None:
    asked = ["eval", "--model", str(tiny_model_dir), "--tasks", "mmlu", "--limit", "8", *extra]
    result = invoke_kqe(monkeypatch, home_with_sources, tmp_path, asked)
    assert result.exit_code != 0
    said = [line for line in result.output.splitlines() if line.strip()]
    assert len(said) == 1 and all(needle in said[0] for needle in needles), result.output
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.json"))


@pytest.mark.slow
@needs_serve_env
def test_an_fp8_kv_row_is_served_by_vllm_with_twice_the_kv_tokens_and_paired_with_its_weights_at_auto(
    tiny_model_dir: Path, workspace: Workspace
) -> None:
    """The tiny model's base at auto and fp8 KV through vLLM: the fp8 row's log counts about twice the
    tokens in the same pool (what the planner says), its items are paired with the auto row's."""
    write_sources(workspace)
    cfg = EvalConfig(
        model=str(tiny_model_dir),
        schemes=("bf16",),
        tasks=("kmmlu",),
        limit=8,
        profile="cpu-ci",
        kv_cache_dtypes=("auto", "fp8"),
    )
    board = run_eval(cfg, workspace, lambda what, done, total: None)
    rows = {row.checkpoint: row for row in read_leaderboard(board)}
    auto, fp8 = rows["bf16"], rows["bf16+kv-fp8"]
    assert fp8.status == "ok" and (auto.kv_cache_dtype, fp8.kv_cache_dtype) == (AUTO, "fp8")
    assert fp8.kv_effect_vs == "bf16" and fp8.kmmlu_kv_effect is not None
    assert fp8.kmmlu_kv_effect == pytest.approx(fp8.kmmlu_acc - auto.kmmlu_acc)
    assert auto.kv_cache_tokens and fp8.kv_cache_tokens
    assert 1.9 < fp8.kv_cache_tokens / auto.kv_cache_tokens < 2.1
    summary = read_record(board.parent / "run.json", RunSummary)
    assert "--kv-cache-dtypes auto,fp8" in summary.command
    assert summary.memory["bf16+kv-fp8"].kv_cache_gib == summary.memory["bf16"].kv_cache_gib  # same pool


def test_the_report_sets_each_kv_row_beside_its_weights_at_auto_per_task_and_per_length() -> None:
    auto = with_cells(
        board_row("bf16", "bf16", "none", 0.0, 0.5), {"kv_cache_tokens": 1000, "ko_rag_f1_4k": 0.5}
    )
    fp8 = with_cells(
        board_row("bf16+kv-fp8", "bf16", "none", -0.02, 0.5),
        {
            "kv_cache_dtype": "fp8", "kv_effect_vs": "bf16", "kv_cache_tokens": 2000, "ko_rag_f1_4k": 0.4,
            "kmmlu_kv_effect": -0.02, "kmmlu_kv_effect_ci_low": -0.05, "kmmlu_kv_effect_ci_high": 0.01,
            "kmmlu_kv_effect_p": 0.3,
        },
    )  # fmt: skip
    assert kv_section([auto]) == []
    text = "\n".join(kv_section([auto, fp8]))
    assert "| bf16+kv-fp8 | fp8 | bf16 | -2.0 [-5.0, +1.0]" in text and "2,000 (2.00×)" in text
    assert "| 4k |" in text and "0.500 → 0.400" in text and "| 1k |" not in text
    report = report_markdown([auto, fp8], None, None, {}, {})
    assert f"## {KV_TITLE}" in report


def test_a_kv_row_is_paired_with_its_weights_at_auto_not_with_a_calibration_control() -> None:
    entries = matrix()
    rows = kv_variants(entries, (AUTO, "fp8"), ["awq-w4a16-ko70", "awq-w4a16-en100"])
    references = calibration_references([*entries, *rows], {"ko70": 0.7, "en100": 0.0})
    assert references == {"awq-w4a16-ko70": "awq-w4a16-en100"}
