"""The scored multiple-choice tasks, prepared as data for the lm-eval YAMLs in evals/tasks/.

Items come from `evals.benchmark_data` (offline files by default, the pinned hub datasets or a local
copy of them when asked), are sampled (subject-stratified, seeded), get their k-shot examples, and are
written as JSON Lines into a cache folder keyed by their inputs. lm-eval's own task objects then turn
them into prompts, so the text our scorer sends is byte for byte what
`lm_eval --include_path evals/tasks --tasks kqe_kmmlu` sends.

- `kmmlu`, `kmmlu_5shot`: KMMLU. Online, the 45-subject test split, shots = the subject's dev items in
  order (lm-eval's `first_n` sampler). Offline, the KMMLU-HARD dev set (225 items, 45 x 5): the shots
  of an item are the same subject's other dev items, so at most 4, and never the item itself.
- `kmmlu_hard`: always the offline KMMLU-HARD dev set, 0-shot.
- `mmlu`, `mmlu_5shot`: MMLU test (57 subjects); shots from the dev split online, offline the
  subject's first other test items.
Shots are written into each row (`shots`) and rendered by the YAML, so a prompt depends on its row
alone and a k-shot prompt can be checked never to hold the item it scores. Each prepared task also
gets `<task>.source.json`, whose `label` says which items these are (it goes into every output).
"""

from __future__ import annotations

import itertools
import json
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.tasks import benchmark_data as data
from evals.tasks.registry import (
    LM_EVAL_PREFIX,
    LM_EVAL_TASKS,
    TASK_SPECS,
    TASKS,
    TaskSpec,
    column_prefix,
    fills_task_columns,
    is_lm_eval_task,
)
from kqe.core.errors import UserError
from kqe.core.io import loads_json, write_atomic
from kqe.core.records import content_hash
from kqe.core.workspace import Workspace

log = logging.getLogger(__name__)


TASKS_DIR = Path(__file__).resolve().parent
"""lm-eval `--include_path` holding our task YAMLs."""
DATA_FORMAT = 2
"""Bump when the prepared rows change shape or meaning: it is part of the cache key."""


@dataclass(frozen=True)
class PromptItem:
    """One item as lm-eval would send it: the context and the continuation of each choice."""

    task: str
    """Our task name (`kmmlu`, `mmlu_5shot`, …)."""
    subject: str
    """Subject within the task, e.g. `high_school_biology`."""
    item_id: str
    """Identifier stable across runs, limits and checkpoints."""
    prompt: str
    """Exact context string lm-eval builds (description, shots and question included)."""
    continuations: tuple[str, ...]
    """Continuation of each choice exactly as lm-eval appends it (target delimiter included)."""
    gold: int
    """Index of the correct choice."""
    choice_chars: tuple[int, ...] = ()
    """Length in characters of each choice's text (lm-eval's `acc_norm` divisor); empty when every
    choice is one letter, where acc_norm is acc."""


def _allocate(sizes: dict[str, int], limit: int, rng: random.Random) -> dict[str, int]:
    """Items per subject: proportional (largest remainder), at least one each when limit allows."""
    subjects = sorted(sizes)
    floor_each = 1 if limit >= len(subjects) else 0
    spare = limit - floor_each * len(subjects)
    pool = {s: sizes[s] - floor_each for s in subjects}
    total = sum(pool.values())
    quota = {s: spare * pool[s] / total for s in subjects}
    counts = {s: floor_each + int(quota[s]) for s in subjects}
    tie_order = {s: rng.random() for s in subjects}
    by_remainder = sorted(subjects, key=lambda s: (-(quota[s] - int(quota[s])), tie_order[s]))
    for subject in by_remainder[: limit - sum(counts.values())]:
        counts[subject] += 1
    return counts


def check_limit(limit: int | None) -> None:
    """A UserError for a limit below 1."""
    if limit is not None and limit < 1:
        raise UserError(f"--limit {limit}: give a number of items per task (at least 1), or 0 for every item")


def stratified_sample(rows: list[dict[str, Any]], limit: int | None, seed: int) -> list[dict[str, Any]]:
    """`limit` rows spread over subjects in proportion to their size; the same for the same seed.

    Returned in source order. `limit` None or at least the row count keeps every row.
    """
    check_limit(limit)
    if limit is None or limit >= len(rows):
        return list(rows)
    positions: dict[str, list[int]] = defaultdict(list)
    for position, row in enumerate(rows):
        positions[row["subject"]].append(position)
    counts = _allocate({s: len(p) for s, p in positions.items()}, limit, random.Random(seed))
    chosen = []
    for subject, count in counts.items():
        chosen += random.Random(f"{seed}/{subject}").sample(positions[subject], count)
    return [rows[position] for position in sorted(chosen)]


def check_tasks(tasks: list[str]) -> None:
    """Known task names (or `lm-eval:<name>`, resolved later), at most one per leaderboard column
    prefix; anything else is a UserError."""
    unknown = [task for task in tasks if task not in TASKS and not is_lm_eval_task(task)]
    known = f"{', '.join(TASKS)}, or {LM_EVAL_PREFIX}<task> (`kqe tasks` lists them)"
    if not tasks:
        raise UserError(f"--tasks names no task: choose from {known}")
    if unknown:
        raise UserError(f"unknown task(s) {unknown}: choose from {known}")
    by_columns: dict[str, list[str]] = defaultdict(list)
    for task in dict.fromkeys(filter(fills_task_columns, tasks)):
        by_columns[column_prefix(task)].append(task)
    for prefix, clash in by_columns.items():
        if len(clash) > 1:
            raise UserError(
                f"tasks {' and '.join(clash)} both fill the {prefix}_* leaderboard columns: "
                "score one of them per run"
            )


def _only_choice_tasks(tasks: list[str]) -> None:
    other = [task for task in tasks if task not in TASK_SPECS]
    if other:
        raise UserError(
            f"--tasks {','.join(other)}: only the registry's multiple-choice tasks ({', '.join(TASK_SPECS)}) "
            "are prepared here (the calibration guard reads their items): leave the others out"
        )


def with_shots(rows: list[dict[str, Any]], pool: list[dict[str, Any]], shots: int) -> list[dict[str, Any]]:
    """Rows with `shots`: the first `shots` items of their subject in `pool` that are not the row's own
    item (same question and choices: the item itself, or a verbatim repeat of it)."""
    by_subject: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for candidate in pool:
        example = {k: v for k, v in candidate.items() if k not in ("item_id", "subject")}
        by_subject[candidate["subject"]].append((data.content_key(candidate), example))
    out = []
    for row in rows:
        own = data.content_key(row)
        others = (example for key, example in by_subject[row["subject"]] if key != own)
        out.append({**row, "shots": list(itertools.islice(others, shots))})
    return out


def _label(source: data.Source, spec: TaskSpec, n_source: int, rows: list[dict[str, Any]], seed: int) -> str:
    """What the scored items are, e.g. `KMMLU-HARD dev (offline, 225 items), 0-shot`."""
    label = f"{source.name} ({source.where}, {n_source:,} items), "
    if spec.shots == 0:
        label += "0-shot"
    else:
        counts = sorted({len(row["shots"]) for row in rows})
        k = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        origin = "from the dev split" if source.shots_split == "dev" else "from the subject's other items"
        label += f"{k}-shot {origin}"
    if len(rows) < n_source:
        label += f"; {len(rows):,} sampled across subjects (seed {seed})"
    return label


def prepare_tasks(
    ws: Workspace, tasks: list[str], limit: int | None, seed: int, online: bool = False
) -> Path:
    """Write `<task>.jsonl` and `<task>.source.json` for each task into `ws.cache/tasks/<key>/`; return
    that folder. `online`: the hub's full test sets where a task has them (`evals.tasks.item_sets`).

    The key hashes the tasks, limit, seed, data format and source identities (file hashes, or hub id
    and pinned revision), so a re-run with the same inputs reuses the folder without reading the
    source, and any change gets a new one.
    """
    sources = task_sources(ws, tasks, online)
    out = _prepared_dir(ws, sources, limit, seed)
    for task, source in sources.items():
        path, meta = out / f"{task}.jsonl", out / f"{task}.source.json"
        if _prepared(out, task):
            continue
        spec = TASK_SPECS[task]
        loaded = source.load(task)
        sample = stratified_sample(loaded.test, limit, seed)
        if spec.shots:
            sample = with_shots(sample, loaded.shots, spec.shots)
        label = _label(source, spec, len(loaded.test), sample, seed)
        info = {"label": label, "items": len(sample), "source_items": len(loaded.test), "shots": spec.shots}
        write_atomic(meta, json.dumps(info, ensure_ascii=False, indent=2) + "\n")
        write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in sample))
        log.info("%s: %s -> %s", task, label, path)
    return out


def task_sources(ws: Workspace, tasks: list[str], online: bool) -> dict[str, data.Source]:
    """Where each choice task's items come from in this run; nothing is read yet."""
    check_tasks(tasks)
    _only_choice_tasks(tasks)
    return {task: TASK_SPECS[task].source(ws, online) for task in tasks}


def to_download(ws: Workspace, tasks: list[str], limit: int | None, seed: int, online: bool) -> list[str]:
    """`repo@revision` of each hub dataset `prepare_tasks` would download (none once prepared)."""
    if not tasks:
        return []
    sources = task_sources(ws, tasks, online)
    out = _prepared_dir(ws, sources, limit, seed)
    return list(dict.fromkeys(s.hub for t, s in sources.items() if s.hub and not _prepared(out, t)))


def _prepared(out: Path, task: str) -> bool:
    """Whether `prepare_tasks` finished `task` in `out` (its rows and its source record)."""
    return (out / f"{task}.jsonl").is_file() and (out / f"{task}.source.json").is_file()


def _prepared_dir(ws: Workspace, sources: dict[str, data.Source], limit: int | None, seed: int) -> Path:
    identities = {task: source.identity for task, source in sources.items()}
    key = content_hash({"format": DATA_FORMAT, "limit": limit, "seed": seed, "sources": identities})
    return ws.cache / "tasks" / key


def source_label(task: str, data_dir: Path) -> str:
    """The label `prepare_tasks` gave a task's items, e.g. `KMMLU-HARD dev (offline, 225 items), 0-shot`."""
    meta = data_dir / f"{task}.source.json"
    if not meta.is_file():
        raise UserError(f"{meta} is missing: run prepare_tasks for {task} first")
    label: str = loads_json(meta.read_text(encoding="utf-8"))["label"]
    return label


def load_prompts(task: str, data_dir: Path) -> list[PromptItem]:
    """The prompts of `task` from a folder `prepare_tasks` wrote, built by lm-eval's task object."""
    from lm_eval.tasks import TaskManager

    check_tasks([task])
    _only_choice_tasks([task])
    if not (data_dir / f"{task}.jsonl").is_file():
        raise UserError(f"{data_dir / f'{task}.jsonl'} is missing: run prepare_tasks for {task} first")
    manager = TaskManager(
        include_path=str(TASKS_DIR), include_defaults=False, metadata={"kqe_task_data": str(data_dir)}
    )
    lm_task = manager.load([LM_EVAL_TASKS[task]])["tasks"][LM_EVAL_TASKS[task]]
    lm_task.build_all_requests()
    items = []
    for request in doc_requests(lm_task):
        if request.context is None:
            raise ValueError(f"{request.doc['item_id']}: lm-eval built different contexts per choice")
        items.append(
            PromptItem(
                task=task,
                subject=request.doc["subject"],
                item_id=request.doc["item_id"],
                prompt=request.context,
                continuations=request.continuations,
                gold=int(lm_task.doc_to_target(request.doc)),
            )
        )
    return items


@dataclass(frozen=True)
class DocRequests:
    """One document's requests as an lm-eval task object built them."""

    doc_id: int
    doc: Any
    context: str | None
    """The context every choice shares; None where lm-eval built one per choice (multiple_input)."""
    continuations: tuple[str, ...]
    """Each choice's continuation, in lm-eval's order."""


def doc_requests(lm_task: Any) -> list[DocRequests]:
    """Every document's requests of an lm-eval task object whose requests are built, by doc id."""
    by_doc: dict[int, list[Any]] = defaultdict(list)
    for instance in lm_task.instances:
        by_doc[instance.doc_id].append(instance)
    requests = []
    for doc_id in sorted(by_doc):
        instances = sorted(by_doc[doc_id], key=lambda instance: instance.idx)
        contexts = {instance.arguments[0] for instance in instances}
        context = contexts.pop() if len(contexts) == 1 else None
        continuations = tuple(instance.arguments[1] for instance in instances)
        requests.append(DocRequests(doc_id, instances[0].doc, context, continuations))
    return requests
