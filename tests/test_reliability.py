"""Reliability: `kqe eval` killed with SIGKILL at every stage, and a server that dies mid-scoring.

The real CLI runs the tiny model (bf16 + w4a16-rtn, cpu-ci profile) in its own process group, and
the test kills that whole group with SIGKILL, as `kill -9 -PGID` would. One workspace goes through
the faults in file order, each test starting from what the previous kill left, because that is the
claim under test: any interrupted run leaves a state the next run resumes from.

1. kill while bf16's vLLM server starts
2. kill while bf16 is scoring (the run pauses after its 8th kmmlu_hard item is written)
3. bf16's vLLM server SIGKILLed while scoring: the run restarts it and scores on; then kill while
   w4a16-rtn is being quantized
4. kill while leaderboard.csv is being written
5. the next run finishes without starting a server; every per-item file holds each item once, and
   bf16's (scored across three runs and two servers) agrees with an uninterrupted run's

After every kill, no process of the run survives: every process started with the run's KQE_HOME
(the CLI, vLLM's API server and engine, the quantization child) is gone within KILL_GRACE_S.
Pauses use the KQE_PAUSE_AT hook (kqe/core/faults.py) so that the kill lands at the intended moment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from evals.reporting.leaderboard import read_leaderboard
from kqe.core.io import read_jsonl, read_record
from kqe.core.results import ItemResult, RunSummary
from kqe.core.workspace import Workspace
from tests.helpers.killed_runs import LIMIT, TOLERANCE, Chain
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.sources import write_test_sources

pytestmark = [pytest.mark.slow, needs_serve_env]


@pytest.fixture(scope="module")
def chain(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    base = tmp_path_factory.mktemp("reliability")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=REPO / ".venv-serve")
    ws.root.mkdir()
    write_test_sources(ws)
    made = Chain(ws, tiny_model_dir)
    yield made
    for line in made.processes():  # a failed test must not leave its server running
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


def test_1_kill_while_the_server_starts_leaves_no_server(chain: Chain) -> None:
    run = chain.start()
    pidfiles = lambda: list((chain.out / "logs").glob("bf16.*.pid"))  # noqa: E731
    run.wait_for("a vLLM server", lambda: bool(pidfiles()) and any("vllm" in p for p in chain.processes()))
    time.sleep(3)  # well into vLLM's start-up
    run.kill_group()

    chain.assert_nothing_left()
    assert chain.stage_files(".score.json") == [] and chain.stage_files(".memory.json") == []
    assert not (chain.out / "leaderboard.csv").exists()


def test_2_kill_while_scoring_keeps_the_written_items_once(chain: Chain) -> None:
    run = chain.start(pause_at="scored bf16 kmmlu_hard 8")
    run.wait_paused("scored bf16 kmmlu_hard 8")
    run.kill_group()

    chain.assert_nothing_left()
    written = chain.items("bf16", "kmmlu_hard")
    assert len(written) == 8 and len({item.item_id for item in written}) == 8
    assert chain.stage_files(".score.json") == []  # the task is not recorded as scored


def test_3_a_dead_server_is_restarted_then_a_kill_while_quantizing_keeps_no_checkpoint(chain: Chain) -> None:
    run = chain.start(pause_at="scored bf16 kmmlu_hard 12", pause_s=8)
    run.wait_paused("scored bf16 kmmlu_hard 12")
    [pidfile] = (chain.out / "logs").glob("bf16.*.pid")
    server = psutil.Process(int(pidfile.read_text()))
    server.kill()  # vLLM's API server, SIGKILL: its engine process is left for kqe to clean up
    quantizing = lambda: any("quantize.llmcompressor_child" in line for line in chain.processes())  # noqa: E731
    run.wait_for("the w4a16-rtn quantization child", quantizing)
    run.kill_group()

    chain.assert_nothing_left()
    log = pidfile.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
    assert "restarting it" in run.text() and "[kqe] the server ended unexpectedly" in log
    for task in ("kmmlu_hard", "mmlu"):
        ids = [item.item_id for item in chain.items("bf16", task)]
        assert len(ids) == len(set(ids)) == LIMIT
    checkpoints = chain.ws.checkpoints(chain.model.name)
    assert not [path for path in checkpoints.glob("w4a16-rtn-*") if path.is_dir()]  # no finished folder


def test_4_kill_while_writing_the_leaderboard_leaves_no_torn_csv(chain: Chain) -> None:
    run = chain.start(pause_at="write leaderboard.csv")
    run.wait_paused("write leaderboard.csv")
    run.kill_group()

    chain.assert_nothing_left()
    assert "deleting unfinished" in run.text()  # the quantization the last kill cut short
    assert not (chain.out / "leaderboard.csv").exists()
    assert list(chain.out.glob(".leaderboard.csv.*.tmp"))  # the half-done write, under another name
    assert len(chain.stage_files(".score.json")) == 4


@pytest.fixture(scope="module")
def uninterrupted(chain: Chain, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[ItemResult]]:
    """bf16's per-item results from one `kqe eval` that nothing interrupts."""
    base = tmp_path_factory.mktemp("uninterrupted")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=chain.ws.serve_venv)
    ws.root.mkdir()
    write_test_sources(ws)
    reference = Chain(ws, chain.model, schemes="bf16")
    run = reference.start()
    assert run.process.wait(timeout=600) == 0, run.text()
    return {task: reference.items("bf16", task) for task in ("kmmlu_hard", "mmlu")}


def test_5_the_last_run_completes_and_matches_an_uninterrupted_run(
    chain: Chain, uninterrupted: dict[str, list[ItemResult]]
) -> None:
    run = chain.start()
    assert run.process.wait(timeout=300) == 0, run.text()
    shown = run.text()
    assert "serve bf16" not in shown and "serve w4a16-rtn" not in shown, shown  # no server was needed

    rows = {row.checkpoint: row for row in read_leaderboard(chain.out / "leaderboard.csv")}
    assert [row.status for row in rows.values()] == ["ok", "ok"]
    summary = read_record(chain.out / "run.json", RunSummary)
    for score_run in summary.score_runs:
        items = read_jsonl(Path(score_run.items_path), ItemResult)
        assert len(items) == len({item.item_id for item in items}) == score_run.n_items == LIMIT
        assert score_run.accuracy == sum(item.correct for item in items) / len(items)
    for task, expected in uninterrupted.items():
        resumed = {item.item_id: item for item in chain.items("bf16", task)}
        assert sorted(resumed) == sorted(item.item_id for item in expected)
        for reference in expected:
            ours = resumed[reference.item_id]
            assert ours.choice_logprobs == pytest.approx(reference.choice_logprobs, abs=TOLERANCE)
            top, second = sorted(reference.choice_logprobs, reverse=True)[:2]
            if top - second > 2 * TOLERANCE:
                assert ours.pred == reference.pred, reference.item_id
    assert chain.processes() == []
