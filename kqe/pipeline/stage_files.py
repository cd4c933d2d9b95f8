"""Where one checkpoint's served results are kept: every stage file keyed by what it depends on.

A checkpoint's work (`evaluate.py`) writes them, the run (`run.py`) reads them; the up-front plan
(`preview.py`) only asks which exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evals.scoring import perplexity
from evals.serving import hardware
from kqe.core.capacity import CapacityReport
from kqe.core.io import read_record
from kqe.core.records import Checkpoint, MemoryReport, content_hash
from kqe.core.results import ScoreRun
from kqe.pipeline.config import RunMatrix
from quantize import catalog, dequantize


@dataclass(frozen=True)
class StageFiles:
    """One checkpoint's stage files under `results/<model>/` for this run's items and profile."""

    key: str
    """Hash of what every served result depends on (build, scoring profile, dequantized or not)."""
    memory: Path
    """What vLLM reserved (MemoryReport)."""
    runs: dict[str, Path]
    """Task → its ScoreRun record, keyed by the task's items too."""
    items: dict[str, Path]
    """Task → its per-item JSON Lines file."""
    circular_runs: dict[str, Path]
    """Task → the ScoreRun of its rotated items (`--circular`), keyed by them; empty without it."""
    circular_items: dict[str, Path]
    """Task → the per-item file of its rotated items (`<item_id>@rot<r>`), keyed as its ScoreRun."""
    load: Path
    """Capacity under load (CapacityReport, from `vllm bench serve`)."""
    load_wanted: bool
    """Whether this run measures load for it (asked for, and its memory is measured, natively)."""
    perplexity: Path
    """Perplexity on the held-out text (Perplexity)."""
    log: Path
    """The server's log."""

    def finished_runs(self) -> dict[str, ScoreRun]:
        """The tasks already scored whose per-item file is still there."""
        runs = {task: read_record(path, ScoreRun) for task, path in self.runs.items() if path.exists()}
        return {task: run for task, run in runs.items() if Path(run.items_path).exists()}

    def finished_circular(self) -> dict[str, ScoreRun]:
        """The tasks whose rotated items are all scored and still there."""
        runs = {
            task: read_record(path, ScoreRun) for task, path in self.circular_runs.items() if path.exists()
        }
        return {task: run for task, run in runs.items() if Path(run.items_path).exists()}

    def load_done(self) -> bool:
        return not self.load_wanted or self.load.exists()

    def complete(self) -> bool:
        """Whether nothing is left to serve this checkpoint for."""
        finished = len(self.finished_runs()) == len(self.runs)
        finished &= len(self.finished_circular()) == len(self.circular_runs)
        return self.memory.exists() and finished and self.load_done() and self.perplexity.exists()

    def capacity(self) -> CapacityReport | None:
        return read_record(self.load, CapacityReport) if self.load.exists() else None

    def memory_report(self) -> MemoryReport:
        return read_record(self.memory, MemoryReport)


def servability(matrix: RunMatrix, ckpt: Checkpoint) -> hardware.Verdict:
    """Whether the engine and device of this machine serve `ckpt` under its scoring profile, and how:
    its weights' verdict, unless the profile's KV-cache dtype is one the engine cannot store here."""
    device, profile = hardware.local_device(matrix.ws.serve_venv), matrix.score_profile(ckpt.name)
    weights = hardware.check_checkpoint(Path(ckpt.path), device, profile.dtype)
    kv = hardware.kv_servability(profile.kv_cache_dtype, device, matrix.plan.spec.head_dim)
    return weights if kv.servable or not weights.servable else kv


def stage_files(matrix: RunMatrix, ckpt: Checkpoint) -> StageFiles:
    """The stage files of `ckpt` in this run (nothing is read or written)."""
    dequantized = servability(matrix, ckpt).dequantize
    parts: list[str | dict] = [ckpt.key, matrix.score_profile(ckpt.name).key]
    if dequantized:  # a native run keys as it always did
        parts.append({"served": "dequantized", "dequantizer": dequantize.DEQUANTIZER_VERSION})
    key = content_hash(*parts)
    stages, name = matrix.out / "stages", ckpt.name
    # keyed by the items too: another --limit or seed scores (and resumes) a different file
    task_items = {t: [p.item_id for p in ps] for t, ps in matrix.prompts.items()}
    task_items |= matrix.rag.stage_items() if matrix.rag else {}
    task_items |= {task: generation.stage_items() for task, generation in matrix.generation.items()}
    task_keys = {t: content_hash(key, ids) for t, ids in task_items.items()}
    # no --circular, no circular key: every other file keys as it did before it existed
    circular_keys = {t: content_hash(key, [p.item_id for p in ps]) for t, ps in matrix.circular.items()}
    held_out = catalog.holdout_documents(matrix.ws)
    texts = {name: perplexity.documents_sha(documents) for name, documents in held_out.items()}
    ppl_key = content_hash(*parts, texts, [perplexity.WINDOW_TOKENS, perplexity.MAX_TOKENS, "windows"])
    # capacity under load belongs to the real format's kernel and the target GPU: measured only there
    planned = matrix.plan.placement.of(name).memory_source == "planner"
    return StageFiles(
        key=key,
        memory=stages / f"{name}.{key}.memory.json",
        runs={task: stages / f"{name}.{task}.{k}.score.json" for task, k in task_keys.items()},
        items={task: matrix.out / "items" / name / f"{task}.{k}.jsonl" for task, k in task_keys.items()},
        circular_runs={t: stages / f"{name}.{t}.circular.{k}.score.json" for t, k in circular_keys.items()},
        circular_items={
            t: matrix.out / "items" / name / f"{t}.circular.{k}.jsonl" for t, k in circular_keys.items()
        },
        load=stages / f"{name}.{key}.capacity.json",
        load_wanted=matrix.cfg.load and not (dequantized or planned),
        perplexity=stages / f"{name}.{ppl_key}.perplexity.json",
        log=matrix.out / "logs" / f"{name}.{key}.log",
    )
