"""The configuration of one `kqe eval` run: `EvalConfig`, the comma lists its options are written in
(each parsed once, by the field's validator), and the command line that reproduces it.

`kqe eval` has one option per field, spelled `option_name(field)`, its help the field's docstring
(`option_help(field)`); `tests/test_eval_config.py` checks the options and their help against the fields
and parses `command()` back through the real CLI for every field.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Sequence
from typing import Any

from pydantic import field_validator

from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.kv_cache import AUTO, parse_kv_dtypes
from kqe.core.records import ItemChoice, Record
from kqe.core.workspace import safe_name

MAX_RUN_NAME_BYTES = 128
"""The longest --run kqe takes (its UTF-8 bytes): a folder name, well inside the 255 bytes a file
system allows."""


def split_list(value: str) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c")."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def split_mixes(text: str) -> tuple[str, ...]:
    """`ko70,en100` → (`ko70`, `en100`); the parts of a custom mix stay together:
    `ko70,ko=0.6,en=0.4` → (`ko70`, `ko=0.6,en=0.4`)."""
    mixes: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" in part and mixes and "=" in mixes[-1] and part.split("=")[0] not in _langs(mixes[-1]):
            mixes[-1] += f",{part}"
        else:
            mixes.append(part)
    if not mixes:
        raise UserError(f"calibration {text!r} names no mix: write e.g. ko70,en100 or ko=0.6,en=0.4")
    return tuple(mixes)


def _langs(custom_mix: str) -> set[str]:
    return {part.split("=")[0].strip() for part in custom_mix.split(",")}


def parse_conditions(text: str, option: str = "--rag-conditions") -> tuple[str, ...]:
    """`retrieved,oracle` -> the ko_rag conditions in `defaults.RAG_CONDITIONS` order; a one-line
    UserError for anything else."""
    return _ordered_subset(text, option, tuple(defaults.RAG_CONDITIONS), "condition")


def parse_lengths(text: str, option: str = "--rag-lengths") -> tuple[str, ...]:
    """`2k,1k` -> ko_rag context lengths in `defaults.RAG_LENGTHS` order; a one-line UserError for
    anything else."""
    return _ordered_subset(text, option, tuple(defaults.RAG_LENGTHS), "length")


def _ordered_subset(text: str, option: str, known: tuple[str, ...], noun: str) -> tuple[str, ...]:
    """The names of comma list `text`, each one of `known`, in `known`'s order."""
    named = split_list(text)
    unknown = [name for name in named if name not in known]
    if unknown or not named:
        what = f"names unknown {', '.join(unknown)}" if unknown else f"names no {noun}"
        raise UserError(f"{option} {text!r} {what}: give some of {','.join(known)}")
    return tuple(name for name in known if name in named)


def parse_count(value: Any, option: str, off: str) -> int:
    """A count of items given as a number or its text; a one-line UserError naming `option` for a
    negative or fractional one, or anything else."""
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isdigit() or (text.startswith("-") and text[1:].isdigit())):
        raise UserError(f"{option} {text!r} is not a whole number: give a count of items, or {off}")
    if int(text) < 0:
        raise UserError(f"{option} {text} is negative: give a count of items, or {off}")
    return int(text)


def _comma_text(value: Any) -> Any:
    """A list given as a sequence (a config read back from run.json) as the text an option gives."""
    return ",".join(value) if isinstance(value, Sequence) and not isinstance(value, str) else value


OPTION_NAMES = {"calibrations": "--calibration", "ppl_margin_pct": "--ppl-margin", "items": "--online"}
"""The fields whose `kqe eval` option is not `--` and the field's name with dashes."""
ALWAYS_SAID = frozenset(
    {"model", "schemes", "calibrations", "calib_samples", "calib_seq_len", "tasks", "items", "limit"}
    | {"profile", "seed", "load"}
)
"""Fields the reproduce command names even at their default: `kqe eval` decides the default of items,
limit, profile and load from the model, the target and the machine; the others make it readable."""
RAG_SAID = frozenset({"rag_conditions", "rag_lengths", "rag_questions"})
"""Fields the reproduce command names even at their default when ko_rag is scored: the slice it drew."""


def option_name(field: str) -> str:
    """The `kqe eval` option that sets `field` (`calib_seq_len` → `--calib-seq-len`)."""
    return OPTION_NAMES.get(field, "--" + field.replace("_", "-"))


def option_help(field: str) -> str:
    """The help of the `kqe eval` option that sets `field`: the field's docstring (pydantic reads it into
    the field's description: `use_attribute_docstrings` of `Record`) on one line, without the backticks
    that mark code for a reader of the source and are only noise on a terminal."""
    description = EvalConfig.model_fields[field].description
    if not description:
        raise ValueError(f"EvalConfig.{field} has no docstring: its kqe eval option would have no help")
    return " ".join(description.replace("`", "").split())


class EvalConfig(Record):
    """Everything that decides what `make eval` computes; its fields make up the reproduce command.

    Each field's docstring is its `kqe eval` option's help (`option_help`), so it is written for the
    person at the terminal: it names options, not fields. A default `kqe eval` decides from the model,
    the target or the machine is said by the option's `show_default`, in `kqe/commands/eval.py`.
    """

    model: str = defaults.MODEL
    """Registry name (`kqe models`), `hf:org/name[@rev]`, or a local model directory."""
    schemes: tuple[str, ...] = defaults.SCHEMES
    """Comma-separated checkpoints to build and score; `bf16` (the base) is always included."""
    calibrations: tuple[str, ...] = defaults.CALIBRATIONS
    """Calibration mixes, comma-separated: `ko100`, `ko70`, `en100`, or shares such as `ko=0.6,en=0.4`.
    A scheme that needs calibration is built once per mix; the mix with the least Korean is the control
    the others are paired with."""
    calib_samples: int = defaults.CALIB_SAMPLES
    """Calibration samples."""
    calib_seq_len: int = defaults.CALIB_SEQ_LEN
    """Tokens per calibration sample."""
    tasks: tuple[str, ...] = defaults.TASKS
    """Comma-separated tasks to score: kmmlu (offline: the KMMLU-HARD dev items), kmmlu_5shot,
    kmmlu_hard, mmlu, mmlu_5shot, ko_faq, ko_rag (`--rag-*` say which slice), or any lm-eval
    multiple-choice or generation task as `lm-eval:<task>` (`kqe tasks` lists them)."""
    items: ItemChoice = ItemChoice()  # decided by evals.tasks.item_sets.choose, which also says why
    """Score KMMLU and MMLU's full test splits from the hub, or the offline sets (KMMLU-HARD dev, an
    MMLU sample)."""
    limit: int | None = defaults.LIMIT
    """Items per task at most, subject-stratified (seeded); 0 scores every item (null in run.json).
    ko_rag draws `--rag-questions` instead."""
    profile: str = defaults.CPU_PROFILE
    """Serve profile (`evals/serving/profiles.toml`): every checkpoint is scored under it, or, with
    `--target-gpu`, deployed with it (its memory columns are planned or measured under it)."""
    seed: int = defaults.SEED
    """Seed of calibration sampling and item sampling."""
    concurrency: int = defaults.CONCURRENCY
    """Scoring requests in flight (each of up to 8 items)."""
    target_gpu: str | None = None  # placed by evals/planning/placement.py
    """GPU the checkpoints will be deployed on (`kqe plan --help` lists them; aliases such as 4090,
    h100, a100): each is planned on it before anything is built, its memory is planned or measured
    for it, and its items are scored wherever it fits."""
    gpu_gib: float | None = None
    """The target as a memory size, GiB per GPU, instead of a named GPU."""
    score_profile: str | None = None
    """Profile items are scored under when the target is not this machine: every checkpoint on a
    machine without a GPU (default `cpu-small`), the last fallback on one with GPUs."""
    load: bool = False
    """Also measure each checkpoint's serving capacity with `vllm bench serve` at concurrency 1, half
    of max-num-seqs and max-num-seqs (as `kqe load` does)."""
    load_duration_s: float = defaults.LOAD_DURATION_S
    """Seconds of load per concurrency level, with `--load`."""
    rag_data: str | None = None
    """Folder with docs.jsonl + questions.jsonl that ko_rag scores instead of its built-in set (format:
    `evals/tasks/ko_rag/README.md`)."""
    rag_conditions: tuple[str, ...] = defaults.RAG_DEFAULT_CONDITIONS  # evals/tasks/ko_rag/sweep.py
    """ko_rag conditions, comma-separated: retrieved (BM25's passages), oracle (the gold passages
    forced in), depth (the oracle at depths 0, 1/4, 1/2, 3/4, end: 5x its cost), closed_book (no
    documents)."""
    rag_lengths: tuple[str, ...] = defaults.RAG_DEFAULT_LENGTHS
    """ko_rag context lengths, comma-separated, of 1k, 2k, 4k, 16k (tokens of the whole request);
    those over the profile's max-model-len are skipped and said so."""
    rag_questions: int | None = defaults.RAG_DEFAULT_QUESTIONS
    """ko_rag questions drawn (seeded; 0: every question), each scored in every condition and length."""
    kv_cache_dtypes: tuple[str, ...] = (AUTO,)
    """KV-cache dtypes to serve, comma-separated, of auto, fp8, fp8_e4m3, fp8_e5m2 (`kqe/core/kv_cache.py`):
    each checkpoint of `--kv-checkpoints` is served again with each one under the same profile otherwise,
    as a row of its own (`bf16+kv-fp8`) paired with the same weights at auto and with the base."""
    kv_checkpoints: tuple[str, ...] = ()
    """Checkpoints served with every `--kv-cache-dtypes` dtype, comma-separated (names as in the
    leaderboard); empty: the base and the run's first 4-bit checkpoint."""
    circular: int = 0
    """CircularEval on this many items per letter-choice task (seeded; the same for every checkpoint):
    each is asked again in every cyclic rotation of its options, 3 more requests per item for 4
    options, and counts right only if right in all; 0: off. ko_rag, lm-eval and generation tasks are
    not rotated."""
    rag_chat_template: bool = False
    """Wrap each ko_rag prompt in the model's chat template as a user turn (instruct checkpoints)."""
    include_path: str | None = None
    """Folder of your own lm-eval task YAMLs, searched with lm-eval's own: their tasks are scored as
    `lm-eval:<task>` (`kqe tasks --include-path DIR` lists them)."""
    apply_chat_template: bool = False
    """Render an lm-eval generation task's prompts through the model's chat template, as `lm_eval
    --apply_chat_template` does (instruct checkpoints); multiple-choice tasks are scored as written."""
    trust_remote_code: bool = False
    """Let vLLM run Python code shipped with the model (config.json `auto_map`; such a model is refused
    without it): only for models you trust."""
    recipes: str | None = None  # read by quantize.recipes
    """TOML file of named recipes (group size, symmetry, …): its table names can be listed in
    `--schemes`."""
    extra: tuple[str, ...] = ()
    """Comma-separated pre-quantized checkpoints to score beside the built ones: model folders or
    `hf:org/name@rev` (a hub checkpoint is pinned to a revision)."""
    multiplicity: str = defaults.MULTIPLICITY[0]
    """How the accuracy p-values (and verdicts) are adjusted for many tests: Holm across each
    checkpoint's tasks, or Holm or Benjamini–Hochberg (bh) across every checkpoint × task of the run
    (recorded in run.json)."""
    ppl_margin_pct: float = defaults.PPL_MARGIN_PCT
    """Perplexity increase, in percent, the perplexity verdicts take as acceptable."""
    run: str | None = None
    """Name of this run: its leaderboard, run.json, report, cards and plots go to
    `results/<model>/runs/<name>/` instead of `results/<model>/`; per-item files and finished stages
    stay in `results/<model>/`, shared with the model's other runs."""

    @field_validator("schemes", mode="before")
    @classmethod
    def _some_scheme(cls, value: Any) -> tuple[str, ...]:
        named = split_list(_comma_text(value))
        if not named:
            raise UserError(f"--schemes {_comma_text(value)!r} names no scheme: give e.g. bf16,awq-w4a16")
        return named

    @field_validator("tasks", "extra", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> tuple[str, ...]:
        return split_list(_comma_text(value))

    @field_validator("calibrations", mode="before")
    @classmethod
    def _mixes(cls, value: Any) -> tuple[str, ...]:
        return split_mixes(_comma_text(value))

    @field_validator("rag_conditions", mode="before")
    @classmethod
    def _conditions(cls, value: Any) -> tuple[str, ...]:
        return parse_conditions(_comma_text(value))

    @field_validator("rag_lengths", mode="before")
    @classmethod
    def _lengths(cls, value: Any) -> tuple[str, ...]:
        return parse_lengths(_comma_text(value))

    @field_validator("rag_questions")
    @classmethod
    def _every_question(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise UserError(f"--rag-questions {value} is negative: give a count, or 0 for every question")
        return value or None  # 0, as --limit 0: every question

    @field_validator("kv_cache_dtypes", mode="before")
    @classmethod
    def _kv_dtypes(cls, value: Any) -> tuple[str, ...]:
        return parse_kv_dtypes(split_list(_comma_text(value)) or (AUTO,))

    @field_validator("kv_checkpoints", mode="before")
    @classmethod
    def _kv_checkpoint_list(cls, value: Any) -> tuple[str, ...]:
        return split_list(_comma_text(value))

    @field_validator("circular", mode="before")
    @classmethod
    def _circular_count(cls, value: Any) -> int:
        return parse_count(value, "--circular", "0 for no CircularEval")

    @field_validator(
        "target_gpu", "score_profile", "rag_data", "include_path", "recipes", "run", mode="before"
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return value or None  # an option given empty (`--run ""`, make's `RUN=`) is not given

    @field_validator("run")
    @classmethod
    def _plain_folder_name(cls, run: str | None) -> str | None:
        if run is None:
            return None
        composed = unicodedata.normalize("NFC", run)  # decomposed and composed Hangul: one run
        if len(composed.encode("utf-8")) > MAX_RUN_NAME_BYTES:  # found only when its folder is made
            raise UserError(
                f"run name {composed[:40]!r}… is {len(composed.encode('utf-8')):,} bytes long: a --run "
                f"names a folder, at most {MAX_RUN_NAME_BYTES} bytes; shorten it"
            )
        if safe_name(run) != composed:  # it names a folder under results/<model>/runs/
            raise UserError(
                f"run name {run!r} is not a plain folder name: use letters and digits (any script, "
                "Hangul too), '.', '_', '-'"
            )
        return composed

    def command(self) -> str:
        """The `kqe eval` line that computes this config again on any machine."""
        words = ["kqe", "eval"]
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            said = name in ALWAYS_SAID or (name in RAG_SAID and "ko_rag" in self.tasks)
            if said or value != field.default:
                words += _option_words(name, value)
        return shlex.join(words)


def _option_words(field: str, value: Any) -> list[str]:
    """`field`'s option and value as `kqe eval` reads them."""
    if isinstance(value, ItemChoice):
        return ["--online" if value.online else "--offline"]
    if isinstance(value, bool):  # only load has a --no- form, and only it is said when off
        return [option_name(field) if value else option_name(field).replace("--", "--no-", 1)]
    if field in ("limit", "rag_questions"):
        return [option_name(field), str(value or 0)]  # 0: every item
    if isinstance(value, tuple):
        return [option_name(field), ",".join(value)]
    if isinstance(value, float):
        short = f"{value:g}"
        return [option_name(field), short if float(short) == value else repr(value)]
    return [option_name(field), str(value)]
