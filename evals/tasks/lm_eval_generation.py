"""lm-eval `generate_until` tasks: their requests as lm-eval builds them, and their answers judged by
lm-eval's own filters and metrics, one item at a time.

lm-eval's task object builds each document's context (few-shot examples seeded as `lm_eval` seeds
them) and its generation kwargs (`until`, `max_gen_toks`, sampling); the scorer sends those
(evals/scoring/lm_eval_generate.py). What comes back goes through the task's filter pipelines
(`filter_list`: regex, take_first, majority vote, a task's own filter class…) and its
`process_results` (exact_match with the task's options, a task's own function), as lm-eval's evaluator
applies them, but per item, so each finished item can be written at once and a run resumes per item.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.tasks.lm_eval_bridge import FEWSHOT_SEED, GENERATION, SUBJECT_FIELD, BridgedTask, load_tasks
from evals.tasks.prompts import stratified_sample
from kqe.core.errors import UserError
from kqe.core.records import content_hash

DEFAULT_MAX_GEN_TOKS = 256
"""lm-eval's default `max_gen_toks` when a task's generation kwargs leave it out."""


@dataclass(frozen=True)
class GenerationItem:
    """One document of a generation task, as lm-eval would send it."""

    task: str
    """Suite task name, `lm-eval:<name>`."""
    subject: str
    """Its leaf task (or the document's subject field): the paired bootstrap's cluster."""
    item_id: str
    """`<leaf>/<doc id>`, stable across runs and checkpoints."""
    prompt: str
    """The exact context lm-eval builds (description and few-shot examples included)."""
    until: tuple[str, ...]
    """Stop strings: generation ends before the first of them (and at the tokenizer's EOS)."""
    max_gen_toks: int
    """Most tokens generated."""
    temperature: float
    """0 for greedy decoding (lm-eval's `do_sample: false`)."""
    repeats: int
    """Generations per document (lm-eval's `repeats`; more than one only for a sampling task)."""
    reference: str
    """The document's target as lm-eval renders it (what the metric compares against)."""


@dataclass(frozen=True)
class GenerationTask:
    """A generation task of a run: which lm-eval task, where its YAMLs are, and the items scored."""

    bridged: BridgedTask
    """The lm-eval task or group."""
    include_path: Path | None
    """The user's YAML folder it was found with (the scorer loads the task again from there)."""
    items: tuple[GenerationItem, ...]
    """The documents scored, sampled as asked."""

    def stage_items(self) -> list[str]:
        """What its scores depend on besides the checkpoint: each item with how it is generated, and the
        metrics judging it (an edited YAML scores again instead of reusing answers judged otherwise)."""
        settings = [(i.item_id, i.until, i.max_gen_toks, i.temperature, i.repeats) for i in self.items]
        return [content_hash(list(self.bridged.metrics), settings), *(item.item_id for item in self.items)]


def generation_task(
    bridged: BridgedTask,
    include_path: Path | None,
    limit: int | None,
    seed: int,
    chat_template_of: Path | None = None,
) -> GenerationTask:
    """Every document of a generation task as lm-eval builds it, `limit` of them sampled across
    subjects (seeded, as for multiple choice); with `chat_template_of` (a model folder), each prompt
    rendered through that tokenizer's chat template as `lm_eval --apply_chat_template` renders it."""
    if bridged.output_type != GENERATION:
        raise ValueError(f"{bridged.name} is not a generation task")
    tasks = load_tasks(bridged, include_path)
    template = chat_template(chat_template_of) if chat_template_of else None
    items = [
        item for leaf in bridged.leaves for item in _leaf_items(bridged.name, leaf, tasks[leaf], template)
    ]
    rows = [{"subject": item.subject, "position": position} for position, item in enumerate(items)]
    sampled = tuple(items[row["position"]] for row in stratified_sample(rows, limit, seed))
    return GenerationTask(bridged, include_path, sampled)


def _leaf_items(
    suite_task: str, leaf: str, lm_task: Any, template: Callable[..., str] | None
) -> list[GenerationItem]:
    field = (lm_task.config.metadata or {}).get(SUBJECT_FIELD)
    return [
        _item(suite_task, leaf, lm_task, instance, str(instance.doc[field]) if field else leaf)
        for instance in built_instances(lm_task, template)
    ]


def built_instances(lm_task: Any, template: Callable[..., str] | None = None) -> list[Any]:
    """The task's request instances, one per document, built with lm-eval's default few-shot seed
    (through `template`, lm-eval's chat-template hook, when given)."""
    lm_task.set_fewshot_seed(seed=FEWSHOT_SEED)
    if template is None:
        lm_task.build_all_requests()
    else:
        lm_task.build_all_requests(apply_chat_template=True, chat_template=template)
    return sorted(lm_task.instances, key=lambda instance: instance.doc_id)


def chat_template(model_dir: Path) -> Callable[..., str]:
    """lm-eval's `chat_template` hook for a model folder: what `HFLM.apply_chat_template` renders (the
    conversation, the assistant's turn opened); UserError when the tokenizer has no template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(
            f"{model_dir} has no chat template: drop --apply-chat-template or use an instruct model"
        )

    def render(chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        rendered = tokenizer.apply_chat_template(
            chat_history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )
        return str(rendered)

    return render


def _item(suite_task: str, leaf: str, lm_task: Any, instance: Any, subject: str) -> GenerationItem:
    context, kwargs = instance.arguments[0], dict(instance.arguments[1] or {})
    until = kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    sampling = bool(kwargs.get("do_sample")) and float(kwargs.get("temperature", 1.0)) > 0
    return GenerationItem(
        task=suite_task,
        subject=subject,
        item_id=f"{leaf}/{instance.doc_id}",
        prompt=str(context),
        until=tuple(str(stop) for stop in until),
        max_gen_toks=int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS)),
        temperature=float(kwargs.get("temperature", 1.0)) if sampling else 0.0,
        repeats=int(instance.repeats or 1),
        reference=str(lm_task.doc_to_target(instance.doc)),
    )


@dataclass(frozen=True)
class Judgement:
    """What lm-eval's filters and metrics make of one item's generations."""

    filtered: str
    """The answer after the first filter pipeline (what the headline metric scored)."""
    metrics: dict[str, float]
    """Every metric of every filter pipeline, keyed `metric,filter`."""
    headline: str
    """The key of `metrics` the leaderboard reports: the task's first metric on its first filter."""


class GenerationJudge:
    """A generation task's lm-eval task objects, loaded once, judging one item's generations at a time."""

    def __init__(self, bridged: BridgedTask, include_path: Path | None) -> None:
        tasks = load_tasks(bridged, include_path)
        self._instances: dict[str, tuple[Any, Any]] = {}
        for leaf in bridged.leaves:
            for instance in built_instances(tasks[leaf]):
                self._instances[f"{leaf}/{instance.doc_id}"] = (tasks[leaf], instance)

    def judge(self, item_id: str, generations: list[str]) -> Judgement:
        """Filter `generations` (one per repeat) through every pipeline and score each result."""
        if item_id not in self._instances:
            raise UserError(f"{item_id}: no such document in the task lm-eval loaded; was the task changed?")
        lm_task, original = self._instances[item_id]
        instance = dataclasses.replace(original, resps=list(generations), filtered_resps={})
        metrics: dict[str, float] = {}
        filtered: dict[str, Any] = {}
        for ensemble in lm_task._filters:
            ensemble.apply([instance])
            filtered[ensemble.name] = instance.filtered_resps[ensemble.name]
            scores = lm_task.process_results(instance.doc, [filtered[ensemble.name]])
            metrics |= {
                f"{metric},{ensemble.name}": _per_item(lm_task, metric, value)
                for metric, value in scores.items()
            }
        first = lm_task._filters[0].name
        headline = next(key for key in metrics if key.endswith(f",{first}"))
        return Judgement(str(_first(filtered[first])), metrics, headline)


def _first(answer: Any) -> Any:
    """A filtered answer: a list when no pipeline took one (lm-eval's raw `resps`), its first then."""
    return answer[0] if isinstance(answer, list) and answer else answer


def _per_item(lm_task: Any, metric: str, value: Any) -> float:
    """A per-item metric value as a float. lm-eval's corpus metrics (bleu, chrf, ter) pass each item's
    (reference, prediction) through to an aggregation over the corpus: here that aggregation is taken
    over the one item (sentence chrF, sentence BLEU), which the paired bootstrap then averages."""
    if isinstance(value, bool | int | float):
        return float(value)
    aggregate = lm_task.aggregation().get(metric)
    if isinstance(value, tuple | list) and aggregate is not None:
        return float(aggregate([value]))
    raise UserError(f"metric {metric} returned {type(value).__name__} {value!r} per item, not a number")


@functools.lru_cache(maxsize=2)
def cached_judge(bridged: BridgedTask, include_path: Path | None) -> GenerationJudge:
    """One judge per task and include folder in a process (loading a task reads its dataset), shared
    by the checkpoints a process scores."""
    return GenerationJudge(bridged, include_path)
