"""A `kqe eval` run in its own process group, killed and resumed in one workspace (test_reliability,
test_ray_executor)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from kqe.core.io import read_jsonl
from kqe.core.results import ItemResult
from kqe.core.workspace import Workspace

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
