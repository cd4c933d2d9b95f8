"""Dataset and metrics of the lm-eval task `ko_ifeval` (`ko_ifeval.yaml` names these), in the shape of
lm-eval's own `ifeval` task: per response `prompt_level_strict_acc` (followed every instruction),
`inst_level_strict_acc` (one boolean per instruction) and their loose variants.

Each document carries its instructions' kwargs as JSON text (`kwargs_json`): Arrow would merge the
kwargs objects of all prompts into one struct and fill the keys a prompt does not use with nulls. Its
`request` field (the shipped keys are 1000 + 10 × request + variant: three prompts ask one request) is
the cluster `kqe eval`'s paired bootstrap resamples.
"""

from __future__ import annotations

import json
from typing import Any

import datasets

from evals.tasks.ko_ifeval.prompts import load_prompts
from evals.tasks.ko_ifeval.scoring import score_response


def _request(key: str) -> str:
    return str(int(key) // 10) if key.isdigit() else key


def ko_ifeval_prompts(**options: Any) -> datasets.DatasetDict:
    """The shipped ko_ifeval prompts as the `test` split."""
    rows = [
        {
            "key": prompt.key,
            "request": _request(prompt.key),
            "prompt": prompt.prompt,
            "instruction_id_list": list(prompt.instruction_id_list),
            "kwargs_json": json.dumps(list(prompt.kwargs), ensure_ascii=False),
        }
        for prompt in load_prompts()
    ]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, Any]:
    """lm-eval's per-document metrics for one response (the first of `results`)."""
    score = score_response(results[0], doc["instruction_id_list"], json.loads(doc["kwargs_json"]))
    return {
        "prompt_level_strict_acc": score.follow_all,
        "inst_level_strict_acc": list(score.follow_instruction_list),
        "prompt_level_loose_acc": score.loose_follow_all,
        "inst_level_loose_acc": list(score.loose_follow_instruction_list),
    }


def agg_inst_level_acc(items: list[list[bool]]) -> float:
    """Instruction-level accuracy: every instruction of every response counts once."""
    flat = [followed for item in items for followed in item]
    return sum(flat) / len(flat) if flat else 0.0
