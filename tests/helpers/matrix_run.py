"""test_pipeline's matrix on the tiny model: its configuration, and the run the local executor made of
it (the `matrix_run` fixture of tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kqe.core.workspace import Workspace


@dataclass(frozen=True)
class MatrixRun:
    """test_pipeline's matrix on the tiny model as the local executor first ran it: the run later
    runs resume from (test_pipeline) and other executors must reproduce (test_ray_executor)."""

    ws: Workspace
    cfg: Any
    """Its EvalConfig."""
    board: Path
    stages: list[str]
    """The progress stages it reported, in order."""
    leaderboard: str
    """The leaderboard's text as first written (later runs in `ws` rewrite it)."""
    items: dict[str, list[Any]]
    """`checkpoint/task` → its per-item results (ItemResult) as first written, from run.json."""


def run_items(board: Path) -> dict[str, list[Any]]:
    """The per-item results of every score run listed in the run.json beside `board`."""
    from kqe.core.io import read_jsonl, read_record
    from kqe.core.results import ItemResult, RunSummary

    summary = read_record(board.parent / "run.json", RunSummary)
    return {
        f"{r.checkpoint}/{r.task}": read_jsonl(Path(r.items_path), ItemResult) for r in summary.score_runs
    }


def matrix_config(model: Path) -> Any:
    from kqe.core.eval_config import EvalConfig

    return EvalConfig(
        # w4a16-rtn, not fp8-dynamic: FP8's CPU matmul is oneDNN's reference code without AMX-FP8
        model=str(model),
        schemes=("bf16", "awq-w4a16", "w4a16-rtn"),
        tasks=("kmmlu", "mmlu"),  # ko_rag's pipeline path has its own test (tests/test_ko_rag_serve.py)
        calib_samples=10,
        calib_seq_len=64,
        limit=30,
        profile="cpu-ci",
    )
