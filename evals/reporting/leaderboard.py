"""The leaderboard: one row per checkpoint, columns declared once by `LeaderboardRow`."""

from __future__ import annotations

import csv
import io
import logging
import math
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from types import UnionType
from typing import get_args

from pydantic import ValidationError

from evals.reporting import row_cells
from evals.reporting.generation_columns import generation_cells
from evals.reporting.leaderboard_row import (
    COLUMNS,
    GENERATED_COLUMNS,
    LEADERBOARD_SCHEMA_VERSION,
    READABLE_SCHEMA_VERSIONS,
    LeaderboardRow,
    column_meaning,
    column_type,
    columns,
)
from evals.reporting.outcome import CheckpointResult, TaskFindings
from evals.tasks.registry import PARALLEL_TASKS, column_prefix, fills_task_columns
from kqe import __version__
from kqe.core.capacity import CapacityReport
from kqe.core.errors import UserError
from kqe.core.io import read_text, require_file, write_atomic
from kqe.core.records import Checkpoint, MemoryReport
from kqe.core.results import Comparison, ScoreRun

log = logging.getLogger(__name__)

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NON_FINITE = {"nan", "inf", "infinity"}

FORMER_LOAD_COLUMN = "load_ttft_p95_s"
"""A column of schema ≤ 5 from kqe's own load generator, replaced by `vllm bench serve` p99s in 6."""
LOAD_COLUMNS = tuple(name for name in LeaderboardRow.model_fields if name.startswith("load_"))
"""The capacity columns (`vllm bench serve` at the target level)."""


def _task_cells(prefix: str, run: ScoreRun | None, comparison: Comparison | None) -> dict:
    cells: dict = {f"{prefix}_acc": run.accuracy if run else None}
    if comparison is not None:
        cells.update(
            {
                f"{prefix}_delta": comparison.delta,
                f"{prefix}_ci_low": comparison.ci_low,
                f"{prefix}_ci_high": comparison.ci_high,
                f"{prefix}_p": comparison.mcnemar_p,
                f"{prefix}_p_holm": comparison.p_holm,
                f"{prefix}_flips_c2w": comparison.flips_c2w,
                f"{prefix}_flips_w2c": comparison.flips_w2c,
                f"{prefix}_kl": comparison.mean_kl,
                f"{prefix}_recovery": comparison.recovery,
                f"{prefix}_mde": comparison.mde,
                f"{prefix}_verdict": comparison.verdict,
            }
        )
        if comparison.ko_en_gap is not None:  # carried by the Korean task's comparison
            cells.update(
                ko_en_gap=comparison.ko_en_gap,
                ko_en_gap_ci_low=comparison.ko_en_gap_ci_low,
                ko_en_gap_ci_high=comparison.ko_en_gap_ci_high,
                ko_en_gap_pairing=comparison.ko_en_gap_pairing,
            )
    return cells


def build_row(result: CheckpointResult) -> LeaderboardRow:
    """Assemble a checkpoint's row from what the run found about it; missing stages leave empty cells. A
    checkpoint never built gets only its status, placement and planned memory."""
    outcome, checkpoint = result.outcome, result.outcome.checkpoint
    if checkpoint is None:
        return _failed_row(result)
    cells: dict = {name: None for name in COLUMNS}
    cells.update(_comparison_cells(outcome.runs, result.tasks))
    cells.update(_found_cells(result))
    cells.update(_scheme_cells(checkpoint, result.serving))
    speeds = [run.items_per_s for run in outcome.runs.values() if run.items_per_s]
    all_versions = checkpoint.package_versions | result.engine_versions
    cells.update(
        **_identity_cells(result, checkpoint.scheme),
        **_memory_cells(result.base_memory, result.memory),
        **_capacity(result.capacity),
        disk_gib=round(checkpoint.disk_bytes / 2**30, 3),
        items_per_s=round(median(speeds), 2) if speeds else None,
        checkpoint_key=checkpoint.key,
        versions=";".join(f"{k}={v}" for k, v in sorted(all_versions.items())),
    )
    return LeaderboardRow(**cells)


def _found_cells(result: CheckpointResult) -> dict[str, object]:
    """The columns of the parts other stages found: averages, ko_rag, perplexity, placement, generation."""
    cells = row_cells.averages_cells(result.tasks.averages)
    if result.rag is not None:
        cells |= row_cells.rag_cells(result.rag)
    if result.perplexity is not None:
        cells |= row_cells.perplexity_cells(result.perplexity)
    if result.placement is not None:
        cells |= row_cells.placement_cells(result.placement)
    return cells | generation_cells(result.generation)


def _comparison_cells(runs: dict[str, ScoreRun], findings: TaskFindings) -> dict:
    """Accuracy, comparison with the base and calibration effect, per task column prefix."""
    cells: dict = {}
    compared = [*findings.vs_base, *findings.vs_control, *findings.vs_kv_control]
    scored = dict.fromkeys(filter(fills_task_columns, [*runs, *compared]))
    for task in sorted(scored, key=lambda task: task in PARALLEL_TASKS):  # a matched ko_en_gap wins
        prefix = column_prefix(task)  # of tasks sharing a prefix, a run scores one
        if task in runs or task in findings.vs_base:
            cells.update(_task_cells(prefix, runs.get(task), findings.vs_base.get(task)))
            cells.update(
                row_cells.choice_cells(prefix, findings.choices.get(task), findings.vs_base.get(task))
            )
            cells.update(row_cells.circular_cells(prefix, findings.circular.get(task)))
        effect = findings.vs_control.get(task)
        if effect is not None:
            cells.update(_effect_cells(prefix, "calib_effect", effect))
        kv_effect = findings.vs_kv_control.get(task)
        if kv_effect is not None:
            cells.update(_effect_cells(prefix, "kv_effect", kv_effect))
    if findings.vs_control:
        cells["calib_effect_vs"] = findings.calibration_control
    if findings.vs_kv_control:
        cells["kv_effect_vs"] = findings.kv_control
    return cells


def _identity_cells(result: CheckpointResult, scheme: str) -> dict[str, object]:
    """What a row is and how it was made, which every row has, built or failed."""
    outcome, profile = result.outcome, result.profile
    return {
        "schema_version": LEADERBOARD_SCHEMA_VERSION,
        "model": outcome.model,
        "checkpoint": outcome.name,
        "scheme": scheme,
        "calibration": outcome.calibration,
        "status": outcome.status,
        "suite_version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "serve_profile": f"{profile.name}:{profile.key}",
        "kv_cache_dtype": profile.kv_cache_dtype,
        "command": result.command,
    }


def _memory_cells(base: MemoryReport | None, memory: MemoryReport | None) -> dict[str, float | int | None]:
    """What vLLM reported about memory, and the weights saved against the base."""
    return {
        "weights_gib": memory.weights_gib if memory else None,
        **_saving(base, memory),
        "kv_cache_gib": memory.kv_cache_gib if memory else None,
        "kv_cache_tokens": memory.kv_cache_tokens if memory else None,
        "max_concurrency": memory.max_concurrency if memory else None,
    }


def _effect_cells(prefix: str, group: str, effect: Comparison) -> dict[str, float | None]:
    """A paired effect's columns: `calib_effect` (with its MDE) or `kv_effect`."""
    cells = {f"{prefix}_{group}{end}": getattr(effect, field) for end, field in _EFFECT_FIELDS.items()}
    return cells | ({f"{prefix}_{group}_mde": effect.mde} if group == "calib_effect" else {})


_EFFECT_FIELDS = {"": "delta", "_ci_low": "ci_low", "_ci_high": "ci_high", "_p": "mcnemar_p"}


def _failed_row(result: CheckpointResult) -> LeaderboardRow:
    """The row of a checkpoint that could not be built, found or scored: the status says why; only what
    the target would hold (`result.memory`, planned) and where it would have been scored are filled."""
    cells: dict = {name: None for name in COLUMNS}
    placement = row_cells.placement_cells(result.placement) if result.placement is not None else {}
    cells.update(
        _identity_cells(result, result.outcome.scheme),
        **_memory_cells(None, result.memory),
        **placement,
        checkpoint_key="",
        versions="",
    )
    return LeaderboardRow(**cells)


def _scheme_cells(checkpoint: Checkpoint, serving: str | None) -> dict[str, object]:
    def gib(count: int | None) -> float | None:
        return None if count is None else round(count / 2**30, 4)

    return {
        "serving": serving,
        "origin": checkpoint.origin or "built",
        "effective_bits": checkpoint.effective_bits,
        "linear_bits": checkpoint.linear_bits,
        "quantized_gib": gib(checkpoint.quantized_bytes),
        "unquantized_gib": gib(checkpoint.unquantized_bytes),
    }


def _saving(base: MemoryReport | None, memory: MemoryReport | None) -> dict[str, float | None]:
    if not (base and memory and base.weights_gib and memory.weights_gib):
        return {"weights_saving_gib": None, "weights_saving_x": None}
    return {
        "weights_saving_gib": round(base.weights_gib - memory.weights_gib, 3),
        "weights_saving_x": round(base.weights_gib / memory.weights_gib, 3),
    }


def _capacity(report: CapacityReport | None) -> dict[str, float | int | None]:
    """The target level (the highest: the profile's max-num-seqs); the other levels stay in run.json."""
    level = report.levels[-1] if report and report.levels else None
    if level is None:
        return {name: None for name in LOAD_COLUMNS}
    return {
        "load_concurrency": level.concurrency,
        "load_output_tokens_per_s": round(level.output_tokens_per_s, 2),
        "load_goodput_req_per_s": None
        if level.goodput_requests_per_s is None
        else round(level.goodput_requests_per_s, 3),
        "load_ttft_p99_ms": round(level.ttft_p99_ms, 1),
        "load_preemptions": level.preemptions,
    }


def _cell(value: object) -> str:
    """CSV text of a value; text that a spreadsheet would run as a formula is quoted with a '."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else ""  # a number that is not one is no number
    text = str(value)
    if text.startswith(_FORMULA_START):
        return "'" + text
    return text


def write_leaderboard(path: Path, rows: list[LeaderboardRow]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = columns(rows)
    writer.writerow(names)
    for row in rows:
        writer.writerow([_cell(getattr(row, name)) for name in names])
    write_atomic(path, buffer.getvalue())


def read_leaderboard(path: Path) -> list[LeaderboardRow]:
    """Read a leaderboard CSV of a readable schema version, its rows upgraded to this one (columns added
    since read as empty); anything else is a one-line error naming the file, row and column."""
    records = _csv_records(path)
    if not records:
        raise UserError(f"leaderboard {path} has no rows: run `make eval` to fill it")
    versions = {record.get("schema_version") for record in records}
    if len(versions) > 1:
        raise UserError(
            f"leaderboard {path} mixes schema versions {sorted(map(str, versions))}: re-run `make eval`"
        )
    version = records[0].get("schema_version")
    if version is not None and version not in {str(v) for v in READABLE_SCHEMA_VERSIONS}:
        raise UserError(
            f"leaderboard {path} has schema version {version}, this suite reads versions "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}: re-run `make eval` with this suite to "
            "rewrite it"
        )
    older = version != str(LEADERBOARD_SCHEMA_VERSION)  # its missing columns were added since: empty
    if any(record.get(FORMER_LOAD_COLUMN) for record in records):
        log.warning(
            "leaderboard %s: its load_* columns come from kqe's former load generator (%s is not read); "
            "re-run with --load to measure with vllm bench serve",
            path,
            FORMER_LOAD_COLUMN,
        )
    missing = [
        name
        for name in COLUMNS
        if name not in records[0]
        and name not in GENERATED_COLUMNS
        and not (older and type(None) in get_args(column_type(name)))
    ]
    if missing:
        raise UserError(f"leaderboard {path} lacks columns {', '.join(missing)}: is it a kqe leaderboard?")
    rows = [_row(path, number, record) for number, record in enumerate(records, start=2)]
    seen: set[tuple[str, str]] = set()
    for row in rows:
        if (row.model, row.checkpoint) in seen:
            raise UserError(
                f"leaderboard {path} lists {row.model} {row.checkpoint} twice: keep one row of it"
            )
        seen.add((row.model, row.checkpoint))
    return rows


def _csv_records(path: Path) -> list[dict[str, str]]:
    """The CSV's rows as dicts (a UTF-8 byte-order mark accepted); UserError for what is not a CSV."""
    require_file(path, "leaderboard", "run `make eval` first or pass an existing CSV")
    text = read_text(path, "leaderboard")
    try:
        records = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise UserError(f"leaderboard {path} is not a readable CSV ({err}): pass a kqe CSV") from None
    for number, record in enumerate(records, start=2):
        if None in record or None in record.values():
            raise UserError(f"leaderboard {path} row {number} has not one cell per column: is it a kqe CSV?")
    return records


def _row(path: Path, number: int, record: dict[str, str]) -> LeaderboardRow:
    """One CSV row as a LeaderboardRow; UserError naming the row and column of a bad cell."""
    cells = {
        name: _parse_cell(name, record[name])
        for name in COLUMNS
        if name in record and name != "schema_version"
    }
    for name, text in cells.items():
        if text is not None and text.strip().lower().lstrip("+-") in _NON_FINITE:
            raise UserError(f"leaderboard {path} row {number}, {name}: {text!r} is not a finite number")
    try:
        return LeaderboardRow.model_validate(cells)
    except ValidationError as exc:
        first = exc.errors()[0]
        column = ".".join(str(part) for part in first["loc"] if part != "tasks")
        raise UserError(
            f"leaderboard {path} row {number}, {column}: {first['msg']} (got {first.get('input')!r})"
        ) from None


def _parse_cell(name: str, text: str) -> str | None:
    if text == "" and type(None) in get_args(column_type(name)):
        return None
    if text.startswith("'") and text[1:].startswith(_FORMULA_START):
        return text[1:]
    return text


def write_aggregate(results_dir: Path) -> Path:
    """`results/leaderboard.csv`: the rows of every model's leaderboard of this schema version.

    A model whose leaderboard has another schema version is left out with a warning, so one stale run
    does not block the others; re-running `make eval` for it brings it back.
    """
    rows: list[LeaderboardRow] = []
    for board in sorted(results_dir.glob("*/leaderboard.csv")):
        try:
            rows += read_leaderboard(board)
        except UserError as exc:
            log.warning("left out of the aggregate: %s", exc)
    path = results_dir / "leaderboard.csv"
    write_leaderboard(path, rows)
    return path


COLUMN_TABLE_START = "<!-- columns:start (generated by `make docs` from LeaderboardRow) -->"
COLUMN_TABLE_END = "<!-- columns:end -->"


def _type_name(annotation: object) -> str:
    types = get_args(annotation) if isinstance(annotation, UnionType) else (annotation,)
    names = [t.__name__ for t in types if t is not type(None) and isinstance(t, type)]
    optional = " (may be empty)" if type(None) in types else ""
    return "/".join(names) + optional


def column_table() -> str:
    """The leaderboard schema as a Markdown table: column, type, meaning (with its unit)."""
    lines = [
        f"Schema version {LEADERBOARD_SCHEMA_VERSION}.",
        "",
        "| column | type | meaning |",
        "|---|---|---|",
    ]
    for name in COLUMNS:
        meaning = " ".join(column_meaning(name).split()).replace("|", "\\|")
        lines.append(f"| `{name}` | {_type_name(column_type(name))} | {meaning} |")
    return "\n".join(lines)


def replace_column_table(text: str, table: str, where: str = "the page") -> str:
    """`text` (of the page `where`, docs/leaderboard.md) with the text between the column-table markers
    replaced by `table`."""
    head, start, rest = text.partition(COLUMN_TABLE_START)
    _, end, tail = rest.partition(COLUMN_TABLE_END)
    if not (start and end):
        raise UserError(f"{where} has no {COLUMN_TABLE_START} … {COLUMN_TABLE_END} block: add one")
    return f"{head}{start}\n{table}\n{end}{tail}"
