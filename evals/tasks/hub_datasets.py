"""The hub datasets the suite's Korean tasks read: one entry per dataset, each fact with where it was
confirmed, and where a run finds its files.

A dataset's files are found, in order: an offline copy in the hub layout (the dataset repository's own
files at their own paths) under `<KQE_HOME>/datasets/<owner>/<name>/`; online, the hub at the pinned
revision. Anything else is one line naming the dataset and how to get it. An entry whose revision or
file layout could not be confirmed has None there with the reason, and its loader stops with that
reason rather than reading a layout nobody checked. `kqe tasks` shows every entry.

Facts were gathered without hub access (2026-12-03), from stored copies of the dataset cards, file
trees and commit pages, and from lm-eval 0.4.13's task YAMLs; each entry's `provenance` says which.
Config names and data fields the lm-eval tasks read are not restated here: they are in lm-eval's YAMLs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from evals.tasks.benchmark_data import (
    KMMLU_HUB,
    KMMLU_REVISION,
    MMLU_HUB,
    MMLU_REVISION,
    ONLINE_ENV,
)
from kqe.core.errors import UserError
from kqe.core.workspace import Workspace


@dataclass(frozen=True)
class HubDataset:
    """One hub dataset: pinned revision, licence, and the files the suite's own loaders read."""

    hub: str
    """Repository id, `owner/name`."""
    revision: str | None
    """Full commit the online data is pinned to; None when no commit could be confirmed."""
    licence: str
    """Licence of its items as its dataset card states it (or why unknown)."""
    provenance: str
    """Where the revision, licence and layout were confirmed, or why they could not be."""
    layout: str | None = None
    """Files and fields the suite's own loader reads, confirmed; None when the loader is lm-eval's own
    YAML (its fields are there) or when the layout could not be confirmed (see `unconfirmed`)."""
    unconfirmed: str | None = None
    """Why this dataset cannot be loaded yet (revision or schema unconfirmed); None when it can."""

    @property
    def pinned(self) -> str | None:
        """`hub@revision` as `datasets` downloads it; None without a confirmed revision."""
        return f"{self.hub}@{self.revision}" if self.revision else None


DATASETS_DIR = "datasets"
"""Folder under KQE_HOME holding offline copies, `<owner>/<name>/` each, in the hub layout."""

HUB_DATASETS = {
    entry.hub: entry
    for entry in (
        HubDataset(
            KMMLU_HUB, KMMLU_REVISION, "CC-BY-ND-4.0",
            "revision: evals/tasks/benchmark_data.py (the dataset's main on 2026-10-08); licence: dataset "
            "card (commit history page of README.md, d61b3f1)",
            "data/<Subject>-{test,dev}.csv: question, A, B, C, D, answer (1-based)",
        ),
        HubDataset(
            "HAERAE-HUB/KMMLU-HARD", None, "CC-BY-ND-4.0 (as KMMLU; its own card not seen)",
            "read by lm-eval's kmmlu_hard YAMLs; no commit of it found in the sources searched",
        ),
        HubDataset(
            "LGAI-EXAONE/KMMLU-Redux", None, "CC-BY-NC-ND-4.0 (third-party summaries; gated dataset)",
            "no commit, card or file tree found; third-party loaders read split test with question, "
            "options, solution, which is not the card",
            unconfirmed="its revision and schema are unconfirmed (gated dataset, card not seen)",
        ),
        HubDataset(
            "LGAI-EXAONE/KMMLU-Pro", None, "CC-BY-NC-ND-4.0 (third-party summaries; gated dataset)",
            "no commit, card or file tree found; third-party loaders read split test with question, "
            "options, solution (1-based), license_name, subject, which is not the card",
            unconfirmed="its revision and schema are unconfirmed (gated dataset, card not seen)",
        ),
        HubDataset(
            "HAERAE-HUB/HAE_RAE_BENCH", None, "unknown: no licence on the cards seen",
            "read by lm-eval's haerae YAMLs; commits were found only for HAE_RAE_BENCH_1.0 and 2.0, "
            "other repositories",
        ),
        HubDataset(
            "EunsuKim/CLIcK", None, "unknown: the dataset card states none",
            "read by lm-eval's click YAMLs; card and tree pages show no licence and no full commit",
        ),
        HubDataset(
            "skt/kobest_v1", None, "CC-BY-SA-4.0",
            "licence: dataset card (as recorded in evals/tasks/catalogue.py before this registry); no "
            "commit found",
        ),
        HubDataset(
            "sean0042/KorMedMCQA", "4f00fada7327a08dbea3867c0ae613287e2d175b", "CC-BY-NC-2.0",
            "revision: dataset file tree at that commit (doctor/, nurse/, pharm/, dentist/ configs); "
            "licence: dataset card; lm-eval's kormedmcqa is generate_until, which the suite does not score",
        ),
        HubDataset(
            MMLU_HUB, MMLU_REVISION, "MIT",
            "revision: evals/tasks/benchmark_data.py (the parquet layout); licence: as recorded there",
            "all/{test,dev}-*.parquet: question, subject, choices, answer (0-based)",
        ),
        HubDataset(
            "openai/MMMLU", "6f08ae4f7e18264d1bd7e58e889376c5a58e3e2e", "MIT",
            "revision and layout: README.md at that commit (configs map test/mmlu_KO-KR.csv; licence: "
            "mit); later READMEs name the same file as config KO_KR; fields: lm-eval's openai-mmmlu "
            "README (Question, A-D, Answer, Subject)",
            "test/mmlu_KO-KR.csv: Question, A, B, C, D, Answer (letter), Subject",
        ),
        HubDataset(
            "facebook/belebele", "d4c91dedc9de484dbea7b7d940f898f59fd135e9", "CC-BY-SA-4.0",
            "revision: file tree at that commit ('Replaced dataset viewer loading script with automated "
            "data', configs data/<lang>.jsonl, split test); fields and pairing: data/README (`link` "
            "with `question_number` identifies a question in every language)",
            "data/<lang>.jsonl: link, question_number, flores_passage, question, mc_answer1-4, "
            "correct_answer_num (1-based)",
        ),
    )
}  # fmt: skip
"""Hub id -> entry: the datasets the registry's tasks and lm-eval's Korean tasks read."""


def offline_copy(ws: Workspace, hub: str) -> Path:
    """Where an offline copy of `hub` lives (the repository's files at their own paths)."""
    return ws.cache / DATASETS_DIR / hub


def unloadable_source(hub: str, ws: Workspace, online: bool) -> NoReturn:
    """The source of a registry task whose dataset cannot be loaded yet: its one-line reason."""
    raise UserError(
        f"{hub}: not loadable: {HUB_DATASETS[hub].unconfirmed}; the suite does not guess a schema or a "
        "revision (`kqe tasks` shows what is known of it)"
    )


def _how_to_get(ws: Workspace, entry: HubDataset) -> str:
    target = offline_copy(ws, entry.hub)
    revision = f" --revision {entry.revision}" if entry.revision else ""
    return (
        f"copy it into {target} (`huggingface-cli download {entry.hub} --repo-type dataset{revision} "
        f"--local-dir {target}`), or run online ({ONLINE_ENV}=1)"
    )


def locate(ws: Workspace, hub: str, files: list[str], online: bool) -> Path | str:
    """The offline copy holding `files` (paths in the hub layout), else online `hub@revision`; a
    UserError naming the dataset when it cannot be loaded (unconfirmed) or is not here offline."""
    entry = HUB_DATASETS[hub]
    if entry.unconfirmed:
        unloadable_source(hub, ws, online)
    copy = offline_copy(ws, hub)
    missing = [name for name in files if not any(copy.glob(name))]
    if not missing:
        return copy
    if online and entry.pinned:
        return entry.pinned
    where = f"{copy} lacks {missing[0]}" if copy.is_dir() else f"no offline copy at {copy}"
    _not_offline(ws, entry, where)


def _not_offline(ws: Workspace, entry: HubDataset, where: str) -> NoReturn:
    if not entry.pinned:
        raise UserError(
            f"{entry.hub} is not available offline ({where}) and has no confirmed revision to "
            f"download: {_how_to_get(ws, entry)}"
        )
    raise UserError(f"{entry.hub} is not available offline ({where}): {_how_to_get(ws, entry)}")


def lm_eval_availability(hub: str) -> str:
    """What `kqe tasks` says of the hub dataset an lm-eval task reads. lm-eval reads the dataset's main
    branch (or the datasets cache), not an offline copy nor the revision pinned here: both are said."""
    entry = HUB_DATASETS.get(hub)
    if entry is None:
        return f"online: {hub} (main; not in the suite's dataset registry)"
    pinned = f"registry pins {entry.revision[:7]}" if entry.revision else "revision None: unconfirmed"
    return f"online: {hub} (lm-eval reads main; {pinned})"
