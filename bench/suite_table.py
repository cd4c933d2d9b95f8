"""The suite's rows: one `Row` per measure against its alternative, the table `make bench` prints, and
results/bench.csv, which keeps the rows of measures a run did not take."""

from __future__ import annotations

import csv
import io
import os
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kqe.core.io import write_atomic

OUT = Path("results/bench.csv")


@dataclass(frozen=True)
class Row:
    """One line of the table: the suite's runs against an alternative's, and the target."""

    measure: str
    ours: list[float]
    versus: str
    theirs: list[float]
    target: str
    ratio: float | None
    met: bool | None
    note: str = ""


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    median = statistics.median(values)
    return f"{median:.3g}" if len(values) == 1 else f"{median:.3g} ({min(values):.3g}-{max(values):.3g})"


def table(rows: list[Row]) -> str:
    header = ("measure", "kqe", "versus", "theirs", "ratio", "target", "met")
    lines = [header] + [
        (
            row.measure,
            spread(row.ours),
            row.versus or "-",
            spread(row.theirs),
            "-" if row.ratio is None else f"{row.ratio:.3g}",
            row.target,
            {True: "yes", False: "NO", None: "-"}[row.met],
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines]
    text += [f"  {row.measure} vs {row.versus or '-'}: {row.note}" for row in rows if row.note]
    return "\n".join(text)


COLUMNS = (
    "when", "cpus", "load_avg_1m", "quick", "measure", "kqe_median", "kqe_min", "kqe_max", "kqe_runs",
    "versus", "versus_median", "versus_min", "versus_max", "versus_runs", "ratio", "target", "met", "note",
)  # fmt: skip


def write_csv(rows: list[Row], quick: bool, path: Path = OUT) -> None:
    """Write this run's rows; rows of measures it did not take (`--only`) are kept from the file."""
    head = [
        datetime.now(UTC).isoformat(timespec="seconds"),
        os.cpu_count(),
        f"{os.getloadavg()[0]:.2f}",
        quick,
    ]
    fresh: dict[tuple[str, str], list[object]] = {}
    for row in rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.4g}"
        measured = [row.measure, *_stats(row.ours), row.versus, *_stats(row.theirs)]
        fresh[(row.measure, row.versus)] = [*head, *measured, ratio, row.target, row.met, row.note]
    kept: list[list[object]] = []
    if path.exists():
        old = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
        if old and tuple(old[0]) == COLUMNS:
            at = {name: i for i, name in enumerate(COLUMNS)}
            for cells in old[1:]:
                key = (cells[at["measure"]], cells[at["versus"]])
                kept.append(fresh.pop(key) if key in fresh else list(cells))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([list(COLUMNS), *kept, *fresh.values()])
    write_atomic(path, buffer.getvalue())


def _stats(values: list[float]) -> list[object]:
    if not values:
        return ["", "", "", 0]
    return [f"{statistics.median(values):.4g}", f"{min(values):.4g}", f"{max(values):.4g}", len(values)]
