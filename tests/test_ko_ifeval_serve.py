"""ko_ifeval through `kqe eval` as an lm-eval generation task on the tiny model: served, scored by the
Korean verifiers per item, compared with the base by the paired machinery (slow)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kqe.core.workspace import Workspace
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env

pytestmark = [pytest.mark.slow, needs_serve_env]
LIMIT = 12


def test_kqe_eval_scores_ko_ifeval_with_paired_statistics(tiny_model_dir: Path, tmp_path: Path) -> None:
    from kqe.core.eval_config import EvalConfig
    from kqe.pipeline.run import run_eval
    from tests.helpers.sources import write_sources

    ws = Workspace(root=tmp_path / "project", cache=tmp_path / "cache", serve_venv=REPO / ".venv-serve")
    ws.root.mkdir()
    write_sources(ws)
    cfg = EvalConfig(
        model=str(tiny_model_dir),
        schemes=("bf16", "w4a16-rtn"),
        tasks=("lm-eval:ko_ifeval",),
        include_path=str(REPO / "evals" / "tasks" / "ko_ifeval"),
        limit=LIMIT,
        profile="cpu-ci",
    )
    board = run_eval(cfg, ws, lambda what, done, total: None)
    rows = {row["checkpoint"]: row for row in csv.DictReader(board.open(encoding="utf-8"))}
    base, candidate = rows["bf16"], next(row for name, row in rows.items() if name != "bf16")
    assert candidate["status"] == "ok"
    assert candidate["lmeval_source"].startswith("user ko_ifeval")
    for column in ("acc", "delta", "ci_low", "ci_high", "p", "same_as_base", "hangul_share"):
        assert candidate[f"lmeval_{column}"] != "", column
    assert 0.0 <= float(candidate["lmeval_acc"]) <= 1.0
    assert float(candidate["lmeval_gen_items"]) == LIMIT
    assert float(base["lmeval_same_as_base"]) == 1.0
