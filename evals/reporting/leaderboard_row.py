"""One checkpoint's row of `results/<model>/leaderboard.csv`, versioned apart from every other record:
a new column rewrites leaderboards, never the checkpoints, calibration sets or per-item files behind them.

The per-task columns (`kmmlu_acc`, `mmlu_verdict`, …), the ko_rag ones and the generation ones are not
written out by hand: `task_columns` generates them (and `--circular`'s) from the task registry,
`rag_columns` from ko_rag's sweep, `generation_columns` per generative prefix, and the row holds them
in `tasks`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from evals.reporting.generation_columns import GENERATION_COLUMNS
from evals.reporting.rag_columns import RAG, RAG_COLUMNS
from evals.reporting.task_columns import (
    AVERAGES_COLUMNS,
    CALIBRATION_EFFECT_COLUMNS,
    CIRCULAR_COLUMNS,
    COMPARISON_COLUMNS,
    KV_EFFECT_COLUMNS,
    TASK_COLUMNS,
    Cell,
    cell,
)
from evals.tasks.registry import COLUMN_SPECS
from kqe.core.records import Record

LEADERBOARD_SCHEMA_VERSION = 9
"""Version of the leaderboard's columns (`schema_version`), bumped when a column is added or changes: 4
target/placement; 5 perplexity CIs, verdicts, calibration effect, KO−EN gap; 6 ko_rag answerable F1/EM
and abstain precision, lmeval_*, faq_*, ko_en_gap_pairing, load_* by `vllm bench serve`; 7 ko_rag per
condition (oracle, depth grid, closed-book gain), retrieval recall, ko_rag_hangul/abstain/mc on the
retrieved condition alone (older boards averaged every item they had, all retrieved then); 8 ppl_lo_*
(LibreOffice's help pages in Korean and English, their KO−EN gap), and per task the top choice and its
share (answer collapse, also in the verdict) and the letter-debiased accuracy with its Δ and CI (older
boards read them as empty); 9 kv_cache_dtype and kv_effect_vs (`--kv-cache-dtypes`; `<prefix>_kv_effect*`
only in runs with a non-auto KV row). A registry
task with a new column prefix (mmmlu_*, belebele_*), or `--circular`'s `<prefix>_acc_circular*`, adds
columns only to the runs that have them: no bump."""
READABLE_SCHEMA_VERSIONS = (3, 4, 5, 6, 7, 8, 9)
"""Versions this suite reads: an older board's missing columns (all optional) read as empty."""


GENERATED_COLUMNS = TASK_COLUMNS | CIRCULAR_COLUMNS | KV_EFFECT_COLUMNS | RAG_COLUMNS | GENERATION_COLUMNS
"""Every generated column: name -> its prefix (group), type and docs."""


@dataclass(frozen=True)
class TaskScores:
    """One task's accuracy and its Δ against the base with the 95% CI, as a row holds them (fractions)."""

    acc: float | None
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str | None


class LeaderboardRow(Record):
    """One checkpoint's row of `results/<model>/leaderboard.csv` (one column per field)."""

    schema_version: int = LEADERBOARD_SCHEMA_VERSION
    """Leaderboard schema version."""
    model: str
    """Registry name of the model."""
    checkpoint: str
    """Checkpoint name."""
    scheme: str
    """Quantization scheme."""
    calibration: str
    """Calibration mix name, or `none`."""
    status: str
    """`ok`, or `failed: <why>` when the checkpoint could not be built, served or scored."""
    suite_version: str
    """Version of ko-quant-eval that wrote the row."""
    date: str
    """UTC date and time the row was written (ISO 8601, seconds)."""
    ko_en_gap: float | None
    """Korean Δ − English Δ (KMMLU − MMLU, or a parallel pair's): negative means Korean lost more."""
    ko_en_gap_ci_low: float | None
    """Lower end of the 95% CI of ko_en_gap."""
    ko_en_gap_ci_high: float | None
    """Upper end of the 95% CI of ko_en_gap."""
    ko_en_gap_pairing: str | None = None
    """How ko_en_gap paired the tasks: `matched items: <pairing>` (a parallel pair, its registry entry
    naming how items match, e.g. `link + question_number (…)`) or `unpaired (different items)`."""
    calib_effect_vs: str | None = None
    """Checkpoint of the same scheme calibrated on another mix that this row is paired with
    (`awq-w4a16-en100` for `awq-w4a16-ko70`); empty when the run has no such pair."""
    kv_cache_dtype: str | None = None
    """`--kv-cache-dtype` the row was served with: `auto` (the model's dtype) or an FP8 one
    (`--kv-cache-dtypes`); empty on boards before schema 9, all served at auto."""
    kv_effect_vs: str | None = None
    """For a row served with a non-auto KV dtype (`bf16+kv-fp8`): the row of the same weights at auto
    KV it is paired with (`<task>_kv_effect`); empty otherwise."""
    # perplexity columns
    ppl_ko: float | None = None
    """Perplexity (per token of this model's tokenizer) on held-out Korean text (bills never used for
    calibration), through the server."""
    ppl_ko_delta_pct: float | None = None
    """ppl_ko relative to the base's, percent (+10.0 = 10% higher perplexity); empty on the base row."""
    ppl_en: float | None = None
    """Perplexity on held-out English text (Botchan chapters X–XI), through the server."""
    ppl_en_delta_pct: float | None = None
    """ppl_en relative to the base's, percent; empty on the base row."""
    ppl_ko_delta_pct_ci_low: float | None = None
    """Lower end of the paired 95% CI of ppl_ko_delta_pct (documents resampled: run.json says how)."""
    ppl_ko_delta_pct_ci_high: float | None = None
    """Upper end of that CI."""
    ppl_ko_verdict: str | None = None
    """Korean perplexity verdict at the run's margin (+1% by default): significant loss, no loss
    detected within margin, or inconclusive."""
    ppl_en_delta_pct_ci_low: float | None = None
    """Lower end of the paired 95% CI of ppl_en_delta_pct."""
    ppl_en_delta_pct_ci_high: float | None = None
    """Upper end of that CI."""
    ppl_en_verdict: str | None = None
    """English perplexity verdict at the run's margin."""
    ppl_ko_calib_effect_pct: float | None = None
    """ppl_ko relative to `calib_effect_vs`'s on the same windows, percent (negative: this mix lowered
    Korean perplexity)."""
    ppl_ko_calib_effect_ci_low: float | None = None
    """Lower end of the paired 95% CI of ppl_ko_calib_effect_pct."""
    ppl_ko_calib_effect_ci_high: float | None = None
    """Upper end of that CI."""
    ppl_faq_gap_pct: float | None = None
    """Korean minus English perplexity change against the base on the same held-out Debian FAQ
    sections, percentage points (positive: Korean lost more)."""
    ppl_faq_gap_ci_low: float | None = None
    """Lower end of the paired 95% CI of ppl_faq_gap_pct (sections resampled in both languages)."""
    ppl_faq_gap_ci_high: float | None = None
    """Upper end of that CI."""
    ppl_lo_ko: float | None = None
    """Perplexity on held-out Korean LibreOffice help: 177 pages of its Korean translation (about 250
    Hangul letters each, pages as documents), through the server."""
    ppl_lo_ko_delta_pct: float | None = None
    """ppl_lo_ko relative to the base's, percent; empty on the base row."""
    ppl_lo_ko_delta_pct_ci_low: float | None = None
    """Lower end of the paired 95% CI of ppl_lo_ko_delta_pct (pages resampled)."""
    ppl_lo_ko_delta_pct_ci_high: float | None = None
    """Upper end of that CI."""
    ppl_lo_ko_verdict: str | None = None
    """Korean help perplexity verdict at the run's margin."""
    ppl_lo_en: float | None = None
    """Perplexity on the English originals of the same paragraphs of the same help pages."""
    ppl_lo_en_delta_pct: float | None = None
    """ppl_lo_en relative to the base's, percent; empty on the base row."""
    ppl_lo_en_delta_pct_ci_low: float | None = None
    """Lower end of the paired 95% CI of ppl_lo_en_delta_pct (pages resampled)."""
    ppl_lo_en_delta_pct_ci_high: float | None = None
    """Upper end of that CI."""
    ppl_lo_en_verdict: str | None = None
    """English help perplexity verdict at the run's margin."""
    ppl_lo_gap_pct: float | None = None
    """Korean minus English perplexity change against the base on the same help pages, percentage
    points (positive: Korean lost more)."""
    ppl_lo_gap_ci_low: float | None = None
    """Lower end of the paired 95% CI of ppl_lo_gap_pct (pages resampled in both languages)."""
    ppl_lo_gap_ci_high: float | None = None
    """Upper end of that CI."""
    # scheme columns
    serving: str | None = None
    """How this engine and device serve the checkpoint: `native`, `dequantized: <why>` (its weights
    rebuilt unquantized where the engine has no kernel for its format: quality measured, memory planned),
    `weight-only W8A16 (FP8 Marlin) …`, `not servable here: <why>` (then it is not scored), or
    `unchecked: …` (vLLM decides)."""
    origin: str | None = None
    """`built` for checkpoints the suite built, else the directory or hub id it was given."""
    effective_bits: float | None = None
    """Bits per parameter over the whole checkpoint on disk (bf16: 16; 16-bit embeddings count)."""
    linear_bits: float | None = None
    """Bits per weight of the quantized linear layers alone, scales and zero points included."""
    quantized_gib: float | None = None
    """Checkpoint bytes of the quantized linear layers, GiB."""
    unquantized_gib: float | None = None
    """Checkpoint bytes kept in 16 bits (embeddings, LM head, norms), GiB."""
    target: str | None = None
    """The deployment the memory columns describe (`rtx4090 ×1 under rtx4090-16k:<key>`); empty without
    a target, when they are what vLLM logged where the items were scored."""
    memory_source: str | None = None
    """`vllm-log` (measured by vLLM on the target or, without one, where it was scored) or `planner`
    (planned for the target: this machine is not it)."""
    fits_target: bool | None = None
    """Whether the checkpoint fits the target (weights + overhead + one max-model-len request)."""
    target_pattern: str | None = None
    """The OOM pattern the target meets (A weights, B KV under load, C one request); empty when none."""
    target_shortfall_gib: float | None = None
    """GiB per GPU the target lacks, when it does not fit."""
    score_device: str | None = None
    """Where the items were scored: `cpu` or `gpu` (with `serve_profile`)."""
    score_tensor_parallel_size: int | None = None
    """GPUs the checkpoint was split over for scoring."""
    score_cpu_offload_gib: float | None = None
    """GiB of weights offloaded to CPU memory for scoring (`--cpu-offload-gb`), 0 when none."""
    score_placement: str | None = None
    """Why it was scored there: `fits the target`, `no GPU on this machine`, `tensor parallel over 2
    GPUs`, `offload 11 GiB of weights to CPU`, `--score-profile …`."""
    weights_gib: float | None
    """Weights memory vLLM reported, or the planner's on the target (see memory_source)."""
    weights_saving_gib: float | None
    """Weights memory saved against the base checkpoint, GiB."""
    weights_saving_x: float | None
    """Base weights memory divided by this checkpoint's (2.0 = half the memory)."""
    kv_cache_gib: float | None
    """KV cache memory vLLM reserved (or the planner's on the target)."""
    kv_cache_tokens: int | None
    """Tokens the KV cache holds."""
    max_concurrency: float | None
    """Requests of max-model-len tokens served at once."""
    load_concurrency: int | None
    """Requests in flight at the `vllm bench serve` target level: max-num-seqs (all levels: run.json)."""
    load_output_tokens_per_s: float | None
    """Output tokens/s at that level with long Korean RAG prompts."""
    load_goodput_req_per_s: float | None = None
    """Requests/s at that level that met the goodput SLO (TTFT and TPOT; run.json has the SLO)."""
    load_ttft_p99_ms: float | None = None
    """99th percentile time to first token at that level, milliseconds."""
    load_preemptions: int | None
    """Requests vLLM preempted at that level (KV cache exhausted: OOM pattern B)."""
    disk_gib: float | None
    """Checkpoint size on disk."""
    items_per_s: float | None
    """Median scoring speed over the tasks."""
    serve_profile: str
    """Serve profile the items were scored under: name and hash."""
    checkpoint_key: str
    """Hash of the checkpoint's build inputs."""
    versions: str
    """Key package versions (`vllm=…;llmcompressor=…;…`)."""
    command: str
    """Command that reproduces this row."""

    tasks: dict[str, Cell] = Field(default_factory=dict)
    """The generated columns (GENERATED_COLUMNS), by column name; read them as attributes
    (`row.kmmlu_acc`, `row.ko_rag_f1_1k`)."""

    @model_validator(mode="before")
    @classmethod
    def _gather_task_columns(cls, data: Any) -> Any:
        """Per-task columns may be passed by name like any other: they are gathered into `tasks`."""
        if not isinstance(data, dict):
            return data
        named = {key: data[key] for key in data if key in GENERATED_COLUMNS}
        rest = {key: value for key, value in data.items() if key not in GENERATED_COLUMNS}
        unknown = set(rest.get("tasks", {})) - set(GENERATED_COLUMNS)
        if unknown:
            raise ValueError(f"unknown task columns {sorted(unknown)}")
        cells = rest.get("tasks", {}) | named
        rest["tasks"] = {key: cell(GENERATED_COLUMNS[key].kind, value) for key, value in cells.items()}
        return rest

    def task_scores(self, prefix: str) -> TaskScores:
        """One task column prefix's accuracy and Δ against the base with its CI (`kqe choose` reads these)."""
        return TaskScores(
            acc=getattr(self, f"{prefix}_acc"),
            delta=getattr(self, f"{prefix}_delta"),
            ci_low=getattr(self, f"{prefix}_ci_low"),
            ci_high=getattr(self, f"{prefix}_ci_high"),
            verdict=getattr(self, f"{prefix}_verdict"),
        )

    def __getattr__(self, name: str) -> Any:
        if name in GENERATED_COLUMNS:
            return self.__dict__["tasks"].get(name)
        return super().__getattr__(name)  # type: ignore[misc]


def _layout() -> list[str]:
    """Column order of the CSV: the per-task groups sit where the comparison and averages belong."""
    before = {
        "ko_en_gap": [*COMPARISON_COLUMNS, *CIRCULAR_COLUMNS],
        "ppl_ko": [*CALIBRATION_EFFECT_COLUMNS, *KV_EFFECT_COLUMNS, *AVERAGES_COLUMNS],
        "serving": [*RAG_COLUMNS, *GENERATION_COLUMNS],
    }
    columns: list[str] = []
    for name in LeaderboardRow.model_fields:
        if name != "tasks":
            columns += [*before.get(name, []), name]
    return columns


COLUMNS = _layout()
"""Every column of every registered task, in CSV order (a CSV holds the scored tasks' only: `columns`)."""


def columns(rows: list[LeaderboardRow]) -> list[str]:
    """The CSV's columns for `rows`: every fixed one and ko_rag's own, and the generated columns of the
    prefixes any row has a value for, so a task (or a ko_rag condition) added later does not change
    the leaderboards of runs without it."""
    scored = {
        GENERATED_COLUMNS[name].prefix
        for row in rows
        for name, value in row.tasks.items()
        if value is not None
    } | {RAG}
    return [
        name for name in COLUMNS if name not in GENERATED_COLUMNS or GENERATED_COLUMNS[name].prefix in scored
    ]


def scored_tasks(rows: Sequence[LeaderboardRow]) -> dict[str, str]:
    """Column prefix -> label of the tasks any of `rows` has a value for, in registry order."""
    scored = {
        TASK_COLUMNS[name].prefix
        for row in rows
        for name, value in row.tasks.items()
        if value is not None and name in TASK_COLUMNS
    }
    return {prefix: spec.label for prefix, spec in COLUMN_SPECS.items() if prefix in scored}


def column_meaning(name: str) -> str:
    """The docs of column `name`."""
    if name in GENERATED_COLUMNS:
        return GENERATED_COLUMNS[name].meaning
    return LeaderboardRow.model_fields[name].description or ""


def column_type(name: str) -> Any:
    """The type of column `name` (an optional type where the cell may be empty)."""
    if name in GENERATED_COLUMNS:
        return GENERATED_COLUMNS[name].kind | None
    return LeaderboardRow.model_fields[name].annotation
