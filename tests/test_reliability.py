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
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from evals.reporting.leaderboard import read_leaderboard
from kqe.core.io import read_jsonl, read_record
from kqe.core.results import ItemResult, RunSummary
from kqe.core.workspace import Workspace
from tests.conftest import REPO, needs_serve_env
from tests.test_pipeline import write_sources

pytestmark = [pytest.mark.slow, needs_serve_env]

LIMIT = 16
"""Items per task: two requests of 8 per task."""
KILL_GRACE_S = 30.0
"""How long the processes of a killed run may take to go (vLLM gets SIGTERM from setpriv)."""
TOLERANCE = 0.05
"""Largest |log-prob difference| (nats) between two bf16 runs of the same item (batching noise)."""


@dataclass
class Run:
    """One `kqe eval` process group in a workspace."""

    process: subprocess.Popen[bytes]
    stderr: Path

    def text(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, what: str, ready: Callable[[], bool], timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"kqe ended (code {self.process.returncode}) before {what}:\n{self.text()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout_s:.0f} s:\n{self.text()}")
            time.sleep(0.1)

    def wait_paused(self, point: str) -> None:
        self.wait_for(f"pause at {point!r}", lambda: f"kqe: paused at {point}" in self.text())

    def kill_group(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@dataclass
class Chain:
    """The workspace the faults go through, and how to start `kqe eval` in it."""

    ws: Workspace
    model: Path
    # not fp8-dynamic: on CPUs without AMX-FP8 its matmul runs in oneDNN's reference implementation
    # (`ref:any`, 0.07 items/s on the tiny model on this project's machine), past every timeout here
    schemes: str = "bf16,w4a16-rtn"
    runs: int = 0

    @property
    def out(self) -> Path:
        return self.ws.root / "results" / self.model.name

    def start(self, pause_at: str | None = None, pause_s: float | None = None) -> Run:
        self.runs += 1
        env = {**os.environ, "KQE_HOME": str(self.ws.cache), "KQE_SERVE_VENV": str(self.ws.serve_venv)}
        env |= {"COLUMNS": "200", "KQE_PAUSE_AT": pause_at or "", "KQE_PAUSE_S": str(pause_s or "inf")}
        stderr = self.ws.root / f"run{self.runs}.err"
        command = [sys.executable, "-m", "kqe.cli", "eval", "--model", str(self.model)]
        command += ["--schemes", self.schemes, "--tasks", "kmmlu_hard,mmlu", "--limit", str(LIMIT)]
        command += ["--profile", "cpu-ci"]
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                command,
                cwd=self.ws.root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        return Run(process, stderr)

    def processes(self) -> list[str]:
        """Live processes started with this workspace's KQE_HOME (the CLI and everything it started)."""
        found = []
        for process in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if process.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if process.environ().get("KQE_HOME") == str(self.ws.cache):
                    found.append(f"{process.info['pid']} {' '.join(process.info['cmdline'] or [])[:150]}")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + KILL_GRACE_S
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == [], f"processes outlived the killed run: {left}"

    def items(self, checkpoint: str, task: str) -> list[ItemResult]:
        [path] = (self.out / "items" / checkpoint).glob(f"{task}.*.jsonl")
        return read_jsonl(path, ItemResult)

    def stage_files(self, suffix: str) -> list[str]:
        return sorted(path.name for path in (self.out / "stages").glob(f"*{suffix}"))


def write_test_sources(ws: Workspace) -> None:
    """test_pipeline's sources, plus held-out text for the perplexity stage where they lack it."""
    write_sources(ws)
    bills, botchan = ws.sources() / "ko" / "bills", ws.sources() / "en" / "botchan.txt"
    if not list(bills.glob("180989[6-9].txt")):
        (bills / "1809896.txt").write_text(
            (bills / "1809890.txt").read_text(encoding="utf-8"), encoding="utf-8"
        )
    text = botchan.read_text(encoding="utf-8")
    if "CHAPTER X." not in text:
        botchan.write_text(f"CHAPTER I\n\n{text}\nCHAPTER X.\n\n{text}\n--(THE END)--\n", encoding="utf-8")


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
    quantizing = lambda: any("quantize._" in line for line in chain.processes())  # noqa: E731
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
