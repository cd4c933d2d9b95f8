"""The configuration of one `kqe eval` run: `EvalConfig`, the comma lists its options are written in
(each parsed once, by the field's validator), and the command line that reproduces it.

`kqe eval` has one option per field, spelled `option_name(field)`; `tests/test_eval_config.py` checks
the options against the fields and parses `command()` back through the real CLI for every field.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from pydantic import field_validator

from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.records import ItemChoice, Record
from kqe.core.workspace import safe_name


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
    named = split_list(text)
    unknown = [name for name in named if name not in defaults.RAG_CONDITIONS]
    if unknown or not named:
        what = f"names unknown {', '.join(unknown)}" if unknown else "names no condition"
        raise UserError(f"{option} {text!r} {what}: give some of {','.join(defaults.RAG_CONDITIONS)}")
    return tuple(name for name in defaults.RAG_CONDITIONS if name in named)


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


def option_name(field: str) -> str:
    """The `kqe eval` option that sets `field` (`calib_seq_len` → `--calib-seq-len`)."""
    return OPTION_NAMES.get(field, "--" + field.replace("_", "-"))


class EvalConfig(Record):
    """Everything that decides what `make eval` computes; its fields make up the reproduce command."""

    model: str = defaults.MODEL
    """Registry name, `hf:org/name[@rev]`, or a local model directory."""
    schemes: tuple[str, ...] = defaults.SCHEMES
    """Checkpoints to build and score; `bf16` (the base) is always included."""
    calibrations: tuple[str, ...] = defaults.CALIBRATIONS
    """Calibration mixes (`ko100`, `ko70`, `en100`, or `ko=0.6,en=0.4`): a scheme that needs one is
    built once per mix; the mix with the least Korean is the control the others are paired with."""
    calib_samples: int = defaults.CALIB_SAMPLES
    """Calibration samples."""
    calib_seq_len: int = defaults.CALIB_SEQ_LEN
    """Tokens per calibration sample."""
    tasks: tuple[str, ...] = defaults.TASKS
    """Tasks to score."""
    items: ItemChoice = ItemChoice()
    """Whether KMMLU and MMLU come from the hub's full test sets or the offline sets, and why
    (`kqe eval` decides it from the model and the environment, `evals.tasks.item_sets`)."""
    limit: int | None = defaults.LIMIT
    """Items per task at most (subject-stratified); None scores every item (`kqe eval`'s default online)."""
    profile: str = defaults.CPU_PROFILE
    """Serve profile: the one every checkpoint is scored under, or, with a target GPU, the one it
    will be deployed with (its memory columns are planned or measured under it)."""
    seed: int = defaults.SEED
    """Seed of calibration sampling and item sampling."""
    concurrency: int = defaults.CONCURRENCY
    """Scoring requests in flight."""
    target_gpu: str | None = None
    """GPU the checkpoints will be deployed on (evals/planning/gpus.toml name or alias); each is
    planned on it before anything is built, and scored where it fits (`evals/planning/placement.py`)."""
    gpu_gib: float | None = None
    """The target as a memory size (GiB per GPU) instead of a named GPU."""
    score_profile: str | None = None
    """Profile items are scored under when the target is not this machine: every checkpoint on a
    machine without a GPU (default `cpu-small`), the last fallback on one with GPUs."""
    load: bool = False
    """Also measure serving capacity (`vllm bench serve` at 1, half, all of max-num-seqs) per checkpoint."""
    load_duration_s: float = defaults.LOAD_DURATION_S
    """Seconds of load per concurrency level when `load` is on."""
    rag_data: str | None = None
    """Folder with docs.jsonl + questions.jsonl that ko_rag scores instead of its built-in set."""
    rag_conditions: tuple[str, ...] = defaults.RAG_DEFAULT_CONDITIONS
    """ko_rag conditions scored (`evals/tasks/ko_rag/sweep.py`): retrieved, oracle, depth, closed_book."""
    rag_chat_template: bool = False
    """Wrap each ko_rag prompt in the model's chat template as a user turn (instruct checkpoints)."""
    include_path: str | None = None
    """Folder of a user's lm-eval task YAMLs, searched with lm-eval's own for `lm-eval:<task>` tasks."""
    trust_remote_code: bool = False
    """Let vLLM run Python code shipped with the model (`auto_map`); refused without it."""
    recipes: str | None = None
    """TOML file of named recipes (`quantize.recipes`): its tables can be listed in `schemes`."""
    extra: tuple[str, ...] = ()
    """Pre-quantized checkpoints scored beside the built ones: model folders or `hf:org/name[@rev]`."""
    multiplicity: str = defaults.MULTIPLICITY[0]
    """How accuracy p-values are adjusted for many tests (`kqe.core.defaults.MULTIPLICITY`): Holm
    across each checkpoint's tasks, or Holm / Benjamini–Hochberg across every checkpoint × task."""
    ppl_margin_pct: float = defaults.PPL_MARGIN_PCT
    """Perplexity increase (percent) the perplexity verdicts take as acceptable."""
    run: str | None = None
    """Run name: the run's leaderboard, run.json, report, cards and plots go to
    `results/<model>/runs/<run>/` instead of `results/<model>/`; per-item files and stage records
    stay in `results/<model>/`, shared by every run of the model."""

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

    @field_validator(
        "target_gpu", "score_profile", "rag_data", "include_path", "recipes", "run", mode="before"
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return value or None  # an option given empty (`--run ""`, make's `RUN=`) is not given

    @field_validator("run")
    @classmethod
    def _plain_folder_name(cls, run: str | None) -> str | None:
        if run is not None and safe_name(run) != run:  # it names a folder under results/<model>/runs/
            raise UserError(
                f"run name {run!r} is not a plain folder name: use letters, digits, '.', '_', '-'"
            )
        return run

    def command(self) -> str:
        """The `kqe eval` line that computes this config again on any machine."""
        words = ["kqe", "eval"]
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if name in ALWAYS_SAID or value != field.default:
                words += _option_words(name, value)
        return shlex.join(words)


def _option_words(field: str, value: Any) -> list[str]:
    """`field`'s option and value as `kqe eval` reads them."""
    if isinstance(value, ItemChoice):
        return ["--online" if value.online else "--offline"]
    if isinstance(value, bool):  # only load has a --no- form, and only it is said when off
        return [option_name(field) if value else option_name(field).replace("--", "--no-", 1)]
    if field == "limit":
        return [option_name(field), str(value or 0)]  # 0: every item
    if isinstance(value, tuple):
        return [option_name(field), ",".join(value)]
    if isinstance(value, float):
        short = f"{value:g}"
        return [option_name(field), short if float(short) == value else repr(value)]
    return [option_name(field), str(value)]
