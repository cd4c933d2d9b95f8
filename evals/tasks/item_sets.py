"""Which benchmark items a run scores: the hub's full test sets (online) or the offline sets, decided once.

Online when the model comes from the hub (a registry model without an offline installer, or
`hf:org/name`) or when asked (`--online`, `KQE_ONLINE=1`); offline for the embedded default model and
local model folders, or when asked (`--offline`, `KQE_OFFLINE=1`, which wins over `KQE_ONLINE=1` and the
model). Online, KMMLU and MMLU are their full test splits at pinned revisions and every item is scored
unless a limit is given; offline, the KMMLU-HARD dev items and a subject-stratified MMLU sample.

The hub is never probed to decide: whether it happens to answer must not change which items a run
scores. When items must be downloaded and it does not answer, the run stops before any work with a
one-line error that says how to run offline.
"""

from __future__ import annotations

from collections.abc import Callable

from evals.tasks import prompts
from evals.tasks.benchmark_data import KMMLU_DIR_ENV, MMLU_DIR_ENV, OFFLINE_ENV, ONLINE_ENV, Source
from evals.tasks.registry import TASK_SPECS
from kqe.core import hub
from kqe.core.env import env_switch, env_value
from kqe.core.errors import UserError
from kqe.core.records import ItemChoice, ModelSpec
from kqe.core.workspace import Workspace

Resolution = Callable[[int], str]
"""What a number of paired items cannot tell from noise, in words (statistics says it: tasks sit below)."""


def choose(spec: ModelSpec, asked: bool | None) -> ItemChoice:
    """Online or offline for a run of `spec`: the flag given, else the environment, else the model."""
    if asked is not None:
        return ItemChoice(online=asked, why="--online" if asked else "--offline")
    if env_switch(OFFLINE_ENV):  # a switch set off (`KQE_OFFLINE=0`) is as if unset
        return ItemChoice(online=False, why=f"{OFFLINE_ENV}={env_value(OFFLINE_ENV)}")
    if env_switch(ONLINE_ENV):
        return ItemChoice(online=True, why=f"{ONLINE_ENV}={env_value(ONLINE_ENV)}")
    if spec.local_path:
        return ItemChoice(online=False, why="local model folder")
    if spec.offline:
        return ItemChoice(online=False, why=f"{spec.name} installed without the hub")
    return ItemChoice(online=True, why=f"hub model {spec.hub_id}")


def announce(
    ws: Workspace, tasks: list[str], choice: ItemChoice, limit: int | None, resolution: Resolution
) -> list[str]:
    """What will be scored, said before any work: one line per choice task (with what its item count
    can resolve: `evals.statistics.resolution.unresolved`), then what decided it."""
    choice_tasks = [task for task in tasks if task in TASK_SPECS]
    if not choice_tasks:
        return []
    sources = prompts.task_sources(ws, choice_tasks, choice.online)
    lines = [
        f"{TASK_SPECS[task].label}: {describe(source, limit, resolution)}" for task, source in sources.items()
    ]
    online = sources if choice.online else prompts.task_sources(ws, choice_tasks, True)
    if any(source.hub for source in online.values()):  # the choice changes some task's items
        other = (
            f"{OFFLINE_ENV}=1 scores the offline sets"
            if choice.online
            else f"{ONLINE_ENV}=1 (with network) scores the full test splits"
        )
        lines.append(f"items {'online' if choice.online else 'offline'} ({choice.why}); {other} instead")
    return lines


def describe(source: Source, limit: int | None, resolution: Resolution) -> str:
    """`full test split (HAERAE-HUB/KMMLU@d61b3f1), 35,030 items — differences under ~0.3–0.9 points …`."""
    what = f"{'full test split' if source.full else source.name} ({source.where})"
    scored = scored_items(source, limit)
    if source.items is None or scored is None:
        return f"{what}, every item{'' if limit is None else f' up to {limit:,}'} (counted on reading)"
    count = (
        f"{source.items:,} items"
        if scored == source.items
        else f"{scored:,} of {source.items:,} items sampled across subjects"
    )
    return f"{what}, {count} — {resolution(scored)}"


def scored_items(source: Source, limit: int | None) -> int | None:
    """Items a run scores from `source` at `limit` (None: every item); None until they are counted."""
    return None if source.items is None else min(limit or source.items, source.items)


def check_hub(downloads: list[str], choice: ItemChoice) -> None:
    """Stop with one line when `downloads` (`repo@revision`) must come from a hub that does not answer.

    Any HTTP answer counts as reachable (a wrong revision is the download's own error). With
    `HF_HUB_OFFLINE=1` nothing is asked: the datasets cache serves the files or the load says so.
    """
    if not downloads or hub.hub_offline():
        return
    repo, revision = downloads[0].split("@")
    reason = hub.unreachable("datasets", repo, revision)
    if reason is not None:
        names = ", ".join(download.split("@")[0] for download in downloads)
        raise UserError(
            f"{names} must come from the hub ({choice.why}) but {hub.hub_endpoint()} does not answer "
            f"({reason}): run offline with {OFFLINE_ENV}=1 (KMMLU-HARD dev and an MMLU sample), or point "
            f"{KMMLU_DIR_ENV} / {MMLU_DIR_ENV} at local copies"
        )
