"""`--executor ray`: each checkpoint's work (build if missing → serve → score → memory) is one Ray task.

The tasks write per-item files and stage records into the workspace exactly as the local executor does
(same keys: a run resumes on either executor), so KQE_HOME and this checkout with its venvs must be at
the same path on every node, on storage they all see; a probe file checks that on each node before any
work. The driver alone writes the leaderboard, run.json and report, after every task has returned.
A task whose worker or node dies runs again (`RETRIES`) and resumes from its per-item files; Ctrl-C
cancels every task, whose vLLM servers then get their parent-death signal: this executor stops no process
itself, the worker's children each lead their own group under one (`kqe.core.processes`).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evals.reporting.outcome import CheckpointOutcome
from kqe.core.errors import UserError
from kqe.core.io import write_atomic
from kqe.pipeline.config import RunMatrix
from kqe.pipeline.evaluate import checkpoint_outcome, evaluate_checkpoint
from kqe.pipeline.matrix import MatrixEntry

log = logging.getLogger(__name__)

INSTALL = "KQE_EXTRAS=ray make setup (or .venv/bin/pip install --no-deps -r requirements/ray.txt)"
RETRIES = 2
"""Times a checkpoint's task runs again after its worker or node died."""
POLL_S = 0.5
GPU_RESOURCE = "kqe-gpu:{}"
"""Custom resource a node declares (`ray start --resources '{"kqe-gpu:rtx4090": 1}'`) to say which GPU it has:
checkpoints whose memory is measured on the target GPU then run only there."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray needs Ray, which is not installed here: {INSTALL}") from None
    return ray


@dataclass(frozen=True)
class RayExecutor:
    """One Ray task per checkpoint, as many at once as the cluster's resources allow."""

    address: str | None = None
    """Head node address (`host:port` as `ray start --head` prints it, or `auto`); None starts Ray here."""
    retries: int = RETRIES
    """Times a checkpoint's task runs again when its worker or node dies."""
    cpus_per_checkpoint: float = 1.0
    """CPUs a checkpoint served on CPU asks for (on GPU: one CPU and its tensor-parallel GPUs)."""

    def check(self) -> None:
        """Before any work: Ray is installed, and something answers at the address."""
        import_ray()
        if self.address and self.address != "auto":
            check_reachable(self.address)

    def evaluate(self, matrix: RunMatrix, usual_start_s: float) -> dict[str, CheckpointOutcome]:
        ray = import_ray()
        env = {"env_vars": {k: v for k, v in os.environ.items() if k.startswith("KQE_")}}
        if self.address:
            ray.init(address=self.address, runtime_env=env, logging_level=logging.WARNING)
        else:
            ray.init(include_dashboard=False, runtime_env=env, logging_level=logging.WARNING)
        offers = node_offers(ray)
        log.info("Ray cluster: %s", "; ".join(map(describe, offers)))
        probe = matrix.out / f".ray-probe-{secrets.token_hex(8)}"
        write_atomic(probe, probe.name)
        try:
            return self._run_tasks(ray, matrix, usual_start_s, probe, offers)
        finally:
            probe.unlink(missing_ok=True)
            ray.shutdown()

    def _run_tasks(
        self, ray: Any, matrix: RunMatrix, usual_start_s: float, probe: Path, offers: list[dict[str, float]]
    ) -> dict[str, CheckpointOutcome]:
        board = ray.remote(num_cpus=0)(ProgressBoard).remote()
        shared = ray.put(replace(matrix, progress=Relay(board)))
        task, retry = (
            ray.remote(run_checkpoint_task),
            {"max_retries": self.retries, "retry_exceptions": False},
        )
        outcomes: dict[str, CheckpointOutcome] = {}
        running: dict[Any, MatrixEntry] = {}
        for entry in matrix.plan.entries:
            request = self.request(matrix, entry, offers)
            if request is None:  # fits nowhere: its row says why at once, nothing to run
                outcomes[entry.name] = evaluate_checkpoint(matrix, entry, usual_start_s)
            elif unmet := unmet_by(request, offers):
                log.error("%s: %s", entry.name, unmet)
                outcomes[entry.name] = checkpoint_outcome(matrix, entry, f"failed: {unmet}")
            else:
                running[task.options(**request, **retry).remote(shared, entry, usual_start_s, probe)] = entry
        try:
            self._collect(ray, running, board, matrix, outcomes)
        except BaseException:  # Ctrl-C, or a bug in one task: no task may outlive the driver
            for ref in running:
                ray.cancel(ref, force=True)
            raise
        return {entry.name: outcomes[entry.name] for entry in matrix.plan.entries}

    def request(self, matrix: RunMatrix, entry: MatrixEntry, offers: list[dict[str, float]]) -> dict | None:
        """The Ray resources `entry` asks for, from its placement; None when it is scored nowhere."""
        placement = matrix.plan.placement.of(entry.name)
        score = placement.score
        if score is None:
            return None
        if score.device == "cpu":
            return {"num_cpus": self.cpus_per_checkpoint}
        request: dict[str, Any] = {"num_cpus": 1, "num_gpus": score.profile.tensor_parallel_size}
        target = matrix.plan.placement.target
        kind = GPU_RESOURCE.format(target.gpu) if target and target.gpu else None
        if kind and placement.memory_source == "vllm-log" and any(kind in offer for offer in offers):
            request["resources"] = {kind: 0.001}  # only a node that has the target GPU measures its memory
        return request

    def _collect(
        self,
        ray: Any,
        running: dict[Any, MatrixEntry],
        board: Any,
        matrix: RunMatrix,
        outcomes: dict[str, CheckpointOutcome],
    ) -> None:
        pending = list(running)
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            for update in ray.get(board.drain.remote()):
                matrix.progress(*update)
            for ref in done:
                entry = running[ref]
                outcomes[entry.name] = self._result(ray, ref, matrix, entry)

    def _result(self, ray: Any, ref: Any, matrix: RunMatrix, entry: MatrixEntry) -> CheckpointOutcome:
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # raised by our code in the task: as if raised here
            raise exc.cause from None
        except ray.exceptions.RayError as exc:  # its worker or node died on every try
            tries = self.retries + 1
            why = f"its Ray task died {tries} times ({type(exc).__name__}); finished items are kept"
            log.error("%s: %s", entry.name, why)
            return checkpoint_outcome(matrix, entry, f"failed: {why}, re-run to resume")


def run_checkpoint_task(
    matrix: RunMatrix, entry: MatrixEntry, usual_start_s: float, probe: Path
) -> CheckpointOutcome:
    """The Ray task: one checkpoint's work, on a node that sees the run's workspace."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")  # Ray forwards it
    try:
        seen = probe.read_text() == probe.name
    except OSError:
        seen = False
    if not seen:
        raise UserError(
            f"node {socket.gethostname()} does not see this run's workspace {matrix.ws.cache}: put KQE_HOME "
            "on storage every node mounts at the same path (docs/gpu.md, Many GPUs or machines)"
        )
    return evaluate_checkpoint(matrix, entry, usual_start_s)


class ProgressBoard:
    """A Ray actor the tasks report progress to; the driver drains it into its bars (latest per stage)."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[int, int]] = {}

    def report(self, what: str, done: int, total: int) -> None:
        self._latest[what] = (done, total)

    def drain(self) -> list[tuple[str, int, int]]:
        latest, self._latest = self._latest, {}
        return [(what, done, total) for what, (done, total) in latest.items()]


@dataclass(frozen=True)
class Relay:
    """The `progress` callable a task gets: it forwards to the board without waiting."""

    board: Any

    def __call__(self, what: str, done: int, total: int) -> None:
        self.board.report.remote(what, done, total)


def check_reachable(address: str) -> None:
    """UserError (one line, naming the address) unless something listens at `address`."""
    if address.startswith("ray://"):
        raise UserError(
            f"--ray-address {address} is a Ray Client address: give the head's address as "
            "`ray start --head` prints it (host:6379)"
        )
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--ray-address {address!r} is not host:port: give it as `ray start --head` prints")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UserError(
            f"--ray-address {address}: nothing answers there ({exc.strerror or exc}); start the head with "
            "`ray start --head` and give the address it prints"
        ) from None


def node_offers(ray: Any) -> list[dict[str, float]]:
    """Total resources of every live node."""
    return [dict(node["Resources"]) for node in ray.nodes() if node["Alive"]]


def unmet_by(request: dict[str, Any], offers: list[dict[str, float]]) -> str | None:
    """Why no node can run a task asking for `request` (Ray would wait forever); None when one can."""
    need = {"CPU": request.get("num_cpus", 0), "GPU": request.get("num_gpus", 0)}
    need = {name: amount for name, amount in (need | request.get("resources", {})).items() if amount}
    if any(all(offer.get(name, 0) >= amount for name, amount in need.items()) for offer in offers):
        return None
    return f"no node of the Ray cluster has {describe(need)} (its nodes: {'; '.join(map(describe, offers))})"


def describe(resources: dict[str, float]) -> str:
    """`8 CPU, 1 GPU`: what a node has or a task asks for, without Ray's memory and node-name entries."""
    hidden = ("node:", "memory", "object_store_memory")
    shown = sorted((name, amount) for name, amount in resources.items() if not name.startswith(hidden))
    return ", ".join(f"{amount:g} {name}" for name, amount in shown) or "nothing"
