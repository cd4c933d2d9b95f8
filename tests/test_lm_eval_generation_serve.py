"""lm-eval generation tasks through the served checkpoint against stock `lm_eval --model
local-completions` on the same server: the same prompts, the same generations and the same filtered
answers (the correctness reference of the generation path), and the per-item file holding what a
user reads an answer by (raw text, filtered answer, metrics, token ids, finish reason, fidelity)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evals.scoring.job import ScoringJob
from evals.scoring.lm_eval_generate import score_lm_eval_generation
from evals.tasks import lm_eval_bridge
from evals.tasks.lm_eval_generation import GenerationJudge, generation_task
from kqe.core.io import read_jsonl
from kqe.core.results import ItemResult
from kqe.core.workspace import Workspace
from tests.helpers.lm_eval_generation_tasks import write_generation_tasks
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env

TASKS = ("kqe_gen_medmcqa_local", "kqe_gen_short_local")
AGREEMENT = 0.99
"""Share of items whose filtered answer must equal lm-eval's (the issue's bar)."""

pytestmark = [pytest.mark.slow, needs_serve_env]


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Path]:
    base = tmp_path_factory.mktemp("lm-eval-gen-serve")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=REPO / ".venv-serve")
    ws.root.mkdir()
    return ws, write_generation_tasks(base / "user-tasks")


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, setting: tuple[Workspace, Path]) -> Iterator[Any]:
    from evals.serving.serve import VllmServer, load_profile

    ws = setting[0]
    profile = load_profile("cpu-ci").model_copy(update={"dtype": "float32"})
    with VllmServer(tiny_model_dir, "tiny", profile, ws, ws.root / "logs" / "tiny.log") as running:
        yield running


def _local_completions(
    server: Any, tiny_model_dir: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Stock lm-eval's API model against the same server, as its docs say to run it (its key from
    OPENAI_API_KEY)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("OPENAI_API_KEY", server.endpoint.api_key)
    args = (
        f"model=tiny,base_url={server.endpoint.base_url}/v1/completions,tokenizer={tiny_model_dir},"
        "tokenized_requests=True,add_bos_token=True,num_concurrent=4,max_retries=2"
    )
    result = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=args,
        tasks=list(TASKS),
        task_manager=TaskManager(include_path=str(folder)),
        log_samples=True,
    )
    assert result is not None
    return result


def test_generations_and_filtered_answers_equal_lm_eval_local_completions(
    server: Any, tiny_model_dir: Path, setting: tuple[Workspace, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, folder = setting
    reference = _local_completions(server, tiny_model_dir, folder, monkeypatch)
    for task in TASKS:
        bridged = lm_eval_bridge.resolve(f"lm-eval:{task}", folder)
        items = list(generation_task(bridged, folder, None, 0).items)
        path = ws.root / f"{task}.jsonl"
        job = ScoringJob(tiny_model_dir, server.endpoint, path, "tiny", "test-profile", concurrency=4)
        run = score_lm_eval_generation(items, job, GenerationJudge(bridged, folder), seed=0)
        ours = {result.item_id: result for result in read_jsonl(path, ItemResult)}
        assert run.n_items == len(ours) == len(items)
        headline_filter = next(iter(ours.values())).metrics and bridged.metrics[0].split(",")[1]
        samples = [s for s in reference["samples"][task] if s["filter"] == headline_filter]
        assert len(samples) == len(items)
        same_text = same_answer = 0
        for sample in samples:
            result = ours[f"{task}/{sample['doc_id']}"]
            assert sample["arguments"][0][0] == next(i.prompt for i in items if i.item_id == result.item_id)
            same_text += result.generated == sample["resps"][0][0]
            same_answer += result.filtered == sample["filtered_resps"][0]
        assert same_answer / len(samples) >= AGREEMENT, (task, same_answer, len(samples))
        assert same_text / len(samples) >= AGREEMENT, (task, same_text, len(samples))
        metric = bridged.metrics[0].split(",")[0]
        assert run.accuracy == pytest.approx(
            reference["results"][task][f"{metric},{headline_filter}"], abs=0.05
        )


def test_per_item_file_keeps_what_an_answer_is_read_by(
    server: Any, tiny_model_dir: Path, setting: tuple[Workspace, Path]
) -> None:
    ws, folder = setting
    bridged = lm_eval_bridge.resolve("lm-eval:kqe_gen_short_local", folder)
    items = list(generation_task(bridged, folder, 6, 0).items)
    path = ws.root / "resumed.jsonl"
    job = ScoringJob(tiny_model_dir, server.endpoint, path, "tiny", "test-profile", concurrency=2)
    judge = GenerationJudge(bridged, folder)
    score_lm_eval_generation(items[:3], job, judge, seed=0)
    first = {result.item_id: result for result in read_jsonl(path, ItemResult)}
    run = score_lm_eval_generation(items, job, judge, seed=0)  # resumes: only the 3 new ones are sent
    results = {result.item_id: result for result in read_jsonl(path, ItemResult)}
    assert run.n_items == len(results) == 6
    assert all(results[item_id] == result for item_id, result in first.items())
    for result in results.values():
        assert result.generated is not None and result.filtered is not None
        assert set(result.metrics) == {
            f"{m},{f}" for f in ("raw", "first-word") for m in ("exact_match", "chrf")
        }
        assert result.generated_ids and len(result.generated_ids) <= 12
        assert result.finish_reason in ("stop", "length")
        assert result.code_switch is not None  # the prompts are Korean
        assert result.correct == (result.metrics["exact_match,raw"] == 1.0)


def test_kqe_eval_scores_a_generation_task_with_paired_statistics_divergence_and_fidelity(
    tiny_model_dir: Path, setting: tuple[Workspace, Path]
) -> None:
    import csv

    from kqe.core.eval_config import EvalConfig
    from kqe.pipeline.run import run_eval
    from tests.helpers.sources import write_sources

    ws, folder = setting
    write_sources(ws)
    cfg = EvalConfig(
        model=str(tiny_model_dir),
        schemes=("bf16", "w4a16-rtn"),
        tasks=("lm-eval:kqe_gen_short_local",),
        include_path=str(folder),
        limit=None,
        profile="cpu-ci",
    )
    board = run_eval(cfg, ws, lambda what, done, total: None)
    rows = {row["checkpoint"]: row for row in csv.DictReader(board.open(encoding="utf-8"))}
    base, candidate = rows["bf16"], next(row for name, row in rows.items() if name != "bf16")
    assert candidate["status"] == "ok"
    assert candidate["lmeval_source"].startswith("user kqe_gen_short_local (json")
    for column in ("acc", "delta", "ci_low", "ci_high", "p", "same_as_base", "chrf_vs_base", "hangul_share"):
        assert candidate[f"lmeval_{column}"] != "", column
    for column in ("hangul_share_delta", "code_switch_rate", "code_switch_delta", "score_delta"):
        low, value, high = (float(candidate[f"lmeval_{column}{end}"]) for end in ("_ci_low", "", "_ci_high"))
        assert low <= value <= high, column
    assert 0.0 <= float(candidate["lmeval_same_as_base"]) <= 1.0
    assert candidate["lmeval_score_metric"] == "chrf,raw"
    assert float(candidate["lmeval_gen_items"]) == 16
    assert float(base["lmeval_same_as_base"]) == 1.0 and base["lmeval_hangul_share_delta"] == ""
    assert base["lmeval_acc"] != "" and base["lmeval_delta"] == ""
