"""What every scorer of a task takes alike: where the tokenizer, server and per-item file are, and
whose results they are.

A frozen dataclass rather than a `Record`: it carries a progress callback, which is no data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evals.serving.endpoint import Endpoint


@dataclass(frozen=True)
class ScoringJob:
    """One task's scoring of one served checkpoint, as the letter, continuation and generation
    scorers all take it."""

    tokenizer_dir: Path
    """The checkpoint's folder, whose tokenizer encodes the prompts as the server reads them."""
    endpoint: Endpoint
    """The running server that scores them."""
    items_path: Path
    """The per-item results file: appended to as items finish, and what a re-run resumes from."""
    checkpoint: str
    """The checkpoint's name, written into the task's ScoreRun."""
    profile_key: str
    """The key of the serving profile it was scored under, written into the ScoreRun."""
    concurrency: int = 8
    """Requests in flight at most."""
    progress: Callable[[int, int], None] | None = None
    """Called with (items done, items in all) at the start and after each finished item."""
