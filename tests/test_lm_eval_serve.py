"""lm-eval tasks through the served checkpoint against stock `lm_eval --model hf`, and through `kqe eval`.

The tiny model is served in float32 and lm-eval runs it in float32 (see tests/test_score.py): each
choice's log-likelihood must agree within TOLERANCE nats, and acc and acc_norm on every item, for a
KoBEST-COPA-shaped task (multi-token continuations, the prompt log-probs path) and a letter task (the
one-token read). Both read the same user YAMLs and json files (tests/lm_eval_fixtures.py).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evals.scoring.continuation import score_choices
from evals.scoring.job import ScoringJob
from evals.tasks import lm_eval_bridge
from kqe.core.io import read_jsonl
from kqe.core.results import ItemResult
from kqe.core.workspace import Workspace
from tests.helpers.lm_eval_tasks import write_user_tasks
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.sources import write_sources

TOLERANCE = 1e-3
"""Largest |log-likelihood difference| (nats) allowed between the server and lm-eval hf, float32."""
TASKS = ("kqe_copa_local", "kqe_letters_local")

pytestmark = [pytest.mark.slow, needs_serve_env]


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Path]:
    base = tmp_path_factory.mktemp("lm-eval-serve")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=REPO / ".venv-serve")
    ws.root.mkdir()
    return ws, write_user_tasks(base / "user-tasks")


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, setting: tuple[Workspace, Path]) -> Iterator[Any]:
    from evals.serving.serve import VllmServer, load_profile

    ws = setting[0]
    profile = load_profile("cpu-ci").model_copy(update={"dtype": "float32"})
    with VllmServer(tiny_model_dir, "tiny", profile, ws, ws.root / "logs" / "tiny.log") as running:
        yield running


def _reference(tiny_model_dir: Path, folder: Path) -> dict[str, Any]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    result = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={tiny_model_dir},dtype=float32",
        tasks=list(TASKS),
        task_manager=TaskManager(include_path=str(folder)),
        log_samples=True,
        batch_size=8,
        device="cpu",
    )
    assert result is not None
    return result


def test_per_item_loglikelihoods_equal_lm_eval_hf(
    server: Any, tiny_model_dir: Path, setting: tuple[Workspace, Path]
) -> None:
    ws, folder = setting
    reference = _reference(tiny_model_dir, folder)
    for task in TASKS:
        bridged = lm_eval_bridge.resolve(f"lm-eval:{task}", folder)
        items = lm_eval_bridge.load_prompts(bridged, folder, None, 0)
        path = ws.root / f"{task}.jsonl"
        run = score_choices(items, ScoringJob(tiny_model_dir, server.endpoint, path, "tiny", "test-profile"))
        ours = {result.item_id: result for result in read_jsonl(path, ItemResult)}
        samples = reference["samples"][task]
        assert run.n_items == len(ours) == len(samples) == len(items) == 24
        prompt_of = {item.item_id: item.prompt for item in items}
        for sample in samples:
            result = ours[f"{task}/{sample['doc_id']}"]
            assert sample["arguments"][0][0] == prompt_of[result.item_id]  # byte for byte
            hf = [float(response[0][0]) for response in sample["resps"]]
            assert result.choice_logprobs == pytest.approx(hf, abs=TOLERANCE), result.item_id
            assert float(result.correct) == sample["acc"], result.item_id
            assert float(result.pred_norm == result.gold) == sample["acc_norm"], result.item_id
        assert run.accuracy == pytest.approx(reference["results"][task]["acc,none"])
        assert run.accuracy_norm == pytest.approx(reference["results"][task]["acc_norm,none"])


def test_kqe_eval_scores_a_user_yaml_with_paired_statistics(
    tiny_model_dir: Path, setting: tuple[Workspace, Path]
) -> None:
    from kqe.core.eval_config import EvalConfig
    from kqe.pipeline.run import run_eval

    ws, folder = setting
    write_sources(ws)
    cfg = EvalConfig(
        model=str(tiny_model_dir),
        schemes=("bf16", "w4a16-rtn"),
        tasks=("lm-eval:kqe_copa_local",),
        include_path=str(folder),
        limit=None,
        profile="cpu-ci",
    )
    board = run_eval(cfg, ws, lambda what, done, total: None)
    rows = {row["checkpoint"]: row for row in csv.DictReader(board.open(encoding="utf-8"))}
    candidate = next(row for name, row in rows.items() if name != "bf16")
    assert candidate["status"] == "ok"
    assert (
        candidate["lmeval_source"]
        == f"user kqe_copa_local (json {{'test': '{folder / 'copa.json'}'}}), 24 items"
    )
    for column in ("lmeval_acc", "lmeval_delta", "lmeval_ci_low", "lmeval_ci_high", "lmeval_p", "lmeval_kl"):
        assert candidate[column] != "", column
    assert (
        float(candidate["lmeval_ci_low"])
        <= float(candidate["lmeval_delta"])
        <= float(candidate["lmeval_ci_high"])
    )
    assert rows["bf16"]["lmeval_acc"] != "" and rows["bf16"]["lmeval_delta"] == ""
