"""Every task the suite can score, for `kqe tasks`: the registry's, lm-eval's Korean multiple-choice and
generation catalogue, and a user's YAMLs under an include path."""

from __future__ import annotations

from pathlib import Path

from evals.tasks import hub_datasets, lm_eval_bridge
from evals.tasks.lm_eval_generation import generation_task
from evals.tasks.registry import LM_EVAL_PREFIX, TASK_SPECS
from kqe.core.errors import UserError
from kqe.core.records import Record
from kqe.core.workspace import Workspace

KOREAN_LM_EVAL = (
    "kobest", "haerae", "click", "kmmlu", "kormedmcqa", "hrm8k", "mmmlu_ko_kr", "global_mmlu_full_ko",
    "global_mmlu_ko", "belebele_kor_Hang",
)  # fmt: skip
"""Name prefixes of the Korean tasks lm-eval ships; `kqe tasks` lists those it scores, multiple choice
and generation (any other lm-eval task of those kinds is scored too when named)."""
UNKNOWN_LICENCE = "see the dataset card"
"""What `kqe tasks` says of a hub dataset not in evals/tasks/hub_datasets.py."""


class TaskListing(Record):
    """One line of `kqe tasks`."""

    name: str
    """What `--tasks` takes."""
    source: str
    """`registry`, `lm-eval` (a YAML shipped with lm-eval) or `user` (under the include path)."""
    items: int | None
    """Items an offline run scores from it (registry tasks) or that its local data holds (user
    tasks); None when they are only counted on reading the hub dataset."""
    subjects: int | None
    """Subjects (the paired bootstrap's clusters): an lm-eval group's leaf tasks; None when unknown."""
    licence: str
    """Licence of its items."""
    availability: str
    """`offline`, or `online` with the hub dataset that must be downloaded (or cached) first."""
    english: str | None
    """The English task its loss is contrasted with, if any."""
    pairing: str | None = None
    """How its items match its English twin's (a parallel pair); None when unpaired."""
    output_type: str = "multiple_choice"
    """lm-eval's output type: `multiple_choice` (scored by choice log-likelihoods) or `generate_until`
    (generated, then filtered and scored by the task's own metrics)."""
    metric: str | None = None
    """What it is scored by: `acc` for letter choice, or the task's metrics as `metric,filter`."""


def listings(ws: Workspace, include_path: str | None) -> list[TaskListing]:
    """Registry tasks, then lm-eval's Korean multiple-choice tasks, then the include path's tasks."""
    include = lm_eval_bridge.check_include_path(include_path)
    found = [_registry_listing(ws, task) for task in TASK_SPECS]
    index = lm_eval_bridge.task_manager(include).task_index
    for name in sorted(index):
        user = include is not None and _under_include(index[name].yaml_path, include)
        if not user and not name.startswith(KOREAN_LM_EVAL):
            continue
        try:
            bridged = lm_eval_bridge.resolve(LM_EVAL_PREFIX + name, include)
        except UserError:  # another output type, a mixed group, code execution or a judge: not scored
            continue
        found.append(_lm_eval_listing(bridged, include))
    return found


def _under_include(path: Path | None, include: Path) -> bool:
    return path is not None and path.resolve().is_relative_to(include)


def _registry_listing(ws: Workspace, task: str) -> TaskListing:
    spec = TASK_SPECS[task]
    try:
        offline, online = spec.source(ws, False), spec.source(ws, True)
    except UserError as exc:  # ko_faq before `make setup`, a hub dataset not copied, one not loadable
        return TaskListing(
            name=task,
            source="registry",
            items=None,
            subjects=None,
            licence=spec.licence,
            availability=f"not ready: {exc}",
            english=spec.english,
            pairing=spec.pairing,
        )
    availability = "offline"
    if online.hub:
        availability += f" ({offline.name}); online: {online.name} from {online.where}"
    return TaskListing(
        name=task,
        source="registry",
        items=offline.items,
        subjects=None,
        licence=spec.licence,
        availability=availability,
        english=spec.english,
        pairing=spec.pairing,
    )


def _lm_eval_listing(bridged: lm_eval_bridge.BridgedTask, include: Path | None) -> TaskListing:
    items, subjects = None, len(bridged.leaves)
    if bridged.source == "user" and bridged.local:  # small local data: counted, subjects as scored
        try:
            found = _local_subjects(bridged, include)
            items, subjects = len(found), len(set(found))
        except UserError:  # listed all the same; `kqe eval` says what is wrong with it
            pass
    hubs = sorted({dataset.split(" (")[0] for dataset in bridged.datasets})
    entries = [hub_datasets.HUB_DATASETS.get(hub) for hub in hubs]
    licences = sorted({entry.licence if entry else UNKNOWN_LICENCE for entry in entries})
    licence = "the user's" if bridged.source == "user" else ", ".join(licences)
    where = "offline" if bridged.local else "; ".join(hub_datasets.lm_eval_availability(hub) for hub in hubs)
    return TaskListing(
        name=bridged.name,
        source=bridged.source,
        items=items,
        subjects=subjects,
        licence=licence,
        availability=where,
        english=None,
        output_type=bridged.output_type,
        metric=", ".join(bridged.metrics) or None,
    )


def _local_subjects(bridged: lm_eval_bridge.BridgedTask, include: Path | None) -> list[str]:
    """The subject of each item a user task's local data holds."""
    if bridged.output_type == lm_eval_bridge.GENERATION:
        return [item.subject for item in generation_task(bridged, include, None, 0).items]
    return [item.subject for item in lm_eval_bridge.load_prompts(bridged, include, None, 0)]
