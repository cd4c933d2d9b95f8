"""The request arguments lm-eval's own task builds, to hold the suite's prompts against."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def stock_prompts(
    stock_yaml: Path,
    docs: list[dict[str, Any]],
    shots: int = 0,
    shot_docs: list[dict[str, Any]] | None = None,
) -> list[tuple[tuple[str, str], ...]]:
    """Request arguments lm-eval's own task (its installed YAML) builds for `docs`; with `shots`, its
    own few-shot machinery (`first_n` sampler) takes them from `shot_docs` as the dev split, or from
    `docs` themselves (lm-eval then leaves out the scored doc)."""
    import datasets
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    def dataset(**_: Any) -> datasets.DatasetDict:
        split = datasets.Dataset.from_list(docs)
        dev = split if shot_docs is None else datasets.Dataset.from_list(shot_docs)
        return datasets.DatasetDict({"test": split, "dev": dev})

    config = load_yaml(stock_yaml) | {"custom_dataset": dataset}
    config.pop("tag", None)
    if shots:
        split = "test" if shot_docs is None else "dev"
        config |= {"num_fewshot": shots, "fewshot_split": split, "fewshot_config": {"sampler": "first_n"}}
    task = ConfigurableTask(config=config)
    task.build_all_requests()
    by_doc: dict[int, list[Any]] = {}
    for instance in task.instances:
        by_doc.setdefault(instance.doc_id, []).append(instance)
    return [tuple(i.arguments for i in sorted(by_doc[d], key=lambda i: i.idx)) for d in sorted(by_doc)]
