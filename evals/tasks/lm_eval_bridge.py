"""Any lm-eval multiple-choice or generation task as a suite task: `lm-eval:<task or group>` in `--tasks`.

lm-eval's own `TaskManager` finds the task (its shipped YAMLs, plus a user's `--include-path DIR`) and its
own task object builds every request, few-shot examples included (seeded as `lm_eval` seeds them), so the
context and continuations our scorer sends are byte for byte what `lm_eval --tasks <task>` sends. A group
(or tag) is scored as one suite task whose subjects (the paired bootstrap's clusters) are its leaf tasks;
a YAML whose `metadata` names `kqe_subject_field` takes each document's subject from that field instead.

`multiple_choice` tasks are scored here by their choices' log-likelihoods; `generate_until` tasks by
their generations (evals/tasks/lm_eval_generation.py). Other output types (`loglikelihood`,
`loglikelihood_rolling`), groups mixing two types, and tasks whose metric runs code or asks a judge are
refused in one line.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.tasks.include_yaml import check_task_yaml
from evals.tasks.prompts import PromptItem, doc_requests, stratified_sample
from evals.tasks.registry import LM_EVAL_PREFIX as PREFIX
from kqe.core.errors import UserError

SUBJECT_FIELD = "kqe_subject_field"
"""Key of a task YAML's `metadata` naming the document field that holds its subject."""
FEWSHOT_SEED = 1234
"""lm-eval's default `fewshot_random_seed` (`lm_eval.defaults.DEFAULT_OTHER_SEED`), so the same
few-shot examples are drawn as `lm_eval` draws them."""
LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow"})
"""`dataset_path` values that read local `data_files` rather than a hub dataset."""
MULTIPLE_CHOICE = "multiple_choice"
GENERATION = "generate_until"
OUTPUT_TYPES = (MULTIPLE_CHOICE, GENERATION)
"""The lm-eval output types the suite scores."""
NOT_SCORABLE_METRICS = ("code_eval", "pass_at_k", "pass@k", "judge")
MAX_INCLUDE_ENTRIES = 50_000
"""The most files and folders `--include-path` may hold: lm-eval indexes all of it, and a folder of
task YAMLs holds hundreds (lm-eval 0.4's own task tree: about 17,600), not a disk's worth."""
MAX_INCLUDE_DEPTH = 8
"""The most folders deep below `--include-path` a task YAML may lie (lm-eval's own tree: 5)."""
"""Metric names (or parts of them) that need code execution or an external judge: refused."""


@dataclass(frozen=True)
class BridgedTask:
    """An lm-eval task or group, checked to be multiple choice, with where its data comes from."""

    name: str
    """Suite task name, `lm-eval:<lm-eval name>`."""
    leaves: tuple[str, ...]
    """Its lm-eval leaf tasks (itself for a plain task), each a subject unless a field names them."""
    source: str
    """`lm-eval` for a YAML shipped with lm-eval, `user` for one under the include path."""
    datasets: tuple[str, ...]
    """Each distinct dataset it reads: a hub id (with its config), or a local builder and its files."""
    local: bool
    """Whether every dataset is read from local files (scorable offline without a datasets cache)."""
    output_type: str = MULTIPLE_CHOICE
    """lm-eval's output type of its leaves: `multiple_choice` or `generate_until`."""
    metrics: tuple[str, ...] = ()
    """Its first leaf's metrics as lm-eval names their results, `metric,filter` (`acc,none`)."""

    @property
    def lm_eval_name(self) -> str:
        return self.name.removeprefix(PREFIX)


def check_include_path(include_path: str | None) -> Path | None:
    """The include folder, or a UserError when it does not exist or holds no YAML."""
    if include_path is None:
        return None
    path = Path(include_path).expanduser()
    if not path.is_dir():
        raise UserError(f"--include-path {include_path}: not a folder; give a folder of lm-eval task YAMLs")
    if not _yaml_files(path, include_path):
        raise UserError(
            f"--include-path {include_path}: no *.yaml task files in it; put lm-eval task YAMLs there"
        )
    return path.resolve()


def _yaml_files(path: Path, given: str) -> int:
    """How many `*.yaml`/`*.yml` files the include folder holds, walked as lm-eval walks it (links not
    followed); UserError, before lm-eval indexes it, when it is larger or deeper than an include
    folder is (`MAX_INCLUDE_ENTRIES`, `MAX_INCLUDE_DEPTH`) or holds a YAML lm-eval would misread."""
    found = entries = 0
    for folder, dirs, files in os.walk(path):
        entries += len(dirs) + len(files)
        if entries > MAX_INCLUDE_ENTRIES:
            raise UserError(
                f"--include-path {given}: too large for a folder of task YAMLs (more than "
                f"{MAX_INCLUDE_ENTRIES:,} files and folders, all of which lm-eval would index): give the "
                "folder of your task YAMLs"
            )
        if dirs and len(Path(folder).relative_to(path).parts) >= MAX_INCLUDE_DEPTH:
            raise UserError(
                f"--include-path {given}: too deep for a folder of task YAMLs (folders more than "
                f"{MAX_INCLUDE_DEPTH} deep: {folder}): give the folder of your task YAMLs"
            )
        yamls = [name for name in files if name.endswith((".yaml", ".yml"))]
        for name in yamls:
            check_task_yaml(Path(folder) / name, given)
        found += len(yamls)
    return found


@functools.lru_cache(maxsize=4)
def task_manager(include_path: Path | None, include_defaults: bool = True) -> Any:
    """lm-eval's TaskManager over its shipped YAMLs and the include folder (indexing takes ~10 s)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(
        include_path=str(include_path) if include_path else None,
        include_defaults=include_defaults,
    )


def resolve(task: str, include_path: Path | None) -> BridgedTask:
    """The bridged task `task` names; UserError when lm-eval has no such task, or it is of an output type
    the suite does not score, or its metric runs code or asks a judge."""
    name = task.removeprefix(PREFIX)
    index = task_manager(include_path).task_index
    if name not in index:
        close = difflib.get_close_matches(name, list(index), n=5, cutoff=0.6)
        hint = f"closest: {', '.join(PREFIX + c for c in close)}" if close else "`kqe tasks` lists them"
        raise UserError(f"--tasks {task}: lm-eval has no task or group {name!r}; {hint}")
    leaves = _leaves(name, index)
    configs = {leaf: index[leaf].cfg or {} for leaf in leaves}
    output_type = _output_type(task, configs)
    for leaf, cfg in configs.items():
        _check_metrics(task, leaf, cfg)
    datasets = tuple(dict.fromkeys(_dataset(cfg) for cfg in configs.values()))
    user = include_path is not None and any(_under(index[leaf].yaml_path, include_path) for leaf in leaves)
    local = all(_is_local(cfg) for cfg in configs.values())
    source = "user" if user else "lm-eval"
    metrics = _metric_keys(configs[leaves[0]])
    return BridgedTask(PREFIX + name, tuple(leaves), source, datasets, local, output_type, metrics)


def _metric_names(cfg: dict[str, Any]) -> list[str]:
    return [str(entry.get("metric")) for entry in cfg.get("metric_list") or [] if isinstance(entry, dict)]


def _metric_keys(cfg: dict[str, Any]) -> tuple[str, ...]:
    """`metric,filter` for each metric of the config and each of its filter pipelines (`none` without)."""
    metrics = _metric_names(cfg)
    filters = [str(entry.get("name")) for entry in cfg.get("filter_list") or [] if isinstance(entry, dict)]
    return tuple(f"{metric},{name}" for name in filters or ["none"] for metric in metrics)


def _output_type(task: str, configs: dict[str, dict[str, Any]]) -> str:
    """The one output type every leaf has; UserError for a type not scored or a group mixing two."""
    kinds = {leaf: cfg.get("output_type", GENERATION) for leaf, cfg in configs.items()}
    for leaf, kind in kinds.items():
        if kind not in OUTPUT_TYPES:
            raise UserError(
                f"--tasks {task}: {leaf} is a {kind} task; the suite scores lm-eval tasks of output_type "
                "multiple_choice (kobest_*, haerae, click, belebele_*, kmmlu, mmmlu_*, …) or generate_until "
                "(kormedmcqa_*, hrm8k_*, kmmlu_cot_hard_*, …)"
            )
    if len(set(kinds.values())) > 1:
        raise UserError(
            f"--tasks {task}: its leaves mix multiple_choice and generate_until tasks; name the leaves "
            "of one kind instead (`kqe tasks` lists them)"
        )
    return next(iter(kinds.values()))


def _check_metrics(task: str, leaf: str, cfg: dict[str, Any]) -> None:
    """UserError when the leaf's metric needs code execution or an external judge."""
    if cfg.get("unsafe_code"):
        raise UserError(
            f"--tasks {task}: {leaf} runs generated code to score it (unsafe_code); not scored here"
        )
    names = [
        str(entry.get("metric", "")) for entry in cfg.get("metric_list") or [] if isinstance(entry, dict)
    ]
    for metric in names:
        if any(part in metric.lower() for part in NOT_SCORABLE_METRICS):
            raise UserError(
                f"--tasks {task}: {leaf}'s metric {metric!r} needs code execution or an external judge; "
                "not scored here"
            )


def _leaves(name: str, index: dict[str, Any]) -> list[str]:
    """The leaf tasks of a task, group or tag, in lm-eval's order, each once."""
    from lm_eval.tasks._index import Kind

    entry = index[name]
    if entry.kind == Kind.TAG:
        members = [other.name for other in index.values() if name in other.tags]
    elif entry.kind == Kind.GROUP:
        members = [member for member in (entry.cfg or {}).get("task", []) if isinstance(member, str)]
    else:
        return [name]
    return list(
        dict.fromkeys(leaf for member in members if member in index for leaf in _leaves(member, index))
    )


def _under(path: Path | None, folder: Path) -> bool:
    return path is not None and path.resolve().is_relative_to(folder)


def _is_local(cfg: dict[str, Any]) -> bool:
    path = str(cfg.get("dataset_path") or "")
    return bool(cfg.get("custom_dataset")) or path in LOCAL_BUILDERS or Path(path).expanduser().exists()


def _dataset(cfg: dict[str, Any]) -> str:
    path = str(cfg.get("dataset_path") or "custom_dataset")
    if path in LOCAL_BUILDERS:
        files = (cfg.get("dataset_kwargs") or {}).get("data_files")
        return f"{path} {files}"
    return f"{path} ({cfg['dataset_name']})" if cfg.get("dataset_name") else path


def load_prompts(
    bridged: BridgedTask, include_path: Path | None, limit: int | None, seed: int
) -> list[PromptItem]:
    """Every item of `bridged` as lm-eval builds it, `limit` of them sampled across subjects (seeded)."""
    tasks = load_tasks(bridged, include_path)
    items = [item for leaf in bridged.leaves for item in _leaf_items(bridged.name, leaf, tasks[leaf])]
    rows = [{"subject": item.subject, "position": position} for position, item in enumerate(items)]
    return [items[row["position"]] for row in stratified_sample(rows, limit, seed)]


def load_tasks(bridged: BridgedTask, include_path: Path | None) -> dict[str, Any]:
    """lm-eval's task objects of the leaves; a dataset that cannot be read is one line naming it."""
    lm_eval_log = logging.getLogger("lm_eval")
    level = lm_eval_log.level
    lm_eval_log.setLevel(logging.CRITICAL)  # its errors about metrics we do not compute (kobest's f1)
    try:
        return dict(task_manager(include_path).load(list(bridged.leaves))["tasks"])
    except (ConnectionError, OSError, ValueError) as exc:  # datasets' offline misses are these
        where = "; ".join(bridged.datasets)
        if bridged.local:
            raise UserError(f"{bridged.name}: its dataset {where} could not be read ({exc})") from None
        raise UserError(
            f"{bridged.name}: dataset {where} is not available offline (not in the datasets cache); "
            "download it once with network (`KQE_ONLINE=1`, or `datasets.load_dataset` with its id), "
            "or copy it into a local json folder under an --include-path YAML"
        ) from None
    finally:
        lm_eval_log.setLevel(level)


def _leaf_items(suite_task: str, leaf: str, lm_task: Any) -> list[PromptItem]:
    """The items of one leaf task from lm-eval's own requests (context and continuation per choice)."""
    lm_task.set_fewshot_seed(seed=FEWSHOT_SEED)
    lm_task.build_all_requests()
    field = (lm_task.config.metadata or {}).get(SUBJECT_FIELD)
    items = []
    for request in doc_requests(lm_task):
        doc, doc_id = request.doc, request.doc_id
        if request.context is None:
            raise UserError(f"{suite_task}: {leaf} builds a different context per choice (multiple_input)")
        choices = [str(choice) for choice in lm_task.doc_to_choice(doc)]
        items.append(
            PromptItem(
                task=suite_task,
                subject=str(doc[field]) if field else leaf,
                item_id=f"{leaf}/{doc_id}",
                prompt=request.context,
                continuations=request.continuations,
                gold=_gold(suite_task, leaf, doc_id, lm_task.doc_to_target(doc), choices),
                choice_chars=tuple(len(choice) for choice in choices),
            )
        )
    return items


def _gold(suite_task: str, leaf: str, doc_id: int, target: Any, choices: list[str]) -> int:
    """The gold index as lm-eval reads a target: an index, or the text of a choice."""
    if isinstance(target, str) and target in choices:
        return choices.index(target)
    if isinstance(target, int) and 0 <= target < len(choices):
        return target
    raise UserError(f"{suite_task}: {leaf} document {doc_id} has target {target!r}, not one of its choices")


def source_label(bridged: BridgedTask, count: int, limit: int | None) -> str:
    """What the `count` scored items are, e.g. `lm-eval kobest_copa (skt/kobest_v1 (copa)), 40 items
    sampled across subjects`."""
    where = "; ".join(bridged.datasets)
    sampled = " sampled across subjects" if limit is not None and count == limit else ""
    return f"{bridged.source} {bridged.lm_eval_name} ({where}), {count:,} items{sampled}"
