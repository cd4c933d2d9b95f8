"""Where a run's checkpoints are evaluated: one after another on this machine, or as Ray tasks.

Either way each checkpoint's work is `kqe.pipeline.evaluate.evaluate_checkpoint`, writing to the same
workspace keys, so a run started on one executor resumes on the other with the same results.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from evals.reporting.outcome import CheckpointOutcome
from kqe.core.defaults import EXECUTORS
from kqe.core.errors import UserError
from kqe.pipeline.config import RunMatrix
from kqe.pipeline.evaluate import evaluate_checkpoint


class Executor(Protocol):
    def evaluate(self, matrix: RunMatrix, usual_start_s: float) -> dict[str, CheckpointOutcome]:
        """Every checkpoint of `matrix`, in the matrix's order, by name."""
        ...


@dataclass(frozen=True)
class LocalExecutor:
    """One checkpoint after another in this process (the default)."""

    def evaluate(self, matrix: RunMatrix, usual_start_s: float) -> dict[str, CheckpointOutcome]:
        return {e.name: evaluate_checkpoint(matrix, e, usual_start_s) for e in matrix.plan.entries}


def executor_named(name: str, ray_address: str | None = None) -> Executor:
    """`--executor NAME [--ray-address ADDR]`; UserError for a combination that means nothing."""
    if name == "local":
        if ray_address:
            raise UserError(f"--ray-address {ray_address} needs --executor ray (EXECUTOR=ray in make)")
        return LocalExecutor()
    if name == "ray":
        from kqe.pipeline.ray_executor import RayExecutor  # imports ray only when asked for

        executor = RayExecutor(address=ray_address or os.environ.get("RAY_ADDRESS") or None)
        executor.check()  # before calibrating or building anything
        return executor
    raise UserError(f"--executor {name!r} is not an executor: use one of {', '.join(EXECUTORS)}")
