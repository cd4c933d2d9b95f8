"""Per-item results for the paired statistics' tests: a checkpoint's items, and a base/candidate pair
with a chosen number of flips."""

from __future__ import annotations

from kqe.core.results import ItemResult


def make_items(
    correct: list[bool], subjects: list[str] | None = None, logprobs=None, task: str = "t"
) -> list[ItemResult]:
    """One item per entry of `correct` (item ids `task/i`), answering choice 0 when right and 1 when wrong."""
    items = []
    for i, ok in enumerate(correct):
        lp = logprobs[i] if logprobs is not None else [-1.0, -2.0, -3.0, -4.0]
        items.append(
            ItemResult(
                task=task,
                subject=subjects[i] if subjects else "s",
                item_id=f"{task}/{i}",
                gold=0,
                pred=0 if ok else 1,
                correct=ok,
                choice_logprobs=lp,
                prompt_sha="x",
            )
        )
    return items


def flips(n: int, c2w: int, w2c: int, base_right: int, task: str = "t") -> tuple[list, list]:
    """n items: c2w right→wrong, w2c wrong→right, the rest as base (base_right of them right)."""
    base = [True] * c2w + [False] * w2c + [i < base_right for i in range(n - c2w - w2c)]
    cand = [False] * c2w + [True] * w2c + base[c2w + w2c :]
    return make_items(base, task=task), make_items(cand, task=task)
