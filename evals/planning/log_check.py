"""`kqe plan --check-logs`: the planner against real vLLM start-up logs on GPUs.

The corpus (`evals/planning/gpu_logs/*.toml`, shipped with the suite) holds published vLLM GPU logs:
their memory lines, provenance and the settings each ran with. For every log the planner plans the
same request (model, scheme, GPU memory, release, tensor parallel, lengths, utilization, KV dtype)
and the planned weights, available KV memory and KV tokens are compared with what the log says.

The non-torch and CUDA-graph parts of the overhead are medians of what the corpus's logs state
(`fit_overheads`, the constants of `FITTED_OVERHEADS`); each row is also re-planned with them fitted
on the other logs only (leave-one-out), so the report says how much of the agreement is the fit.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError, model_validator

from evals.planning.plan_evaluation import evaluate
from evals.planning.planner import validate
from evals.planning.vllm_memory import (
    FITTED_OVERHEADS,
    Overheads,
    PlanRequest,
    VllmEngine,
    gpu_named,
)
from evals.serving.memory import parse_memory
from kqe.core.errors import UserError
from kqe.core.io import loads_toml
from kqe.core.records import EngineSettings, ModelSpec, Record
from kqe.core.registry import dense_param_count, load_registry
from kqe.core.schemes import SCHEMES

CORPUS_DIR = Path(__file__).with_name("gpu_logs")
MEASURES = ("weights_gib", "kv_cache_gib", "kv_cache_tokens")
Measure = Literal["weights_gib", "kv_cache_gib", "kv_cache_tokens"]

# What the profile says it measured besides weights: V1 0.1x "non-torch forward increase memory:
# 0.25GiB", "Estimated CUDA graph memory: 0.84 GiB total"; V0 "non_torch_memory takes 0.30GiB",
# "non_torch_memory     1.79GiB", "non_torch_memory=0.35GiB".
_NON_TORCH = re.compile(
    r"non[-_]torch(?: forward increase)?(?:_memory)?(?: memory)?(?::| takes|=|\s)\s*([\d.]+) ?GiB"
)
_CUDA_GRAPHS = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB")


class LogEntry(EngineSettings):
    """One vLLM start of the corpus: provenance, the settings it ran with, its memory lines."""

    id: str
    url: str
    why: str
    """Why it was kept: where its settings are stated."""
    vllm_version: str
    vllm_engine: VllmEngine
    model: str
    scheme: str
    gpu: str
    gpu_gib: float | None = None
    """Total GPU memory as the log states it; None: the GPU's of gpus.toml."""
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    kv_settings_unknown: str | None = None
    """Why the KV cannot be planned from this log (only its weights are compared)."""
    settings_line: str
    memory_lines: str

    @model_validator(mode="before")
    @classmethod
    def _states_its_settings(cls, data: Any) -> Any:
        """A log states what it ran with where a profile would fall back on a default."""
        missing = [name for name in _STATED if isinstance(data, dict) and name not in data]
        if missing:
            raise ValueError(f"{missing[0]}: field required")
        return data


_STATED = ("tensor_parallel_size", "gpu_memory_utilization", "kv_cache_dtype")
"""Engine settings whose profile defaults say nothing about a published log."""


class LogCheckRow(Record):
    """Planned against logged for one log of the corpus; errors are (planned − logged) / logged."""

    id: str
    """The log's id in the corpus."""
    url: str
    """Where the log was published."""
    model: str
    """Model name (registry or corpus)."""
    scheme: str
    """Weight format planned."""
    gpu: str
    """GPU the log ran on."""
    vllm_version: str
    """vLLM release that wrote the log."""
    tensor_parallel_size: int
    """GPUs the model is split over."""
    logged: dict[str, float | None]
    """What the log says, by measure (None: the log does not say, or its KV settings are unknown)."""
    planned: dict[str, float | None]
    """What the planner computes from the log's settings, by measure."""
    error_pct: dict[str, float | None]
    """Signed error in percent, by measure (None where either side is missing)."""
    leave_one_out_error_pct: dict[str, float | None]
    """The same with the fitted overhead parts fitted on the other logs only."""


class LogCheckReport(Record):
    """The error distribution of the planner over a corpus of GPU logs."""

    logs: int
    """Logs checked."""
    median_abs_error_pct: dict[str, float | None]
    """Median absolute error by measure, over the logs that state it."""
    max_abs_error_pct: dict[str, float | None]
    """Largest absolute error by measure."""
    leave_one_out_median_abs_error_pct: dict[str, float | None]
    """Median absolute error with the fitted parts fitted without the log checked."""
    worst: dict[str, str | None]
    """Id of the log with the largest error, by measure."""
    rows: list[LogCheckRow]
    """One row per log."""


def load_corpus(folder: Path = CORPUS_DIR) -> list[tuple[LogEntry, ModelSpec]]:
    """Every log of the `*.toml` files in `folder`, with its model (UserError, one line, otherwise)."""
    if not folder.is_dir():
        raise UserError(f"--check-logs {folder}: no such folder; give a folder of log corpus *.toml files")
    files = sorted(folder.glob("*.toml"))
    if not files:
        raise UserError(
            f"--check-logs {folder}: no *.toml log corpus in it (see {CORPUS_DIR / 'corpus.toml'})"
        )
    registry = load_registry()
    entries: list[tuple[LogEntry, ModelSpec]] = []
    for file in files:
        try:
            table = loads_toml(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:  # not UTF-8, not TOML, nested too deep
            raise UserError(f"log corpus {file}: not readable TOML ({err})") from None
        models = _corpus_models(file, table.get("models", {}), registry)
        logs = table.get("log", [])
        if not logs:
            raise UserError(f"log corpus {file}: no [[log]] entries")
        entries += [_entry(file, raw, registry | models) for raw in logs]
    return entries


def _corpus_models(file: Path, tables: dict, registry: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
    models = {}
    for name, fields in tables.items():
        if name in registry:
            raise UserError(f"log corpus {file}: model {name!r} is in the registry; describe it once")
        shape = {key: value for key, value in fields.items() if key != "source"}
        if not isinstance(fields.get("source"), str):
            raise UserError(
                f"log corpus {file}: model {name!r}: say where its numbers come from (source = …)"
            )
        try:  # the registry's own record: the corpus states the same facts a registry entry does
            spec = ModelSpec.model_validate(
                {"name": name, "revision": "public config", "params_b": 0, **shape}
            )
        except ValidationError as err:
            raise UserError(f"log corpus {file}: model {name!r}: {_first_error(err)}") from None
        count = dense_param_count(
            layers=spec.layers,
            hidden=spec.hidden,
            intermediate=spec.intermediate,
            heads=spec.heads,
            kv_heads=spec.kv_heads,
            head_dim=spec.head_dim,
            vocab=spec.vocab,
            tied=spec.tied_embeddings,
        )
        models[name] = spec.model_copy(update={"params_b": round(count / 1e9, 3)})
    return models


def _entry(file: Path, raw: dict, models: dict[str, ModelSpec]) -> tuple[LogEntry, ModelSpec]:
    name = raw.get("id", "?") if isinstance(raw, dict) else "?"
    try:
        entry = LogEntry.model_validate(raw)
    except ValidationError as err:
        raise UserError(
            f"log corpus {file}: log {name!r}: {_first_error(err)}: state it from the log or its "
            "thread, or leave the log out"
        ) from None
    if entry.model not in models:
        raise UserError(
            f"log corpus {file}: log {name!r}: unknown model {entry.model!r}: use a registry name or "
            f"describe it in a [models.{entry.model!r}] table"
        )
    if entry.scheme not in SCHEMES:
        raise UserError(f"log corpus {file}: log {name!r}: unknown scheme {entry.scheme!r}")
    return entry, models[entry.model]


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "entry"
    return f"{where}: {first['msg'].lower()}"


def request_for(entry: LogEntry, model: ModelSpec) -> PlanRequest:
    """The plan request a log's settings make."""
    gpu = gpu_named(entry.gpu)
    major, minor = (int(part) for part in entry.vllm_version.split(".")[:2])
    req = PlanRequest(
        model=model,
        scheme=entry.scheme,
        gpu=gpu.name,
        gpu_gib=entry.gpu_gib or gpu.memory_gib,
        compute_capability=gpu.compute_capability,
        max_num_batched_tokens=entry.max_num_batched_tokens,
        vllm_version=(major, minor),
        vllm_engine=entry.vllm_engine,
        **entry.model_dump(include=set(EngineSettings.model_fields)),
    )
    try:
        validate(req)
    except UserError as err:
        raise UserError(f"log {entry.id!r}: {err}") from None
    return req


def logged_memory(entry: LogEntry) -> dict[str, float | None]:
    """What a log's memory lines say, by measure."""
    report = parse_memory(entry.memory_lines, entry.max_model_len, "gpu", block_size=entry.block_size)
    logged = {"weights_gib": report.weights_gib, "kv_cache_gib": report.kv_cache_gib}
    tokens = report.kv_cache_tokens
    logged["kv_cache_tokens"] = float(tokens) if tokens is not None else None
    if entry.kv_settings_unknown:
        logged |= {"kv_cache_gib": None, "kv_cache_tokens": None}
    return logged


def planned_memory(req: PlanRequest, overheads: Overheads) -> dict[str, float | None]:
    """What the planner computes for a request, by measure."""
    ev = evaluate(req, overheads)
    return {
        "weights_gib": ev.weights_gib,
        "kv_cache_gib": ev.kv_gib,
        "kv_cache_tokens": float(ev.capacity.logged_tokens),
    }


def _profile_parts(entry: LogEntry) -> tuple[float | None, float | None]:
    """The non-torch and CUDA-graph GiB a log's profile states, if it does."""
    non_torch = _NON_TORCH.search(entry.memory_lines)
    graphs = _CUDA_GRAPHS.search(entry.memory_lines)
    return (
        float(non_torch[1]) if non_torch else None,
        float(graphs[1]) if graphs else None,
    )


def fit_overheads(entries: list[LogEntry], fallback: Overheads = FITTED_OVERHEADS) -> Overheads:
    """Medians of the non-torch memory (by engine and tensor parallel > 1) and of the CUDA-graph
    estimate (by tensor parallel > 1) the logs state; `fallback`'s value where no log states one."""
    non_torch: dict[tuple[VllmEngine, bool], list[float]] = {key: [] for key in fallback.non_torch}
    graphs: dict[bool, list[float]] = {key: [] for key in fallback.cuda_graphs}
    for entry in entries:
        stated_non_torch, stated_graphs = _profile_parts(entry)
        multi = entry.tensor_parallel_size > 1
        if stated_non_torch is not None:
            non_torch[(entry.vllm_engine, multi)].append(stated_non_torch)
        if stated_graphs is not None:
            graphs[multi].append(stated_graphs)
    return Overheads(
        non_torch={k: _median(v, fallback.non_torch[k]) for k, v in non_torch.items()},
        cuda_graphs={k: _median(v, fallback.cuda_graphs[k]) for k, v in graphs.items()},
    )


def _median(values: list[float], fallback: float) -> float:
    return round(statistics.median(values), 2) if values else fallback


def _errors(planned: dict[str, float | None], logged: dict[str, float | None]) -> dict[str, float | None]:
    errors: dict[str, float | None] = {}
    for measure in MEASURES:
        got, want = planned[measure], logged[measure]
        errors[measure] = None if got is None or not want else round((got - want) / want * 100, 2)
    return errors


def check_rows(corpus: list[tuple[LogEntry, ModelSpec]]) -> list[LogCheckRow]:
    """One row per log: planned with `fit_overheads` of the whole corpus, and leave-one-out."""
    entries = [entry for entry, _ in corpus]
    fitted = fit_overheads(entries)
    rows = []
    for index, (entry, model) in enumerate(corpus):
        req = request_for(entry, model)
        logged = logged_memory(entry)
        planned = planned_memory(req, fitted)
        others = fit_overheads(entries[:index] + entries[index + 1 :])
        rows.append(
            LogCheckRow(
                id=entry.id,
                url=entry.url,
                model=model.name,
                scheme=entry.scheme,
                gpu=req.gpu or entry.gpu,
                vllm_version=entry.vllm_version,
                tensor_parallel_size=entry.tensor_parallel_size,
                logged=logged,
                planned={k: None if logged[k] is None else v for k, v in planned.items()},
                error_pct=_errors(planned, logged),
                leave_one_out_error_pct=_errors(planned_memory(req, others), logged),
            )
        )
    return rows


def summarize(rows: list[LogCheckRow]) -> LogCheckReport:
    """The error distribution of `rows` (absolute errors; measures a log does not state are skipped)."""

    def stat(kind: Literal["median", "max", "loo"], measure: str) -> float | None:
        field = "leave_one_out_error_pct" if kind == "loo" else "error_pct"
        values = [abs(v) for row in rows if (v := getattr(row, field)[measure]) is not None]
        if not values:
            return None
        return round(max(values) if kind == "max" else statistics.median(values), 2)

    def worst(measure: str) -> str | None:
        stated = [row for row in rows if row.error_pct[measure] is not None]
        return max(stated, key=lambda row: abs(row.error_pct[measure] or 0.0)).id if stated else None

    return LogCheckReport(
        logs=len(rows),
        median_abs_error_pct={m: stat("median", m) for m in MEASURES},
        max_abs_error_pct={m: stat("max", m) for m in MEASURES},
        leave_one_out_median_abs_error_pct={m: stat("loo", m) for m in MEASURES},
        worst={m: worst(m) for m in MEASURES},
        rows=rows,
    )


def check_logs(folder: Path = CORPUS_DIR) -> LogCheckReport:
    """The planner against every log of the corpus in `folder`."""
    return summarize(check_rows(load_corpus(folder)))
