"""Measured numbers as data: `results/measurements.jsonl`, one `Measurement` per line, rendered into
`docs/performance.md` by `make docs` (scripts/docs.py).

Every timing and measured result the docs cite lives here, dated and with the machine, load and commit
it was taken on, so a page states what was measured and links to the number instead of keeping it.
`make bench` appends its rows (bench/bench_rows.py); `scripts/record_measurement.py` appends a hand-run
one, or merges fragment files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from bench.machine import CPU_FLAGS, Machine, this_machine
from kqe.core.errors import UserError
from kqe.core.io import read_text, write_atomic

MEASUREMENTS = Path("results/measurements.jsonl")
"""Where `make bench` appends (relative to the repository root, where make runs)."""
PERFORMANCE_PAGE = Path("docs/performance.md")
__all__ = [
    "MEASUREMENTS",
    "TOPICS",
    "Machine",
    "Measurement",
    "append",
    "load",
    "measured",
    "merge",
    "render",
    "this_machine",
]

TOPICS: dict[str, str] = {
    "setup": "Setup",
    "first-run": "First runs of `make eval`",
    "tests": "Test suite and CI",
    "builds": "Quantization builds",
    "scoring": "Scoring rates through the server",
    "serving": "Server start and engine settings",
    "cpu-kinds": "CPU kinds and emulation",
    "findings": "What the committed runs found",
    "statistics": "Statistics: simulations",
    "bench": "`make bench`: kqe against its peers",
    "planner": "The memory planner against real logs",
    "doctor": "`kqe doctor`",
    "capacity": "Serving capacity (`kqe load`)",
    "ko_rag": "ko_rag runs",
    "tasks": "Tasks: agreement with lm-eval and the hub",
    "calibration": "Calibration sets",
}
"""Topic id → its section title in docs/performance.md, in page order (pages link `performance.md#<id>`)."""
Spread = Literal["min-max", "95% CI", "range"]
Number = StrictInt | StrictFloat


class Measurement(BaseModel):
    """One measured number (a time, a rate, a size, a rate of coverage ...) and how it was taken."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_: Literal[1] = Field(1, alias="schema")
    """Row schema version (`schema_` in Python: `schema` would shadow a BaseModel method)."""
    date: str
    """When it was measured, YYYY-MM-DD (for rows moved from the README without a date: the date of
    the commit that added the number, said in `note`)."""
    topic: str
    """A `TOPICS` id: the section of docs/performance.md the row appears in."""
    what: str
    """What was measured, self-contained: command, model, checkpoint, items, what is excluded."""
    value: Number
    """The number (the median when several runs were taken, the midpoint of a stated range)."""
    unit: str
    """"s", "min", "items/s", "GiB", "MiB", "%", "x", "points", "nats", "count", "fraction" ..."""
    low: Number | None = None
    """Lower end of the spread around `value`; None when none was stated."""
    high: Number | None = None
    """Upper end of the spread around `value`; None when none was stated."""
    spread: Spread | None = None
    """What `low`..`high` is: the min-max of the runs, a 95% confidence interval, or a stated range."""
    runs: StrictInt | None = None
    """How many runs `value` summarises; None when not stated."""
    cpu: str
    """The CPU, e.g. "AMD EPYC (AVX2 only), 2 cores"; "" when the source did not say which."""
    cpu_flags: str
    """Space-separated `CPU_FLAGS` present (as the measured code saw them: an emulated kind's under
    emulation); "" when unknown."""
    load: str | None
    """The 1-minute load average as recorded ("1.8–2.1" for a range); None when not recorded."""
    commit: str
    """Short hash of the commit measured (or that first stated the number); "" when unknown."""
    note: str = ""
    """Caveats, conditions, comparisons, targets."""
    source: str | None = None
    """A results/ path holding the raw data, if any."""

    @field_validator("date")
    @classmethod
    def _iso_date(cls, value: str) -> str:
        try:
            if len(value) != 10:
                raise ValueError
            date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a date YYYY-MM-DD") from None
        return value

    @field_validator("topic")
    @classmethod
    def _known_topic(cls, value: str) -> str:
        if value not in TOPICS:
            raise ValueError(f"{value!r} is not a topic: use one of {', '.join(TOPICS)}")
        return value

    @field_validator("what", "unit")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("value", "low", "high")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("runs")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator("cpu_flags")
    @classmethod
    def _known_flags(cls, value: str) -> str:
        unknown = [flag for flag in value.split() if flag not in CPU_FLAGS]
        if unknown:
            raise ValueError(f"{' '.join(unknown)} not among {' '.join(CPU_FLAGS)}")
        return value

    @model_validator(mode="after")
    def _spread_fits(self) -> Measurement:
        stated = [self.low is not None, self.high is not None, self.spread is not None]
        if any(stated) and not all(stated):
            raise ValueError("low, high and spread go together: give all three or none")
        if self.low is not None and self.high is not None:
            if self.low > self.high:
                raise ValueError(f"low {self.low} is above high {self.high}")
            if self.spread != "95% CI" and not self.low <= self.value <= self.high:
                raise ValueError(f"value {self.value} lies outside its {self.spread} {self.low}..{self.high}")
        return self

    def to_json(self) -> str:
        """One line, keys in schema order, UTF-8 text kept as is."""
        return json.dumps(self.model_dump(by_alias=True), ensure_ascii=False)


# --- reading and writing -----------------------------------------------------------------------------


def parse(text: str, where: str) -> list[Measurement]:
    """Rows of JSON Lines `text`; a UserError listing every bad line as `<where>:<line>: <why>`."""
    rows, errors = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line, parse_constant=_no_constant)
            if not isinstance(fields, dict):
                raise ValueError(f"a JSON {type(fields).__name__}, not an object")
            rows.append(Measurement(**fields))
        except ValidationError as err:
            errors.append(f"{where}:{number}: {describe(err)}")
        except ValueError as err:  # json.JSONDecodeError is one
            errors.append(f"{where}:{number}: not a measurement row: {err}")
    if errors:
        raise UserError("\n".join(errors))
    return rows


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a row may hold")


def describe(err: ValidationError) -> str:
    """A ValidationError as `field: why; field: why`, fields named by their JSON keys."""
    parts = []
    for error in err.errors():
        field = ".".join(str(part) for part in error["loc"])
        why = error["msg"].removeprefix("Value error, ")
        parts.append(f"{field}: {why}" if field else why)
    return "; ".join(parts)


def load(path: Path) -> list[Measurement]:
    """The rows of `path` (none when it does not exist)."""
    if not path.exists():
        return []
    return parse(read_text(path, "measurements file"), str(path))


def dump(rows: Iterable[Measurement]) -> str:
    return "".join(row.to_json() + "\n" for row in rows)


def append(path: Path, rows: Sequence[Measurement]) -> None:
    """Add `rows` after those of `path`, rewriting the whole file atomically (readers never see half)."""
    write_atomic(path, dump([*load(path), *rows]))


def topic_order(row: Measurement) -> tuple[int, str]:
    return list(TOPICS).index(row.topic), row.date


def merge(path: Path, fragments: Sequence[Path]) -> list[Measurement]:
    """Validate every fragment, then append their rows to `path` sorted by topic order then date
    (stable: each fragment's order kept within), leaving out rows `path` already holds. Returns the
    rows added. Nothing is written when any fragment has a bad line."""
    found: list[Measurement] = []
    errors = []
    for fragment in fragments:
        try:
            found += parse(read_text(fragment, "fragment"), str(fragment))
        except UserError as err:
            errors.append(str(err))
    if errors:
        raise UserError("\n".join(errors))
    kept = load(path)
    seen = set(kept)
    added = []
    for row in sorted(found, key=topic_order):
        if row not in seen:
            seen.add(row)
            added.append(row)
    write_atomic(path, dump([*kept, *added]))
    return added


def measured(
    machine: Machine,
    topic: str,
    what: str,
    values: Sequence[float],
    unit: str,
    runs: int | None = None,
    **rest: Any,
) -> Measurement:
    """A row of this machine from the runs `values`: their median, with their min-max when several
    (`runs` when `values` summarise more runs than they list, as a median alone)."""
    ordered = sorted(float(f"{value:.4g}") for value in values)  # 4 digits, as results/bench.csv
    middle = len(ordered) // 2
    median = (
        ordered[middle] if len(ordered) % 2 else float(f"{(ordered[middle - 1] + ordered[middle]) / 2:.4g}")
    )
    spread: dict[str, Any] = {}
    if len(ordered) > 1:
        spread = {"low": ordered[0], "high": ordered[-1], "spread": "min-max"}
    facts = machine.model_dump()
    return Measurement(
        topic=topic, what=what, value=median, unit=unit, runs=runs or len(ordered), **spread, **facts, **rest
    )


# --- docs/performance.md -----------------------------------------------------------------------------

PAGE_HEAD = """# Performance: what was measured

<!-- generated by `make docs` (scripts/docs.py) from results/measurements.jsonl: do not edit -->

Every timing and measured result the other pages cite, one table per topic. This page is generated
by `make docs` from [`results/measurements.jsonl`](../results/measurements.jsonl) (one JSON object per
line, its fields described in `bench/measurements.py`): do not edit it, change that file and run
`make docs` (`make test` fails while the two differ). The pages explain what each number means and
link here (`performance.md#<topic>`).

The columns:

- **date**: when it was measured (a number without one in its source: the date of the commit that
  first stated it, as the note says);
- **what**: what was measured: command, model, checkpoint, items, what is excluded;
- **value**: the number and its unit, then its spread where one was taken: the min–max of the runs,
  a 95% confidence interval, or a stated range;
- **runs**: how many runs the value summarises (— when not stated);
- **CPU**: the machine's CPU kind and cores (unknown when the source did not say);
- **load**: the 1-minute load average while or after it ran (— when not recorded);
- **commit**: the commit measured, or the one that first stated the number;
- **note**: conditions, caveats, targets, and where the raw data lies.

Adding rows: `make bench` appends the rows it measures (with this machine's date, CPU, load and
commit); a number measured by hand is appended with
`.venv/bin/python scripts/record_measurement.py --topic <id> --what '...' --value N --unit s` (see
`--help`), and fragment files are merged with `--merge FILE...`. Then `make docs`.
"""
COLUMNS = ("date", "what", "value", "runs", "CPU", "load", "commit", "note")
GLUED_UNITS = {"%", "x", "×"}
"""Units written against the number (8.3x, 1.0%); the others after a space."""


def render(measurements: Sequence[Measurement]) -> str:
    """docs/performance.md: a header, then each topic with rows (in `TOPICS` order) as a table, rows
    sorted by date, then by their order in the file."""
    by_topic: dict[str, list[Measurement]] = {topic: [] for topic in TOPICS}
    for row in measurements:
        by_topic[row.topic].append(row)
    present = [topic for topic, rows in by_topic.items() if rows]
    parts = [PAGE_HEAD]
    if present:
        parts.append("Topics: " + " · ".join(f"[{_title(topic)}](#{topic})" for topic in present) + "\n")
    for topic in present:
        lines = [f'<a id="{topic}"></a>', "", f"## {TOPICS[topic]}", ""]
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += [_table_row(row) for row in sorted(by_topic[topic], key=lambda row: row.date)]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _title(topic: str) -> str:
    return TOPICS[topic].replace("`", "")  # a link's text: code spans would only add noise


def _table_row(row: Measurement) -> str:
    note = row.note
    if row.source:
        note = f"{note}; data: `{row.source}`" if note else f"data: `{row.source}`"
    cells = [
        row.date,
        row.what,
        format_value(row),
        "—" if row.runs is None else str(row.runs),
        row.cpu or "unknown",
        "—" if row.load is None else row.load,
        f"`{row.commit}`" if row.commit else "",
        note,
    ]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _cell(text: str) -> str:
    """One table cell: on one line, its `|` escaped (inside code spans too, as GitHub reads tables)."""
    return " ".join(text.split()).replace("|", "\\|")


def format_value(row: Measurement) -> str:
    """ "6.88 items/s (6.26–6.98, min-max)", "8.3x", "12 % (4–20, 95% CI)"."""
    text = _number(row.value) + ("" if row.unit in GLUED_UNITS else " ") + row.unit
    if row.low is not None and row.high is not None:
        text += f" ({_number(row.low)}–{_number(row.high)}, {row.spread})"
    return text


def _number(value: float) -> str:
    return f"{value:,}"
